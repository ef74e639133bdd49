"""A report's model: traces and CSVs through the detectors, per port and direction.

What ``burstscope report`` and ``demo`` show; the views (report_view.py, plot.py) only
turn it into a table, JSON or a picture. A trace that recorded its jobs is also grouped by
job (report_jobs.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from burstscope.cluster import Cluster, map_in
from burstscope.collector.jobs.model import COMPUTE, STORAGE
from burstscope.collector.jobs.spans import JobSpan, read_job_log
from burstscope.collector.trace import (
    PortSamples,
    SlowSeries,
    TraceError,
    TraceInfo,
    read_info,
    read_samples,
    read_slow,
)
from burstscope.detectors.analyzer import BATCH_BLOCK, Chunk, DirectionAnalyzer, Summary, WorkArrays
from burstscope.detectors.bursts import Bursts
from burstscope.detectors.config import (
    DIRECTIONS,
    Thresholds,
    nominal_interval_ns,
    scale_key,
)
from burstscope.detectors.congestion import CongestionShare, congestion_direction, congestion_share
from burstscope.detectors.fleet import (
    FleetSynchrony,
    MillisecondRuns,
    fleet_synchrony,
    saturated_milliseconds,
)
from burstscope.detectors.line_rate import rate_runs
from burstscope.detectors.rails import (
    RailBins,
    RailFinding,
    RailTable,
    bin_for,
    node_steps,
    peer_groups,
    rail_table,
    step_verdicts,
    verdicts,
)
from burstscope.detectors.scales import Windows, peak_envelope
from burstscope.detectors.stragglers import (
    NodeStanding,
    NodeStep,
    Standings,
    StepLimits,
    StepSplitter,
    StepVerdict,
    judge,
)
from burstscope.detectors.synchrony import Synchrony, synchrony
from burstscope.detectors.throttle import Throttle, ThrottleLimits, classify_direction
from burstscope.errors import UsageError
from burstscope.plot_series import PLOT_BUCKET_NS, PlotSeries, Zoom, empty_int
from burstscope.report_collectives import (
    CollectiveOptions,
    CollectiveReport,
    DirectionLabels,
    NodeCollectives,
    labelled_port,
    load,
)
from burstscope.report_jobs import JobReport, PortLedger, job_reports, ledgers

# Samples a port needs before its sampling interval (the finest scale) is decided.
INTERVAL_PROBE = 64
# A step of the rail table where the job's period does not repeat (detectors.rails).
RAIL_WINDOW_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class DirectionReport:
    direction: str  # "transmit" | "receive"
    summary: Summary
    plot: PlotSeries
    # Congestion counters recorded beside the samples (empty without slow pieces), by name.
    congestion: tuple[tuple[str, CongestionShare], ...] = ()
    # Its saturated and long-burst seconds by cause (detectors.throttle); None without any.
    throttle: Throttle | None = None


@dataclass(frozen=True, slots=True)
class PortReport:
    source: str  # the PATH argument the port came from
    device: str
    port: int
    directions: tuple[DirectionReport, DirectionReport]
    warnings: tuple[str, ...]  # about the port as a whole (line rate changes)

    @property
    def label(self) -> str:
        return f"{self.device}/{self.port}"


@dataclass(frozen=True, slots=True)
class RailReport:
    """One node's training rails side by side, step by step (detectors.rails): the rails
    of one kind that a job uses for compute (every port of one line rate without a job
    table), in columns; per direction the table and the rails flagged over stretches."""

    source: str
    rails: tuple[str, ...]  # "device/port", the tables' columns
    directions: tuple[tuple[str, RailTable, tuple[RailFinding, ...]], ...]


@dataclass(frozen=True, slots=True)
class NodeReport:
    """One trace (one node), analysed where its file is read: what goes back to the client
    is summaries (histograms, counts, bursts, saturated milliseconds), never samples."""

    source: str  # the PATH argument
    info: TraceInfo
    ports: tuple[PortReport, ...]
    synchrony: tuple[tuple[str, str, Synchrony], ...]
    saturated: MillisecondRuns  # milliseconds in which any port ended a saturated sample
    jobs: tuple[JobReport, ...] = ()  # from the trace's side table; () without one
    job_warnings: tuple[str, ...] = ()  # side table lines that could not be read
    collectives: CollectiveReport | None = None  # None: no collective records for it
    rails: RailReport | None = None  # None: fewer than three rails of one kind
    # Its steps on the training rails (detectors.stragglers), for the stragglers across
    # nodes; () where the rails report has no rails.
    steps: tuple[NodeStep, ...] = ()

    @property
    def name(self) -> str:
        return self.info.host or self.source


@dataclass(frozen=True, slots=True)
class NodeContrast:
    """The 15 s vs 1 ms contrast of one node or the fleet, merged from port summaries."""

    saturated_ns: int
    hidden_saturated_ns: int  # inside coarse windows under the busy threshold
    finest_busy: int  # finest samples above busy, of finest_count
    finest_count: int
    coarse_busy: int  # coarse windows above busy, of coarse_count
    coarse_count: int

    @staticmethod
    def of(summaries: list[Summary]) -> NodeContrast:
        return NodeContrast(
            sum(s.saturated_ns for s in summaries),
            sum(s.hidden_saturated_ns for s in summaries),
            sum(s.finest.busy for s in summaries),
            sum(s.finest.count for s in summaries),
            sum(s.coarse.busy for s in summaries),
            sum(s.coarse.count for s in summaries),
        )

    @property
    def hidden_share(self) -> float | None:
        """Share of saturated time a 15 s scrape shows as a window under 25%."""
        if self.saturated_ns == 0:
            return None
        return self.hidden_saturated_ns / self.saturated_ns


@dataclass(frozen=True, slots=True)
class StragglerGroup:
    """One job's steps across the fleet's nodes, judged (detectors.stragglers): per node
    its standing over every judged step of the traces, and the steps worth reading."""

    job: str | None  # the job id; None: the nodes' steps outside any job table's jobs
    nodes: tuple[str, ...]  # the nodes with steps in the group, by name
    judged: int  # steps judged (matched on at least min_nodes nodes)
    resolution_ns: int | None  # the smallest lag called, the largest of its steps'; None: none
    standings: tuple[NodeStanding, ...]  # by node name
    flagged: tuple[StepVerdict, ...]  # the judged steps with a straggler or a slow rail


@dataclass(frozen=True, slots=True)
class Fleet:
    """Many nodes' traces together: per node and fleet-wide contrast, cross-node synchrony,
    and the stragglers across the nodes of each job."""

    nodes: tuple[str, ...]
    clock_offsets_ns: tuple[int | None, ...]  # as each trace recorded it
    contrast: tuple[NodeContrast, ...]  # per node
    total: NodeContrast
    synchrony: FleetSynchrony
    stragglers: tuple[StragglerGroup, ...] = ()  # per job, by job id; () without steps
    straggler_limits: StepLimits = field(default_factory=StepLimits)


@dataclass(frozen=True, slots=True)
class Report:
    ports: tuple[PortReport, ...]
    synchrony: tuple[tuple[str, str, Synchrony], ...]  # (source, direction, matrix)
    fleet: Fleet | None = None  # with two traces or more
    jobs: tuple[JobReport, ...] = ()  # every trace's, in the order of the paths
    job_warnings: tuple[str, ...] = ()
    collectives: tuple[CollectiveReport, ...] = ()  # the traces' that had records
    rails: tuple[RailReport, ...] = ()  # the traces' with three rails of one kind or more


@dataclass(slots=True)
class _Direction:
    """An analyzer and, with --plot, the little of its output a picture needs."""

    analyzer: DirectionAnalyzer
    keep_plot: bool
    plot: PlotSeries = field(default_factory=PlotSeries)
    _parts: dict[str, list[Any]] = field(default_factory=dict)
    _zoom: Zoom = field(default_factory=Zoom)
    saturated_ms: list[Any] = field(default_factory=list)
    labels: DirectionLabels | None = None  # the classes in flight, when records were given
    rails: RailBins = field(default_factory=RailBins)  # for the rails side by side

    def feed(self, timestamp: Any, values: Any, rebaseline: Any) -> None:
        chunk = self.analyzer.feed(timestamp, values, rebaseline)
        self._bin(chunk)
        if self.labels is not None:
            self.labels.feed(chunk, values)
        if chunk.saturated.size:
            self.saturated_ms.append(saturated_milliseconds(chunk.timestamp_ns, chunk.saturated))
        self._keep(chunk)

    def _bin(self, chunk: Chunk) -> None:
        windows = chunk.windows.get(self.rails.window_key, Windows.empty())
        rate = self.analyzer.line_rate_bytes_per_second
        self.rails.feed(windows.end_ns, windows.utilization, windows.covered_ns, rate, chunk.bursts)

    def finish(self) -> None:
        chunk = self.analyzer.finish()
        self._bin(chunk)
        if self.labels is not None:
            self.labels.feed(chunk, np.empty(0, dtype=np.uint64))
        self._keep(chunk)
        if self.keep_plot:
            parts = {name: _join(parts) for name, parts in self._parts.items()}
            self.plot = PlotSeries(**parts, **self._zoom.series())

    def _add(self, name: str, values: Any) -> None:
        self._parts.setdefault(name, []).append(values)

    def _keep(self, chunk: Chunk) -> None:
        if not self.keep_plot:
            return
        thresholds = self.analyzer.thresholds
        for key, prefix in ((scale_key(thresholds.coarse_window_ns), "coarse"), ("1", "second")):
            windows = chunk.windows.get(key)
            if windows is not None:
                self._add(f"{prefix}_end_ns", windows.end_ns)
                self._add(f"{prefix}_utilization", windows.utilization)
        self._zoom.feed(chunk)  # before the return: the last chunk may only close a burst
        if chunk.timestamp_ns.size == 0:
            return
        starts, peaks = peak_envelope(
            chunk.timestamp_ns, chunk.utilization, chunk.valid, PLOT_BUCKET_NS
        )
        self._add("peak_start_ns", starts)
        self._add("peak_utilization", peaks)


class _Port:
    """One port of one trace: its two directions, created once the interval is known."""

    def __init__(
        self,
        source: str,
        device: str,
        port: int,
        options: _Options,
        interval_ns: int | None,
        work_arrays: WorkArrays,
        ledger: PortLedger | None = None,
        collectives: NodeCollectives | None = None,
        steps: _NodeSteps | None = None,
    ) -> None:
        self.source = source
        self.steps = steps  # the node's step splitting, fed the transmit counter
        # The labels of the collectives in flight, for a port that carries them.
        self.collectives = collectives
        # The jobs that held the port and when (None: no job did): its samples are fed in
        # parts cut where the holders change, each part's totals added to them.
        self.ledger = ledger
        self.work_arrays = work_arrays  # shared by every direction of the trace
        self.interval_ns = interval_ns  # as the trace states it; None: judged from the steps
        self.device = device
        self.port = port
        self.options = options
        self.pending: list[PortSamples] = []
        self.directions: tuple[_Direction, _Direction] | None = None
        self.line_rate: int | None = None
        self.warnings: list[str] = []
        self.rate_warned = False
        # Samples gathered into blocks of at most BATCH_BLOCK before they reach the
        # detectors: a 5 s piece is 5,000 samples, and a feed has a fixed cost.
        self.buffer: list[PortSamples] = []
        self.buffered = 0
        self.blocks = _Blocks()

    @property
    def label(self) -> str:
        return f"{self.device} port {self.port}"

    def add(self, samples: PortSamples) -> None:
        if self.directions is None:
            self.pending.append(samples)
            if sum(p.timestamp_ns.size for p in self.pending) >= INTERVAL_PROBE:
                self._start(final=False)
            return
        self._feed(samples)

    def finish(self) -> None:
        if self.directions is None:
            self._start(final=True)
        assert self.directions is not None
        self._flush()
        for direction in self.directions:
            direction.finish()

    def _rate_from(self, samples: PortSamples) -> int | None:
        """The first known line rate in these samples."""
        if self.options.line_rate is not None:
            return self.options.line_rate
        rates = samples.line_rate_bytes_per_second
        if rates is None:
            raise UsageError(
                f"{str(samples.source)!r}: no line_rate_bytes_per_second column; "
                "pass --line-rate GBITS"
            )
        known = rates[rates > 0]
        if known.size == 0:
            return None
        return int(known[0])

    def _start(self, final: bool) -> None:
        rate = next((r for r in (self._rate_from(p) for p in self.pending) if r is not None), None)
        if rate is None:
            if not final:
                return
            source = self.pending[0].source
            raise UsageError(
                f"{str(source)!r}: line rate unknown (0) for {self.label}; pass --line-rate GBITS"
            )
        self.line_rate = rate
        stamps = np.concatenate([p.timestamp_ns for p in self.pending])
        if np.count_nonzero(np.diff(stamps) > 0) == 0:
            raise UsageError(
                f"{str(self.pending[0].source)!r}: {self.label} needs at least two samples "
                "with increasing timestamps"
            )
        interval = self.interval_ns or nominal_interval_ns(stamps)
        if self.steps is not None:
            self.steps.join((self.device, self.port), rate, interval)
        self.directions = tuple(  # type: ignore[assignment]
            _Direction(
                DirectionAnalyzer(
                    rate,
                    self.options.thresholds,
                    interval,
                    keep_bursts=True,
                    work_arrays=self.work_arrays,
                ),
                keep_plot=self.options.plot,
                rails=RailBins(bin_for(self.options.thresholds.window_scales(interval))),
            )
            for _ in DIRECTIONS
        )
        if self.collectives is not None:
            for name, direction in zip(DIRECTIONS, self.directions or (), strict=True):
                direction.labels = self.collectives.direction(
                    f"{self.device}/{self.port} {name}", rate, self.options.thresholds
                )
        pending, self.pending = self.pending, []
        for samples in pending:
            self._feed(samples)

    def _feed(self, samples: PortSamples) -> None:
        """Each interval divided by the rate in force for it: the trace records the rate per
        row, and a change (a renegotiated link) applies from the row that carries it. Rows
        are gathered into blocks of about BATCH_BLOCK for the detectors; a rate change
        first flushes what was gathered at the old rate."""
        assert self.directions is not None
        rates = samples.line_rate_bytes_per_second
        if self.options.line_rate is not None or rates is None or not rates.size:
            self._gather(samples)
            return
        runs = rate_runs(rates, self.line_rate or 0)
        for run in runs:
            if run.rate > 0 and run.rate != self.line_rate:
                self._flush()
                self.warnings.append(
                    f"line rate changed from {(self.line_rate or 0) * 8 / 1e9:g} to "
                    f"{run.rate * 8 / 1e9:g} Gb/s at {int(samples.timestamp_ns[run.rows.start])} "
                    "ns; each interval is divided by the rate in force"
                )
                self.line_rate = run.rate
                for direction in self.directions:
                    direction.analyzer.set_line_rate(run.rate)
            # The usual piece is one run: the rate in force throughout.
            self._gather(samples if len(runs) == 1 else _rows(samples, run.rows))

    def _gather(self, samples: PortSamples) -> None:
        size = samples.timestamp_ns.size
        if self.buffered and self.buffered + size > BATCH_BLOCK:
            self._flush()  # blocks within BATCH_BLOCK: the detectors' work arrays fit them
        self.buffer.append(samples)
        self.buffered += size
        if self.buffered >= BATCH_BLOCK:
            self._flush()

    def _flush(self) -> None:
        if not self.buffer:
            return
        assert self.directions is not None
        parts, self.buffer, self.buffered = self.buffer, [], 0
        blocks = self.blocks
        stamps = blocks.join("timestamp_ns", [p.timestamp_ns for p in parts])
        marks = (
            None
            if all(p.rebaseline is None for p in parts)
            else blocks.join(
                "rebaseline",
                [
                    np.zeros(p.timestamp_ns.size, np.bool_)
                    if p.rebaseline is None
                    else p.rebaseline
                    for p in parts
                ],
            )
        )
        xmit = blocks.join("xmit_bytes", [p.xmit_bytes for p in parts])
        rcv = blocks.join("rcv_bytes", [p.rcv_bytes for p in parts])
        transmit, receive = self.directions
        # A piece larger than a block (a CSV, a foreign Parquet file) is fed a block at a
        # time; any chunking gives the same result.
        ledger = self.ledger
        for first in range(0, stamps.size, BATCH_BLOCK):
            block = slice(first, first + BATCH_BLOCK)
            for part in [block] if ledger is None else ledger.parts(stamps, block):
                part_marks = None if marks is None else marks[part]
                transmit.feed(stamps[part], xmit[part], part_marks)
                receive.feed(stamps[part], rcv[part], part_marks)
                if ledger is not None:
                    ledger.record(
                        int(stamps[part.start]),
                        int(stamps[part.stop - 1]),
                        (transmit.analyzer, receive.analyzer),
                    )
        if self.steps is not None:
            self.steps.feed((self.device, self.port), self.line_rate or 0, stamps, xmit, marks)


class _NodeSteps:
    """A node's steps on its training rails (detectors.stragglers), split as the samples are
    read: the training rails are known only at the end (the rails report picks them: the
    ports of one line rate, three or more, that a job held for compute, or every port
    without a job table), so the ports that can be ones are split by line rate (a port with
    the group of its first rate), and the steps of the group the rails report picked are
    the node's. A splitter closes its steps once every one of its rails has been fed again,
    so it holds about one block of active samples per rail, never the trace."""

    def __init__(self, host: str, compute: set[tuple[str, int]]) -> None:
        self.host = host
        self.compute = compute  # with a job table: the ports a job held for compute
        self.rate_of: dict[tuple[str, int], int] = {}  # port: the rate of its group
        self.splitters: dict[int, StepSplitter] = {}
        self.rails: dict[int, set[str]] = {}  # rate: the rails of its splitter
        self.fed: dict[int, set[str]] = {}  # rate: the rails fed since it last closed
        self.steps: dict[int, list[NodeStep]] = {}

    def join(self, key: tuple[str, int], rate: int, interval_ns: int) -> None:
        if self.compute and key not in self.compute:
            return
        self.rate_of[key] = rate
        if rate not in self.splitters:
            self.splitters[rate] = StepSplitter(self.host, interval_ns)
            self.rails[rate], self.fed[rate], self.steps[rate] = set(), set(), []
        self.rails[rate].add(_rail_label(key))

    def feed(
        self,
        key: tuple[str, int],
        line_rate: int,
        stamps: npt.NDArray[np.int64],
        values: npt.NDArray[Any],
        marks: npt.NDArray[np.bool_] | None,
    ) -> None:
        rate = self.rate_of.get(key)
        if rate is None:
            return
        label = _rail_label(key)
        splitter = self.splitters[rate]
        splitter.feed(label, line_rate, stamps, values, marks)
        fed = self.fed[rate]
        fed.add(label)
        if fed >= self.rails[rate]:
            fed.clear()
            self.steps[rate] += splitter.close()

    def finish(self, rails: list[tuple[str, int]]) -> list[NodeStep]:
        """The steps of the group most of ``rails`` (the training rails) are in."""
        for rate, splitter in self.splitters.items():
            self.steps[rate] += splitter.close(final=True)
        rates = [self.rate_of[key] for key in rails if key in self.rate_of]
        if not rates:
            return []
        return self.steps[max(set(rates), key=lambda rate: (rates.count(rate), rate))]


def _rail_label(key: tuple[str, int]) -> str:
    return f"{key[0]}/{key[1]}"


def _with_jobs(
    steps: list[NodeStep], spans: tuple[JobSpan, ...], rails: set[tuple[str, int]]
) -> list[NodeStep]:
    """Each step with the jobs that held its rails for compute at its onset."""
    holding = [s for s in spans if s.role == COMPUTE and (s.device, s.port) in rails]
    if not holding:
        return steps
    return [
        dataclasses.replace(
            step,
            jobs=tuple(sorted({s.job.job_id for s in holding if s.holds(step.onset_ns)})),
        )
        for step in steps
    ]


class _Blocks:
    """Arrays a port's blocks are joined into, reused from one block to the next.

    A fresh array of a block (512 KiB) is fresh pages, and faulting them in costs more than
    copying into memory already mapped. Nothing the detectors return refers to these
    arrays: what outlives a feed is copied (or computed) from them.
    """

    def __init__(self) -> None:
        self.arrays: dict[str, npt.NDArray[Any]] = {}

    def join(self, name: str, parts: list[npt.NDArray[Any]]) -> npt.NDArray[Any]:
        size = sum(p.size for p in parts)
        if size > BATCH_BLOCK:
            return np.concatenate(parts)
        array = self.arrays.get(name)
        if array is None or array.dtype != parts[0].dtype:
            array = self.arrays[name] = np.empty(BATCH_BLOCK, dtype=parts[0].dtype)
        joined: npt.NDArray[Any] = np.concatenate(parts, out=array[:size])
        return joined


@dataclass(frozen=True, slots=True)
class _Options:
    line_rate: int | None
    thresholds: Thresholds
    plot: bool
    collectives: CollectiveOptions = field(default_factory=CollectiveOptions)
    throttle: ThrottleLimits = field(default_factory=ThrottleLimits)


def analyze_paths(
    paths: list[Path],
    line_rate_gbits: float | None,
    plot: bool,
    thresholds: Thresholds,
    cluster: Cluster | None = None,
    collectives: CollectiveOptions | None = None,
    throttle: ThrottleLimits | None = None,
) -> Report:
    """Read every trace, feed the detectors, and gather what the views show.

    Each trace is one task: in this process by default, or on the Dask cluster given.
    Either way the client merges the same node reports in the same order, so the report
    is the same to the bit.
    """
    if line_rate_gbits is not None and not line_rate_gbits > 0:
        raise UsageError(f"--line-rate must be positive, got {line_rate_gbits:g}")
    line_rate = None if line_rate_gbits is None else round(line_rate_gbits * 1e9 / 8)
    options = _Options(
        line_rate,
        thresholds,
        plot,
        collectives or CollectiveOptions(),
        throttle or ThrottleLimits(),
    )
    nodes = map_in(cluster, analyze_trace, [(path, options) for path in paths])
    return merge_nodes(nodes)


def merge_nodes(nodes: list[NodeReport]) -> Report:
    """One report from the node reports, in the order of the paths."""
    ports = tuple(p for node in nodes for p in node.ports)
    synchronies = tuple(s for node in nodes for s in node.synchrony)
    return Report(
        ports,
        synchronies,
        _fleet(nodes) if len(nodes) > 1 else None,
        tuple(job for node in nodes for job in node.jobs),
        tuple(warning for node in nodes for warning in node.job_warnings),
        tuple(node.collectives for node in nodes if node.collectives is not None),
        tuple(node.rails for node in nodes if node.rails is not None),
    )


def _fleet(nodes: list[NodeReport]) -> Fleet:
    names = [node.name for node in nodes]
    # Two traces of one host (or none named): tell them apart by position.
    if len(set(names)) < len(names):
        names = [f"{name} #{index}" for index, name in enumerate(names)]
    summaries = [[d.summary for p in node.ports for d in p.directions] for node in nodes]
    limits = StepLimits()
    return Fleet(
        nodes=tuple(names),
        clock_offsets_ns=tuple(node.info.clock_offset_ns for node in nodes),
        contrast=tuple(NodeContrast.of(s) for s in summaries),
        total=NodeContrast.of([s for node in summaries for s in node]),
        synchrony=fleet_synchrony(names, [node.saturated for node in nodes]),
        stragglers=_stragglers(names, nodes, limits),
        straggler_limits=limits,
    )


def _stragglers(
    names: list[str], nodes: list[NodeReport], limits: StepLimits
) -> tuple[StragglerGroup, ...]:
    """The nodes' steps grouped by job (a step's first job; None for steps no job table
    places, all of them one group) and judged across nodes; every judged step counts in
    the standings, not only the last window's."""
    by_job: dict[str | None, list[NodeStep]] = {}
    for name, node in zip(names, nodes, strict=True):
        for step in node.steps:
            # The fleet's name: two traces of one host are two nodes.
            named = step if step.host == name else dataclasses.replace(step, host=name)
            by_job.setdefault(step.jobs[0] if step.jobs else None, []).append(named)
    groups = []
    for job in sorted(by_job, key=lambda job: (job is not None, job or "")):
        steps = by_job[job]
        verdicts = judge(steps, limits)
        standings = Standings(window=max(1, len(verdicts)))
        for verdict in verdicts:
            standings.add(verdict)
        groups.append(
            StragglerGroup(
                job,
                tuple(sorted({step.host for step in steps})),
                len(verdicts),
                max((v.resolution_ns for v in verdicts), default=None),
                tuple(standings.standings()),
                tuple(v for v in verdicts if v.stragglers or v.slow_rail is not None),
            )
        )
    return tuple(groups)


