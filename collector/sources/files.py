"""Reading a pair of cumulative counter files per port on open descriptors, the 1 ms hot path.

Shared by the InfiniBand and netdev sources: the files differ, the mechanics do not.
``os.pread(fd, n, 0)`` on an open sysfs attribute re-runs the driver's show() on every
call (fs/kernfs/file.c resets the seq_file iterator at offset 0), so descriptors stay
open for the life of the sampler and are reopened only after a failure.

The tick has two implementations with the same results. Where the optional compiled core
``burstscope.collector.sources._tick`` was built (``pip install`` compiles it when a C compiler and
the Python headers are present), one C call per tick reads every healthy port straight
into the ring's record; the ports it cannot settle (closed, just reopened, a failed read,
text that is not a plain decimal) are read again by the Python path below, which owns
every fault rule. Without it, or with ``BURSTSCOPE_PURE_PYTHON_TICK=1``, the Python path
reads every port.
"""

from __future__ import annotations

import os
import struct
import time
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from burstscope.collector.discovery import DeviceInfo
from burstscope.collector.sources.base import (
    BAD_REASONS,
    MAX_COUNTER_BYTES,
    STATUS_HELD,
    STATUS_MISSING,
    STATUS_OK,
    STATUS_REBASELINE,
    PortSpec,
    RecordLayout,
    SampleRow,
    UnsampledPort,
    bad_errno_status,
    bad_status,
)

try:
    from burstscope.collector.sources import _tick
except ImportError:  # built without a C compiler: the pure-Python tick
    _tick = None  # type: ignore[assignment]
PURE_PYTHON_ENV = "BURSTSCOPE_PURE_PYTHON_TICK"

# Enough for any 64-bit decimal and its newline.
_READ_BYTES = 32
_FIRST_RETRY_NS = 10_000_000
_MAX_RETRY_NS = 5_000_000_000
_INT64 = struct.Struct("=q")
_UINT64 = struct.Struct("=Q")
_UINT8 = struct.Struct("=B")


def compiled_tick_available() -> bool:
    """True when the compiled tick is built and not switched off (BURSTSCOPE_PURE_PYTHON_TICK)."""
    return _tick is not None and os.environ.get(PURE_PYTHON_ENV, "") in ("", "0")


_NOT_A_NUMBER, _NEGATIVE, _TOO_LARGE = (
    BAD_REASONS.index(name) for name in ("not_a_number", "negative", "out_of_range")
)


class _OutOfRange(ValueError):
    """A reading no counter can hold: ``counter`` 0 is the transmit file, 1 the receive."""

    def __init__(self, counter: int, reason: int) -> None:
        super().__init__(BAD_REASONS[reason])
        self.counter = counter
        self.reason = reason


def _out_of_range(x: int, r: int, limit: int) -> _OutOfRange:
    """Which of a pair outside 0..limit is refused, and why (the transmit file first)."""
    counter = 0 if not 0 <= x <= limit else 1
    value = x if counter == 0 else r
    return _OutOfRange(counter, _NEGATIVE if value < 0 else _TOO_LARGE)


@dataclass(frozen=True, slots=True)
class CounterFiles:
    """The files of one port and the factor that turns their values into bytes.

    ``extra_*`` files are added to the first (irdma keeps IPv4 and IPv6 octets apart);
    ``min_read_interval_ns`` is the kernel's cache lifetime (hw_counters lifespan): the port
    is read no more often, and the ticks between are STATUS_HELD.
    """

    xmit_path: str
    rcv_path: str
    bytes_per_unit: int
    extra_xmit: tuple[str, ...] = ()
    extra_rcv: tuple[str, ...] = ()
    min_read_interval_ns: int = 0


