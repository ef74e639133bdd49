"""Rail imbalance inside a node: each step's bytes, peak and burst time per training rail, side
by side, and the rails that carry clearly less than their peers or drain slower.

A node's training rails (one NIC per GPU) carry equal shares of a synchronous job's
collectives: NCCL stripes every collective over all of them. A rail that carries clearly
less than its peers (hash polarisation of the flows, NCCL falling back to fewer rails) or
that moves its share at a clearly lower peak (a degraded lane, a link trained at a lower
width) slows every step of the job, and a 15 s average hides both.

Definitions (the choices, in one place):

* **Step.** One period of the job, found by detectors.periodicity over the node's training
  rails' bursts (both directions). The steps are phased at the quietest point of the folded
  traffic, so a step's bursts are not cut at its edges; only whole steps inside the series
  count. The period is found anew in each minute (``SEGMENT_NS``): a job ends, a slowed
  rail stretches the step. Where it does not repeat (no job, a minute the step changed in)
  a step is a fixed window instead (the report: 1 s); the agent, which judges live, uses
  its 15 s windows, several steps each.
* **Per step and rail** (one direction): bytes, the peak sample utilization (the highest
  burst's peak, or a quieter bin's mean), and the time in bursts (detectors.bursts: runs
  above the burst threshold). RailBins gathers them in ``BIN_NS`` bins from what the
  analyzer already computed (its 10 ms windows and its bursts), so they cost the report no
  pass over the samples and it holds 100 values a second per port direction, not 1,000.
* **Peers.** Only training rails of one kind compare: the caller groups the rails (same
  device model or line rate, the storage NIC left out by its job role); a group needs at
  least ``MIN_PEERS`` + 1 rails, and each rail is judged against the median of the others.
* **Judged step.** The peers' median peak reaches the burst threshold: a step in which the
  job moved. Idle steps and idle nodes are never judged.
* **Light.** The rail's bytes are under ``light_below`` (0.85) x the peers' median.
* **Slow.** The rail's peak is under ``slow_peak_below`` (0.85) x the peers' median and its
  drain time (bytes / peak: how long the step's bytes take at the rail's own peak) over
  ``slow_drain_above`` (1.15) x theirs: it bursts longer at a lower peak. The drain time, not
  the burst time, decides: a rail at half its rate runs at or under 0.5 of line rate, under
  the burst threshold, so its burst time falls instead of rising. The burst time is shown.
  Light is tested first: a rail that carries less is light, whatever its peak.
* **Verdict.** A rail is imbalanced over a stretch when ``needed`` (4) of ``stretch`` (5)
  consecutive judged steps found it so, of one kind; one odd step never is.

Pure numpy: no clock, no files. Scores against injected faults: burstscope.testing.faults_rails.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from burstscope.detectors.analyzer import Chunk
from burstscope.detectors.arrays import F64, I64, B
from burstscope.detectors.bursts import Bursts
from burstscope.detectors.config import Thresholds, scale_key
from burstscope.detectors.periodicity import iteration_period

BIN_NS = 10_000_000
SEGMENT_NS = 60_000_000_000  # the period is found anew in each minute
MIN_PEERS = 2  # others a rail is compared with: a median of two at least
BALANCED, LIGHT, SLOW = 0, 1, 2
KIND_NAMES = {LIGHT: "light", SLOW: "slow"}
K = TypeVar("K", bound=Hashable)  # a port's key, as the caller names ports


@dataclass(frozen=True, slots=True)
class RailLimits:
    """When a step's rail is imbalanced, and how many steps make a verdict."""

    light_below: float = 0.85
    slow_peak_below: float = 0.85
    slow_drain_above: float = 1.15
    busy_peak: float = 0.5  # the burst threshold: peers this busy make a judged step
    stretch: int = 5
    needed: int = 4

    def __post_init__(self) -> None:
        if not 0 < self.needed <= self.stretch:
            raise ValueError("needed must be in 1 .. stretch")


@functools.cache
def _window_key(bin_ns: int) -> str:
    return scale_key(bin_ns)