def analyze_trace(path: Path, options: _Options) -> NodeReport:
    """One trace through the detectors: the task each node's trace is."""
    found: dict[tuple[str, int], _Port] = {}
    # The trace's directions are fed one after another: one set of work arrays serves all.
    work_arrays = WorkArrays()
    held = read_job_log(path) if path.is_dir() else None
    window = options.thresholds.coarse_window_ns
    port_ledgers = ledgers(held.spans, window) if held is not None else {}
    storage = [(s.device, s.port) for s in held.spans if s.role == STORAGE] if held else []
    compute = {(s.device, s.port) for s in held.spans if s.role == COMPUTE} if held else set()
    try:
        info = read_info(path)
        splitting = _NodeSteps(info.host or str(path), compute)
        log = load(path, options.collectives, info.host)
        collectives = NodeCollectives(log) if log is not None else None
        for samples in read_samples(path):
            key = (samples.device, samples.port)
            if key not in found:
                labelled = collectives is not None and labelled_port(
                    samples.device, samples.port, storage, options.collectives.ports
                )
                found[key] = _Port(
                    str(path),
                    samples.device,
                    samples.port,
                    options,
                    info.interval_ns,
                    work_arrays,
                    port_ledgers.get(key),
                    collectives if labelled else None,
                    splitting,
                )
            found[key].add(samples)
        slow = read_slow(path)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    slow_by_port: dict[tuple[str, int], list[SlowSeries]] = {}
    for series in slow:
        slow_by_port.setdefault((series.device, series.port), []).append(series)
    port_reports = []
    # Each direction's bursts, for the synchrony across this node's ports: computed here, so
    # the report sent back to the client holds no per-burst arrays (about 1 MB per port
    # direction for 10 minutes of a busy port).
    port_bursts: list[tuple[Bursts, Bursts]] = []
    saturated: list[Any] = []
    for key in sorted(found):
        port = found[key]
        port.finish()
        port_reports.append(_port_report(port, slow_by_port.get(key, []), options.throttle))
        assert port.directions is not None
        transmit, receive = port.directions
        port_bursts.append((transmit.analyzer.bursts(), receive.analyzer.bursts()))
        last = port_reports[-1].directions[0].summary.last_ns
        if port.ledger is not None and last is not None:
            # What closing the last windows settled goes to the holders at the end.
            port.ledger.record(last, last, (transmit.analyzer, receive.analyzer), final=True)
        saturated += [ms for direction in port.directions for ms in direction.saturated_ms]
    synchronies = []
    for index, name in enumerate(DIRECTIONS):
        if len(port_reports) < 2:
            continue
        bursts = [both[index] for both in port_bursts]
        synchronies.append(
            (
                str(path),
                name,
                synchrony(
                    [f"{p.device}/{p.port}" for p in port_reports],
                    [b.start_ns for b in bursts],
                    [b.end_ns for b in bursts],
                ),
            )
        )
    runs = MillisecondRuns.from_milliseconds(_join(saturated) if saturated else empty_int())
    jobs: tuple[JobReport, ...] = ()
    if held is not None and held.spans:
        held_ports = {key: port_ledgers[key] for key in found if key in port_ledgers}
        by_port = dict(zip(sorted(found), port_bursts, strict=True))
        jobs = job_reports(str(path), held.spans, held_ports, by_port, _extent(port_reports))
    collective_report = None
    if collectives is not None:
        collective_report = collectives.report(str(path))
    chosen = _training_rails([found[key] for key in sorted(found)], compute)
    rails = _rails(str(path), chosen)
    rail_keys = [(p.device, p.port) for p, _ in chosen]
    steps = splitting.finish(rail_keys)
    if held is not None and held.spans:
        steps = _with_jobs(steps, held.spans, set(rail_keys))
    return NodeReport(
        str(path),
        info,
        tuple(port_reports),
        tuple(synchronies),
        runs,
        jobs,
        held.problems if held is not None else (),
        collective_report,
        rails,
        tuple(steps),
    )


