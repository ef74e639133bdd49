"""Records of both sources as classified spans on the counters' clock, and what the records say.

Clock. Records are joined to counter samples by wall clock on the same host: the Inspector's
``*_ts`` are ``gettimeofday`` microseconds and a Kineto trace's times are Unix nanoseconds
from ``system_clock``, both the host's CLOCK_REALTIME, which is also what a burstscope trace's
timestamps are (CLOCK_MONOTONIC plus an offset to CLOCK_REALTIME fixed at start). A stepped
clock or a trace from another host breaks that: ``offset_ns`` is added to every record's time
(a configured correction), and detectors/collective_join.estimate_offset_ns estimates what is
left from the data.

A span is what a source says a collective's kernel ran: for a verbose Inspector record the
earliest channel's ``kernel_start_ts`` to the latest ``kernel_stop_ts`` (else
``coll_start_ts``/``coll_stop_ts``); for a PyTorch trace the NCCL kernel on the GPU stream.
A plain Inspector record has no time of its own (``dump_timestamp_us`` is when the dump thread
wrote it): it counts in the per-collective figures and as ``unplaced``, never in a span.
"""

from __future__ import annotations

import logging
import os
import statistics
import tomllib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from burstscope.collector.collectives.nccl_inspector import InspectorReader, InspectorRecord
from burstscope.collector.collectives.pytorch_trace import NcclKernel, PytorchTrace
from burstscope.detectors.collective_classes import (
    Classification,
    Communication,
    canonical_collective,
    classify,
    validate_mapping,
)
from burstscope.detectors.collective_join import CollectiveSpan

_LOG = logging.getLogger(__name__)

INSPECTOR = "nccl-inspector"
PYTORCH = "pytorch"
BAD_SPAN = "no kernel time"  # a verbose record whose stop is missing or before its start


class MappingError(ValueError):
    """A mapping file that cannot be read or maps to something that is not a class."""