class PairedFileReader:
    """Keeps two descriptors per port open and reads them into a SampleRow.

    A port whose open fails is marked STATUS_MISSING; a read that fails (EIO, EINVAL) or
    returns what no counter can hold (text, a negative number, more than 64 bits of bytes)
    is marked with the file and the reason (``bad_status``). Either way its descriptors are
    closed and it is reopened with capped exponential backoff; the first reading after a
    reopen is STATUS_REBASELINE so no delta is taken across the outage. Other ports are not
    delayed, and nothing a file returns can make the ring write fail.
    """

    def __init__(self, files: tuple[CounterFiles, ...]) -> None:
        self._files = files
        self._scales = tuple(port.bytes_per_unit for port in files)
        # The largest raw value whose bytes still fit the ring's unsigned 64-bit columns.
        self._limits = tuple(MAX_COUNTER_BYTES // scale for scale in self._scales)
        count = len(files)
        # Typed arrays rather than lists: the compiled tick reads them in place.
        self._xmit_fd = array("i", [-1] * count)
        self._rcv_fd = array("i", [-1] * count)
        self._next_status = array("B", [STATUS_REBASELINE] * count)
        self._retry_at = [0] * count
        self._backoff = [_FIRST_RETRY_NS] * count
        # Ports with extra files or a minimum interval take the slower path in read_into.
        self._special = [bool(f.extra_xmit or f.extra_rcv or f.min_read_interval_ns) for f in files]
        self._extra_fds: list[list[int]] = [[] for _ in files]
        self._next_read = [0] * count

    def open(self) -> None:
        for index in range(len(self._files)):
            self._reopen(index)

    def close(self) -> None:
        for index in range(len(self._files)):
            self._close(index)

    def _close(self, index: int) -> None:
        for fds in (self._xmit_fd, self._rcv_fd):
            if fds[index] >= 0:
                os.close(fds[index])
                fds[index] = -1
        for fd in self._extra_fds[index]:
            os.close(fd)
        self._extra_fds[index] = []

    def _reopen(self, index: int) -> bool:
        files = self._files[index]
        try:
            self._xmit_fd[index] = os.open(files.xmit_path, os.O_RDONLY | os.O_CLOEXEC)
            self._rcv_fd[index] = os.open(files.rcv_path, os.O_RDONLY | os.O_CLOEXEC)
            for path in (*files.extra_xmit, *files.extra_rcv):
                self._extra_fds[index].append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            self._close(index)
            self._fail(index)
            return False
        self._next_status[index] = STATUS_REBASELINE
        return True

    def _fail(self, index: int) -> None:
        # Failures reach the consumer as STATUS_MISSING rows (burstscope_port_failed_reads).
        now = time.monotonic_ns()
        self._retry_at[index] = now + self._backoff[index]
        self._backoff[index] = min(self._backoff[index] * 2, _MAX_RETRY_NS)

    def record_reader(self, buffer: memoryview, layout: RecordLayout) -> RecordReader | None:
        """The compiled tick over these descriptors, filling records of ``buffer`` in place;
        None without the compiled core (the caller then packs a SampleRow from read_into)."""
        if not compiled_tick_available():
            return None
        if layout.ports != len(self._files):
            raise ValueError(f"record holds {layout.ports} ports, the reader {len(self._files)}")
        return RecordReader(self, buffer, layout)

    def read_into(self, row: SampleRow, ports: Iterable[int] | None = None) -> None:
        """Read every port (or only ``ports``, indexes) into ``row``."""
        # The hot path: every name the loop uses is a local, so each port costs its two
        # preads, two clock reads and a few list stores, not attribute and global lookups.
        pread = os.pread
        clock = time.monotonic_ns
        timestamps, xmit, rcv = row.timestamp_ns, row.xmit_bytes, row.rcv_bytes
        durations, status = row.read_ns, row.status
        xmit_fds, rcv_fds, next_status = self._xmit_fd, self._rcv_fd, self._next_status
        limits = self._limits
        special = self._special
        scales = self._scales
        for index in range(len(scales)) if ports is None else ports:
            scale = scales[index]
            if special[index]:
                self._read_special(index, row)
                continue
            xmit_fd = xmit_fds[index]
            if xmit_fd < 0:
                now = clock()
                if now < self._retry_at[index] or not self._reopen(index):
                    timestamps[index] = now
                    status[index] = STATUS_MISSING
                    continue
                xmit_fd = xmit_fds[index]
            before = clock()
            counter = 0
            try:
                x = int(pread(xmit_fd, _READ_BYTES, 0))
                counter = 1
                r = int(pread(rcv_fds[index], _READ_BYTES, 0))
                limit = limits[index]
                if not (0 <= x <= limit and 0 <= r <= limit):
                    raise _out_of_range(x, r, limit)
            except (OSError, ValueError) as exc:
                self._read_failed(index, row, before, counter, exc)
                continue
            after = clock()
            timestamps[index] = (before + after) >> 1
            xmit[index] = x * scale
            rcv[index] = r * scale
            durations[index] = after - before
            if next_status[index] == STATUS_OK:
                status[index] = STATUS_OK
            else:
                # First good read after a (re)open. Backoff only grows after a failure,
                # and every failure is followed by a reopen, so this is the one place to
                # reset it.
                status[index] = next_status[index]
                next_status[index] = STATUS_OK
                self._backoff[index] = _FIRST_RETRY_NS

    def _read_failed(
        self, index: int, row: SampleRow, before: int, counter: int, exc: OSError | ValueError
    ) -> None:
        """One bad read costs this port's tick: it is closed, retried with backoff, and the
        row says which file failed and why (``counter`` 0 transmit, 1 receive)."""
        after = time.monotonic_ns()
        self._close(index)
        self._fail(index)
        row.timestamp_ns[index] = after
        row.read_ns[index] = after - before
        # int() accepts b"123\n"; b"N/A (no PMA)" raises ValueError. A value no counter can
        # hold (-1, 38 digits, >= 2**62 words) is refused before it reaches the row, so the
        # ring's packed uint64 columns never see it.
        if isinstance(exc, _OutOfRange):
            row.status[index] = bad_status(exc.counter, exc.reason)
        elif isinstance(exc, OSError):
            row.status[index] = bad_errno_status(counter, exc.errno or 0)
        else:
            row.status[index] = bad_status(counter, _NOT_A_NUMBER)

    def _read_special(self, index: int, row: SampleRow) -> None:
        """A port with summed files or a cache lifetime: the same steps, off the fast loop."""
        files = self._files[index]
        now = time.monotonic_ns()
        if self._xmit_fd[index] >= 0 and now < self._next_read[index]:
            row.timestamp_ns[index] = now
            row.status[index] = STATUS_HELD
            return
        if self._xmit_fd[index] < 0 and (now < self._retry_at[index] or not self._reopen(index)):
            row.timestamp_ns[index] = now
            row.status[index] = STATUS_MISSING
            return
        extra = len(files.extra_xmit)
        limit = self._limits[index]
        before = time.monotonic_ns()
        counter = 0
        try:
            x = int(os.pread(self._xmit_fd[index], _READ_BYTES, 0))
            fds = self._extra_fds[index]
            x += sum(int(os.pread(fd, _READ_BYTES, 0)) for fd in fds[:extra])
            counter = 1
            r = int(os.pread(self._rcv_fd[index], _READ_BYTES, 0))
            r += sum(int(os.pread(fd, _READ_BYTES, 0)) for fd in fds[extra:])
            if not (0 <= x <= limit and 0 <= r <= limit):
                raise _out_of_range(x, r, limit)
        except (OSError, ValueError) as exc:
            self._read_failed(index, row, before, counter, exc)
            return
        after = time.monotonic_ns()
        self._next_read[index] = before + files.min_read_interval_ns
        row.timestamp_ns[index] = (before + after) >> 1
        row.xmit_bytes[index] = x * files.bytes_per_unit
        row.rcv_bytes[index] = r * files.bytes_per_unit
        row.read_ns[index] = after - before
        row.status[index] = self._next_status[index]
        if self._next_status[index] != STATUS_OK:
            self._next_status[index] = STATUS_OK
            self._backoff[index] = _FIRST_RETRY_NS


class RecordReader:
    """The compiled tick (collector/sources/_tick.c) over one PairedFileReader's descriptors.

    It reads the descriptors, scales and next statuses in place, so a port the Python path
    closes, reopens or rebaselines is seen by the next compiled tick. Ports the compiled
    tick leaves alone (``pending``) are read by ``finish`` with the Python rules.
    """

    def __init__(self, reader: PairedFileReader, buffer: memoryview, layout: RecordLayout) -> None:
        self._reader = reader
        self._buffer = buffer
        self._layout = layout
        count = layout.ports
        self._count = count
        # A scale of 0 leaves the port to Python: ports with extra files or a minimum read
        # interval (PairedFileReader._special) always take the Python path.
        self._scales = array(
            "q",
            [
                0 if special else scale
                for special, scale in zip(reader._special, reader._scales, strict=True)
            ],
        )
        self._pending = bytearray(count)
        self._row = SampleRow.for_ports(count)
        self._columns = (
            (layout.timestamp_ns, _INT64, self._row.timestamp_ns),
            (layout.xmit_bytes, _UINT64, self._row.xmit_bytes),
            (layout.rcv_bytes, _UINT64, self._row.rcv_bytes),
            (layout.read_ns, _INT64, self._row.read_ns),
        )

    def __call__(self, offset: int) -> None:
        """One tick into the record at ``offset``; lateness and commit are the caller's."""
        reader = self._reader
        if _tick.read_ports(
            self._buffer,
            offset,
            self._count,
            reader._xmit_fd,
            reader._rcv_fd,
            self._scales,
            reader._next_status,
            self._pending,
        ):
            self.finish(offset)

    def finish(self, offset: int) -> None:
        """Read the ports the compiled tick left (``pending``) into the record, in Python."""
        pending, buffer, row = self._pending, self._buffer, self._row
        unsettled = [index for index in range(self._count) if pending[index]]
        self._reader.read_into(row, unsettled)
        status = self._layout.status
        for index in unsettled:
            for start, packer, values in self._columns:
                packer.pack_into(buffer, offset + start + 8 * index, values[index])
            _UINT8.pack_into(buffer, offset + status + index, row.status[index])

    def run(
        self,
        records: int,
        capacity: int,
        record_bytes: int,
        header: tuple[int, int, int, int, int],
        interval_ns: int,
        spin_ns: int,
        deadline: int,
        ticks: int,
        missed: int,
        parent: int,
    ) -> tuple[int, int, int, int, int, int]:
        """The sampler's loop in C until it stops, meets a tick with ports for Python, or
        finds its parent gone: (reason, deadline, ticks, missed, woke, offset), see _tick.c."""
        reader = self._reader
        return _tick.run_ticks(
            self._buffer,
            records,
            capacity,
            record_bytes,
            header,
            self._count,
            reader._xmit_fd,
            reader._rcv_fd,
            self._scales,
            reader._next_status,
            self._pending,
            interval_ns,
            spin_ns,
            deadline,
            ticks,
            missed,
            parent,
        )


class FileCounterSource:
    """The open/read/close half of a source whose counters are files; subclasses find the files."""

    ports: tuple[PortSpec, ...]
    unsampled: tuple[UnsampledPort, ...] = ()
    notes: tuple[str, ...] = ()
    devices: tuple[DeviceInfo, ...] = ()
    _files: tuple[CounterFiles, ...]
    _reader: PairedFileReader | None = None

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_reader"] = None  # descriptors belong to the process that opened them
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def open(self) -> None:
        self._reader = PairedFileReader(self._files)
        self._reader.open()

    def read_into(self, row: SampleRow) -> None:
        assert self._reader is not None, "open() first"
        self._reader.read_into(row)

    def record_reader(self, buffer: memoryview, layout: RecordLayout) -> RecordReader | None:
        """The compiled tick over the open descriptors (PairedFileReader.record_reader)."""
        assert self._reader is not None, "open() first"
        return self._reader.record_reader(buffer, layout)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
