"""The shared-memory ring: the sampler process writes one row per tick; RingReader follows it.

One writer, any number of readers, no locks. Each tick is one fixed-size record after the
header (lateness, then the per-port columns, then status bytes), so the writer stores a
tick with a single ``struct.pack_into`` (or, with the compiled tick of the file sources,
fills the record in place: ``layout``, ``next_record``, ``commit``) and readers see the
columns as strided numpy views. The writer fills row ``head % capacity`` and only then
advances ``head``; a reader copies the rows it has not seen and, after copying, re-reads
``head`` to discard any row the writer may have overwritten meanwhile (those are counted as
lost, never returned torn).

Why that holds on a weak memory model (AArch64, e.g. Grace), not only on x86-64's TSO: the
head is the ring's sequence word, as in a seqlock (H.-J. Boehm, "Can Seqlocks Get Along
with Programming Language Memory Models?", MSPC 2012), and it is only ever stored and
loaded through the compiled module (collector/sources/_tick.c), never by numpy:

- The writer publishes row h by storing ``head = h + 1`` with release
  (``ring_publish_head``; the compiled loop ``run_ticks`` makes the same store), after
  every store of the row in program order. A reader's first look at the head is a
  load-acquire (``ring_acquire_head``). C11 5.1.2.4p11 (C++ [atomics.order]p2): a release
  store synchronizes with an acquire load that reads its value, so every store of the rows
  below the head the reader saw happens before its copy, which sees them (or a later
  overwrite, caught by the next rule).
- Right after that store the writer issues a release fence; the reader, after its copy,
  issues an acquire fence and re-reads the head (``ring_recheck_head``). C11 7.17.4p2
  (C++ [atomics.fences]p2, https://timsong-cpp.github.io/cppwp/n4861/atomics.fences): a
  release fence synchronizes with an acquire fence when a load sequenced before the
  acquire fence reads a store sequenced after the release fence. The stores of row h + 1,
  which overwrite row h + 1 - capacity, follow the fence after ``head = h + 1``; so if any
  load of the copy saw one of them, the re-read head is at least h + 1 (write-read
  coherence, C++ [intro.races]) and that row is dropped: only rows from
  ``recheck - capacity + 1`` on are returned.

The fence rule is stated for atomic objects; the rows are plain stores (struct.pack_into,
the C tick) and plain loads (numpy), which in the C abstract machine is a data race. What
makes it hold in practice is what the compilers emit: the row accesses are ordinary
loads and stores in other functions, and the head accesses and fences are STLR, LDAR,
DMB ISH and DMB ISHLD on AArch64 (plain moves and compiler barriers on x86-64; mapping
table: https://www.cl.cam.ac.uk/~pes20/cpp/cpp0xmappings.html), which order every access
on either side at the hardware level. A row torn at any byte is dropped the same way. No
test on x86-64 can show a hardware reordering; tests/test_ring_hammer.py shows that the
reader catches a writer whose program order publishes a row before writing it.

Built without the compiled module (``ORDERED_HEAD`` false) the head is a plain numpy word:
correct on x86-64 (TSO: stores are seen in order, loads are not reordered with each
other), not on weaker models; setup.py therefore lets the module be skipped only on x86.
"""

from __future__ import annotations

import enum
import functools
import mmap
import struct
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np
import numpy.typing as npt

from burstscope.collector.sources.base import (
    BAD_REASONS,
    MAX_COUNTER_BYTES,
    STATUS_BAD,
    STATUS_HELD,
    STATUS_MISSING,
    STATUS_REBASELINE,
    PortSpec,
    RecordLayout,
    SampleRow,
    bad_status,
    describe_bad_status,
)
from burstscope.collector.trace.schema import TIME_GRAIN_NS, PortColumns, stored_times

try:
    from burstscope.collector.sources import _tick
except ImportError:  # built without a C compiler (x86 only, see setup.py): plain numpy words
    _tick = None  # type: ignore[assignment]

