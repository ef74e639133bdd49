"""Stragglers and slow rails across the nodes of one job, from the timing of each node's steps.

The model (docs/culprits.md, "Stragglers across nodes", says it whole): a collective's bulk
transfer starts only when its last rank has arrived. NCCL's flow control lets an early rank
send only what its peers' buffers take (``NCCL_BUFFSIZE``, 4 MiB by default, per peer and
channel: under 0.1 ms at 400 Gb/s) and then wait. So a compute straggler delays every
node's main burst, and what survives of it in the counters is each node's **first bytes**
of the step: the early ranks' small sends come on time, the straggler's come with its main
burst. A slow link paces every rank of its ring, so no node's rate tells which link it is;
what survives is the rail whose transfers end last, on every node.

Definitions (the choices, in one place):

* **Active sample.** A sample of one rail's transmit counter that moved at least
  ``floor`` (1%) of line rate over its interval: far above the background trickle, far
  below one eager send (4 MiB in a 1 ms sample is 8% at 400 Gb/s).
* **Step.** On one node, a run of active samples of its training rails (any rail) with no
  silence of ``quiet_ns`` (50 ms) or more inside it; a silence that long closes it. Pick
  it between the longest compute gap inside a step and the gap between steps (the
  simulated MoE job: 31 ms and 80 ms; a value near either splits nodes differently).
* **Onset** of a rail's step: the start of its first active sample's interval (the
  previous reading). Its first byte left between then and the **latest onset**: the
  sample's end less the time its bytes take at line rate (NIC sends, an eager send or a
  bulk transfer, go at line rate). The step's onset and latest onset are its rails'
  earliest; its **end** the end of its last active sample. Per rail: onset, latest onset,
  end, bytes and peak utilization.
* **One step across nodes.** The nodes' steps whose onsets lie within ``quiet_ns`` of the
  next one (single linkage, sorted by onset): the lateness a straggler adds is much less
  than the silence between steps. A node with two steps in one group keeps its first.
  A group of fewer than ``min_nodes`` (3) nodes is not judged.
* **Lag.** A node's onset minus the median onset of the step's nodes (the lower median:
  a value of the data): a whole number of samples give or take the nodes' read noise
  and clock error. The lag it had **at least**: its onset minus the median node's latest
  onset. A node is a **straggler** in the step when its lag is at least the clock error
  between the nodes (``clock_error_ns``, 100 us: PTP-class) plus one sampling interval,
  and its lag at least is at least the clock error plus ``margin_ns`` (0.5 ms: ranks that
  wait on nothing reach a collective within it of each other). No lag smaller than the
  clocks and the sampler can resolve is called one, and no lag the sample grid alone
  could have made (two ranks 0.2 ms apart on either side of a sample boundary).
* **Excess.** A node's end minus the median end: whose transfers end last. Only nodes
  whose step lasted within ``quiet_ns`` of the median duration compare: a node that
  split or joined steps differently (a gap measured at the threshold) has no excess in
  that step. A rail's excess, on one node, is its end minus the median of that node's
  rails' ends; the step's **slow rail** is the rail with the largest excess on more than
  half the nodes, when that excess is at least ``rail_excess_ns`` (5 ms). Rails of a
  healthy job do not end together: NCCL's channels and the rails' hashing leave one rail
  last by up to 3.0 ms in the simulated MoE job (24 nodes, an hour), the same rail on
  every node since every node runs the same collectives; a rail at 0.8 of its rate ends
  9 to 14 ms late, at 0.5 55 to 64 ms.
* **Score.** Per node, over the last ``window`` (300) judged steps: the share in which it
  was a straggler; its lag and excess quantiles over the same steps.

Pure numpy and dataclasses: no clock, no files, no network. The live agent (per-node
steps, collector.step_summaries), the fleet consumer (burstscope.commands.stragglers) and
the fleet report use these same functions, so live and offline say the same.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from burstscope.detectors.arrays import F64, I64

QUIET_NS = 50_000_000
FLOOR = 0.01
CLOCK_ERROR_NS = 100_000
MARGIN_NS = 500_000
MIN_NODES = 3
RAIL_EXCESS_NS = 5_000_000
WINDOW_STEPS = 300


@dataclass(frozen=True, slots=True)
class StepLimits:
    quiet_ns: int = QUIET_NS
    floor: float = FLOOR
    clock_error_ns: int = CLOCK_ERROR_NS
    margin_ns: int = MARGIN_NS
    min_nodes: int = MIN_NODES
    rail_excess_ns: int = RAIL_EXCESS_NS

    def resolution_ns(self, interval_ns: int) -> int:
        """The smallest lag or excess called: the clocks' error and one sample."""
        return self.clock_error_ns + interval_ns

    @property
    def sure_ns(self) -> int:
        """The smallest lag-at-least called: the clocks' error and the ranks' jitter."""
        return self.clock_error_ns + self.margin_ns


