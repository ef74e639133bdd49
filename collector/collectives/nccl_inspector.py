"""NCCL Inspector dump files: one JSON object per completed collective, read as the file grows.

The Inspector is NCCL's profiler plugin ``libnccl-profiler-inspector.so`` (NVIDIA/nccl
``ext-profiler/inspector/`` from NCCL 2.28.3, ``plugins/profiler/inspector/`` from 2.29.7; its
README.md and sources: ``inspector.cc``, ``inspector_plugin.cc``, ``inspector_json.cc`` and
``json.cc``). Every release so far writes ``"inspector_output_format_version": "v4.0"``,
though 2.30 added fields (``header.comm_name``, ``p2p_perf`` objects); this reader takes both.

The file. The dump thread writes ``<NCCL_INSPECTOR_DUMP_DIR>/<hostname>-pid<pid>.log``,
opened with ``fopen(..., "w")`` (a restarted writer truncates it), and appends for every
communicator one object per completed operation: ``header`` (``id``: the communicator's hash
as "0x..."; ``rank``, ``n_ranks``, ``nnodes``; from 2.30 ``comm_name``), ``metadata``
(``inspector_output_format_version``, ``dump_timestamp_us``, ``hostname``, ``pid``) and
``coll_perf`` (``coll``, ``coll_sn``, ``coll_msg_size_bytes``, ``coll_exec_time_us``,
``coll_timing_source``, ``coll_algobw_gbs``, ``coll_busbw_gbs``) or, from 2.30, ``p2p_perf``
(the same with ``p2p_`` names and ``p2p_peer``). ``json.cc`` writes an object compactly on one
line and ends it with a newline; the README prints them indented. Both are read here: an
object starts with ``{`` at the start of a line, so an object cut by a writer that died is
recognised when the next one starts, and one bad object costs only itself.

What it holds, and what it misses:

- Collectives only up to 2.29: the plugin asks NCCL for ``ncclProfileColl |
  ncclProfileKernelCh`` events (``inspectorPluginInit``), so Send/Recv, and with them
  pipeline-parallel traffic, never appear. From 2.30, ``NCCL_INSPECTOR_ENABLE_P2P`` (default
  1) adds ``ncclProfileP2p`` and Send/Recv arrive as ``p2p_perf`` objects.
- A sample up to 2.29: each communicator keeps only its last completed collective
  (``completedCollInfo``, overwritten at every completion) until the dump thread next passes,
  so collectives that complete faster than the dump interval are not all written. From 2.30
  a ring of ``NCCL_INSPECTOR_DUMP_COLL_RING_SIZE`` (1024) per communicator keeps them all
  unless it overflows (the oldest are overwritten). 2.30 also leaves out operations under
  ``NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES`` (8192) and, by default
  (``NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING=1``), those without GPU kernel timing.
- When the file grows: with ``NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS`` unset, 2.28
  starts no dump thread (no file at all) and 2.30 writes only at communicator teardown.
- Times of the collective only with ``NCCL_INSPECTOR_DUMP_VERBOSE=1``: ``event_trace_ts``
  gives ``coll_start_ts``/``coll_stop_ts`` and per channel ``kernel_start_ts``,
  ``kernel_stop_ts`` and ``kernel_record_ts``, in microseconds. Without it only
  ``dump_timestamp_us`` dates a record, and that is when it was written, not when it ran.
- Time base: every ``*_ts`` and ``dump_timestamp_us`` is ``inspectorGetTime()``, which is
  ``gettimeofday``: the wall clock (CLOCK_REALTIME, stepped by NTP), not a monotonic clock,
  read on the CPU when the plugin's callback runs. A kernel channel's start and stop are when
  NCCL's proxy thread saw the channel's work counter move (``src/transport/profiler.cc``), so
  they trail the GPU by that thread's polling; the GPU's own ``%globaltimer`` values go only
  into ``coll_exec_time_us`` (``coll_timing_source`` "kernel_gpu"). A ``*_ts`` of 0 is an
  event that never came, read as None.
- NCCL's own AllToAll (``ncclAlltoAll``, 2.28) is named "Invalid" by 2.28.3, whose
  ``ncclStringToFunc`` knows only the older collectives (Gather and Scatter too), with a
  bandwidth of 0; "All2All" from 2.30. AllToAll built from grouped Send/Recv (as PyTorch
  builds it) appears, from 2.30, as Send and Recv.
- A bandwidth that is NaN is written as the string "nan" (``jsonDouble``): read as None.

Bad input is one counted skip, logged (the first of each kind at WARNING, the rest at
DEBUG), never an exception: an object that is not JSON or lacks a field (the plugin itself
writes ``"comm_name":,`` when a name holds a control character, since
``inspectorCommInfoHeader``'s result is not checked), an object over ``max_object_bytes``
(never held in memory whole), and at ``finish`` an object cut at the end of the file.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import msgspec
import numpy as np

from burstscope.detectors.arrays import I64, B

try:
    from burstscope.collector.collectives import _spans
except ImportError:  # built without a C compiler: msgspec reads the lines
    _spans = None  # type: ignore[assignment]

_LOG = logging.getLogger(__name__)

FORMAT_VERSIONS = frozenset({"v4.0"})  # metadata.inspector_output_format_version seen so far
# A verbose object with every channel (MAXCHANNELS is 64 in NCCL) is about 20 KB compact and
# 40 KB indented: anything past this is not one object.
DEFAULT_MAX_OBJECT_BYTES = 256 * 1024
# What one read() takes from the file at most: the records it returns stay bounded too.
DEFAULT_READ_BYTES = 4 * 1024 * 1024
# What the compiled reader copies out of the page cache at a time, to read its lines while
# they are still in the processor's cache (_spans.c, scan_file).
READ_CHUNK = 64 * 1024

# Kinds of skipped input, the keys of InspectorReader.skipped.
MALFORMED = "malformed"  # not JSON, or not an Inspector record
OVERSIZED = "oversized"  # longer than max_object_bytes
TRUNCATED = "truncated"  # cut at the end of the file when the reader was told it was finished

_BOUNDARY = b"\n{"  # an object starts at the beginning of a line
_DECODER = json.JSONDecoder()
_loads: Callable[[bytes | str], Any] = msgspec.json.decode


@dataclass(frozen=True, slots=True)
class KernelChannel:
    """One channel of the collective's kernel, verbose dumps only (``event_trace_ts``)."""

    channel_id: int  # kernel_events[].channel_id
    start_us: int | None  # kernel_start_ts: wall clock when the proxy saw the channel start
    stop_us: int | None  # kernel_stop_ts: wall clock when the proxy saw it finish
    record_us: int | None  # kernel_record_ts: when NCCL handed the GPU's stop time over


