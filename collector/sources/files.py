"""Reading a pair of cumulative counter files per port on open descriptors, the 1 ms hot path.

Shared by the InfiniBand and netdev sources: the files differ, the mechanics do not.
``os.pread(fd, n, 0)`` on an open sysfs attribute re-runs the driver's show() on every
call (fs/kernfs/file.c resets the seq_file iterator at offset 0), so descriptors stay
open for the life of the sampler and are reopened only after a failure.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from collector.discovery import DeviceInfo
from collector.sources.base import (
    BAD_REASONS,
    MAX_COUNTER_BYTES,
    STATUS_HELD,
    STATUS_MISSING,
    STATUS_OK,
    STATUS_REBASELINE,
    PortSpec,
    SampleRow,
    UnsampledPort,
    bad_errno_status,
    bad_status,
)

# Enough for any 64-bit decimal and its newline.
_READ_BYTES = 32
_FIRST_RETRY_NS = 10_000_000
_MAX_RETRY_NS = 5_000_000_000


_NOT_A_NUMBER, _NEGATIVE, _TOO_LARGE = (
    BAD_REASONS.index(name) for name in ("not_a_number", "negative", "out_of_range")
)


class _OutOfRange(ValueError):
    def __init__(self, reason: int) -> None:
        super().__init__(BAD_REASONS[reason])
        self.reason = reason


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
        self._xmit_fd = [-1] * count
        self._rcv_fd = [-1] * count
        self._next_status = [STATUS_REBASELINE] * count
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

    def read_into(self, row: SampleRow) -> None:
        # The hot path: every name the loop uses is a local, so each port costs its two
        # preads, two clock reads and a few list stores, not attribute and global lookups.
        pread = os.pread
        clock = time.monotonic_ns
        timestamps, xmit, rcv = row.timestamp_ns, row.xmit_bytes, row.rcv_bytes
        durations, status = row.read_ns, row.status
        xmit_fds, rcv_fds, next_status = self._xmit_fd, self._rcv_fd, self._next_status
        limits = self._limits
        special = self._special
        for index, scale in enumerate(self._scales):
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
                    counter = 0 if not 0 <= x <= limit else 1
                    value = x if counter == 0 else r
                    raise _OutOfRange(_NEGATIVE if value < 0 else _TOO_LARGE)
            except (OSError, ValueError) as exc:
                # int() accepts b"123\n"; b"N/A (no PMA)" raises ValueError. A value no
                # counter can hold (-1, 38 digits, >= 2**62 words) is refused here, so the
                # ring's packed uint64 columns never see it.
                after = clock()
                self._close(index)
                self._fail(index)
                timestamps[index] = after
                durations[index] = after - before
                if isinstance(exc, _OutOfRange):
                    status[index] = bad_status(counter, exc.reason)
                elif isinstance(exc, OSError):
                    status[index] = bad_errno_status(counter, exc.errno or 0)
                else:
                    status[index] = bad_status(counter, _NOT_A_NUMBER)
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
                counter = 0 if not 0 <= x <= limit else 1
                value = x if counter == 0 else r
                raise _OutOfRange(_NEGATIVE if value < 0 else _TOO_LARGE)
        except (OSError, ValueError) as exc:
            # As on the fast path: one bad value costs this port's tick, counted by reason.
            after = time.monotonic_ns()
            self._close(index)
            self._fail(index)
            row.timestamp_ns[index] = after
            row.read_ns[index] = after - before
            if isinstance(exc, _OutOfRange):
                row.status[index] = bad_status(counter, exc.reason)
            elif isinstance(exc, OSError):
                row.status[index] = bad_errno_status(counter, exc.errno or 0)
            else:
                row.status[index] = bad_status(counter, _NOT_A_NUMBER)
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


class FileCounterSource:
    """The open/read/close half of a source whose counters are files; subclasses find the files."""

    ports: tuple[PortSpec, ...]
    unsampled: tuple[UnsampledPort, ...] = ()
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

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