# True when the head is published with release and read with acquire (the docstring says why).
ORDERED_HEAD = _tick is not None

_MAGIC = 0x62757273_74736370  # "burstscp"
_PAGE_BYTES = mmap.PAGESIZE
_HEADER_WORDS = 64


class Field(enum.IntEnum):
    """Header words (int64) shared by the sampler and its readers."""

    MAGIC = 0
    PORTS = 1
    CAPACITY = 2
    HEAD = 3  # rows written since start; row i lives at slot i % capacity
    TICKS = 4  # ticks run
    MISSED_TICKS = 5  # deadlines skipped: they would have followed a late tick too closely
    STATE = 6  # SamplerState
    STOP_REQUESTED = 7
    HEARTBEAT_NS = 8  # CLOCK_MONOTONIC of the latest tick
    WALL_OFFSET_NS = 9  # CLOCK_REALTIME - CLOCK_MONOTONIC, fixed at start
    INTERVAL_NS = 10
    PID = 11
    REALTIME = 12  # 1 when SCHED_FIFO was granted
    CPU = 13  # the CPU the sampler is pinned to, -1 when not pinned
    TIMER_SLACK_NS = 14
    REALTIME_ERRNO = 15  # why SCHED_FIFO was refused (errno); 0 when granted or not asked
    CPU_ERRNO = 16  # why pinning to a CPU was refused (errno); 0 otherwise
    COMPILED_TICK = 17  # 1 when the tick runs in the compiled core (collector.sources._tick)


# Plain ints: numpy indexes with an int faster than with an IntEnum (the writer's hot path).
_HEAD = int(Field.HEAD)


_PORT_COLUMNS = ("timestamp_ns", "xmit_bytes", "rcv_bytes", "read_ns", "status")


class SamplerState(enum.IntEnum):
    STARTING = 0
    RUNNING = 1
    STOPPED = 2
    FAILED = 3


@dataclass(frozen=True, slots=True)
class RingRows:
    """Rows copied out of the ring, oldest first."""

    first_row: int  # the row number of index 0
    timestamp_ns: npt.NDArray[Any]  # [rows, ports] CLOCK_MONOTONIC midpoints
    xmit_bytes: npt.NDArray[Any]  # [rows, ports]
    rcv_bytes: npt.NDArray[Any]
    read_ns: npt.NDArray[Any]
    status: npt.NDArray[Any]
    lateness_ns: npt.NDArray[Any]  # [rows] wake-up time minus deadline
    lost_rows: int  # rows overwritten before this reader got to them

    def __len__(self) -> int:
        return int(self.lateness_ns.shape[0])


def _record_layout(ports: int) -> tuple[np.dtype[Any], struct.Struct]:
    """One tick's record, as readers see it (numpy) and as the writer packs it (struct).

    The int64 fields come first so each is 8-byte aligned; the status bytes come last,
    padded so the next record is aligned too. Native byte order, no implicit padding.
    """
    padding = -ports % 8
    packer = struct.Struct(f"=q{ports}q{ports}Q{ports}Q{ports}q{ports}B{padding}x")
    layout = np.dtype(
        {
            "names": [
                "lateness_ns",
                "timestamp_ns",
                "xmit_bytes",
                "rcv_bytes",
                "read_ns",
                "status",
            ],
            "formats": [
                np.int64,
                (np.int64, (ports,)),
                (np.uint64, (ports,)),
                (np.uint64, (ports,)),
                (np.int64, (ports,)),
                (np.uint8, (ports,)),
            ],
            "itemsize": packer.size,
        }
    )
    return layout, packer


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _sanitized(row: SampleRow) -> SampleRow:
    """A copy of ``row`` in which every reading the record cannot hold is refused."""
    safe = SampleRow(
        list(row.timestamp_ns), list(row.xmit_bytes), list(row.rcv_bytes), list(row.read_ns), []
    )
    low, high = _INT64
    for index, status in enumerate(row.status):
        for column in (safe.timestamp_ns, safe.read_ns):
            column[index] = min(max(int(column[index]), low), high)
        for counter, column in enumerate((safe.xmit_bytes, safe.rcv_bytes)):
            value = int(column[index])
            if not 0 <= value <= MAX_COUNTER_BYTES:
                reason = BAD_REASONS.index("negative" if value < 0 else "out_of_range")
                status = bad_status(counter, reason)
                safe.xmit_bytes[index] = safe.rcv_bytes[index] = 0
                break
        safe.status.append(status if 0 <= status <= 255 else bad_status(0, 2))
    return safe