@dataclass(frozen=True, slots=True)
class InspectorRecord:
    """One completed collective (or, from 2.30, Send/Recv) of one communicator on one rank."""

    communicator_id: str  # header.id: NCCL's communicator hash, "0x..."
    communicator_name: str | None  # header.comm_name (2.30 on; "unknown" there reads None)
    rank: int  # header.rank
    n_ranks: int  # header.n_ranks
    nnodes: int  # header.nnodes
    format_version: str  # metadata.inspector_output_format_version
    hostname: str  # metadata.hostname (gethostname on the writer)
    pid: int  # metadata.pid
    dump_timestamp_us: int  # metadata.dump_timestamp_us: wall clock when written
    collective: str  # coll_perf.coll or p2p_perf.p2p: "AllReduce", "Send", ...
    peer: int | None  # p2p_perf.p2p_peer; None for a collective
    sequence_number: int  # coll_sn / p2p_sn: NCCL's count of the communicator's operations
    message_size_bytes: int  # coll_msg_size_bytes / p2p_msg_size_bytes
    exec_time_us: int  # coll_exec_time_us: the longest channel's kernel time
    timing_source: str | None  # coll_timing_source: kernel_gpu, kernel_cpu or collective_cpu
    algorithm_bandwidth_gbs: float | None  # coll_algobw_gbs (None when written "nan")
    bus_bandwidth_gbs: float | None  # coll_busbw_gbs (None when written "nan")
    start_us: int | None  # event_trace_ts.coll_start_ts (verbose only)
    stop_us: int | None  # event_trace_ts.coll_stop_ts (verbose only)
    kernel_channels: tuple[KernelChannel, ...] | None  # event_trace_ts.kernel_events (verbose)

    @property
    def point_to_point(self) -> bool:
        return self.peer is not None


