"""The agent's throttled seconds: each saturated or long-burst second of this node, by cause.

The live side of detectors/throttle.py. The pipeline hands over each drained chunk with its
analyzer (the saturated seconds are the analyzer's, the long bursts the chunk's closed
bursts) and, once per drain, the slow poller's snapshot; each congestion counter's new poll
becomes one interval of evidence. A second is settled, counted once under its cause, when
the samples have passed its end by ``SETTLE_NS`` and every congestion counter of its port
has been polled after its end: later evidence cannot reach it any more. A long burst that
closes after its first seconds were settled adds only the seconds still open. The node's
totals per direction and cause are exported as ``burstscope_throttled_seconds_total``,
absent until a second of that direction has been judged (a port direction without any
congestion counter is never judged: nothing says whether it was throttled).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from prometheus_client.metrics_core import CounterMetricFamily, Metric

from burstscope.collector.slow_poller import SlowSnapshot
from burstscope.collector.sources.base import PortSpec
from burstscope.detectors.analyzer import Chunk, DirectionAnalyzer
from burstscope.detectors.config import DIRECTIONS, NS_PER_SECOND
from burstscope.detectors.congestion import congestion_direction
from burstscope.detectors.counters import RESETTING_64
from burstscope.detectors.throttle import (
    CAUSES,
    DIRECTION_CAUSES,
    PFC,
    Evidence,
    ThrottleLimits,
    classify,
    counter_cause,
    evidence,
    long_burst_seconds,
    pfc_evidence_names,
)

FAMILY = "burstscope_throttled_seconds_total"
HELP = (
    "Wall-clock seconds of this node's port directions that held a saturated sample or a "
    "burst of 100 ms or more, by what the slow counters say held them back: pfc (paused by "
    "PFC), ecn (ECN marks or CNPs), credit (port_xmit_wait moved; its tick is not in "
    "sysfs), clean (none of them); one cause per second, in that order of "
    "precedence; a second of two ports counts twice. Absent for a direction until one of "
    "its seconds is judged (ports with congestion counters only)."
)
# How far the samples must have passed a second's end before it is settled: the drain
# period and a poll's lag, with margin.
SETTLE_NS = 3 * NS_PER_SECOND
# Evidence kept per counter: well beyond any second still waiting to be settled.
KEEP_NS = 130 * NS_PER_SECOND

Key = tuple[str, int, str]  # (device, port, direction)


@dataclass(slots=True)
class _Counter:
    """One congestion counter's latest poll: its wall time and cumulative known increments."""

    wall_ns: int
    increments: int
    intervals: deque[Evidence] = field(default_factory=deque)


@dataclass(slots=True)
class _Direction:
    pending: set[int] = field(default_factory=set)  # candidate seconds not yet settled
    settled_until: int = -1  # every second up to this one is settled
    latest_sample_ns: int = 0


class LiveThrottle:
    """Classifies this node's saturated and long-burst seconds as they settle (thread-safe:
    the pipeline feeds it, scrapes read its totals)."""

    def __init__(self, limits: ThrottleLimits | None = None) -> None:
        self.limits = limits or ThrottleLimits()
        self._lock = threading.Lock()
        self._directions: dict[Key, _Direction] = {}
        self._counters: dict[tuple[str, int], dict[str, _Counter]] = {}  # port -> name -> it
        self._totals: dict[str, list[int]] = {}  # direction -> seconds per CAUSES index

    def feed(
        self, spec: PortSpec, direction: str, chunk: Chunk, analyzer: DirectionAnalyzer
    ) -> None:
        """A drained chunk of one port direction (the pipeline's state lock held)."""
        if chunk.timestamp_ns.size == 0 and len(chunk.bursts) == 0:
            return
        with self._lock:
            state = self._directions.setdefault((spec.device, spec.port, direction), _Direction())
            if chunk.timestamp_ns.size:
                state.latest_sample_ns = max(state.latest_sample_ns, int(chunk.timestamp_ns[-1]))
            found = [
                long_burst_seconds(
                    chunk.bursts.start_ns, chunk.bursts.end_ns, self.limits.long_burst_ns
                )
            ]
            if chunk.saturated.size:
                found.append(analyzer.saturated_seconds())
            for seconds in found:
                state.pending.update(int(s) for s in seconds[seconds > state.settled_until])

    def observe(self, slow: SlowSnapshot | None, wall_offset_ns: int) -> None:
        """The slow poller's latest readings (once a drain), then settle what can be."""
        if slow is None:
            return
        with self._lock:
            for (device, port, name), state in slow.counters.items():
                if state.increment is None or counter_cause(name) is None:
                    continue
                wall = state.timestamp_ns + wall_offset_ns
                mine = self._counters.setdefault((device, port), {})
                known = mine.get(name)
                if known is None:
                    mine[name] = _Counter(wall, state.increment)
                    continue
                if wall <= known.wall_ns:
                    continue
                found = evidence(
                    name,
                    [wall],
                    [state.increment],
                    self.limits,
                    RESETTING_64,
                    previous=(known.wall_ns, known.increments),
                )
                if found is not None:
                    known.intervals.append(found)
                    while known.intervals and known.intervals[0].end_ns[0] < wall - KEEP_NS:
                        known.intervals.popleft()
                known.wall_ns, known.increments = wall, state.increment
            self._settle()

    def _settle(self) -> None:
        for (device, port, direction), state in self._directions.items():
            counters = [
                (name, counter)
                for name, counter in self._counters.get((device, port), {}).items()
                if congestion_direction(name) == direction
            ]
            if not counters:
                continue  # nothing to judge by (yet): its seconds wait, then age out
            polled = min(counter.wall_ns for _, counter in counters)
            until = min(state.latest_sample_ns - SETTLE_NS, polled) // NS_PER_SECOND - 1
            if until <= state.settled_until:
                continue
            seconds = np.array(sorted(s for s in state.pending if s <= until), dtype=np.int64)
            state.pending = {s for s in state.pending if s > until}
            state.settled_until = until
            if seconds.size == 0:
                continue
            pfc = pfc_evidence_names([name for name, _ in counters])
            judged = [
                interval
                for name, counter in counters
                if counter_cause(name) != PFC or name in pfc
                for interval in counter.intervals
            ]
            causes = classify(seconds, judged, self.limits.min_overlap_ns)
            totals = self._totals.setdefault(direction, [0] * len(CAUSES))
            for index, count in enumerate(np.bincount(causes, minlength=len(CAUSES)).tolist()):
                totals[index] += count

    def totals(self) -> dict[str, tuple[int, ...]]:
        """Seconds per cause (CAUSES order) for each direction judged so far."""
        with self._lock:
            return {direction: tuple(counts) for direction, counts in self._totals.items()}

    def families(self) -> Iterable[Metric]:
        """The node's family (BurstscopeCollector.extra_families): at most seven series."""
        return throttle_families(self.totals())


def throttle_families(totals: Mapping[str, Sequence[int]]) -> list[Metric]:
    """Seconds per direction and cause (CAUSES order) as the family; none before the first."""
    if not totals:
        return []
    family = CounterMetricFamily(FAMILY.removesuffix("_total"), HELP, labels=("direction", "cause"))
    for direction in DIRECTIONS:
        counts = totals.get(direction)
        if counts is None:
            continue
        for cause in DIRECTION_CAUSES[direction]:
            family.add_metric([direction, cause], counts[CAUSES.index(cause)])
    return [family]