def capacity_for(interval_ns: int, seconds: float = 64.0) -> int:
    """Rows needed to hold at least ``seconds`` of ticks (the design asks for >= 60 s)."""
    return max(1024, int(seconds * 1e9 // interval_ns) + 1)


class Ring:
    """A fixed-size table of ticks in one shared-memory block."""

    def __init__(self, memory: shared_memory.SharedMemory, owner: bool) -> None:
        self._memory = memory
        self._owner = owner
        buffer = memory.buf
        if buffer is None:
            raise ValueError(f"shared memory {memory.name!r} is closed")
        self._buffer = buffer
        self.header: npt.NDArray[Any] = np.ndarray((_HEADER_WORDS,), dtype=np.int64, buffer=buffer)
        if self.header[Field.MAGIC] != _MAGIC:
            raise ValueError(f"shared memory {memory.name!r} is not a burstscope ring")
        ports = int(self.header[Field.PORTS])
        capacity = int(self.header[Field.CAPACITY])
        self.ports = ports
        self.capacity = capacity
        layout, packer = _record_layout(ports)
        self._pack_into = packer.pack_into
        self._record_bytes = packer.size
        # For a source that fills a record in place (the compiled tick): its columns' offsets.
        self.layout = RecordLayout(
            ports,
            *(layout.fields[name][1] for name in _PORT_COLUMNS),  # type: ignore[index]
        )
        self._lateness_into = struct.Struct("=q").pack_into
        self._publish_head, self._acquire_head, self._recheck_head = self._head_access()
        records: npt.NDArray[Any] = np.ndarray(
            (capacity,), dtype=layout, buffer=buffer, offset=_HEADER_WORDS * 8
        )
        # [capacity, ports] views (lateness_ns: [capacity]) of the records' columns.
        self.timestamp_ns: npt.NDArray[Any] = records["timestamp_ns"]
        self.xmit_bytes: npt.NDArray[Any] = records["xmit_bytes"]
        self.rcv_bytes: npt.NDArray[Any] = records["rcv_bytes"]
        self.read_ns: npt.NDArray[Any] = records["read_ns"]
        self.lateness_ns: npt.NDArray[Any] = records["lateness_ns"]
        self.status: npt.NDArray[Any] = records["status"]

    def _head_access(
        self,
    ) -> tuple[Callable[[int], None], Callable[[], int], Callable[[], int]]:
        """publish(head), acquire() and recheck() of the head word, ordered as the module
        docstring says (plain numpy accesses without the compiled module)."""
        if _tick is not None:
            buffer = self._buffer
            publish, acquire, recheck = (
                _tick.ring_publish_head,
                _tick.ring_acquire_head,
                _tick.ring_recheck_head,
            )
            # partial, not lambda: one C call per publish, no Python frame (the writer's path).
            return (
                functools.partial(publish, buffer, _HEAD),
                functools.partial(acquire, buffer, _HEAD),
                functools.partial(recheck, buffer, _HEAD),
            )
        header = self.header

        def publish_plain(value: int) -> None:
            header[_HEAD] = value

        def load_plain() -> int:
            return int(header[_HEAD])

        return publish_plain, load_plain, load_plain

    @property
    def name(self) -> str:
        return self._memory.name

    @classmethod
    def create(cls, ports: int, capacity: int) -> Ring:
        size = _HEADER_WORDS * 8 + capacity * _record_layout(ports)[1].size
        memory = shared_memory.SharedMemory(create=True, size=size)
        # Every page allocated now, not on the writer's first pass through the ring, where
        # each fresh page would fault inside a tick's read window (the C reference loop
        # faults its table in before it starts too). The ring is resident from the start,
        # as it is anyway once the writer has wrapped.
        np.ndarray((size,), dtype=np.uint8, buffer=memory.buf)[:] = 0
        header = np.ndarray((_HEADER_WORDS,), dtype=np.int64, buffer=memory.buf)
        header[Field.PORTS] = ports
        header[Field.CAPACITY] = capacity
        header[Field.CPU] = -1
        header[Field.MAGIC] = _MAGIC
        return cls(memory, owner=True)

    @classmethod
    def attach(cls, name: str) -> Ring:
        # Attached only from the sampler process, which shares its parent's resource
        # tracker (spawn hands it over), so registering the name again is harmless and
        # only the creator unlinks.
        return cls(shared_memory.SharedMemory(name=name), owner=False)

    def prefault(self) -> None:
        """Writer side, before the first tick: map every page of the records into this
        process (a write to each, of what it holds), so no tick takes the page fault."""
        pages = np.ndarray(
            ((len(self._buffer) - _HEADER_WORDS * 8) // _PAGE_BYTES,),
            dtype=np.uint8,
            buffer=self._buffer,
            offset=_HEADER_WORDS * 8,
            strides=(_PAGE_BYTES,),
        )
        pages |= 0

    def get(self, field: Field) -> int:
        return int(self.header[field])

    def set(self, field: Field, value: int) -> None:
        self.header[field] = value

    def write(self, row: SampleRow, lateness_ns: int) -> None:
        """Writer side: one tick. The row becomes visible when ``head`` advances."""
        head = int(self.header[_HEAD])  # the writer's own word: no ordering needed
        offset = _HEADER_WORDS * 8 + head % self.capacity * self._record_bytes
        try:
            self._pack_into(
                self._buffer,
                offset,
                lateness_ns,
                *row.timestamp_ns,
                *row.xmit_bytes,
                *row.rcv_bytes,
                *row.read_ns,
                *row.status,
            )
        except struct.error:
            # A source handed over a value the record cannot hold: that port's reading
            # is refused, the tick and every other port are written as usual.
            safe = _sanitized(row)
            self._pack_into(
                self._buffer,
                offset,
                lateness_ns,
                *safe.timestamp_ns,
                *safe.xmit_bytes,
                *safe.rcv_bytes,
                *safe.read_ns,
                *safe.status,
            )
        self._publish_head(head + 1)

    @property
    def buffer(self) -> memoryview:
        """The whole shared block: header, then the records (writer side, in place)."""
        return self._buffer

    @property
    def records_offset(self) -> int:
        """Where in ``buffer`` the records start (after the header)."""
        return _HEADER_WORDS * 8

    @property
    def record_bytes(self) -> int:
        return self._record_bytes

    def next_record(self) -> int:
        """Writer side: the offset in ``buffer`` of the record the next tick fills."""
        return _HEADER_WORDS * 8 + int(self.header[_HEAD]) % self.capacity * self._record_bytes

    def commit(self, offset: int, lateness_ns: int) -> None:
        """Writer side: the record at ``offset`` (next_record) is filled; it becomes visible."""
        self._lateness_into(self._buffer, offset, lateness_ns)
        self._publish_head(int(self.header[_HEAD]) + 1)

    def read_since(self, cursor: int) -> tuple[int, RingRows]:
        """Reader side: the rows written since ``cursor``; returns the new cursor."""
        head = self._acquire_head()
        # The writer may be filling slot head % capacity right now: that is row
        # head - capacity, so only rows from head - capacity + 1 on are whole.
        oldest = max(cursor, head - self.capacity + 1)
        slots = np.arange(oldest, head) % self.capacity
        copies = (
            self.timestamp_ns[slots],
            self.xmit_bytes[slots],
            self.rcv_bytes[slots],
            self.read_ns[slots],
            self.status[slots],
            self.lateness_ns[slots],
        )
        # Rows the writer overwrote while we copied are dropped, not returned torn.
        after = self._recheck_head()
        overwritten = min(len(slots), max(0, after - self.capacity + 1 - oldest))
        timestamp_ns, xmit_bytes, rcv_bytes, read_ns, status, lateness_ns = (
            array[overwritten:] for array in copies
        )
        rows = RingRows(
            first_row=oldest + overwritten,
            timestamp_ns=timestamp_ns,
            xmit_bytes=xmit_bytes,
            rcv_bytes=rcv_bytes,
            read_ns=read_ns,
            status=status,
            lateness_ns=lateness_ns,
            lost_rows=oldest - cursor + overwritten,
        )
        return head, rows

    def close(self) -> None:
        # Views into the buffer must go before the mapping can close.
        for name in ("header", "timestamp_ns", "xmit_bytes", "rcv_bytes", "read_ns"):
            setattr(self, name, None)
        self.lateness_ns = None  # type: ignore[assignment]
        self.status = None  # type: ignore[assignment]
        self._memory.close()
        if self._owner:
            self._memory.unlink()


class RingReader:
    """Follows the ring from where it last stopped; counts rows it was too slow to see."""

    def __init__(self, ring: Ring, ports: tuple[PortSpec, ...]) -> None:
        self.ring = ring
        self.ports = ports
        self.cursor = 0
        self.lost_rows = 0
        self.missing_by_port = [0] * len(ports)
        # Refused readings per port: (counter file, reason) -> count.
        self.refused_by_port: list[dict[tuple[str, str], int]] = [{} for _ in ports]

    @property
    def missing_samples(self) -> int:
        return sum(self.missing_by_port)

    @property
    def wall_offset_ns(self) -> int:
        return self.ring.get(Field.WALL_OFFSET_NS)

    def poll(self) -> list[PortColumns]:
        """Samples since the last poll, per port, wall-clock stamped; failed reads left out."""
        return self.poll_with_timing()[0]

    def poll_with_timing(
        self,
    ) -> tuple[list[PortColumns], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """As poll(), plus each tick's lateness and every successful read's duration (ns)."""
        self.cursor, rows = self.ring.read_since(self.cursor)
        self.lost_rows += rows.lost_rows
        offset = self.wall_offset_ns
        columns = []
        for index, spec in enumerate(self.ports):
            status = rows.status[:, index]
            present = status < STATUS_MISSING
            # Held ticks (not read: the kernel's cache had not expired) are no failures.
            failed = ~present & (status != STATUS_HELD)
            self.missing_by_port[index] += int(np.count_nonzero(failed))
            if status.size and int(status.max()) >= STATUS_BAD:
                codes, counts = np.unique(status[status >= STATUS_BAD], return_counts=True)
                refused = self.refused_by_port[index]
                for code, count in zip(codes.tolist(), counts.tolist(), strict=True):
                    key = describe_bad_status(int(code))
                    refused[key] = refused.get(key, 0) + int(count)
            # The times as a recording keeps them, so what the agent detects live is what a
            # report finds in its recording, to the sample.
            stamps_us, stored_read_ns = stored_times(
                rows.timestamp_ns[present, index] + offset, rows.read_ns[present, index]
            )
            columns.append(
                PortColumns(
                    device=spec.device,
                    port=spec.port,
                    # Unknown here: collector.intake decides the rate in force for each row.
                    line_rate_bytes_per_second=0,
                    timestamp_ns=stamps_us * TIME_GRAIN_NS,
                    xmit_bytes=rows.xmit_bytes[present, index],
                    rcv_bytes=rows.rcv_bytes[present, index],
                    read_ns=stored_read_ns,
                    rebaseline=status[present] == STATUS_REBASELINE,
                )
            )
        read_ns = rows.read_ns[rows.status < STATUS_MISSING]
        return columns, rows.lateness_ns, read_ns