def parse_record(document: object) -> InspectorRecord:
    """One decoded JSON object as a record; ValueError says what is missing or wrong."""
    top = _object(document, "the object")
    header = _object(top.get("header"), "header")
    metadata = _object(top.get("metadata"), "metadata")
    if ("coll_perf" in top) == ("p2p_perf" in top):
        raise ValueError("needs exactly one of coll_perf and p2p_perf")
    p2p = "p2p_perf" in top
    prefix = "p2p" if p2p else "coll"
    perf = _object(top[f"{prefix}_perf"], f"{prefix}_perf")
    name = header.get("comm_name")
    if name is not None and not isinstance(name, str):
        raise ValueError("header.comm_name is not a string")
    source = perf.get(f"{prefix}_timing_source")
    if source is not None and not isinstance(source, str):
        raise ValueError(f"{prefix}_timing_source is not a string")
    start, stop, channels = _event_trace(perf.get("event_trace_ts"), prefix)
    return InspectorRecord(
        communicator_id=_string(header, "id"),
        # The plugin writes "unknown" for a communicator without a name.
        communicator_name=None if name in (None, "", "unknown") else name,
        rank=_integer(header, "rank"),
        n_ranks=_integer(header, "n_ranks"),
        nnodes=_integer(header, "nnodes"),
        format_version=_string(metadata, "inspector_output_format_version"),
        hostname=_string(metadata, "hostname"),
        pid=_integer(metadata, "pid"),
        dump_timestamp_us=_integer(metadata, "dump_timestamp_us"),
        collective=_string(perf, prefix),
        peer=_integer(perf, "p2p_peer") if p2p else None,
        sequence_number=_integer(perf, f"{prefix}_sn"),
        message_size_bytes=_integer(perf, f"{prefix}_msg_size_bytes"),
        exec_time_us=_integer(perf, f"{prefix}_exec_time_us"),
        timing_source=source,
        algorithm_bandwidth_gbs=_bandwidth(perf, f"{prefix}_algobw_gbs"),
        bus_bandwidth_gbs=_bandwidth(perf, f"{prefix}_busbw_gbs"),
        start_us=start,
        stop_us=stop,
        kernel_channels=channels,
    )


class SpanRecord(NamedTuple):
    """What the running agent keeps of a record: who ran what, and when (``parse_span``).

    A tuple rather than an InspectorRecord: the agent reads a thousand records a second, and
    building the full record with its channels costs four times the decoding.
    """

    hostname: str
    format_version: str
    communicator_id: str
    communicator_name: str | None
    n_ranks: int
    nnodes: int
    collective: str
    start_us: int | None  # the earliest kernel_start_ts, else coll_start_ts; None: plain
    stop_us: int | None  # the latest kernel_stop_ts, else coll_stop_ts


def parse_span(document: Any) -> SpanRecord:
    """The fields a span needs from one decoded object; ValueError as parse_record's.

    Each field it takes is checked as parse_record checks it, straight from the
    dictionaries; the fields a span does not need (sequence number, sizes, bandwidths) are
    not looked at, so a record wrong only there is kept here and skipped by parse_record.
    This is the agent's path, parse_record the report's.
    """
    try:
        header = document["header"]
        metadata = document["metadata"]
        perf = document.get("coll_perf")
        prefix = "coll"
        if perf is None:
            perf, prefix = document["p2p_perf"], "p2p"
        elif "p2p_perf" in document:
            raise ValueError("needs exactly one of coll_perf and p2p_perf")
        name = header.get("comm_name")
        fields = (
            metadata["hostname"],
            metadata["inspector_output_format_version"],
            header["id"],
            header["rank"],
            header["n_ranks"],
            header["nnodes"],
            perf[prefix],
        )
        trace = perf.get("event_trace_ts")
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not an Inspector record: {error!r}") from None
    host, version, identity, rank, n_ranks, nnodes, collective = fields
    if not (
        type(host) is str
        and type(version) is str
        and type(identity) is str
        and type(collective) is str
        and type(rank) is int
        and type(n_ranks) is int
        and type(nnodes) is int
        and (name is None or type(name) is str)
    ):
        raise ValueError("a header, metadata or perf field has the wrong type")
    start = stop = None
    if trace is not None:
        start, stop = _span_times(trace, prefix)
    return SpanRecord(
        host,
        version,
        identity,
        None if name in (None, "", "unknown") else name,
        n_ranks,
        nnodes,
        collective,
        start,
        stop,
    )