def read_mapping(path: str | os.PathLike[str]) -> dict[str, str]:
    """A TOML file of ``"communicator id or group name" = "EP" | "PP" | "DP" | "other"``."""
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as error:
        raise MappingError(f"{path}: cannot be read: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise MappingError(f"{path}: not TOML: {error}") from None
    mapping = {}
    for key, value in document.items():
        if not isinstance(value, str):
            raise MappingError(f"{path}: {key!r} must map to a string, not {value!r}")
        mapping[key] = value
    try:
        validate_mapping(mapping)
    except ValueError as error:
        raise MappingError(f"{path}: {error}") from None
    return mapping


def inspector_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The dump files named, a directory standing for its ``*.log`` files."""
    found: list[Path] = []
    for path in map(Path, paths):
        found.extend(sorted(path.glob("*.log")) if path.is_dir() else [path])
    return found


def read_inspector(
    paths: Iterable[str | os.PathLike[str]], hostname: str | None = None
) -> tuple[list[InspectorRecord], Counter[str]]:
    """Every record in these dump files (this host's, with ``hostname``), and the skips."""
    records: list[InspectorRecord] = []
    skipped: Counter[str] = Counter()
    for path in inspector_files(paths):
        reader = InspectorReader(path, hostname=hostname)
        while True:
            records.extend(reader.read())
            if reader.caught_up:
                break
        reader.finish()
        skipped.update(reader.skipped)
    return records, skipped


def inspector_communication(record: InspectorRecord) -> Communication:
    names = (record.communicator_name,) if record.communicator_name else ()
    return Communication(
        record.collective, record.communicator_id, names, record.n_ranks, record.nnodes
    )


def kernel_communication(kernel: NcclKernel) -> Communication:
    meta = kernel.metadata
    if meta is None:
        return Communication(kernel.kernel)
    names = tuple(n for n in (meta.group_description, meta.group_name) if n)
    return Communication(meta.collective, None, names, meta.group_size, None)


def kernel_span_us(record: InspectorRecord) -> tuple[int, int] | None:
    channels = record.kernel_channels or ()
    starts = [c.start_us for c in channels if c.start_us is not None]
    stops = [c.stop_us for c in channels if c.stop_us is not None]
    start = min(starts) if starts else record.start_us
    stop = max(stops) if stops else record.stop_us
    if start is None or stop is None or stop < start:
        return None
    return start, stop


def _name(collective: str) -> str:
    return canonical_collective(collective) or collective


@dataclass(frozen=True, slots=True)
class CollectiveFigures:
    """What the records say about one collective of one class, placed in time or not."""

    collective: str  # canonical name
    kind: str | None
    rules: tuple[str, ...]  # the rules that decided its kind, each once
    records: int  # this host's records of it (one per rank and call)
    placed: int  # of which have kernel times (verbose Inspector, PyTorch)
    inspector_records: int  # of which from the Inspector
    operations: float | None  # Inspector calls the sequence numbers say ran; None: no records
    bus_bandwidth_gbs: float | None  # NCCL's median busBw over its records
    message_bytes: int  # summed message sizes

    @property
    def sampled_share(self) -> float | None:
        """The share of the calls that ran which the Inspector log holds (its dumps sample)."""
        if not self.operations:
            return None
        return min(self.inspector_records / self.operations, 1.0)


@dataclass(frozen=True, slots=True)
class CollectiveLog:
    """Every source's records of one host, classified: spans and per-collective figures."""

    spans: tuple[CollectiveSpan, ...]
    figures: tuple[CollectiveFigures, ...]
    records: int
    unplaced: int  # records without kernel times: plain Inspector dumps
    skipped: Mapping[str, int]
    sources: tuple[str, ...]  # INSPECTOR and/or PYTORCH, those that gave records
    offset_ns: int  # added to every record's time


def collective_log(
    inspector: Sequence[InspectorRecord] = (),
    traces: Sequence[PytorchTrace] = (),
    mapping: Mapping[str, str] | None = None,
    offset_ns: int = 0,
    skipped: Mapping[str, int] | None = None,
) -> CollectiveLog:
    """Classify every record (the largest group taken over all of them) and place them."""
    kernels = [k for trace in traces for k in trace.kernels]
    communications = [inspector_communication(r) for r in inspector]
    communications += [kernel_communication(k) for k in kernels]
    classes = classify(communications, mapping)
    spans: list[CollectiveSpan] = []
    lost: Counter[str] = Counter(skipped or {})
    for trace in traces:
        lost.update(trace.skipped)
    unplaced = 0
    groups: dict[tuple[str, str | None], list[tuple[object, Classification]]] = defaultdict(list)
    for record, decided in zip(inspector, classes, strict=False):
        groups[(_name(record.collective), decided.kind)].append((record, decided))
        if record.kernel_channels is None and record.start_us is None:
            unplaced += 1
            continue
        span = kernel_span_us(record)
        if span is None:
            lost[BAD_SPAN] += 1
            continue
        spans.append(_inspector_span(record, decided, span, offset_ns))
    for kernel, decided in zip(kernels, classes[len(inspector) :], strict=True):
        groups[(_name(kernel_communication(kernel).collective), decided.kind)].append(
            (kernel, decided)
        )
        spans.append(_kernel_span(kernel, decided, offset_ns))
    for kind, count in sorted(lost.items()):
        _LOG.warning("collective records: %d skipped (%s)", count, kind)
    ran = _operations_per_record(inspector)
    ordered = sorted(groups.items(), key=lambda item: (item[0][0], item[0][1] or ""))
    figures = tuple(_figures(name, kind, rows, ran) for (name, kind), rows in ordered)
    sources = tuple(
        s for s, present in ((INSPECTOR, bool(inspector)), (PYTORCH, bool(kernels))) if present
    )
    spans.sort(key=lambda s: (s.start_ns, s.end_ns))
    return CollectiveLog(
        spans=tuple(spans),
        figures=figures,
        records=len(inspector) + len(kernels),
        unplaced=unplaced,
        skipped=dict(sorted(lost.items())),
        sources=sources,
        offset_ns=offset_ns,
    )


def inspector_spans(
    records: Sequence[InspectorRecord],
    mapping: Mapping[str, str] | None = None,
    offset_ns: int = 0,
) -> list[CollectiveSpan]:
    """The placed (verbose) records as classified spans."""
    return list(collective_log(records, (), mapping, offset_ns).spans)


def pytorch_spans(
    trace: PytorchTrace, mapping: Mapping[str, str] | None = None, offset_ns: int = 0
) -> list[CollectiveSpan]:
    """A rank's NCCL kernels as classified spans."""
    return list(collective_log((), (trace,), mapping, offset_ns).spans)


def _inspector_span(
    record: InspectorRecord, decided: Classification, span: tuple[int, int], offset_ns: int
) -> CollectiveSpan:
    start_us, stop_us = span
    return CollectiveSpan(
        start_ns=start_us * 1000 + offset_ns,
        # A stop in the same microsecond as the start still covers that microsecond.
        end_ns=max(stop_us, start_us + 1) * 1000 + offset_ns,
        collective=_name(record.collective),
        kind=decided.kind,
        rule=decided.rule,
        communicator=record.communicator_id,
        n_ranks=record.n_ranks,
        nnodes=record.nnodes,
        message_bytes=record.message_size_bytes,
        bus_bandwidth_gbs=record.bus_bandwidth_gbs,
        source=INSPECTOR,
    )


def _kernel_span(kernel: NcclKernel, decided: Classification, offset_ns: int) -> CollectiveSpan:
    meta = kernel.metadata
    communication = kernel_communication(kernel)
    return CollectiveSpan(
        start_ns=kernel.start_unix_ns + offset_ns,
        end_ns=max(kernel.end_unix_ns, kernel.start_unix_ns + 1) + offset_ns,
        collective=_name(communication.collective),
        kind=decided.kind,
        rule=decided.rule,
        communicator=(meta.group_name or meta.group_description or "") if meta else "",
        n_ranks=meta.group_size if meta else None,
        nnodes=None,
        message_bytes=(meta.in_bytes if meta else None),
        bus_bandwidth_gbs=None,
        source=PYTORCH,
    )


def _operations_per_record(records: Sequence[InspectorRecord]) -> dict[tuple[str, int], float]:
    """Per (communicator, rank): the operations that ran per record the log holds.

    ``coll_sn`` counts a communicator's operations on one rank: from its first to its last
    record, max - min + 1 ran, of every collective of that communicator, and the records
    are a sample of them.
    """
    numbers: dict[tuple[str, int], list[int]] = defaultdict(list)
    for r in records:
        numbers[(r.communicator_id, r.rank)].append(r.sequence_number)
    return {key: (max(s) - min(s) + 1) / len(s) for key, s in numbers.items()}


def _figures(
    name: str,
    kind: str | None,
    rows: list[tuple[object, Classification]],
    ran_per_record: Mapping[tuple[str, int], float],
) -> CollectiveFigures:
    rules = tuple(dict.fromkeys(decided.rule for _, decided in rows))
    records = [r for r, _ in rows if isinstance(r, InspectorRecord)]
    kernels = [k for k, _ in rows if isinstance(k, NcclKernel)]
    bandwidths = [r.bus_bandwidth_gbs for r in records if r.bus_bandwidth_gbs is not None]
    placed = sum(r.kernel_channels is not None or r.start_us is not None for r in records)
    operations = sum(ran_per_record[(r.communicator_id, r.rank)] for r in records)
    message = sum(r.message_size_bytes for r in records)
    message += sum(k.metadata.in_bytes or 0 for k in kernels if k.metadata is not None)
    return CollectiveFigures(
        collective=name,
        kind=kind,
        rules=rules,
        records=len(records) + len(kernels),
        placed=placed + len(kernels),
        inspector_records=len(records),
        operations=operations if records else None,
        bus_bandwidth_gbs=statistics.median(bandwidths) if bandwidths else None,
        message_bytes=message,
    )