def _training_rails(ports: list[_Port], compute: set[tuple[str, int]]) -> list[tuple[_Port, int]]:
    """The node's training rails and their peer groups: with a job table, the ports a job
    held for compute (never a storage NIC); without one, every port; peers are those of one
    line rate, three or more of them."""
    eligible = [not compute or (p.device, p.port) in compute for p in ports]
    groups = peer_groups([p.line_rate or 0 for p in ports], eligible)
    return [(p, g) for p, g in zip(ports, groups, strict=True) if g >= 0]


def _rails(source: str, chosen: list[tuple[_Port, int]]) -> RailReport | None:
    """The training rails side by side, step by step."""
    if not chosen:
        return None
    bins = [[d.rails for d in p.directions or ()] for p, _ in chosen]
    # The period from the transmit bursts: the job's steps time both directions alike.
    every = [b for both in bins for b in both]
    starts, ends, periods = node_steps(every, RAIL_WINDOW_NS, timing=[b[0] for b in bins])
    directions = []
    for index, name in enumerate(DIRECTIONS):
        table = rail_table([both[index] for both in bins], starts, ends, periods)
        codes, judged = step_verdicts(table.bytes, table.peak, [g for _, g in chosen])
        directions.append((name, table, verdicts(codes, judged)))
    labels = tuple(f"{p.device}/{p.port}" for p, _ in chosen)
    return RailReport(source, labels, tuple(directions))