def _span_times(trace: Any, prefix: str) -> tuple[int | None, int | None]:
    """The earliest kernel start and latest kernel stop (else the collective's own start and
    stop) of an ``event_trace_ts``, as _event_trace reads them, without its objects."""
    try:
        events = trace["kernel_events"]
        start, stop = trace.get(f"{prefix}_start_ts"), trace.get(f"{prefix}_stop_ts")
        starts = [e.get("kernel_start_ts") for e in events]
        stops = [e.get("kernel_stop_ts") for e in events]
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"event_trace_ts is not one: {error!r}") from None
    if type(events) is not list:
        raise ValueError("event_trace_ts.kernel_events is not a list")
    for value in (start, stop, *starts, *stops):
        # Each present and an integer, as _timestamp wants; 0 is an event that never came.
        if type(value) is not int:
            raise ValueError("a kernel time is missing or not an integer")
    known_starts = [t for t in starts if t]
    known_stops = [t for t in stops if t]
    return (
        min(known_starts) if known_starts else (start or None),
        max(known_stops) if known_stops else (stop or None),
    )


class SpanKind(NamedTuple):
    """What the records of one communicator's collective share: a SpanRecord less its times."""

    hostname: str
    format_version: str
    communicator_id: str
    communicator_name: str | None
    n_ranks: int
    nnodes: int
    collective: str