@dataclass(slots=True)
class RailBins:
    """One port direction's traffic in ``bin_ns`` bins of absolute time, from what the
    analyzer already made: its windows of ``bin_ns`` (bytes = utilization x covered time x
    line rate) and its bursts (their time, and their peak sample in the bin they start in;
    a bin's peak is the higher of that and the window's mean). Fed chunk by chunk."""

    bin_ns: int = BIN_NS
    _bins: list[I64] = field(default_factory=list)
    _bytes: list[F64] = field(default_factory=list)
    _mean: list[F64] = field(default_factory=list)
    _burst_start: list[I64] = field(default_factory=list)
    _burst_end: list[I64] = field(default_factory=list)
    _burst_peak: list[F64] = field(default_factory=list)
    _grid: tuple[tuple[int, int], tuple[F64, F64]] | None = None

    @property
    def window_key(self) -> str:
        """The analyzer's name for the windows of ``bin_ns`` (Chunk.windows' key)."""
        return _window_key(self.bin_ns)

    def feed(
        self,
        window_end_ns: I64,
        window_utilization: F64,
        window_covered_ns: I64,
        line_rate_bytes_per_second: int,
        bursts: Bursts,
    ) -> None:
        """The ``bin_ns`` windows a chunk closed (aligned ends) and the bursts it closed."""
        self._grid = None
        if len(bursts):
            self._burst_start.append(bursts.start_ns)
            self._burst_end.append(bursts.end_ns)
            self._burst_peak.append(bursts.peak_utilization)
        if window_end_ns.size == 0:
            return
        self._bins.append((np.asarray(window_end_ns, np.int64) - 1) // self.bin_ns)
        utilization = np.asarray(window_utilization, np.float64)
        self._bytes.append(utilization * window_covered_ns * (line_rate_bytes_per_second / 1e9))
        self._mean.append(utilization)

    def span(self) -> tuple[int, int] | None:
        """The first bin fed and one past the last; None before any window."""
        if not self._bins:
            return None
        return int(self._bins[0][0]), int(self._bins[-1][-1]) + 1

    def grid(self, first_bin: int, bins: int) -> tuple[F64, F64]:
        """Bytes and peak per bin over [first_bin, first_bin + bins); the last grid asked
        for is kept (the steps and the table ask for the same one)."""
        if self._grid is not None and self._grid[0] == (first_bin, bins):
            return self._grid[1]
        nbytes = np.zeros(bins, np.float64)
        peak = np.zeros(bins, np.float64)
        if self._bins:
            index = np.concatenate(self._bins) - first_bin
            keep = (index >= 0) & (index < bins)
            # A window closes once: each bin is fed at most once, in time order.
            nbytes[index[keep]] = np.concatenate(self._bytes)[keep]
            peak[index[keep]] = np.concatenate(self._mean)[keep]
        if self._burst_start:
            at = np.concatenate(self._burst_start) // self.bin_ns - first_bin
            keep = (at >= 0) & (at < bins)
            if keep.any():
                # Bursts come in time order: the highest peak of each bin's run of them.
                at, peaks = at[keep], np.concatenate(self._burst_peak)[keep]
                first = np.flatnonzero(np.diff(at, prepend=at[0] - 1))
                highest = np.maximum.reduceat(peaks, first)
                peak[at[first]] = np.maximum(peak[at[first]], highest)
        self._grid = ((first_bin, bins), (nbytes, peak))
        return nbytes, peak

    def burst_ns_between(self, start_ns: I64, end_ns: I64) -> F64:
        """Time in bursts inside each [start, end): from the time in bursts before each
        instant (one direction's bursts never overlap), so a burst a step cuts is shared."""
        begin, finish = self.bursts()
        if begin.size == 0:
            return np.zeros(start_ns.size, np.float64)
        done = np.concatenate(([0], np.cumsum(finish - begin)))

        def before(t: I64) -> F64:
            index = np.searchsorted(begin, t, side="right")  # bursts begun by t
            partial = np.where(index > 0, np.minimum(t, finish[index - 1]) - begin[index - 1], 0)
            result: F64 = (done[np.maximum(index - 1, 0)] + np.maximum(partial, 0)).astype(
                np.float64
            )
            return result

        return before(end_ns) - before(start_ns)

    def bursts(self) -> tuple[I64, I64]:
        if not self._burst_start:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(self._burst_start), np.concatenate(self._burst_end)


@dataclass(frozen=True, slots=True)
class RailTable:
    """Per step (rows) and rail (columns) of one direction, and each step's verdicts."""

    start_ns: I64  # (steps,)
    end_ns: I64
    bytes: F64  # (steps, rails)
    peak: F64  # (steps, rails): the highest sample utilization, a fraction of line rate
    burst_ns: F64  # (steps, rails): time in bursts
    period_ns: I64  # (steps,): the job's period each step follows; 0: a fixed window


def node_steps(
    rails: Sequence[RailBins],
    window_ns: int,
    segment_ns: int = SEGMENT_NS,
    timing: Sequence[RailBins] | None = None,
) -> tuple[I64, I64, I64]:
    """The steps over the rails' common span, found segment by segment (a job's period
    changes when a job ends, a rail slows or the job is rescheduled): in each ``segment_ns``
    (a shorter tail joins the last), whole periods of the job phased at the quietest point
    of its folded traffic, or ``window_ns`` windows where no period repeats.
    ``timing``: the rails whose bursts give the period (default all: one direction of each
    rail is as good, the job's steps time both, and costs half).
    Returns each step's start and end, and the period it follows (0: a window)."""
    spans = [s for s in (r.span() for r in rails) if s is not None]
    none = np.empty(0, np.int64)
    if not spans:
        return none, none, none
    bin_ns = rails[0].bin_ns
    first, stop = max(s[0] for s in spans), min(s[1] for s in spans)
    if stop <= first:
        return none, none, none
    starts, ends = zip(*(r.bursts() for r in timing or rails), strict=True)
    order = np.argsort(np.concatenate(starts), kind="stable")
    burst_start, burst_end = np.concatenate(starts)[order], np.concatenate(ends)[order]
    total = sum((r.grid(first, stop - first)[0] for r in rails), np.zeros(stop - first))
    per_segment = max(1, segment_ns // bin_ns)
    edges = [*range(first, stop, per_segment), stop]
    if len(edges) > 2 and edges[-1] - edges[-2] < per_segment // 2:
        del edges[-2]
    parts = []
    for low, high in itertools.pairwise(edges):
        begin, finish = low * bin_ns, high * bin_ns
        piece = slice(*np.searchsorted(burst_start, [begin, finish]))
        inside = burst_end[piece] <= finish
        start, end = burst_start[piece][inside], burst_end[piece][inside]
        found = iteration_period(start, end, end - start, begin, finish)
        if found is None or found.period_ns < 2 * bin_ns:
            lows = np.arange(begin, finish - window_ns + 1, window_ns, dtype=np.int64)
            parts.append((lows, lows + window_ns, np.zeros(lows.size, np.int64)))
            continue
        period = found.period_ns
        traffic = total[low - first : high - first]
        # Fold each bin by its phase in the period; the quietest phase bin starts the steps.
        phase_bins = max(1, period // bin_ns)
        phase = ((np.arange(traffic.size) * bin_ns) % period) * phase_bins // period
        folded = np.bincount(phase, weights=traffic, minlength=phase_bins)
        offset = int(np.argmin(folded)) * period // phase_bins
        count = (finish - begin - offset) // period
        lows = begin + offset + np.arange(count, dtype=np.int64) * period
        parts.append((lows, lows + period, np.full(count, period, np.int64)))
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))  # type: ignore[return-value]


def _common_grid(rails: Sequence[RailBins], first: int, stop: int) -> tuple[int, int]:
    """The grid node_steps asked the rails for when it holds [first, stop) (each rail keeps
    its last grid), else [first, stop) itself."""
    spans = [s for s in (r.span() for r in rails) if s is not None]
    if spans:
        low, high = max(s[0] for s in spans), min(s[1] for s in spans)
        if low <= first and stop <= high:
            return low, high - low
    return first, stop - first


def rail_table(rails: Sequence[RailBins], start_ns: I64, end_ns: I64, period_ns: I64) -> RailTable:
    """Each rail's bytes, peak and burst time in each step [start_ns, end_ns) (steps in
    time order, not overlapping); a step takes the bins whose middle it holds."""
    steps = int(start_ns.size)
    shape = (steps, len(rails))
    nbytes, peak, burst = (np.zeros(shape, np.float64) for _ in range(3))
    table = RailTable(start_ns, end_ns, nbytes, peak, burst, period_ns)
    if steps == 0:
        return table
    bin_ns = rails[0].bin_ns
    first, bins = _common_grid(rails, int(start_ns[0]) // bin_ns, -(-int(end_ns[-1]) // bin_ns))
    low = np.clip((start_ns - first * bin_ns + bin_ns // 2) // bin_ns, 0, bins)
    high = np.clip((end_ns - first * bin_ns + bin_ns // 2) // bin_ns, low, bins)
    # reduceat over [low0, high0, low1, high1, ...]: the even results are the steps.
    edges = np.stack([low, high], axis=1).ravel()
    filled = high > low
    for column, rail in enumerate(rails):
        for out, values, reduce in zip(
            (nbytes, peak), rail.grid(first, bins), (np.add, np.maximum), strict=True
        ):
            padded = np.append(values, 0.0)
            out[:, column] = np.where(filled, reduce.reduceat(padded, edges)[0::2], 0.0)
        burst[:, column] = rail.burst_ns_between(start_ns, end_ns)
    return table


def step_verdicts(
    nbytes: F64, peak: F64, peers: Sequence[int], limits: RailLimits | None = None
) -> tuple[I64, B]:
    """Per step and rail: BALANCED, LIGHT or SLOW; and per step and rail whether it was
    judged (a peer group of enough rails, busy peers). ``peers``: a group id per rail
    (rails of one id compare; a negative id is never judged)."""
    limits = limits or RailLimits()
    nbytes = np.asarray(nbytes, np.float64)
    peak = np.asarray(peak, np.float64)
    codes = np.zeros(nbytes.shape, np.int64)
    judged = np.zeros(nbytes.shape, np.bool_)
    group = np.asarray(peers, np.int64)
    drain = np.divide(nbytes, peak, out=np.full(nbytes.shape, np.inf), where=peak > 0)
    for rail in range(nbytes.shape[1]):
        if group[rail] < 0:
            continue
        others = np.flatnonzero((group == group[rail]) & (np.arange(group.size) != rail))
        if others.size < MIN_PEERS:
            continue
        peer_bytes = np.median(nbytes[:, others], axis=1)
        peer_peak = np.median(peak[:, others], axis=1)
        peer_drain = np.median(drain[:, others], axis=1)
        busy = (peer_peak >= limits.busy_peak) & (peer_bytes > 0)
        light = busy & (nbytes[:, rail] < limits.light_below * peer_bytes)
        slow = (
            busy
            & ~light
            & (peak[:, rail] < limits.slow_peak_below * peer_peak)
            & (drain[:, rail] > limits.slow_drain_above * peer_drain)
        )
        codes[light, rail] = LIGHT
        codes[slow, rail] = SLOW
        judged[:, rail] = busy
    return codes, judged


@dataclass(frozen=True, slots=True)
class RailFinding:
    """A rail imbalanced over consecutive steps [first_step, last_step]."""

    rail: int  # column of the table
    kind: int  # LIGHT or SLOW
    first_step: int
    last_step: int
    steps_flagged: int


def verdicts(codes: I64, judged: B, limits: RailLimits | None = None) -> tuple[RailFinding, ...]:
    """Stretches in which a rail was imbalanced, of one kind, in ``needed`` of ``stretch``
    consecutive judged steps; overlapping stretches of one rail and kind are one finding.
    Steps not judged are skipped, not counted against it."""
    limits = limits or RailLimits()
    found: list[RailFinding] = []
    for rail in range(codes.shape[1]):
        steps = np.flatnonzero(judged[:, rail])
        if steps.size < limits.stretch:
            continue
        for kind in (LIGHT, SLOW):
            hit = (codes[steps, rail] == kind).astype(np.int64)
            sums = np.convolve(hit, np.ones(limits.stretch, np.int64), "valid")
            marked = np.zeros(steps.size, np.bool_)
            for window in np.flatnonzero(sums >= limits.needed):
                marked[window : window + limits.stretch] |= (
                    hit[window : window + limits.stretch] > 0
                )
            found += _runs(rail, kind, steps, marked, limits.stretch)
    return tuple(sorted(found, key=lambda f: (f.first_step, f.rail)))


def _runs(rail: int, kind: int, steps: I64, marked: B, stretch: int) -> list[RailFinding]:
    """Marked judged steps as findings, a gap shorter than a stretch joining two runs."""
    positions = np.flatnonzero(marked)
    if positions.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(positions) >= stretch) + 1
    return [
        RailFinding(rail, kind, int(steps[part[0]]), int(steps[part[-1]]), int(part.size))
        for part in np.split(positions, breaks)
    ]


def flagged_now(codes: I64, judged: B, limits: RailLimits | None = None) -> dict[int, int]:
    """Live: rail -> kind for the rails whose last ``stretch`` judged steps hold ``needed``
    of one kind (the verdict as of the newest step)."""
    limits = limits or RailLimits()
    out: dict[int, int] = {}
    for rail in range(codes.shape[1]):
        recent = codes[judged[:, rail], rail][-limits.stretch :]
        if recent.size < limits.stretch:
            continue
        for kind in (LIGHT, SLOW):
            if int(np.count_nonzero(recent == kind)) >= limits.needed:
                out[rail] = kind
    return out


def rail_groups(ports: Sequence[tuple[K, int]], storage: Collection[K] = ()) -> dict[K, int]:
    """Live: (port key, line rate) of the node's ports, and those a job holds for storage
    -> the peer group of each (peer_groups)."""
    groups = peer_groups([rate for _, rate in ports], [key not in storage for key, _ in ports])
    return {key: group for (key, _), group in zip(ports, groups, strict=True)}


def peer_groups(line_rates: Sequence[int], eligible: Sequence[bool]) -> list[int]:
    """A group id per port: eligible ports of one line rate share one, in groups of at least
    MIN_PEERS + 1; -1 for the rest (a storage NIC, a port of a kind with too few peers)."""
    rates = [rate if ok else None for rate, ok in zip(line_rates, eligible, strict=True)]
    sizes = {rate: rates.count(rate) for rate in set(rates) if rate is not None}
    kinds = sorted(rate for rate, size in sizes.items() if size > MIN_PEERS)
    return [kinds.index(rate) if rate in kinds else -1 for rate in rates]


def bin_for(window_scales_ns: Sequence[int]) -> int:
    """The bins RailBins takes from an analyzer with these window scales: BIN_NS, or its
    finest window where the scales leave 10 ms out."""
    return BIN_NS if BIN_NS in window_scales_ns else min(window_scales_ns)


@dataclass(slots=True)
class _LiveWindows:
    """One port direction's closed windows (end, bytes, peak, burst ns), the newest last,
    and the bursts of the window still open."""

    ends: list[int] = field(default_factory=list)
    rows: list[tuple[float, float, float]] = field(default_factory=list)
    open_peak: float = 0.0
    open_burst_ns: float = 0.0


class LiveRails(Generic[K]):
    """The agent's rails side by side: each port direction's coarse windows (15 s, several
    steps of a job each: the agent does not look for the period) as steps, and the rails
    flagged as of the newest window the rails of a group have in common.

    Bounded: ``keep`` windows per port direction. A burst counts in the window it ends in
    (the tracker hands it over when it closes); its peak raises that window's.
    """

    def __init__(
        self,
        limits: RailLimits | None = None,
        keep: int = 0,
        coarse_window_ns: int = Thresholds().coarse_window_ns,
    ) -> None:
        self.limits = limits or RailLimits()
        self.coarse_key = scale_key(coarse_window_ns)
        self.keep = keep or 2 * self.limits.stretch
        self._windows: dict[tuple[K, str], _LiveWindows] = {}
        self.flagged: dict[K, int] = {}  # port key -> LIGHT or SLOW, as of judge()
        self.judged: set[K] = set()  # ports in a peer group with enough windows

    def feed(
        self,
        key: K,
        direction: str,
        line_rate_bytes_per_second: int,
        windows: tuple[I64, F64, I64],
        bursts: Bursts,
    ) -> None:
        """A chunk's closed coarse windows (aligned ends, utilization, covered ns) and its
        closed bursts, for port ``key``'s ``direction``."""
        state = self._windows.setdefault((key, direction), _LiveWindows())
        ends, utilization, covered = windows
        burst_end = bursts.end_ns
        for index in range(int(ends.size)):
            end = int(ends[index])
            inside = burst_end <= end
            if inside.any():
                state.open_peak = max(state.open_peak, float(bursts.peak_utilization[inside].max()))
                state.open_burst_ns += float((burst_end - bursts.start_ns)[inside].sum())
                bursts = _after(bursts, ~inside)
                burst_end = bursts.end_ns
            mean = float(utilization[index])
            nbytes = mean * float(covered[index]) * line_rate_bytes_per_second / 1e9
            state.ends.append(end)
            state.rows.append((nbytes, max(mean, state.open_peak), state.open_burst_ns))
            state.open_peak, state.open_burst_ns = 0.0, 0.0
        if len(bursts):
            state.open_peak = max(state.open_peak, float(bursts.peak_utilization.max()))
            state.open_burst_ns += float((bursts.end_ns - bursts.start_ns).sum())
        del state.ends[: -self.keep], state.rows[: -self.keep]

    def feed_chunk(
        self, key: K, direction: str, line_rate_bytes_per_second: int, chunk: Chunk
    ) -> None:
        """What the analyzer made of a drained piece: its coarse windows and bursts."""
        windows = chunk.windows.get(self.coarse_key)
        ends = windows.end_ns if windows is not None else np.empty(0, np.int64)
        utilization = windows.utilization if windows is not None else np.empty(0)
        covered = windows.covered_ns if windows is not None else np.empty(0, np.int64)
        self.feed(
            key, direction, line_rate_bytes_per_second, (ends, utilization, covered), chunk.bursts
        )

    def judge(self, groups: dict[K, int]) -> dict[K, int]:
        """The verdict per port of the groups given (port key -> group id; a port outside
        every group is not judged): both directions, over the windows every rail of the
        group has; a port flagged in either direction is flagged, LIGHT before SLOW."""
        self.flagged, self.judged = {}, set()
        members: dict[int, list[K]] = {}
        for key, group in groups.items():
            if group >= 0:
                members.setdefault(group, []).append(key)
        for keys in members.values():
            if len(keys) <= MIN_PEERS:
                continue
            for direction in ("transmit", "receive"):
                states = [self._windows.get((key, direction)) for key in keys]
                if any(s is None or not s.ends for s in states):
                    continue
                common = set.intersection(*(set(s.ends) for s in states if s is not None))
                ends = sorted(common)[-self.limits.stretch :]
                if len(ends) < self.limits.stretch:
                    continue
                rows = np.array(
                    [[s.rows[s.ends.index(end)] for s in states if s is not None] for end in ends]
                )  # (windows, rails, 3)
                codes, judged = step_verdicts(rows[:, :, 0], rows[:, :, 1], [0] * len(keys))
                self.judged.update(keys)
                for column, kind in flagged_now(codes, judged, self.limits).items():
                    key = keys[column]
                    self.flagged[key] = min(self.flagged.get(key, kind), kind)
        return dict(self.flagged)

    def forget(self, keep: Collection[K]) -> None:
        """Drop the windows of ports no longer sampled."""
        for key in [k for k in self._windows if k[0] not in keep]:
            del self._windows[key]


def _after(bursts: Bursts, keep: B) -> Bursts:
    return Bursts(
        bursts.start_ns[keep],
        bursts.end_ns[keep],
        bursts.bytes[keep],
        bursts.peak_utilization[keep],
        bursts.mean_utilization[keep],
    )
