"""A report's collectives: every sample and burst labelled with the classes in flight on its host.

The records (NCCL Inspector dumps, PyTorch traces) become classified spans
(collector.collectives.join); each port direction's samples, as the detectors see them, get
the class set and the collective names of the spans they overlap (detectors.collective_join).
From those: per class and per collective the bytes, time at line rate, hidden saturation,
bursts and the measured peak beside NCCL's own bus bandwidth; per pair of classes the
saturated collision time, whether Hermod's urgent class went first, and what each mapping of
the three types into two lossless priorities would have done to it.

Which ports: the collectives' rails, not a storage NIC that shares the host. By default every
port the trace's job table does not mark as storage; ``ports`` names them otherwise.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from burstscope.collector.collectives.join import (
    CollectiveFigures,
    CollectiveLog,
    MappingError,
    collective_log,
    read_inspector,
    read_mapping,
)
from burstscope.collector.collectives.live import parse_clock_offset
from burstscope.collector.collectives.pytorch_trace import TraceError, read_trace
from burstscope.detectors.analyzer import Chunk
from burstscope.detectors.collective_join import (
    DP,
    EP,
    HERMOD,
    OTHER,
    PP,
    CollisionRun,
    MappingRow,
    MaskLedger,
    MaskTotals,
    PairRow,
    SpanIndex,
    class_bit,
    collision_runs,
    estimate_offset_ns,
    hermod_kinds,
    mapping_rows,
    pair_rows,
)
from burstscope.detectors.config import Thresholds, scale_key
from burstscope.errors import UsageError

# Where `burstscope simulate --collectives` (and a site that wants `report` to find them)
# puts the training stack's records beside a trace.
COLLECTIVES_DIR = "collectives"
INSPECTOR_DIR = "nccl-inspector"
PYTORCH_DIR = "pytorch"
# Collective names beyond this many share the last bit of the name masks.
_NAME_BITS = 8


@dataclass(frozen=True, slots=True)
class CollectiveOptions:
    """What `report` was told about the records: files, a class mapping, a clock offset."""

    inspector: tuple[Path, ...] = ()  # dump files or directories
    pytorch: tuple[Path, ...] = ()  # trace files
    mapping: tuple[tuple[str, str], ...] = ()  # communicator or group -> class
    offset_ns: int = 0
    ports: tuple[str, ...] = ()  # "device" or "device/port"; () the default choice

    @staticmethod
    def build(
        inspector: Sequence[Path],
        pytorch: Sequence[Path],
        mapping_file: Path | None,
        offset_ns: int,
        ports: Sequence[str],
    ) -> CollectiveOptions:
        """Options from the command line; UsageError for a mapping file that is not right."""
        try:
            mapping = read_mapping(mapping_file) if mapping_file is not None else {}
        except MappingError as error:
            raise UsageError(str(error)) from None
        return CollectiveOptions(
            tuple(inspector), tuple(pytorch), tuple(mapping.items()), offset_ns, tuple(ports)
        )


def discover(trace: Path, options: CollectiveOptions) -> tuple[list[Path], list[Path]]:
    """The record files for a trace: those given, else the trace's own ``collectives/``."""
    if options.inspector or options.pytorch:
        return list(options.inspector), list(options.pytorch)
    root = trace / COLLECTIVES_DIR
    if not trace.is_dir() or not root.is_dir():
        return [], []
    inspector = [root / INSPECTOR_DIR] if (root / INSPECTOR_DIR).is_dir() else []
    pytorch = sorted((root / PYTORCH_DIR).glob("*.json")) + sorted(
        (root / PYTORCH_DIR).glob("*.json.gz")
    )
    return inspector, pytorch


def load(trace: Path, options: CollectiveOptions, hostname: str | None) -> CollectiveLog | None:
    """Every record for this trace's host, classified and placed; None when there are none."""
    inspector_paths, pytorch_paths = discover(trace, options)
    if not inspector_paths and not pytorch_paths:
        return None
    for path in [*inspector_paths, *pytorch_paths]:
        if not path.exists():
            raise UsageError(f"collective records {str(path)!r} do not exist")
    records, skipped = read_inspector(inspector_paths, hostname)
    traces = []
    for path in pytorch_paths:
        try:
            traces.append(read_trace(path))
        except TraceError as error:
            raise UsageError(str(error)) from None
    return collective_log(records, traces, dict(options.mapping), options.offset_ns, skipped)