@dataclass(frozen=True, slots=True, eq=False)
class Spans:
    """Records as columns, in the order read: each one's kind and times (``SpanReader``).

    The agent reads a thousand records a second: as columns they cost it a few array
    operations a poll, where a SpanRecord each cost more than the reading.
    """

    kinds: tuple[SpanKind, ...]
    kind: I64  # each record's index in kinds
    start_us: I64  # SpanRecord.start_us, 0 for None (parse_span reads a 0 as None)
    stop_us: I64  # SpanRecord.stop_us, the same

    def __len__(self) -> int:
        return int(self.kind.size)

    def records(self) -> list[SpanRecord]:
        """Each record as parse_span gives it, in order."""
        columns = (self.kind.tolist(), self.start_us.tolist(), self.stop_us.tolist())
        return [
            SpanRecord._make((*self.kinds[kind], start or None, stop or None))
            for kind, start, stop in zip(*columns, strict=True)
        ]

    def chosen(self, keep: B) -> Spans:
        """The records where ``keep`` is true."""
        return Spans(self.kinds, self.kind[keep], self.start_us[keep], self.stop_us[keep])

    @classmethod
    def of(cls, records: Sequence[SpanRecord]) -> Spans:
        kinds: dict[SpanKind, int] = {}
        index = [kinds.setdefault(SpanKind(*record[:7]), len(kinds)) for record in records]
        return cls(
            tuple(kinds),
            np.array(index, dtype=np.int64),
            np.array([r.start_us or 0 for r in records], dtype=np.int64),
            np.array([r.stop_us or 0 for r in records], dtype=np.int64),
        )

    @classmethod
    def joined(cls, parts: Sequence[Spans]) -> Spans:
        """One after the other, in one set of columns."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls.of(())
        offsets = np.cumsum([0, *(len(part.kinds) for part in parts[:-1])]).tolist()
        return cls(
            tuple(kind for part in parts for kind in part.kinds),
            np.concatenate([p.kind + offset for p, offset in zip(parts, offsets, strict=True)]),
            np.concatenate([part.start_us for part in parts]),
            np.concatenate([part.stop_us for part in parts]),
        )


class _Record(Protocol):
    @property
    def hostname(self) -> str: ...

    @property
    def format_version(self) -> str: ...


R = TypeVar("R", bound=_Record)


def same_host(written: str, wanted: str) -> bool:
    """Whether a record's hostname is this host: equal, or equal up to the first dot.

    gethostname gives the short name on one system and the fully qualified one on another.
    """
    if written == wanted:
        return True
    return written.split(".", 1)[0] == wanted.split(".", 1)[0]


class _Reader(Generic[R]):
    """One dump file, read incrementally: each ``read`` returns the records completed since.

    Only the bytes of an object not yet complete are held (at most ``max_object_bytes``);
    the file is opened for each read, and a file that was replaced or truncated is read
    again from its start. With ``hostname``, records written by another host are left out
    and counted in ``other_host``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        hostname: str | None = None,
        max_object_bytes: int = DEFAULT_MAX_OBJECT_BYTES,
        read_bytes: int = DEFAULT_READ_BYTES,
    ) -> None:
        if max_object_bytes < 2 or read_bytes < 1:
            raise ValueError("max_object_bytes must be at least 2 and read_bytes at least 1")
        self.path = Path(path)
        self.hostname = hostname
        self.max_object_bytes = max_object_bytes
        self.read_bytes = read_bytes
        self.skipped: Counter[str] = Counter()
        self.records = 0  # records parsed (this host's and others')
        self.other_host = 0  # records left out because another host wrote them
        self.position = 0  # bytes of the file taken so far
        self.caught_up = False  # the last read reached the end of the file
        self._identity: tuple[int, int] | None = None
        self._pending = b""  # the object being read: starts with "{" at a line start
        self._discarding = False  # dropping a counted skip's bytes until the next object
        self._after_newline = True  # the last byte taken ended a line (or none was taken)
        self._said: set[str] = set()

    def _take(self) -> bytes:
        """The file's bytes since the last read (at most ``read_bytes``)."""
        opened = self._open()
        if opened is None:
            return b""
        descriptor, size = opened
        try:
            return self._pread(descriptor, size)
        finally:
            os.close(descriptor)

    def _open(self) -> tuple[int, int] | None:
        """The file open and its size, read again from its start if it was replaced or
        truncated; None (and caught up) when it is gone."""
        try:
            descriptor = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self.caught_up = True
            return None
        try:
            status = os.fstat(descriptor)
        except BaseException:
            os.close(descriptor)
            raise
        identity = (status.st_dev, status.st_ino)
        if self._identity is not None and (
            identity != self._identity or status.st_size < self.position
        ):
            _LOG.info("%s was replaced or truncated: reading it from its start", self.path)
            self._restart()
        self._identity = identity
        return descriptor, status.st_size

    def _wanted(self, size: int) -> int:
        # Up to the size just seen: what is appended meanwhile waits for the next read.
        return max(0, min(self.read_bytes, size - self.position))

    def _pread(self, descriptor: int, size: int, wanted: int | None = None) -> bytes:
        """``wanted`` bytes (all ``_wanted``, by default) from the position on, taken."""
        if wanted is None:
            wanted = self._wanted(size)
        data = os.pread(descriptor, wanted, self.position) if wanted > 0 else b""
        self.caught_up = self.position + len(data) >= size
        self.position += len(data)
        return data

    def finish(self) -> None:
        """The writer is done: an object left incomplete at the end is a truncated skip."""
        if self._pending.strip():  # an oversized one being dropped was counted already
            self._skip(TRUNCATED, f"{len(self._pending)} bytes at the end of the file")
        self._pending = b""
        self._discarding = False

    def _restart(self) -> None:
        self.position = 0
        self._pending = b""
        self._discarding = False
        self._after_newline = True

    def _feed(self, data: bytes) -> list[R]:
        if not data:
            return []
        out: list[R] = []
        if self._discarding or not self._pending:
            data = self._to_next_object(data)
            if not data:
                return out
        # Invariant from here: buffer starts at "{" that begins a line.
        buffer = self._pending + data
        searched = max(len(self._pending) - 1, 1)  # a boundary may straddle the two
        start = 0
        while True:
            end = buffer.find(_BOUNDARY, max(searched, start + 1))
            if end < 0:
                break
            self._complete(buffer[start : end + 1], out)
            start = end + 1
        tail = buffer[start:]
        self._after_newline = tail.endswith(b"\n")
        if tail.rstrip().endswith(b"}") and self._complete_tail(tail, out):
            self._pending = b""
        elif len(tail) > self.max_object_bytes:
            self._skip(OVERSIZED, f"an object longer than {self.max_object_bytes} bytes")
            self._pending = b""
            self._discarding = True
        else:
            self._pending = tail
        return out

    def _to_next_object(self, data: bytes) -> bytes:
        """Drop bytes until an object starts at a line start; what is dropped must be blank."""
        if self._after_newline and data.startswith(b"{"):
            start = 0
        else:
            found = data.find(_BOUNDARY)
            start = -1 if found < 0 else found + 1
        dropped = data if start < 0 else data[:start]
        if dropped.strip() and not self._discarding:
            self._skip(MALFORMED, "bytes outside any object")
            self._discarding = True  # the rest of them, up to the next object, with it
        if start < 0:
            if dropped:
                self._after_newline = dropped.endswith(b"\n")
            return b""
        self._discarding = False
        return data[start:]

    def _parse(self, document: object) -> R:
        raise NotImplementedError

    def _complete(self, chunk: bytes, out: list[R]) -> None:
        """One whole object, up to where the next one starts."""
        if len(chunk) > self.max_object_bytes:
            self._skip(OVERSIZED, f"an object of {len(chunk)} bytes")
            return
        try:
            # The usual object, fast: msgspec takes bytes, checks UTF-8 and refuses anything
            # after the object, so an object it takes is one the standard path takes too.
            fast = _loads(chunk)
        except msgspec.DecodeError:
            pass  # judged below, with the standard library's reasons
        else:
            try:
                record = self._parse(fast)
            except ValueError as error:
                self._skip(MALFORMED, str(error))
                return
            self._keep(record, out)
            return
        # Bytes that are not UTF-8 spoil only the object that holds them (a strict encode of
        # the object's own text fails), not a whole object before them.
        text = chunk.decode("utf-8", "surrogateescape")
        try:
            document, end = _DECODER.raw_decode(text)
            text[:end].encode()
            record = self._parse(document)
        except ValueError as error:  # json.JSONDecodeError and UnicodeEncodeError too
            self._skip(MALFORMED, str(error))
            return
        self._keep(record, out)
        if text[end:].strip():
            self._skip(MALFORMED, "bytes after an object")

    def _complete_tail(self, tail: bytes, out: list[R]) -> bool:
        """The last object in the buffer, if it is already a whole record (no next one yet).

        Anything else waits for the next object's start (or ``finish``) to be judged, so the
        counts do not depend on where the writer's appends happened to end.
        """
        if len(tail) > self.max_object_bytes:
            return False  # _feed counts it as oversized
        try:
            record = self._parse(_loads(tail))
        except ValueError:
            return False
        self._keep(record, out)
        return True

    def _keep(self, record: R, out: list[R]) -> None:
        self.records += 1
        self._check_version(record.format_version)
        if self.hostname is not None and not same_host(record.hostname, self.hostname):
            self.other_host += 1
            return
        out.append(record)

    def _check_version(self, version: str) -> None:
        if version not in FORMAT_VERSIONS:
            self._say_once(
                f"version {version}",
                "%s: format version %s is not one this reader was written for (%s)",
                self.path,
                version,
                ", ".join(sorted(FORMAT_VERSIONS)),
            )

    def _skip(self, kind: str, detail: str) -> None:
        self.skipped[kind] += 1
        level = logging.DEBUG if kind in self._said else logging.WARNING
        self._said.add(kind)
        _LOG.log(
            level,
            "%s: skipped a %s Inspector object near byte %d (%s); %d so far%s",
            self.path,
            kind,
            self.position,
            detail,
            self.skipped[kind],
            "" if level == logging.DEBUG else ", further ones are logged at DEBUG",
        )

    def _say_once(self, about: str, message: str, *args: object) -> None:
        if about not in self._said:
            self._said.add(about)
            _LOG.warning(message, *args)