@dataclass(frozen=True, slots=True)
class RailStep:
    """One rail's part of a node's step (transmit)."""

    rail: str  # "device/port"
    onset_ns: int  # its first active sample's start
    end_ns: int
    bytes: int
    peak: float  # highest sample utilization, 0..1
    onset_latest_ns: int | None = None  # the latest its first byte can have left

    @property
    def latest_ns(self) -> int:
        return self.onset_ns if self.onset_latest_ns is None else self.onset_latest_ns


@dataclass(frozen=True, slots=True)
class NodeStep:
    """One node's step: what the agent publishes, and what the fleet report reads."""

    host: str
    onset_ns: int  # the earliest rail's onset: its first active sample's start
    end_ns: int  # the last active sample's end, any rail
    interval_ns: int  # the node's sampling interval
    rails: tuple[RailStep, ...]  # the rails active in the step, by label
    jobs: tuple[str, ...] = ()  # the jobs holding the node's rails, when known
    # The latest the first byte can have left (None: at the onset exactly).
    onset_latest_ns: int | None = None

    @property
    def latest_ns(self) -> int:
        return self.onset_ns if self.onset_latest_ns is None else self.onset_latest_ns

    @property
    def bytes(self) -> int:
        return sum(rail.bytes for rail in self.rails)


@dataclass(slots=True)
class _Rail:
    line_rate: int  # bytes per second
    seen_ns: int = -1  # the latest sample's end fed
    last_ns: int = -1  # the previous sample's end (for the first delta of a feed)
    last_value: int | None = None
    stamps: list[I64] = field(default_factory=list)  # active samples' ends
    begun: list[I64] = field(default_factory=list)  # the latest their bytes can have begun
    earliest: list[I64] = field(default_factory=list)  # their intervals' starts
    moved: list[I64] = field(default_factory=list)  # their bytes
    util: list[F64] = field(default_factory=list)  # their utilization


