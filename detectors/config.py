"""Thresholds and time scales of the detectors, and the names the scales are reported under."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

import numpy as np
import numpy.typing as npt

NS_PER_SECOND = 1_000_000_000
# A port direction: what it sent (counters/port_xmit_data), what it received (port_rcv_data).
DIRECTIONS = ("transmit", "receive")
NS_PER_MICROSECOND = 1_000

# The windows of the contrast: 1 ms up to the 15 s a Prometheus scrape sees. Each is a
# multiple of the one before, which lets a coarser scale look only where a finer one
# crossed a boundary (every coarse boundary is also a fine one).
DEFAULT_WINDOWS_NS = (
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    15_000_000_000,
)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The shared definitions, all configurable; utilizations are fractions of line rate."""

    burst: float = 0.5  # a burst is a run of samples above this (Zhang et al., IMC 2017)
    saturated: float = 0.9  # at or above this a sample counts as saturated
    idle: float = 0.01  # below this a sample or window counts as idle
    busy: float = 0.25  # Acme (NSDI 2024): 15 s samples were rarely above 25%
    coarse_window_ns: int = 15_000_000_000  # what a 15 s scrape sees
    max_gap_ns: int = 1_000_000_000  # a longer interval is a gap, not a measurement
    windows_ns: tuple[int, ...] = DEFAULT_WINDOWS_NS

    def __post_init__(self) -> None:
        for name in ("burst", "saturated", "idle", "busy"):
            value = getattr(self, name)
            # Zero would make every invalid interval (utilization 0) count as busy or burst.
            if not 0.0 < value <= 1.0:
                raise ValueError(f"threshold {name} must be in (0, 1], got {value}")
        if self.coarse_window_ns <= 0 or self.max_gap_ns <= 0:
            raise ValueError("coarse_window_ns and max_gap_ns must be positive")
        if any(w <= 0 for w in self.windows_ns):
            raise ValueError("windows_ns must be positive")

    def window_scales(self, finest_interval_ns: int) -> tuple[int, ...]:
        """Window lengths coarser than the sampling interval, always including the coarse one."""
        chosen = {w for w in self.windows_ns if w > finest_interval_ns * 3 // 2}
        chosen.add(self.coarse_window_ns)
        return tuple(sorted(chosen))


# Cached: a few intervals, asked for at every drain of every port (Decimal is slow).
@lru_cache(maxsize=64)
def scale_key(interval_ns: int) -> str:
    """Seconds as the report's key: 1 ms -> "0.001", 100 us -> "0.0001", 15 s -> "15"."""
    seconds = (Decimal(interval_ns) / NS_PER_SECOND).normalize()
    return format(seconds, "f")


def nominal_interval_ns(timestamp_ns: npt.ArrayLike) -> int:
    """The sampling interval of a series that does not state it: the round interval
    (1, 2 or 5 x 10^k ns) nearest the median positive step.

    Only for traces that do not carry their configured interval (older traces, CSV): a
    jittered median (999.4 us from a 1 ms sampler on a busy machine) would name the
    finest scale "0.000999" instead of "0.001", differently for every port.
    """
    steps = np.diff(np.asarray(timestamp_ns, dtype=np.int64))
    steps = steps[steps > 0]
    if steps.size == 0:
        raise ValueError("need two samples with increasing timestamps to know the interval")
    return round_interval_ns(float(np.median(steps)))


ROUND_MANTISSAS = (1, 2, 5)


def round_interval_ns(interval_ns: float) -> int:
    """The 1, 2 or 5 x 10^k ns nearest ``interval_ns`` on a log scale (at least 1 ns)."""
    if not interval_ns >= 1:  # also NaN
        return 1
    exponent = int(np.floor(np.log10(interval_ns)))
    candidates = [m * 10**e for e in (exponent, exponent + 1) for m in ROUND_MANTISSAS]
    return int(min(candidates, key=lambda c: (abs(np.log(interval_ns / c)), c)))