class InspectorReader(_Reader[InspectorRecord]):
    """A dump file's records whole (``parse_record``): what ``report`` reads."""

    def read(self) -> list[InspectorRecord]:
        """The records completed since the last read (from at most ``read_bytes`` new bytes)."""
        return self._feed(self._take())

    def _parse(self, document: object) -> InspectorRecord:
        return parse_record(document)


class _Header(msgspec.Struct, gc=False):
    id: str
    rank: int
    n_ranks: int
    nnodes: int
    comm_name: str | None = None


class _Metadata(msgspec.Struct, gc=False):
    inspector_output_format_version: str
    hostname: str


class _Kernel(msgspec.Struct, gc=False):
    kernel_start_ts: int
    kernel_stop_ts: int


class _Trace(msgspec.Struct, gc=False):
    kernel_events: list[_Kernel]
    coll_start_ts: int | None = None
    coll_stop_ts: int | None = None
    p2p_start_ts: int | None = None
    p2p_stop_ts: int | None = None


class _Coll(msgspec.Struct, gc=False):
    coll: str
    event_trace_ts: _Trace | None = None


class _P2p(msgspec.Struct, gc=False):
    p2p: str
    event_trace_ts: _Trace | None = None


class _Span(msgspec.Struct, gc=False):
    """The fields parse_span takes, as msgspec types and checks them (an int is not a bool)."""

    header: _Header
    metadata: _Metadata
    coll_perf: _Coll | None = None
    p2p_perf: _P2p | None = None


_SPANS = msgspec.json.Decoder(_Span)