def _extent(ports: list[PortReport]) -> tuple[int, int] | None:
    """The first and last sample of a trace's ports; None without samples."""
    firsts = [d.summary.first_ns for p in ports for d in p.directions]
    lasts = [d.summary.last_ns for p in ports for d in p.directions]
    known_first = [t for t in firsts if t is not None]
    known_last = [t for t in lasts if t is not None]
    if not known_first or not known_last:
        return None
    return min(known_first), max(known_last)


def _port_report(port: _Port, slow: list[SlowSeries], limits: ThrottleLimits) -> PortReport:
    assert port.directions is not None
    directions = []
    for name, direction in zip(DIRECTIONS, port.directions, strict=True):
        analyzer = direction.analyzer
        summary = analyzer.summary()
        saturated = analyzer.saturated_seconds()
        congestion = tuple(
            (
                series.name,
                congestion_share(
                    series.timestamp_ns,
                    series.value,
                    saturated,
                    series.spec,
                    rebaseline=series.rebaseline,
                ),
            )
            for series in slow
            if series.spec is not None and congestion_direction(series.name) == name
        )
        bursts = analyzer.bursts()
        throttle = classify_direction(name, saturated, bursts.start_ns, bursts.end_ns, slow, limits)
        directions.append(
            DirectionReport(
                direction=name,
                summary=summary,
                plot=direction.plot,
                congestion=congestion,
                throttle=throttle if throttle.judged else None,
            )
        )
    return PortReport(
        source=port.source,
        device=port.device,
        port=port.port,
        directions=(directions[0], directions[1]),
        warnings=tuple(port.warnings),
    )


def _join(parts: list[Any]) -> Any:
    return np.concatenate(parts)


def _rows(samples: PortSamples, piece: slice) -> PortSamples:
    """Some consecutive rows of one port's samples."""
    return dataclasses.replace(
        samples,
        timestamp_ns=samples.timestamp_ns[piece],
        xmit_bytes=samples.xmit_bytes[piece],
        rcv_bytes=samples.rcv_bytes[piece],
        line_rate_bytes_per_second=None
        if samples.line_rate_bytes_per_second is None
        else samples.line_rate_bytes_per_second[piece],
        rebaseline=None if samples.rebaseline is None else samples.rebaseline[piece],
    )
