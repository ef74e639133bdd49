"""Wall-clock aligned windows over an adjusted cumulative byte count, chunk by chunk."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from detectors.config import scale_key
from detectors.distributions import UTILIZATION_BINS, utilization_bins, utilization_quantile

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Intervals:
    """One chunk's sample intervals (t_start, t_end], with the running sums before each."""

    start_ns: I64  # t_{i-1}
    end_ns: I64  # t_i
    delta: I64  # bytes in the interval, 0 where invalid
    duration_ns: I64  # t_i - t_{i-1}
    valid: B
    bytes_before: I64  # A_{i-1}: valid bytes up to the start of interval i
    covered_before: I64  # T_{i-1}: valid ns up to the start of interval i


@dataclass(frozen=True, slots=True)
class Windows:
    """Windows closed in one chunk at one scale (only those with covered time)."""

    end_ns: I64  # aligned end: the window is [end_ns - length, end_ns)
    utilization: F64  # covered bytes / covered time / line rate, clipped to 1
    covered_ns: I64

    @staticmethod
    def empty() -> Windows:
        return Windows(np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.int64))


@dataclass(frozen=True, slots=True)
class ScaleStats:
    """Distribution of utilization over one scale's windows (or samples, at the finest)."""

    key: str  # seconds, as the report names the scale ("0.001", "15")
    length_ns: int
    count: int  # windows (or valid samples) with covered time
    maximum: float | None
    idle: int  # windows below the idle threshold
    busy: int  # windows above the busy threshold
    histogram: tuple[int, ...]  # counts per 0.001-wide bin

    @property
    def p99(self) -> float | None:
        """Upper edge of the 0.001-wide bin holding the 99th percentile, at most the max."""
        edge = utilization_quantile(self.histogram, 0.99)
        if edge is None or self.maximum is None:
            return None
        return min(edge, self.maximum)

    @property
    def idle_fraction(self) -> float | None:
        return self.idle / self.count if self.count else None

    @property
    def busy_fraction(self) -> float | None:
        return self.busy / self.count if self.count else None


@dataclass(slots=True)
class Distribution:
    """Running max, threshold counts and histogram of utilizations."""

    idle_threshold: float
    busy_threshold: float
    count: int = 0
    maximum: float = -1.0
    idle: int = 0
    busy: int = 0
    histogram: I64 = field(default_factory=lambda: np.zeros(UTILIZATION_BINS, dtype=np.int64))

    def add(self, utilization: F64) -> None:
        if utilization.size == 0:
            return
        self.count += int(utilization.size)
        self.maximum = max(self.maximum, float(utilization.max()))
        self.idle += int(np.count_nonzero(utilization < self.idle_threshold))
        self.busy += int(np.count_nonzero(utilization > self.busy_threshold))
        self.histogram += utilization_bins(utilization)

    def stats(self, length_ns: int) -> ScaleStats:
        return ScaleStats(
            key=scale_key(length_ns),
            length_ns=length_ns,
            count=self.count,
            maximum=self.maximum if self.count else None,
            idle=self.idle,
            busy=self.busy,
            histogram=tuple(int(c) for c in self.histogram),
        )