def _span_of(typed: _Span) -> SpanRecord:
    """parse_span's record from a typed one; ValueError for what parse_span refuses."""
    coll, p2p = typed.coll_perf, typed.p2p_perf
    if coll is not None and p2p is None:
        name, trace = coll.coll, coll.event_trace_ts
    elif p2p is not None and coll is None:
        name, trace = p2p.p2p, p2p.event_trace_ts
    else:
        raise ValueError("needs exactly one of coll_perf and p2p_perf")
    start = stop = None
    if trace is not None:
        own_start = trace.coll_start_ts if coll is not None else trace.p2p_start_ts
        own_stop = trace.coll_stop_ts if coll is not None else trace.p2p_stop_ts
        if own_start is None or own_stop is None:
            raise ValueError("event_trace_ts lacks its start or stop")
        # The earliest kernel start and the latest stop; 0 is an event that never came.
        for kernel in trace.kernel_events:
            began, ended = kernel.kernel_start_ts, kernel.kernel_stop_ts
            if began and (start is None or began < start):
                start = began
            if ended and (stop is None or ended > stop):
                stop = ended
        start = start if start is not None else (own_start or None)
        stop = stop if stop is not None else (own_stop or None)
    header, metadata = typed.header, typed.metadata
    return SpanRecord(
        metadata.hostname,
        metadata.inspector_output_format_version,
        header.id,
        None if header.comm_name in (None, "", "unknown") else header.comm_name,
        header.n_ranks,
        header.nnodes,
        name,
        start,
        stop,
    )


class SpanReader(_Reader[SpanRecord]):
    """A dump file's records as spans (``parse_span``), in columns: what the running agent reads.

    The usual read is the new bytes up to the last newline, whole objects one a line. The
    compiled reader (``_spans.c``, built with the package where a C compiler is) reads the
    compact lines the plugin writes from the file into columns in one call, a chunk at a
    time; msgspec, where it is not built or declines, decodes them into typed records
    holding only a span's fields, checked as parse_span checks them. Anything else (an
    object cut or malformed, bytes between objects, an object too long, a record parse_span
    refuses) is read again by the general path, which finds object boundaries and counts
    each skip.
    """

    def _parse(self, document: object) -> SpanRecord:
        return parse_span(document)

    def read(self) -> Spans:
        """The records completed since the last read (from at most ``read_bytes`` new bytes)."""
        opened = self._open()
        if opened is None:
            return Spans.of(self._feed(b""))
        descriptor, size = opened
        try:
            spans = self._read_compiled(descriptor, size)
            if spans is not None:
                return spans
            data = self._pread(descriptor, size)
        finally:
            os.close(descriptor)
        if self._discarding or not data or not (self._pending or self._after_newline):
            return Spans.of(self._feed(data))
        buffer = self._pending + data
        cut = buffer.rfind(b"\n") + 1
        rest = buffer[cut:]
        if (
            not cut
            or not buffer.startswith(b"{")
            or (rest and not rest.startswith(b"{"))
            or len(rest) > self.max_object_bytes
        ):
            return Spans.of(self._feed(data))
        spans = compiled_spans(buffer, cut, self.max_object_bytes)
        if spans is None:
            spans = self._typed(buffer, cut)
        if spans is None:
            return Spans.of(self._feed(data))
        self._pending = b""
        self._after_newline = True
        return self._with_rest(self._keep_all(spans), rest)

    def _read_compiled(self, descriptor: int, size: int) -> Spans | None:
        """The whole lines after the pending bytes, read from the file by the compiled
        reader a chunk at a time (``_spans.scan_file``); None, nothing taken, where it is
        not built or declines."""
        wanted = self._wanted(size)
        if (
            _spans is None
            or not wanted
            or self._discarding
            or not (self._pending or self._after_newline)
        ):
            return None
        found = _spans.scan_file(
            descriptor, self.position, wanted, self._pending, self.max_object_bytes, READ_CHUNK
        )
        if found is None:
            return None
        kinds, columns, consumed = found
        taken = consumed - len(self._pending)
        self.position += taken
        self._pending = b""
        self._after_newline = True
        kept = self._keep_all(_columns_of(kinds, columns))
        # What follows the last newline is read as before (and held if it is not whole).
        return self._with_rest(kept, self._pread(descriptor, size, wanted - taken))

    def _with_rest(self, kept: Spans, rest: bytes) -> Spans:
        if not rest:
            return kept
        # What follows the last newline starts an object at a line start: the general path
        # reads it now if it is whole (as GeneralReader does, newline or not), else keeps it.
        return Spans.joined([kept, Spans.of(self._feed(rest))])

    def _typed(self, buffer: bytes, cut: int) -> Spans | None:
        """``buffer[:cut]`` decoded by msgspec, or None where the general path must judge."""
        try:
            # A view: the lines are decoded where they lie, not copied first.
            typed = _SPANS.decode_lines(memoryview(buffer)[:cut])
            records = [_span_of(t) for t in typed]
        except ValueError:  # msgspec's DecodeError and ValidationError too
            return None
        # One object per object start ("{" at a line start), none longer than the cap: as
        # the general path would have cut them. Compact dumps, the usual, are told by one
        # object per line and no blank line: two quick scans.
        compact = buffer.count(b"\n", 0, cut) == len(records) and buffer.find(b"\n\n", 0, cut) < 0
        if not compact and buffer.count(b"\n{", 0, cut) + 1 != len(records):
            return None
        if cut > self.max_object_bytes and _longest(buffer, cut, compact) > self.max_object_bytes:
            return None
        return Spans.of(records)

    def _keep_all(self, spans: Spans) -> Spans:
        """``_keep`` for every record at once: counted, versions said, other hosts' left out."""
        self.records += len(spans)
        for kind in spans.kinds:
            self._check_version(kind.format_version)
        if self.hostname is None:
            return spans
        other = [not same_host(kind.hostname, self.hostname) for kind in spans.kinds]
        if not any(other):
            return spans
        left_out = np.array(other, dtype=bool)[spans.kind]
        self.other_host += int(left_out.sum())
        return spans.chosen(~left_out)