def labelled_port(
    device: str, port: int, storage: Iterable[tuple[str, int]], chosen: Sequence[str]
) -> bool:
    """Whether a port's samples are labelled: one of ``chosen``, else any but storage."""
    if chosen:
        return device in chosen or f"{device}/{port}" in chosen
    return (device, port) not in set(storage)


class NameBits:
    """A bit per collective name (canonical), in the order of first appearance."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names: list[str] = []
        for name in names:
            if name not in self.names:
                self.names.append(name)

    def bit(self, name: str) -> int:
        return 1 << min(self.names.index(name), _NAME_BITS - 1)

    def label(self, bit: int) -> str:
        position = bit.bit_length() - 1
        if position == _NAME_BITS - 1 and len(self.names) > _NAME_BITS:
            return "others"
        return self.names[position]

    def bits(self) -> list[int]:
        return [1 << i for i in range(min(len(self.names), _NAME_BITS))]


@dataclass(slots=True)
class DirectionLabels:
    """One port direction's samples and bursts, labelled as the detectors see them."""

    classes: SpanIndex
    names: SpanIndex
    line_rate: int
    thresholds: Thresholds
    by_class: MaskLedger = field(default_factory=MaskLedger)
    by_name: MaskLedger = field(default_factory=MaskLedger)
    bursts_by_class: Counter[int] = field(default_factory=Counter)
    burst_bytes_by_class: Counter[int] = field(default_factory=Counter)
    saturated_ns: int = 0
    # Collision samples (few): where, their masks, kept until the end to make runs.
    _collide: list[tuple[int, int, int, int]] = field(default_factory=list)
    # Where each burst began, to within a sample: the end of its first sample less the time
    # its bytes take at line rate (a burst runs near line rate from its first byte).
    onsets: list[npt.NDArray[np.int64]] = field(default_factory=list)
    _position: int = 0
    _previous: tuple[int, int] | None = None  # the last sample's (time, counter)
    _was_in_burst: bool = False
    # Saturated time per class set of each coarse window still open, by window end.
    _open: dict[int, tuple[MaskLedger, MaskLedger]] = field(default_factory=dict)

    def feed(self, chunk: Chunk, values: npt.NDArray[np.uint64]) -> None:
        stamps = chunk.timestamp_ns
        if stamps.size:
            self._samples(chunk, values)
        self._close(chunk)
        self._bursts(chunk)

    def _samples(self, chunk: Chunk, values: npt.NDArray[np.uint64]) -> None:
        stamps = chunk.timestamp_ns
        counters = values.astype(np.int64)
        before_t, before_v = self._previous or (int(stamps[0]), int(counters[0]))
        lo = np.concatenate(([before_t], stamps[:-1]))
        earlier = np.concatenate(([before_v], counters[:-1]))
        self._previous = (int(stamps[-1]), int(counters[-1]))
        valid = chunk.valid
        duration = np.where(valid, stamps - lo, 0)
        sent = np.where(valid, counters - earlier, 0)
        utilization = chunk.utilization
        in_burst = valid & (utilization >= self.thresholds.burst)
        saturated = valid & (utilization >= self.thresholds.saturated)
        self.saturated_ns += int(duration[saturated].sum())
        before = np.concatenate(([self._was_in_burst], in_burst[:-1]))
        self._was_in_burst = bool(in_burst[-1])
        first = np.flatnonzero(in_burst & ~before)
        if first.size:
            took = (sent[first] / (self.line_rate / 1e9)).astype(np.int64)
            self.onsets.append(stamps[first] - np.minimum(took, duration[first]))
        classes = self.classes.masks(lo, stamps)
        names = self.names.masks(lo, stamps)
        none = np.zeros(stamps.shape, dtype=np.bool_)
        # Hidden saturation is known when a window closes: saturated time waits per window.
        window = self.thresholds.coarse_window_ns
        ends = (stamps // window + 1) * window
        for end in np.unique(ends).tolist():
            part = ends == end
            pending = self._open.setdefault(int(end), (MaskLedger(), MaskLedger()))
            held = part & saturated
            pending[0].add(
                classes[held], duration[held], sent[held], none[held], held[held], none[held]
            )
            pending[1].add(
                names[held], duration[held], sent[held], none[held], held[held], none[held]
            )
        self.by_class.add(classes, duration, sent, in_burst, saturated, none)
        self.by_name.add(names, duration, sent, in_burst, saturated, none)
        hermod = classes & HERMOD
        kinds = np.array([hermod_kinds(m) for m in range(16)])[hermod]
        for i in np.flatnonzero(saturated & (kinds >= 2)).tolist():
            self._collide.append((self._position + i, int(lo[i]), int(stamps[i]), int(classes[i])))
        self._position += stamps.size

    def _close(self, chunk: Chunk) -> None:
        windows = chunk.windows.get(scale_key(self.thresholds.coarse_window_ns))
        if windows is None:
            return
        for end, utilization in zip(
            windows.end_ns.tolist(), windows.utilization.tolist(), strict=True
        ):
            pending = self._open.pop(int(end), None)
            if pending is None or utilization >= self.thresholds.busy:
                continue
            for ledger, pending_ledger in ((self.by_class, pending[0]), (self.by_name, pending[1])):
                for mask, totals in pending_ledger.by_mask.items():
                    target = ledger.by_mask.setdefault(mask, MaskTotals())
                    target.hidden_saturated_ns += totals.saturated_ns
        # Windows that closed without covered time are never listed: drop those long past.
        if chunk.timestamp_ns.size:
            last = int(chunk.timestamp_ns[-1])
            for end in [e for e in self._open if e < last - self.thresholds.coarse_window_ns]:
                del self._open[end]

    def _bursts(self, chunk: Chunk) -> None:
        bursts = chunk.bursts
        if not len(bursts.start_ns):
            return
        masks = self.classes.masks(bursts.start_ns, bursts.end_ns)
        for mask, nbytes in zip(masks.tolist(), bursts.bytes.tolist(), strict=True):
            self.bursts_by_class[mask] += 1
            self.burst_bytes_by_class[mask] += int(nbytes)

    def runs(self) -> list[CollisionRun]:
        if not self._collide:
            return []
        rows = np.array(self._collide, dtype=np.int64)
        # collision_runs breaks runs where positions are not consecutive.
        return collision_runs(
            rows[:, 1],
            rows[:, 2],
            rows[:, 3].astype(np.uint8),
            np.ones(len(rows), dtype=np.bool_),
            self.classes,
            position=rows[:, 0],
        )


@dataclass(frozen=True, slots=True)
class ClassRow:
    """One class (or collective): what the labelled samples carried and NCCL's view of it."""

    name: str
    kind: str | None  # for a collective row: its class
    totals: MaskTotals
    bursts: int
    line_rate_bytes_per_second: int
    records: int
    rules: tuple[str, ...]  # how the records' classes were decided (collective_classes rules)
    sampled_share: float | None  # Inspector records / operations that ran
    bus_bandwidth_gbs: float | None  # NCCL's median

    @property
    def peak_gbs(self) -> float:
        """The rail's measured peak during its samples, in GB/s (NCCL's unit for busBw)."""
        return self.totals.peak_bytes_per_second / 1e9


@dataclass(frozen=True, slots=True)
class CollectiveReport:
    """One trace's collectives: the records, the labelled samples and the collision tables."""

    source: str
    sources: tuple[str, ...]
    records: int
    unplaced: int
    spans: int
    skipped: tuple[tuple[str, int], ...]
    offset_ns: int
    residual_offset_ns: int | None  # median kernel-start-to-burst-onset lag, estimated
    ports: tuple[str, ...]  # the ports labelled
    classes: tuple[ClassRow, ...]  # EP, PP, DP, other, none, collision
    collectives: tuple[ClassRow, ...]
    bursts: tuple[tuple[tuple[str, ...], int, int], ...]  # class set, bursts, bytes
    saturated_ns: int
    labelled: MaskTotals  # every labelled sample, whatever its class set
    pairs: tuple[PairRow, ...]
    mappings: tuple[MappingRow, ...]
    collision_runs: int


class NodeCollectives:
    """The labels of one trace's ports, fed as the report's detectors are."""

    def __init__(self, log: CollectiveLog) -> None:
        self.log = log
        self.index = SpanIndex(log.spans)
        self.name_bits = NameBits(s.collective for s in log.spans)
        bits = [self.name_bits.bit(s.collective) for s in log.spans]
        self.names = SpanIndex(log.spans, bits=bits)
        self.directions: list[tuple[str, DirectionLabels]] = []

    def direction(self, port_label: str, line_rate: int, thresholds: Thresholds) -> DirectionLabels:
        labels = DirectionLabels(self.index, self.names, line_rate, thresholds)
        self.directions.append((port_label, labels))
        return labels

    def report(self, source: str) -> CollectiveReport:
        by_class, by_name = MaskLedger(), MaskLedger()
        bursts: Counter[int] = Counter()
        burst_bytes: Counter[int] = Counter()
        runs: list[CollisionRun] = []
        saturated = 0
        onsets = [o for _, labels in self.directions for o in labels.onsets]
        rates = [labels.line_rate for _, labels in self.directions] or [0]
        for _, labels in self.directions:
            by_class.merge(labels.by_class)
            by_name.merge(labels.by_name)
            bursts.update(labels.bursts_by_class)
            burst_bytes.update(labels.burst_bytes_by_class)
            runs += labels.runs()
            saturated += labels.saturated_ns
        figures = self.log.figures
        rate = max(rates)
        classes = []
        for name, bit in (("EP", EP), ("PP", PP), ("DP", DP), ("other", OTHER)):
            kind = None if bit == OTHER else name
            chosen = [f for f in figures if class_bit(f.kind) == bit]
            classes.append(
                _row(name, kind, by_class.total(bit), _bursts(bursts, bit), rate, chosen)
            )
        none = by_class.by_mask.get(0, MaskTotals())
        classes.append(_row("none", None, none, bursts.get(0, 0), rate, []))
        colliding = MaskTotals()
        for mask, totals in by_class.by_mask.items():
            if hermod_kinds(mask) >= 2:
                colliding.add(totals)
        collided = sum(n for m, n in bursts.items() if hermod_kinds(m) >= 2)
        classes.append(_row("collision", None, colliding, collided, rate, []))
        collectives = []
        for bit in self.name_bits.bits():
            name = self.name_bits.label(bit)
            chosen = [f for f in figures if f.collective == name]
            kinds = {f.kind for f in chosen}
            kind = kinds.pop() if len(kinds) == 1 else None
            collectives.append(_row(name, kind, by_name.total(bit), 0, rate, chosen))
        return CollectiveReport(
            source=source,
            sources=self.log.sources,
            records=self.log.records,
            unplaced=self.log.unplaced,
            spans=len(self.log.spans),
            skipped=tuple(sorted(self.log.skipped.items())),
            offset_ns=self.log.offset_ns,
            residual_offset_ns=estimate_offset_ns(
                self.log.spans, np.sort(np.concatenate(onsets)) if onsets else np.empty(0, np.int64)
            ),
            ports=tuple(dict.fromkeys(label for label, _ in self.directions)),
            classes=tuple(classes),
            collectives=tuple(collectives),
            bursts=tuple(
                (_class_set(mask), count, burst_bytes[mask])
                for mask, count in sorted(bursts.items())
            ),
            saturated_ns=saturated,
            labelled=by_class.total(0),
            pairs=tuple(pair_rows(runs, saturated)),
            mappings=tuple(mapping_rows(runs)),
            collision_runs=len(runs),
        )


def _class_set(mask: int) -> tuple[str, ...]:
    from burstscope.detectors.collective_join import class_names

    return class_names(mask)


def _bursts(counts: Counter[int], bit: int) -> int:
    return sum(n for mask, n in counts.items() if mask & bit)


def _row(
    name: str,
    kind: str | None,
    totals: MaskTotals,
    bursts: int,
    rate: int,
    figures: Sequence[CollectiveFigures],
) -> ClassRow:
    inspector = sum(f.inspector_records for f in figures)
    operations = sum(f.operations or 0 for f in figures)
    bandwidths = [f.bus_bandwidth_gbs for f in figures if f.bus_bandwidth_gbs is not None]
    return ClassRow(
        name=name,
        kind=kind,
        totals=totals,
        bursts=bursts,
        line_rate_bytes_per_second=rate,
        records=sum(f.records for f in figures),
        rules=tuple(dict.fromkeys(rule for f in figures for rule in f.rules)),
        sampled_share=min(inspector / operations, 1.0) if operations else None,
        bus_bandwidth_gbs=float(np.median(bandwidths)) if bandwidths else None,
    )


def parse_ports(text: str | None) -> tuple[str, ...]:
    """``--collective-ports mlx5_0,mlx5_1/1`` as names; () for none given."""
    if text is None:
        return ()
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise UsageError("--collective-ports needs at least one DEVICE or DEVICE/PORT")
    return names


def path_list(values: Sequence[str] | None) -> tuple[Path, ...]:
    return tuple(Path(os.fspath(v)) for v in values or ())


def parse_offset(text: str) -> int:
    """``--collective-clock-offset``: the agent's parser (live.parse_clock_offset), its
    ValueError as one line for the command line."""
    try:
        return parse_clock_offset(text)
    except ValueError as error:
        raise UsageError(f"--collective-clock-offset {error}") from None