class WindowScale:
    """Windows of one length aligned to wall-clock multiples of it.

    A window's bytes are A(end) - A(start) on the adjusted cumulative A: the sum of valid
    deltas, interpolated linearly inside the interval that holds a boundary (flat across
    an invalid one). A(b) depends only on integers carried exactly and the one interval
    holding b, so any chunking gives bit-identical windows.
    """

    def __init__(self, length_ns: int, bytes_to_utilization: float, distribution: Distribution):
        self.length_ns = length_ns
        self.key = scale_key(length_ns)
        self._scale = bytes_to_utilization  # 1e9 / line rate
        self.distribution = distribution
        # Windows covered for less than half their length (a trace's first and last, the
        # edges of a gap) are no fair "15 s average": they count only when a scale has no
        # other window, as in a trace shorter than the window.
        self.partial = Distribution(distribution.idle_threshold, distribution.busy_threshold)
        # A and T at the last boundary passed: integer part, interpolated part, covered ns.
        self._bytes_int = 0
        self._bytes_fraction = 0.0
        self._covered = 0

    def set_bytes_to_utilization(self, scale: float) -> None:
        """A new line rate (1e9 / rate) for windows that close from now on."""
        self._scale = scale

    def advance(self, intervals: Intervals, candidates: I64 | None) -> tuple[Windows, I64]:
        """Close the windows whose end boundary lies in these intervals.

        ``candidates`` are indices of the intervals that may hold a boundary (None: all).
        Returns the closed windows and the indices of intervals that hold a boundary,
        which are the candidates for the next, coarser scale.
        """
        length = self.length_ns
        if candidates is None:
            start = intervals.start_ns
            end = intervals.end_ns
            # Each interval starts where the one before ended: one division per sample.
            end_index = end // length
            start_index = np.empty_like(end_index)
            start_index[0] = int(start[0]) // length
            start_index[1:] = end_index[:-1]
            crossings = end_index - start_index
        else:
            if candidates.size == 0:
                return Windows.empty(), candidates
            start = intervals.start_ns[candidates]
            end = intervals.end_ns[candidates]
            crossings = end // length - start // length
        holding = np.flatnonzero(crossings)
        if holding.size == 0:
            return Windows.empty(), holding
        index = holding if candidates is None else candidates[holding]
        count = crossings[holding]
        valid = intervals.valid[index]
        # Boundaries inside an invalid interval all carry the same A and T: only the first
        # can close a window with covered time, so the rest are skipped (a long gap would
        # otherwise enumerate every empty window in it).
        count = np.where(valid, count, 1)
        first_k = start[holding] // length + 1
        if int(count.max()) > 1:
            repeated = np.repeat(np.arange(index.size), count)
            offsets = np.arange(repeated.size) - np.repeat(np.cumsum(count) - count, count)
            boundary = (first_k[repeated] + offsets) * length
            index = index[repeated]
            valid = valid[repeated]
        else:
            boundary = first_k * length
        interval_start = intervals.start_ns[index]
        into = np.where(valid, boundary - interval_start, 0)
        bytes_int = intervals.bytes_before[index]
        bytes_fraction = intervals.delta[index] * into / np.maximum(intervals.duration_ns[index], 1)
        covered = intervals.covered_before[index] + into
        windows = self._close(boundary, bytes_int, bytes_fraction, covered)
        return windows, (holding if candidates is None else candidates[holding])

    def finish(self, bytes_total: int, covered_total: int, last_ns: int | None) -> Windows:
        """Close the window holding the last sample, over the time it covered."""
        if last_ns is None:
            return Windows.empty()
        end = (last_ns // self.length_ns + 1) * self.length_ns
        return self._close(
            np.array([end], dtype=np.int64),
            np.array([bytes_total], dtype=np.int64),
            np.zeros(1, dtype=np.float64),
            np.array([covered_total], dtype=np.int64),
        )

    def _close(self, boundary: I64, bytes_int: I64, bytes_fraction: F64, covered: I64) -> Windows:
        previous_int = np.empty_like(bytes_int)
        previous_int[0] = self._bytes_int
        previous_int[1:] = bytes_int[:-1]
        previous_fraction = np.empty_like(bytes_fraction)
        previous_fraction[0] = self._bytes_fraction
        previous_fraction[1:] = bytes_fraction[:-1]
        previous_covered = np.empty_like(covered)
        previous_covered[0] = self._covered
        previous_covered[1:] = covered[:-1]
        self._bytes_int = int(bytes_int[-1])
        self._bytes_fraction = float(bytes_fraction[-1])
        self._covered = int(covered[-1])

        window_covered = covered - previous_covered
        keep = window_covered > 0
        window_bytes = (bytes_int - previous_int) + (bytes_fraction - previous_fraction)
        if not keep.all():
            boundary = boundary[keep]
            window_bytes = window_bytes[keep]
            window_covered = window_covered[keep]
        utilization = np.minimum(window_bytes * self._scale / window_covered, 1.0)
        # Interpolation rounding can leave -1e-12 in an empty window; it is zero.
        np.maximum(utilization, 0.0, out=utilization)
        full = window_covered * 2 >= self.length_ns
        self.distribution.add(utilization[full])
        self.partial.add(utilization[~full])
        return Windows(boundary, utilization, window_covered)

    def stats(self) -> ScaleStats:
        chosen = self.distribution if self.distribution.count else self.partial
        return chosen.stats(self.length_ns)


def peak_envelope(end_ns: I64, utilization: F64, valid: B, bucket_ns: int) -> tuple[I64, F64]:
    """Largest valid utilization per wall-clock bucket: what a plot of a long series can show."""
    if not valid.any():
        return np.empty(0, np.int64), np.empty(0, np.float64)
    bucket = (end_ns[valid] - 1) // bucket_ns
    values = utilization[valid]
    starts = np.flatnonzero(np.diff(bucket, prepend=bucket[0] - 1))
    return bucket[starts] * bucket_ns, np.maximum.reduceat(values, starts)