def compiled_reader_built() -> bool:
    """Whether the compiled reader of compact lines (``_spans.c``) was built at install."""
    return _spans is not None


def compiled_spans(buffer: bytes, cut: int, max_object_bytes: int) -> Spans | None:
    """The lines of ``buffer[:cut]`` read by the compiled reader; None where it is not
    built or declines (a line not as the plugin writes it, or longer than the cap)."""
    if _spans is None:
        return None
    found = _spans.scan(memoryview(buffer)[:cut], max_object_bytes)
    if found is None:
        return None
    return _columns_of(*found)


def _columns_of(
    kinds: list[tuple[str, str, str, str | None, int, int, str]], columns: bytes
) -> Spans:
    """The compiled reader's kinds and columns as Spans."""
    # Each line's kind, start and stop; a copy, so each column is one block.
    table = np.frombuffer(columns, dtype=np.int64).reshape(-1, 3).T.copy()
    return Spans(
        tuple(
            # The plugin writes "unknown" for a communicator without a name, as parse_span.
            SpanKind(host, version, id_, None if name in ("", "unknown") else name, n, nodes, op)
            for host, version, id_, name, n, nodes, op in kinds
        ),
        table[0],
        table[1],
        table[2],
    )


def _longest(buffer: bytes, cut: int, compact: bool) -> int:
    """The longest object in ``buffer[:cut]``: of compact lines, the longest line (found
    from the newlines' places, nothing copied); else cut at every object start."""
    if not compact:
        return max(map(len, buffer[:cut].split(b"\n{")))
    newlines = np.flatnonzero(np.frombuffer(buffer, dtype=np.uint8, count=cut) == ord("\n"))
    return int(np.diff(newlines, prepend=-1).max())


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not an object")
    return value


def _string(fields: dict[str, Any], key: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{key} is missing or not a string")
    return value


def _integer(fields: dict[str, Any], key: str) -> int:
    value = fields.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key} is missing or not an integer")
    return value


def _bandwidth(fields: dict[str, Any], key: str) -> float | None:
    value = fields.get(key)
    if value == "nan":  # json.cc jsonDouble writes a NaN as this string
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"{key} is missing or not a number")
    number = float(value)
    return None if number != number else number


def _timestamp(fields: dict[str, Any], key: str) -> int | None:
    value = _integer(fields, key)
    return value or None  # 0: the event never came (the plugin zero-fills its records)


def _event_trace(
    trace: object, prefix: str
) -> tuple[int | None, int | None, tuple[KernelChannel, ...] | None]:
    if trace is None:
        return None, None, None
    fields = _object(trace, "event_trace_ts")
    events = fields.get("kernel_events")
    if not isinstance(events, list):
        raise ValueError("event_trace_ts.kernel_events is missing or not a list")
    channels = []
    for event in events:
        channel = _object(event, "a kernel event")
        channels.append(
            KernelChannel(
                channel_id=_integer(channel, "channel_id"),
                start_us=_timestamp(channel, "kernel_start_ts"),
                stop_us=_timestamp(channel, "kernel_stop_ts"),
                record_us=_timestamp(channel, "kernel_record_ts"),
            )
        )
    return (
        _timestamp(fields, f"{prefix}_start_ts"),
        _timestamp(fields, f"{prefix}_stop_ts"),
        tuple(channels),
    )
