"""The PFC storm watchdog: a port priority paused for most of a trailing window.

Switches run PFC watchdogs (SONiC declares a storm once a queue has been paused for 400 ms,
and restores it after pauses stop: sonic-mgmt docs/testplan/PFC_Watchdog_TestPlan.md);
this is the host's. It reads the pause counters of a port priority polled at >= 10 Hz and
asks, at every poll, what fraction of the trailing window the port was paused:

    fraction(t_i) = paused time in (t_j, t_i] / (t_i - t_j)

where t_j is the latest poll at least ``window_ns`` before t_i, so the window is never
shorter than configured (at 10 Hz, 400-500 ms). A storm starts at the first poll whose
fraction reaches ``threshold`` and ends at the first poll whose fraction falls to
``end_threshold`` or below (hysteresis: one start and one end per storm, however the
fraction wavers in between).

Per priority, not summed over priorities: PFC pauses one priority at a time (IEEE 802.1Qbb),
a storm is a lossless priority stuck, and a sum of eight priorities' paused time is no
fraction of anything. The port's figure is its priorities' highest.

Paused time comes from the driver's pause duration where it has one (mlx5
``rx_prio<p>_pause_duration``, microseconds: drivers/net/ethernet/mellanox/mlx5/core/
en_stats.c pport_per_prio_pfc_stats_desc, Documentation/networking/device_drivers/ethernet/
mellanox/mlx5/counters.rst). Where only frames are counted, ``paused_ns_from_frames`` gives
an upper bound: a PFC frame asks for at most 65535 quanta of 512 bit times each (IEEE
802.1Qbb, the pause quanta of IEEE 802.3 Annex 31B), and the counter does not say how many
a frame carried, so frames yield "paused at most this long", never a measured duration.

Pure: no I/O, no clock; the batch functions and ``StormWatch`` (one poll at a time) give the
same storms for the same polls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from burstscope.detectors.arrays import F64, I64, B

NS_PER_SECOND = 1_000_000_000
# SONiC's detection time: a storm is declared after 400 ms of pause.
DEFAULT_WINDOW_NS = 400_000_000
# "Most of the window": 80% paused. A congested but working lossless class pauses in
# bursts of micro- to milliseconds; the whole window paused is a stuck class.
DEFAULT_THRESHOLD = 0.8
# The storm is over once the window is at most this much paused.
DEFAULT_END_THRESHOLD = 0.2
# 10 Hz: four polls per 400 ms window.
DEFAULT_INTERVAL_NS = 100_000_000
# IEEE 802.1Qbb PFC frame: a per-priority pause time in quanta of 512 bit times, 16 bits.
QUANTUM_BITS = 512
MAX_QUANTA = 0xFFFF
PAUSE_DURATION_NS_PER_UNIT = 1_000  # mlx5 *_pause_duration counts microseconds


@dataclass(frozen=True, slots=True)
class WatchdogConfig:
    """The watchdog's window and thresholds (``[pfc_watchdog]``)."""

    window_ns: int = DEFAULT_WINDOW_NS
    threshold: float = DEFAULT_THRESHOLD
    end_threshold: float = DEFAULT_END_THRESHOLD

    def __post_init__(self) -> None:
        if self.window_ns <= 0:
            raise ValueError(f"window must be positive, not {self.window_ns} ns")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], not {self.threshold}")
        if not 0.0 <= self.end_threshold < self.threshold:
            raise ValueError(
                f"end threshold must be in [0, threshold {self.threshold}), "
                f"not {self.end_threshold}"
            )


DEFAULT_CONFIG = WatchdogConfig()


def paused_ns_from_frames(
    frames: npt.ArrayLike, interval_ns: npt.ArrayLike, bits_per_second: float
) -> I64:
    """An upper bound on the paused time of intervals in which ``frames`` pause frames
    arrived, at ``bits_per_second``: each frame at most 65535 quanta of 512 bit times
    (83.88 us at 400 Gb/s), and never more than the interval itself."""
    if bits_per_second <= 0:
        raise ValueError(f"link speed must be positive, not {bits_per_second}")
    most = np.asarray(frames, dtype=np.float64) * (
        MAX_QUANTA * QUANTUM_BITS * NS_PER_SECOND / bits_per_second
    )
    span = np.asarray(interval_ns, dtype=np.int64)
    return np.minimum(np.floor(most).astype(np.int64), span)