class StepSplitter:
    """One node's steps from its training rails' transmit counters, fed as they are read.

    ``feed`` takes one rail's cumulative counter readings (the ends of their intervals and
    the values); ``close`` returns the steps that are over: those followed by ``quiet_ns``
    of silence on every rail, up to the time every rail has been read to. Only active
    samples are held, and only until their step closes: a step of a few hundred
    milliseconds holds a few hundred per rail.
    """

    def __init__(self, host: str, interval_ns: int, limits: StepLimits | None = None) -> None:
        self.host = host
        self.interval_ns = interval_ns
        self.limits = limits or StepLimits()
        self._rails: dict[str, _Rail] = {}
        self.jobs: tuple[str, ...] = ()  # set by the caller: the jobs holding the node now

    def feed(
        self,
        rail: str,
        line_rate: int,
        stamps_ns: I64,
        values: I64,
        restart: np.ndarray | None = None,
    ) -> None:
        """Readings of ``rail``'s transmit counter: interval ends and cumulative bytes.
        ``restart`` marks readings with no delta into them (a rebaseline or a reset)."""
        state = self._rails.get(rail)
        if state is None or state.line_rate != line_rate:
            state = self._rails[rail] = _Rail(line_rate)
        if not len(stamps_ns) or line_rate <= 0:
            return
        stamps = np.asarray(stamps_ns, dtype=np.int64)
        counts = np.asarray(values, dtype=np.int64)
        dt = np.empty_like(stamps)
        dt[0] = stamps[0] - state.last_ns
        np.subtract(stamps[1:], stamps[:-1], out=dt[1:])
        moved = np.empty_like(counts)
        moved[0] = counts[0] - (state.last_value or 0)
        np.subtract(counts[1:], counts[:-1], out=moved[1:])
        # The samples that can be active (their bytes a hair under the floor or more), then
        # the utilization of those alone: the same samples as dividing every one, at half
        # the cost (the fleet report feeds every sample of every rail).
        candidate = moved >= dt * (self.limits.floor * line_rate / 1e9 * (1 - 1e-9))
        candidate &= dt > 0
        if state.last_value is None:
            candidate[0] = False
        if restart is not None:
            candidate &= ~np.asarray(restart, dtype=np.bool_)
        index = np.flatnonzero(candidate)
        util = moved[index] * 1e9 / (dt[index] * float(line_rate))
        keep = util >= self.limits.floor
        if keep.any():
            active, util = index[keep], util[keep]
            ends, moved, dt = stamps[active], moved[active], dt[active]
            # The latest each sample's bytes can have begun, sent at line rate.
            state.begun.append(ends - np.minimum(dt, (moved * 1e9 / line_rate).astype(np.int64)))
            state.earliest.append(ends - dt)
            state.stamps.append(ends)
            state.moved.append(moved)
            state.util.append(np.minimum(util, 1.0))
        state.last_ns = int(stamps[-1])
        state.last_value = int(counts[-1])
        state.seen_ns = int(stamps[-1])

    def close(self, final: bool = False) -> list[NodeStep]:
        """The steps over by now (``final``: every step held, the last one too)."""
        rails = [(label, state) for label, state in sorted(self._rails.items())]
        known = [state.seen_ns for _, state in rails if state.seen_ns >= 0]
        if not known:
            return []
        seen = min(known)  # every rail has been read to here
        parts = []
        for index, (_, state) in enumerate(rails):
            if state.stamps:
                stamps = np.concatenate(state.stamps)
                parts.append(
                    (
                        index,
                        stamps,
                        np.concatenate(state.moved),
                        np.concatenate(state.util),
                        np.concatenate(state.begun),
                        np.concatenate(state.earliest),
                    )
                )
        if not parts:
            return []
        every = np.sort(np.concatenate([p[1] for p in parts]))
        breaks = np.flatnonzero(np.diff(every) >= self.limits.quiet_ns)
        starts = np.concatenate(([every[0]], every[breaks + 1]))
        ends = np.concatenate((every[breaks], [every[-1]]))
        over = ends + self.limits.quiet_ns <= seen if not final else np.ones(len(ends), bool)
        # Steps close in order: a later one is never over before an earlier one.
        count = int(over.sum())
        if count == 0:
            return []
        until = int(ends[count - 1])
        steps = []
        for start, end in zip(starts[:count].tolist(), ends[:count].tolist(), strict=True):
            pieces = []
            for index, stamps, moved, util, begun, earliest in parts:
                lo = int(np.searchsorted(stamps, start, side="left"))
                hi = int(np.searchsorted(stamps, end, side="right"))
                if hi > lo:
                    pieces.append(
                        RailStep(
                            rails[index][0],
                            int(earliest[lo]),
                            int(stamps[hi - 1]),
                            int(moved[lo:hi].sum()),
                            round(float(util[lo:hi].max()), 4),
                            int(begun[lo]),
                        )
                    )
            steps.append(
                NodeStep(
                    self.host,
                    min(piece.onset_ns for piece in pieces),
                    int(end),
                    self.interval_ns,
                    tuple(pieces),
                    self.jobs,
                    min(piece.latest_ns for piece in pieces),
                )
            )
        for index, stamps, moved, util, begun, earliest in parts:
            keep = stamps > until
            state = rails[index][1]
            state.stamps = [stamps[keep]] if keep.any() else []
            state.moved = [moved[keep]] if keep.any() else []
            state.util = [util[keep]] if keep.any() else []
            state.begun = [begun[keep]] if keep.any() else []
            state.earliest = [earliest[keep]] if keep.any() else []
        return steps


@dataclass(frozen=True, slots=True)
class StepVerdict:
    """One step of a group of nodes, judged."""

    onset_ns: int  # the median onset
    nodes: tuple[str, ...]  # the nodes with a part in it, by name
    lag_ns: tuple[int, ...]  # per node: onset minus the median onset
    lag_at_least_ns: tuple[int, ...]  # per node: its onset minus the median's latest onset
    excess_ns: tuple[int | None, ...]  # per node: end minus the median end; None: split unlike
    stragglers: tuple[str, ...]  # lag at or above the resolution, latest first
    slow_rail: str | None  # the rail ending last on more than half the nodes, by enough
    resolution_ns: int


def match_steps(steps: Sequence[NodeStep], quiet_ns: int) -> list[list[NodeStep]]:
    """The nodes' steps grouped into steps of the job: onsets within ``quiet_ns`` of the
    next one, one step per node (its first)."""
    ordered = sorted(steps, key=lambda s: (s.onset_ns, s.host))
    groups: list[list[NodeStep]] = []
    hosts: set[str] = set()  # the current group's: a set, for a fleet of hundreds of nodes
    last = None
    for step in ordered:
        if last is None or step.onset_ns - last > quiet_ns:
            groups.append([])
            hosts = set()
        last = step.onset_ns
        if step.host not in hosts:
            hosts.add(step.host)
            groups[-1].append(step)
    return groups


