"""What a tick's counter reads cost and the finest sampling interval they leave honest.

One judgement for ``discover --probe`` and the agent alike: the tick's read window (the
first read's start to the last read's end, from the sampler's midpoints and durations),
its 99th percentile times ``MARGIN``, rounded up to a whole ``INTERVAL_GRAIN_NS``.

Why a margin of 2: a tick is more than its reads. The sampler also wakes (its lateness,
tens of microseconds under SCHED_FIFO, more without it), stores the row and sleeps to the
next absolute deadline; and a read window that fills the interval leaves nothing for the
1% of ticks slower than the p99. At twice the p99 window, half of every interval is left
for waking and for the slow tail, so a slow read delays its own tick, not the next one.
Why 100 us: the sampler's finest supported interval (collector/sampler.py, MIN_INTERVAL_NS).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MARGIN = 2
INTERVAL_GRAIN_NS = 100_000


@dataclass(frozen=True, slots=True)
class Spread:
    """Nanoseconds: the median, the 99th percentile and the largest of ``count`` values."""

    p50_ns: int
    p99_ns: int
    max_ns: int
    count: int


def spread(values_ns: npt.ArrayLike) -> Spread | None:
    """The spread of a set of durations; None for none. Percentiles are observed values
    (the next one up), never an interpolation between two reads."""
    values = np.asarray(values_ns, dtype=np.int64)
    if not values.size:
        return None
    p50, p99 = np.percentile(values, (50, 99), method="higher")
    return Spread(int(p50), int(p99), int(values.max()), int(values.size))


def tick_read_windows(
    timestamp_ns: npt.NDArray[np.int64], read_ns: npt.NDArray[np.int64], read: npt.NDArray[np.bool_]
) -> npt.NDArray[np.int64]:
    """Per tick with at least one read: the first read's start to the last read's end.

    ``timestamp_ns`` and ``read_ns`` are [ticks, ports], each sample stamped at the midpoint
    of its reads; ``read`` marks the ports that were read that tick (a failed, missing or
    held port left no duration to count)."""
    stamps = np.asarray(timestamp_ns, dtype=np.int64)
    durations = np.asarray(read_ns, dtype=np.int64)
    start = stamps - durations // 2
    end = start + durations
    ticks = read.any(axis=1)
    first = np.where(read, start, np.iinfo(np.int64).max).min(
        axis=1, initial=np.iinfo(np.int64).max
    )
    last = np.where(read, end, np.iinfo(np.int64).min).max(axis=1, initial=np.iinfo(np.int64).min)
    windows: npt.NDArray[np.int64] = (last - first)[ticks]
    return windows


def finest_interval_ns(
    window: Spread, margin: int = MARGIN, grain_ns: int = INTERVAL_GRAIN_NS
) -> int:
    """The finest interval whose ticks hold the p99 read window ``margin`` times over,
    rounded up to a whole ``grain_ns`` (at least one grain)."""
    needed = margin * window.p99_ns
    return max(grain_ns, -(-needed // grain_ns) * grain_ns)