def paused_fraction(timestamp_ns: npt.ArrayLike, paused_ns: npt.ArrayLike, window_ns: int) -> F64:
    """The paused fraction of the trailing window at each poll; nan until the polls span
    a whole window.

    ``paused_ns`` is the cumulative paused time at each poll (any origin). The window ends
    at the poll and starts at the latest poll at least ``window_ns`` before it.
    """
    t = np.asarray(timestamp_ns, dtype=np.int64)
    paused = np.asarray(paused_ns, dtype=np.int64)
    start = np.searchsorted(t, t - window_ns, side="right") - 1
    fraction = np.full(t.size, np.nan)
    covered = start >= 0
    j = start[covered]
    span = t[covered] - t[j]
    fraction[covered] = (paused[covered] - paused[j]) / np.maximum(span, 1)
    clipped: F64 = np.clip(fraction, 0.0, 1.0)
    return clipped


def segmented_fraction(
    timestamp_ns: npt.ArrayLike, increment_ns: npt.ArrayLike, valid: npt.ArrayLike, window_ns: int
) -> F64:
    """``paused_fraction`` over polls whose intervals may be unknown (``valid`` False: a
    failed read, a counter reset): no window reaches back across an unknown interval."""
    t = np.asarray(timestamp_ns, dtype=np.int64)
    known = np.asarray(valid, dtype=bool)
    increment = np.where(known, np.asarray(increment_ns, dtype=np.int64), 0)
    fraction = np.full(t.size, np.nan)
    if t.size == 0:
        return fraction
    # A segment starts at the first poll and at every poll whose interval is unknown.
    breaks = np.flatnonzero(~known[1:]) + 1
    bounds = np.concatenate(([0], breaks, [t.size]))
    for low, high in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        paused = np.cumsum(increment[low:high]) - increment[low]
        fraction[low:high] = paused_fraction(t[low:high], paused, window_ns)
    return fraction


