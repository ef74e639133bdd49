"""Why a saturated second was throttled: each saturated or long-burst second, by its cause.

The congestion shares (detectors/congestion.py) say how much of a counter's growth fell in
saturated seconds; this says, for each such second, which kind of push-back the fabric gave:

- ``pfc``: the port was paused by PFC. Transmit: its peer paused it
  (``rx_prio<p>_pause_duration``, microseconds, or ``rx_prio<p>_pause`` frames where no
  duration is read); receive: it paused its peer (``tx_prio<p>_pause*``).
- ``ecn``: ECN-based congestion control slowed the traffic. Transmit: the reaction point
  handled CNPs (``rp_cnp_handled``); receive: what arrived was ECN-marked
  (``np_ecn_marked_roce_packets``) and the notification point sent CNPs (``np_cnp_sent``).
- ``credit``: on InfiniBand the port had data but no credits (``port_xmit_wait``, transmit
  only): stalled time where the PortSamplesControl tick is configured, else its presence.
- ``clean``: the second's counters that were read show none of these.

Precedence, one cause per second: pfc, then ecn, then credit. A pause stops the port outright
and on a RoCE port it also shows as xmit_wait (the data waited out the pause), so a second
with both is a paused second; ECN is the end-to-end answer of the same congestion, slower and
gentler than a link-level stop, and where it moved it says more than the credit wait that
any slowed sender accrues. So a second is ``credit`` only when neither a pause nor a CNP
explains it. Only the counters a port has are consulted: an InfiniBand port has no pause or
CNP counters, so its seconds are ``credit`` or ``clean``.

Resolution: the slow counters are read about once a second, so a counter interval
(t_{i-1}, t_i] is attributed to every second it overlaps, as ``congestion_share`` does, except
a second it reaches by less than ``min_overlap_ns`` (a poll taken just after a second began
says nothing about that second). A cause can therefore be placed one second early or late
where the poll's phase splits an interval between two seconds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from burstscope.detectors.arrays import I64, B
from burstscope.detectors.config import NS_PER_SECOND
from burstscope.detectors.congestion import congestion_direction
from burstscope.detectors.counters import RESETTING_64, CounterSpec, counter_deltas

PFC = "pfc"
ECN = "ecn"
CREDIT = "credit"
CLEAN = "clean"
# In precedence order: a second takes the first cause whose counters moved past its limit.
CAUSES = (PFC, ECN, CREDIT, CLEAN)
# The causes each direction can have (credit wait is the transmit side's alone).
DIRECTION_CAUSES = {"transmit": (PFC, ECN, CREDIT, CLEAN), "receive": (PFC, ECN, CLEAN)}

_PAUSE_DURATION = re.compile(r"^(rx|tx)_prio\d+_pause_duration$")
_PAUSE_FRAMES = re.compile(r"^((rx|tx)_prio\d+_pause|(rx|tx)_pause_ctrl_phy)$")
XMIT_WAIT = "port_xmit_wait"
NS_PER_MICROSECOND = 1_000


def counter_cause(name: str) -> str | None:
    """The cause a congestion counter answers to (its direction is congestion_direction's)."""
    if congestion_direction(name) is None:
        return None
    if _PAUSE_DURATION.match(name) or _PAUSE_FRAMES.match(name):
        return PFC
    if name == XMIT_WAIT:
        return CREDIT
    return ECN  # rp_cnp_handled, np_cnp_sent, np_ecn_marked_roce_packets


def is_pause_duration(name: str) -> bool:
    return _PAUSE_DURATION.match(name) is not None


@dataclass(frozen=True, slots=True)
class ThrottleLimits:
    """How much a counter must move in an interval to name its cause; all configurable.

    Defaults are stated in physical terms, not fitted to any simulation: a 802.1Qbb pause
    of the largest quanta (65535 x 512 bit times) stops a 400 Gb/s port for 84 us, so 1 ms of
    pause in a second is a dozen of them, sustained back-pressure rather than one frame.
    """

    # A burst at least this long makes its seconds candidates even where no sample reached
    # the saturated threshold: a paused or slowed port stretches its bursts below line rate.
    long_burst_ns: int = 100_000_000
    # A counter interval reaching into a second by less than this is not attributed to it.
    min_overlap_ns: int = 50_000_000
    # PFC: paused time per second of interval (pause durations, mlx5: microseconds).
    pause_fraction: float = 0.001
    # PFC where a direction has frame counters but no duration counter: frames per second.
    pause_frames_per_second: float = 10.0
    # ECN/CNP: marked packets or CNPs per second of interval.
    ecn_packets_per_second: float = 100.0
    # port_xmit_wait's tick (IBA PortSamplesControl.Tick; not in sysfs): None = unknown,
    # then any increment counts (presence only).
    xmit_wait_tick_ns: float | None = None
    # Credit wait, with the tick known: stalled time per second of interval.
    stall_fraction: float = 0.001

    def __post_init__(self) -> None:
        if self.long_burst_ns <= 0 or not 0 <= self.min_overlap_ns < NS_PER_SECOND:
            raise ValueError("long_burst_ns must be positive and min_overlap_ns in [0, 1 s)")
        for name in ("pause_fraction", "pause_frames_per_second", "ecn_packets_per_second"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0")
        if not 0 <= self.stall_fraction <= 1:
            raise ValueError("stall_fraction must be in [0, 1]")
        if self.xmit_wait_tick_ns is not None and not self.xmit_wait_tick_ns > 0:
            raise ValueError("xmit_wait_tick_ns must be positive")


@dataclass(frozen=True, slots=True)
class Evidence:
    """One counter's intervals, each marked where it moved past its cause's limit."""

    cause: str
    start_ns: I64  # the interval (start, end]: the poll before and this poll
    end_ns: I64
    over: B  # moved past the limit (an unknown interval never is)


def evidence(
    name: str,
    timestamp_ns: npt.ArrayLike,
    values: npt.ArrayLike,
    limits: ThrottleLimits,
    spec: CounterSpec = RESETTING_64,
    rebaseline: npt.ArrayLike | None = None,
    previous: tuple[int, int] | None = None,
) -> Evidence | None:
    """A slow counter's readings as evidence of its cause; None for other counters.

    ``previous``: (time, value) of the reading before the first (the live agent's last).
    """
    cause = counter_cause(name)
    if cause is None:
        return None
    end = np.asarray(timestamp_ns, dtype=np.int64)
    deltas = counter_deltas(None if previous is None else previous[1], values, spec, rebaseline)
    start = np.empty_like(end)
    if end.size:
        start[0] = end[0] if previous is None else previous[0]
        start[1:] = end[:-1]
    seconds = (end - start) / NS_PER_SECOND
    amount = deltas.delta.astype(np.float64)
    if cause == PFC and is_pause_duration(name):
        need = limits.pause_fraction * seconds * (NS_PER_SECOND / NS_PER_MICROSECOND)
    elif cause == PFC:
        need = limits.pause_frames_per_second * seconds
    elif cause == ECN:
        need = limits.ecn_packets_per_second * seconds
    elif limits.xmit_wait_tick_ns is None:
        need = np.zeros_like(seconds)  # presence only: any tick counts
    else:
        need = limits.stall_fraction * seconds * NS_PER_SECOND / limits.xmit_wait_tick_ns
    # Strictly more than the limit and never zero: no increment is no evidence. A
    # saturated PortCounter's increment is a lower bound and still counts where it passes.
    over = deltas.valid & (amount > 0) & (amount >= need) & (seconds > 0)
    return Evidence(cause, start, end, over)


def pfc_evidence_names(names: Sequence[str]) -> set[str]:
    """The counters of one port direction to judge PFC by: the pause durations where any is
    read (they say how long), else the frame counters (they say only that it paused)."""
    durations = {n for n in names if is_pause_duration(n)}
    if durations:
        return durations
    return {n for n in names if counter_cause(n) == PFC}


def long_burst_seconds(start_ns: I64, end_ns: I64, minimum_ns: int) -> I64:
    """Sorted wall-clock seconds that a burst of at least ``minimum_ns`` overlaps."""
    start = np.asarray(start_ns, dtype=np.int64)
    end = np.asarray(end_ns, dtype=np.int64)
    long = (end - start) >= minimum_ns
    if not long.any():
        return np.empty(0, np.int64)
    low = start[long] // NS_PER_SECOND
    high = (end[long] - 1) // NS_PER_SECOND
    counts = high - low + 1
    offsets = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(
        np.cumsum(counts) - counts, counts
    )
    return np.unique(np.repeat(low, counts) + offsets)


def candidate_seconds(saturated_seconds: npt.ArrayLike, long_seconds: npt.ArrayLike) -> I64:
    """The seconds to classify: those that held a saturated sample or a long burst."""
    return np.union1d(
        np.asarray(saturated_seconds, dtype=np.int64), np.asarray(long_seconds, dtype=np.int64)
    )


def _touched(seconds: I64, start: I64, end: I64, min_overlap_ns: int) -> B:
    """Which of the sorted ``seconds`` some interval (start, end] overlaps by at least
    ``min_overlap_ns`` (by half the interval, where it is shorter than twice that)."""
    found = np.zeros(seconds.size + 1, dtype=np.int64)
    if start.size and seconds.size:
        guard = np.maximum(np.minimum(min_overlap_ns, (end - start) // 2), 1)
        # A second s is [s, s + 1) s: the interval covers at least ``guard`` of its first
        # second where start + guard <= that second's end, and of its last where
        # end - guard >= that second's start.
        first = (start + guard - 1) // NS_PER_SECOND
        last = (end - guard) // NS_PER_SECOND
        keep = last >= first
        low = np.searchsorted(seconds, first[keep], side="left")
        high = np.searchsorted(seconds, last[keep], side="right")
        # Each interval marks the candidate seconds [low, high): a difference array.
        np.add.at(found, low, 1)
        np.add.at(found, high, -1)
    return np.cumsum(found[:-1]) > 0


def classify(seconds: npt.ArrayLike, evidence: Sequence[Evidence], min_overlap_ns: int) -> I64:
    """Each of ``seconds`` (sorted, unique) as an index into CAUSES: the first cause in
    precedence order with an interval past its limit that overlaps the second; CLEAN where
    none does."""
    candidates = np.asarray(seconds, dtype=np.int64)
    causes = np.full(candidates.size, CAUSES.index(CLEAN), dtype=np.int64)
    for index in range(len(CAUSES) - 2, -1, -1):  # lowest precedence first, overwritten
        moved = [e for e in evidence if e.cause == CAUSES[index]]
        if not moved:
            continue
        start = np.concatenate([e.start_ns[e.over] for e in moved])
        end = np.concatenate([e.end_ns[e.over] for e in moved])
        causes[_touched(candidates, start, end, min_overlap_ns)] = index
    return causes


@dataclass(frozen=True, slots=True)
class CauseSeconds:
    """Classified seconds of one port direction, per cause (CAUSES order)."""

    seconds: tuple[int, ...]  # per cause
    judged: bool  # the direction had a congestion counter to judge by

    @property
    def total(self) -> int:
        return sum(self.seconds)

    def share(self, cause: str) -> float | None:
        total = self.total
        return None if total == 0 else self.seconds[CAUSES.index(cause)] / total

    @staticmethod
    def of(causes: npt.ArrayLike, judged: bool = True) -> CauseSeconds:
        codes = np.asarray(causes, dtype=np.int64)
        return CauseSeconds(tuple(np.bincount(codes, minlength=len(CAUSES)).tolist()), judged)

    def __add__(self, other: CauseSeconds) -> CauseSeconds:
        return CauseSeconds(
            tuple(a + b for a, b in zip(self.seconds, other.seconds, strict=True)),
            self.judged or other.judged,
        )


NOT_JUDGED = CauseSeconds((0,) * len(CAUSES), False)


class CounterSeries(Protocol):
    """One slow counter's recorded readings (collector.trace.SlowSeries has this shape)."""

    @property
    def name(self) -> str: ...
    @property
    def spec(self) -> CounterSpec | None: ...
    @property
    def timestamp_ns(self) -> npt.NDArray[np.int64]: ...
    @property
    def value(self) -> npt.NDArray[np.uint64]: ...
    @property
    def rebaseline(self) -> npt.NDArray[np.bool_]: ...


@dataclass(frozen=True, slots=True)
class Throttle:
    """One port direction's classified seconds (the report's, and what scoring reads)."""

    seconds: I64  # the candidate seconds (wall clock, ns // 1e9), sorted
    causes: I64  # per second, an index into CAUSES
    judged: bool  # False: no congestion counter of this direction was recorded
    stalled_time: bool = False  # credit judged by stalled time (the tick known), not presence

    @property
    def counts(self) -> CauseSeconds:
        return CauseSeconds.of(self.causes, self.judged) if self.judged else NOT_JUDGED

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Throttle):
            return NotImplemented
        return (
            self.judged == other.judged
            and np.array_equal(self.seconds, other.seconds)
            and np.array_equal(self.causes, other.causes)
        )

    __hash__ = None  # type: ignore[assignment]


def classify_direction(
    direction: str,
    saturated_seconds: npt.ArrayLike,
    burst_start_ns: npt.ArrayLike,
    burst_end_ns: npt.ArrayLike,
    series: Sequence[CounterSeries],
    limits: ThrottleLimits,
) -> Throttle:
    """A port direction's saturated and long-burst seconds, each by its cause, from the slow
    counters recorded beside it (those of other directions and gauges are ignored)."""
    mine = [
        s
        for s in series
        if s.spec is not None
        and congestion_direction(s.name) == direction
        and counter_cause(s.name) is not None
    ]
    pfc = pfc_evidence_names([s.name for s in mine])
    found = []
    for s in mine:
        if counter_cause(s.name) == PFC and s.name not in pfc:
            continue
        assert s.spec is not None
        judged = evidence(s.name, s.timestamp_ns, s.value, limits, s.spec, s.rebaseline)
        if judged is not None:
            found.append(judged)
    long = long_burst_seconds(
        np.asarray(burst_start_ns, np.int64),
        np.asarray(burst_end_ns, np.int64),
        limits.long_burst_ns,
    )
    seconds = candidate_seconds(saturated_seconds, long)
    by_time = limits.xmit_wait_tick_ns is not None
    if not mine:
        clean = np.full(seconds.size, CAUSES.index(CLEAN), np.int64)
        return Throttle(seconds, clean, False, by_time)
    return Throttle(seconds, classify(seconds, found, limits.min_overlap_ns), True, by_time)