def _median_step(steps: Sequence[NodeStep]) -> NodeStep:
    """The node step of the (lower) median onset; ties by host name."""
    ordered = sorted(steps, key=lambda s: (s.onset_ns, s.host))
    return ordered[(len(ordered) - 1) // 2]


def _median(values: Sequence[int]) -> int:
    # The lower median of an even count: an integer of the data, the same on every machine.
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def judge_step(group: Sequence[NodeStep], limits: StepLimits | None = None) -> StepVerdict | None:
    """One step across its nodes; None with fewer than ``min_nodes`` nodes."""
    limits = limits or StepLimits()
    if len(group) < limits.min_nodes:
        return None
    ordered = sorted(group, key=lambda s: s.host)
    resolution = limits.resolution_ns(max(s.interval_ns for s in ordered))
    middle = _median_step(ordered)
    onset = middle.onset_ns
    lags = tuple(s.onset_ns - onset for s in ordered)
    sure = tuple(s.onset_ns - middle.latest_ns for s in ordered)
    length = _median([s.end_ns - s.onset_ns for s in ordered])
    alike = [abs(s.end_ns - s.onset_ns - length) <= limits.quiet_ns for s in ordered]
    end = _median([s.end_ns for s, same in zip(ordered, alike, strict=True) if same])
    excess = tuple(s.end_ns - end if same else None for s, same in zip(ordered, alike, strict=True))
    late = sorted(
        (
            (lag, s.host)
            for lag, least, s in zip(lags, sure, ordered, strict=True)
            if lag >= resolution and least >= limits.sure_ns
        ),
        key=lambda pair: (-pair[0], pair[1]),
    )
    return StepVerdict(
        onset,
        tuple(s.host for s in ordered),
        lags,
        sure,
        excess,
        tuple(host for _, host in late),
        _slow_rail(
            [s for s, same in zip(ordered, alike, strict=True) if same],
            max(resolution, limits.rail_excess_ns),
        ),
        resolution,
    )


def _slow_rail(steps: Sequence[NodeStep], resolution: int) -> str | None:
    """The rail that ends last, by ``resolution`` or more, on more than half the nodes."""
    votes: dict[str, int] = {}
    for step in steps:
        if len(step.rails) < 3:
            continue
        ends = [rail.end_ns for rail in step.rails]
        middle = _median(ends)
        latest = max(step.rails, key=lambda rail: (rail.end_ns, rail.rail))
        if latest.end_ns - middle >= resolution:
            votes[latest.rail] = votes.get(latest.rail, 0) + 1
    if not votes:
        return None
    rail, count = max(votes.items(), key=lambda item: (item[1], item[0]))
    return rail if 2 * count > len(steps) else None


def judge(steps: Iterable[NodeStep], limits: StepLimits | None = None) -> list[StepVerdict]:
    """Every judged step of one group of nodes, by onset."""
    limits = limits or StepLimits()
    verdicts = []
    for group in match_steps(list(steps), limits.quiet_ns):
        verdict = judge_step(group, limits)
        if verdict is not None:
            verdicts.append(verdict)
    return verdicts


@dataclass(frozen=True, slots=True)
class NodeStanding:
    """One node over its last judged steps."""

    host: str
    steps: int  # judged steps it had a part in (at most the window)
    straggler_steps: int
    lag_quantiles_ns: tuple[int, int, int]  # p50, p90, max
    excess_quantiles_ns: tuple[int, int, int] | None  # None: no step compared its end

    @property
    def score(self) -> float:
        """The share of its judged steps in which it was a straggler."""
        return self.straggler_steps / self.steps if self.steps else 0.0


QUANTILES = (0.5, 0.9, 1.0)


def _quantiles(values: Sequence[int]) -> tuple[int, int, int]:
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    # Nearest rank: the smallest value with at least q of the values at or below it.
    picked = [ordered[max(0, math.ceil(q * len(ordered)) - 1)] for q in QUANTILES]
    return picked[0], picked[1], picked[2]


class Standings:
    """Each node's lags, excesses and straggler calls over its last ``window`` steps."""

    def __init__(self, window: int = WINDOW_STEPS) -> None:
        self.window = window
        self._rows: dict[str, deque[tuple[int, int | None, bool]]] = {}
        self.judged = 0  # steps judged, ever
        self.straggler_calls: dict[str, int] = {}  # per node, ever (a counter)

    def add(self, verdict: StepVerdict) -> None:
        self.judged += 1
        late = set(verdict.stragglers)
        for host, lag, excess in zip(verdict.nodes, verdict.lag_ns, verdict.excess_ns, strict=True):
            rows = self._rows.get(host)
            if rows is None:
                rows = self._rows[host] = deque(maxlen=self.window)
            rows.append((lag, excess, host in late))
            if host in late:
                self.straggler_calls[host] = self.straggler_calls.get(host, 0) + 1

    def standings(self) -> list[NodeStanding]:
        out = []
        for host in sorted(self._rows):
            rows = self._rows[host]
            ends = [excess for _, excess, _ in rows if excess is not None]
            out.append(
                NodeStanding(
                    host,
                    len(rows),
                    sum(1 for _, _, late in rows if late),
                    _quantiles([lag for lag, _, _ in rows]),
                    _quantiles(ends) if ends else None,
                )
            )
        return out