def storm_states(fraction: npt.ArrayLike, config: WatchdogConfig, storming: bool = False) -> B:
    """Whether a storm is on at each poll, with hysteresis; nan (no verdict) keeps the state
    of the poll before (``storming`` before the first)."""
    f = np.asarray(fraction, dtype=np.float64)
    mark = np.zeros(f.size, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        mark[f >= config.threshold] = 1
        mark[f <= config.end_threshold] = -1
    index = np.where(mark != 0, np.arange(f.size), -1)
    last = np.maximum.accumulate(index) if f.size else index
    state = np.where(last >= 0, mark[np.maximum(last, 0)] == 1, storming)
    return np.asarray(state, dtype=bool)


@dataclass(frozen=True, slots=True)
class Storm:
    """One storm of one port priority, as the batch detector finds it."""

    start_ns: int  # the poll at which the window first reached the threshold
    end_ns: int | None  # the poll at which it fell to the end threshold; None: still on
    peak_fraction: float  # the highest window fraction during the storm
    paused_ns: int  # paused time counted in the storm's polls' intervals


def storms(
    timestamp_ns: npt.ArrayLike,
    increment_ns: npt.ArrayLike,
    config: WatchdogConfig = WatchdogConfig(),
    valid: npt.ArrayLike | None = None,
) -> list[Storm]:
    """The storms of one port priority's polls: ``increment_ns`` is the paused time of the
    interval ending at each poll (the first is ignored), ``valid`` whether it is known."""
    t = np.asarray(timestamp_ns, dtype=np.int64)
    increment = np.asarray(increment_ns, dtype=np.int64)
    known = np.ones(t.size, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    if t.size:
        known = known.copy()
        known[0] = False
    fraction = segmented_fraction(t, increment, known, config.window_ns)
    on = storm_states(fraction, config)
    edges = np.flatnonzero(np.diff(np.concatenate(([False], on, [False])).astype(np.int8)))
    found = []
    paused = np.where(known, increment, 0)
    for begin, stop in zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True):
        end = int(t[stop]) if stop < t.size else None
        through = stop + 1 if stop < t.size else stop
        found.append(
            Storm(
                int(t[begin]),
                end,
                float(np.nanmax(fraction[begin:through])),
                int(paused[begin + 1 : through].sum()),
            )
        )
    return found


@dataclass(frozen=True, slots=True)
class StormEvent:
    """A storm's start or end, as ``StormWatch.update`` reports it."""

    key: Hashable  # the caller's: (device, port, direction, priority) in the agent
    started: bool  # True at the start, False at the end
    time_ns: int  # the poll that decided it
    paused_fraction: float  # the window's fraction at that poll
    start_ns: int  # when the storm was declared
    peak_fraction: float  # highest fraction so far (the whole storm's, at the end)
    paused_ns: int  # paused time in the storm's intervals so far

    @property
    def duration_ns(self) -> int:
        """From the declaration to this event (0 at the start)."""
        return self.time_ns - self.start_ns


@dataclass(slots=True)
class _Watched:
    history: deque[tuple[int, int]] = field(default_factory=deque)  # (poll time, cumulative)
    total_ns: int = 0
    fraction: float | None = None
    storming: bool = False
    start_ns: int = 0
    peak: float = 0.0
    storm_paused_ns: int = 0


class StormWatch:
    """The batch detector one poll at a time, for many port priorities (keys).

    ``update`` takes the paused time of the interval that ends at this poll (None when it is
    unknown: the first poll, a failed read, a counter reset) and returns the storm's start
    or end when this poll decides one. Equal to ``storms`` over the same polls.
    """

    def __init__(self, config: WatchdogConfig = WatchdogConfig()) -> None:
        self.config = config
        self._watched: dict[Hashable, _Watched] = {}

    def update(
        self, key: Hashable, timestamp_ns: int, increment_ns: int | None
    ) -> StormEvent | None:
        watched = self._watched.get(key)
        if watched is None:
            watched = self._watched[key] = _Watched()
        history = watched.history
        if increment_ns is None:
            history.clear()  # no window reaches back across an unknown interval
            watched.fraction = None
            history.append((timestamp_ns, watched.total_ns))
            return None
        if watched.storming:
            watched.storm_paused_ns += increment_ns
        watched.total_ns += increment_ns
        history.append((timestamp_ns, watched.total_ns))
        edge = timestamp_ns - self.config.window_ns
        # Keep the latest poll at or before the window's edge, and everything after it.
        while len(history) >= 2 and history[1][0] <= edge:
            history.popleft()
        first_time, first_total = history[0]
        if first_time > edge:
            watched.fraction = None
            return None
        span = max(timestamp_ns - first_time, 1)
        fraction = min(max((watched.total_ns - first_total) / span, 0.0), 1.0)
        watched.fraction = fraction
        if watched.storming:
            watched.peak = max(watched.peak, fraction)
            if fraction <= self.config.end_threshold:
                watched.storming = False
                return self._event(key, watched, False, timestamp_ns, fraction)
            return None
        if fraction >= self.config.threshold:
            watched.storming = True
            watched.start_ns = timestamp_ns
            watched.peak = fraction
            watched.storm_paused_ns = 0
            return self._event(key, watched, True, timestamp_ns, fraction)
        return None

    @staticmethod
    def _event(
        key: Hashable, watched: _Watched, started: bool, time_ns: int, fraction: float
    ) -> StormEvent:
        return StormEvent(
            key, started, time_ns, fraction, watched.start_ns, watched.peak, watched.storm_paused_ns
        )

    def fraction(self, key: Hashable) -> float | None:
        """The latest window's paused fraction of ``key``; None without a whole window."""
        watched = self._watched.get(key)
        return None if watched is None else watched.fraction

    def storming(self) -> dict[Hashable, float]:
        """The keys in a storm now, with their latest window fraction."""
        return {
            key: watched.fraction if watched.fraction is not None else watched.peak
            for key, watched in self._watched.items()
            if watched.storming
        }

    def forget(self, key: Hashable) -> None:
        self._watched.pop(key, None)
