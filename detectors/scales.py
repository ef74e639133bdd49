"""Wall-clock aligned windows over an adjusted cumulative byte count, chunk by chunk."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from burstscope.detectors.arrays import F64, I64, B
from burstscope.detectors.config import scale_key
from burstscope.detectors.distributions import (
    UTILIZATION_BINS,
    utilization_bins,
    utilization_quantile,
)


@dataclass(frozen=True, slots=True)
class Intervals:
    """One chunk's sample intervals (t_start, t_end], with the running sums after each.

    Only the arrays every sample needs are materialised; the start of an interval and the
    sums before it are read at the few indices that hold a burst edge or a window boundary.
    """

    first_start_ns: int  # t_{-1}: where the chunk's first interval starts
    end_ns: I64  # t_i
    delta: I64  # bytes in the interval, 0 where invalid
    duration_ns: I64  # t_i - t_{i-1}
    valid: B
    all_valid: bool  # valid.all(), known without a pass
    bytes_after: I64  # A_i: valid bytes up to the end of interval i
    # T_i, valid ns up to the end of interval i; None when every interval is valid, where
    # it is covered_start + (t_i - t_{-1}) and needs no pass of its own.
    covered_after: I64 | None
    covered_start: int  # T_{-1}

    def start_at(self, index: I64) -> I64:
        """t_{i-1} for each index i."""
        end = self.end_ns
        return np.where(index > 0, end[index - 1], self.first_start_ns)

    def bytes_before_at(self, index: I64) -> I64:
        """A_{i-1} for each index i."""
        result: I64 = self.bytes_after[index] - self.delta[index]
        return result

    def covered_before_at(self, index: I64) -> I64:
        """T_{i-1} for each index i."""
        if self.covered_after is None:
            result: I64 = self.start_at(index) - self.first_start_ns + self.covered_start
            return result
        covered = np.where(self.valid[index], self.duration_ns[index], 0)
        result = self.covered_after[index] - covered
        return result


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
        # Bytes and covered time at the last boundary passed: integer bytes, the interpolated
        # fraction of an interval's bytes, covered ns.
        self._bytes_int = 0
        self._bytes_fraction = 0.0
        self._covered = 0

    def set_bytes_to_utilization(self, scale: float) -> None:
        """A new line rate (1e9 / rate) for windows that close from now on."""
        self._scale = scale

    def advance(self, intervals: Intervals) -> Windows:
        """Close the windows whose end boundary lies in these intervals."""
        length = self.length_ns
        end = intervals.end_ns
        first_k = intervals.first_start_ns // length + 1
        last_k = int(end[-1]) // length
        count = last_k - first_k + 1
        if count <= 0:
            return Windows.empty()
        if count <= end.size:
            # Few boundaries (the usual case): find the interval holding each by a search
            # in the sorted ends, not by a division per sample. Interval i holds boundary
            # b when t_{i-1} < b <= t_i: the first end at or after b.
            boundary = np.arange(first_k, last_k + 1, dtype=np.int64) * length
            index = holding_interval(end, intervals.first_start_ns, boundary)
            valid = intervals.valid[index]
            if not intervals.all_valid:
                # Boundaries inside an invalid interval all carry the same bytes and covered
                # time: only the first can close a window with covered time.
                first = np.ones(index.size, dtype=np.bool_)
                first[1:] = index[1:] != index[:-1]
                keep = valid | first
                if not keep.all():
                    boundary, index, valid = boundary[keep], index[keep], valid[keep]
        else:
            boundary, index, valid = self._boundaries_by_division(intervals)
            if boundary.size == 0:
                return Windows.empty()
        interval_start = intervals.start_at(index)
        into = np.where(valid, boundary - interval_start, 0)
        bytes_int = intervals.bytes_before_at(index)
        bytes_fraction = intervals.delta[index] * into / np.maximum(intervals.duration_ns[index], 1)
        covered = intervals.covered_before_at(index) + into
        return self._close(boundary, bytes_int, bytes_fraction, covered)

    def _boundaries_by_division(self, intervals: Intervals) -> tuple[I64, I64, B]:
        """Every boundary and the interval holding it, for chunks spanning long gaps: a
        boundary count bounded by the samples, however many empty windows a gap holds."""
        length = self.length_ns
        end = intervals.end_ns
        end_index = end // length
        start_index = np.empty_like(end_index)
        start_index[0] = intervals.first_start_ns // length
        start_index[1:] = end_index[:-1]
        crossings = end_index - start_index
        index = np.flatnonzero(crossings)
        count = crossings[index]
        valid = intervals.valid[index]
        count = np.where(valid, count, 1)
        first_k = start_index[index] + 1
        if index.size and int(count.max()) > 1:
            repeated = np.repeat(np.arange(index.size), count)
            offsets = np.arange(repeated.size) - np.repeat(np.cumsum(count) - count, count)
            return (first_k[repeated] + offsets) * length, index[repeated], valid[repeated]
        return first_k * length, index, valid

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


def advance_scales(scales: list[WindowScale], intervals: Intervals) -> list[Windows]:
    """``[scale.advance(intervals) for scale in scales]``, computed together.

    The same arithmetic element by element, on the boundaries of every scale in one array:
    a chunk costs a few dozen numpy calls rather than a few dozen per scale. A chunk with
    more boundaries than samples at some scale (a long gap) goes scale by scale.
    """
    end = intervals.end_ns
    firsts = [intervals.first_start_ns // w.length_ns + 1 for w in scales]
    counts = [int(end[-1]) // w.length_ns - k + 1 for w, k in zip(scales, firsts, strict=True)]
    if len(scales) < 2 or any(c > end.size for c in counts):
        return [w.advance(intervals) for w in scales]
    count = np.maximum(np.array(counts, dtype=np.int64), 0)
    total = int(count.sum())
    if total == 0:
        return [Windows.empty() for _ in scales]
    start = np.cumsum(count) - count  # each scale's segment of the joined arrays
    finest = scales[0].length_ns
    if all(w.length_ns % finest == 0 for w in scales):
        boundary, index, bytes_int, bytes_fraction, covered = _nested_points(
            scales, intervals, firsts[0], counts
        )
    else:
        offsets = np.arange(total, dtype=np.int64) - np.repeat(start, count)
        length = np.repeat(np.array([w.length_ns for w in scales], dtype=np.int64), count)
        boundary = (np.repeat(np.array(firsts, dtype=np.int64), count) + offsets) * length
        index = holding_interval(end, intervals.first_start_ns, boundary)
        bytes_int, bytes_fraction, covered = _points(intervals, boundary, index)
    if not intervals.all_valid:
        # As in advance(): only the first boundary inside an invalid interval counts.
        first = np.ones(total, dtype=np.bool_)
        first[1:] = index[1:] != index[:-1]
        first[start[count > 0]] = True
        keep = intervals.valid[index] | first
        if not keep.all():
            boundary, bytes_int = boundary[keep], bytes_int[keep]
            bytes_fraction, covered = bytes_fraction[keep], covered[keep]
            start, count = _segments_after(keep, start, count)
    return _close_joined(
        scales,
        boundary,
        bytes_int,
        bytes_fraction,
        covered,
        start,
        count,
        all_covered=intervals.all_valid,
    )


def _points(intervals: Intervals, boundary: I64, index: I64) -> tuple[I64, F64, I64]:
    """A(b), as its integer part and its interpolated fraction, and T(b) at each boundary b
    held by interval ``index``: values that depend on b alone, whatever the scale."""
    interval_start = intervals.start_at(index)
    into = boundary - interval_start
    delta = intervals.delta[index]
    bytes_int: I64 = intervals.bytes_after[index] - delta
    if intervals.all_valid:  # durations >= 1 and no masking: the same values, fewer passes
        bytes_fraction: F64 = delta * into / intervals.duration_ns[index]
        # T(b) = T(t_{i-1}) + (b - t_{i-1}), and with every interval valid T(t_{i-1}) is
        # covered_start + (t_{i-1} - first_start): the interval's start cancels.
        covered: I64 = boundary + (intervals.covered_start - intervals.first_start_ns)
    else:
        into = np.where(intervals.valid[index], into, 0)
        bytes_fraction = delta * into / np.maximum(intervals.duration_ns[index], 1)
        covered = intervals.covered_before_at(index) + into
    return bytes_int, bytes_fraction, covered


def _nested_points(
    scales: list[WindowScale], intervals: Intervals, first_k: int, counts: list[int]
) -> tuple[I64, I64, I64, F64, I64]:
    """Boundaries, holding intervals, A(b) and T(b) of every scale, joined, when each
    window length is a multiple of the finest's (``counts``: boundaries per scale).

    Every coarser boundary is then also a finest boundary, and the points depend on b
    alone: the finest scale's are computed once and each coarser scale takes every r-th
    of them (r = its length / the finest length), the same values as computing them again.
    """
    length = scales[0].length_ns
    boundary = np.arange(first_k * length, (first_k + counts[0]) * length, length)
    index = holding_interval(intervals.end_ns, intervals.first_start_ns, boundary)
    bytes_int, bytes_fraction, covered = _points(intervals, boundary, index)
    picks = []
    for scale, count in zip(scales, counts, strict=True):
        if count <= 0:
            continue
        ratio = scale.length_ns // length
        offset = -first_k % ratio  # the first multiple of ratio at or after first_k
        picks.append(slice(offset, offset + ratio * count, ratio))
    return (
        np.concatenate([boundary[pick] for pick in picks]),
        np.concatenate([index[pick] for pick in picks]),
        np.concatenate([bytes_int[pick] for pick in picks]),
        np.concatenate([bytes_fraction[pick] for pick in picks]),
        np.concatenate([covered[pick] for pick in picks]),
    )


def _close_joined(
    scales: list[WindowScale],
    boundary: I64,
    bytes_int: I64,
    bytes_fraction: F64,
    covered: I64,
    start: I64,
    count: I64,
    all_covered: bool,
) -> list[Windows]:
    """WindowScale._close of every scale at once, on their joined boundaries and points.

    ``all_covered``: every window holds covered time (all intervals valid), so none is
    dropped; T then rises from each scale's last boundary to the next.
    """
    # Each segment continues from its own scale's last boundary.
    live = np.flatnonzero(count > 0)
    first_of = start[live]
    last_of = first_of + count[live] - 1
    previous_int = np.empty_like(bytes_int)
    previous_int[1:] = bytes_int[:-1]
    previous_int[first_of] = [scales[j]._bytes_int for j in live.tolist()]
    previous_fraction = np.empty_like(bytes_fraction)
    previous_fraction[1:] = bytes_fraction[:-1]
    previous_fraction[first_of] = [scales[j]._bytes_fraction for j in live.tolist()]
    previous_covered = np.empty_like(covered)
    previous_covered[1:] = covered[:-1]
    previous_covered[first_of] = [scales[j]._covered for j in live.tolist()]
    for j, last_int, last_fraction, last_covered in zip(
        live.tolist(),
        bytes_int[last_of].tolist(),
        bytes_fraction[last_of].tolist(),
        covered[last_of].tolist(),
        strict=True,
    ):
        scales[j]._bytes_int = last_int
        scales[j]._bytes_fraction = last_fraction
        scales[j]._covered = last_covered

    window_covered = covered - previous_covered
    window_bytes: F64 = (bytes_int - previous_int) + (bytes_fraction - previous_fraction)
    if not all_covered:
        keep = window_covered > 0
        if not keep.all():
            boundary, window_covered = boundary[keep], window_covered[keep]
            window_bytes = window_bytes[keep]
            start, count = _segments_after(keep, start, count)
    utilization: F64 = window_bytes * scales[0]._scale
    utilization /= window_covered
    np.minimum(utilization, 1.0, out=utilization)
    np.maximum(utilization, 0.0, out=utilization)
    _add_grouped(scales, utilization, window_covered, start, count)
    return [
        Windows(boundary[a:b], utilization[a:b], window_covered[a:b]) if b > a else Windows.empty()
        for a, b in zip(start.tolist(), (start + count).tolist(), strict=True)
    ]


def _segments_after(keep: B, start: I64, count: I64) -> tuple[I64, I64]:
    """Segment starts and sizes once the elements where ``keep`` is False are dropped."""
    kept = np.concatenate(([0], np.cumsum(keep)))
    new_start = kept[start]
    return new_start, kept[start + count] - new_start


def _add_grouped(
    scales: list[WindowScale], utilization: F64, window_covered: I64, start: I64, count: I64
) -> None:
    """Distribution.add of each scale's full and partial windows, with one bincount."""
    if utilization.size == 0:
        return
    length = np.repeat(np.array([w.length_ns for w in scales], dtype=np.int64), count)
    full = window_covered * 2 >= length
    bins = (utilization * UTILIZATION_BINS).astype(np.intp)
    np.minimum(bins, UTILIZATION_BINS - 1, out=bins)
    reference = scales[0].distribution
    live = np.flatnonzero(count > 0)
    where = start[live]
    if full.all():
        # The usual chunk: no partial window (only a trace's first and last, and a gap's
        # edges, are partial), so each scale's segment is one group and reduces in place.
        bins += np.repeat(np.arange(0, len(scales) * UTILIZATION_BINS, UTILIZATION_BINS), count)
        histogram = np.bincount(bins, minlength=len(scales) * UTILIZATION_BINS)
        histogram = histogram.reshape(len(scales), UTILIZATION_BINS)
        idle = utilization < reference.idle_threshold
        busy = utilization > reference.busy_threshold
        for j, size, peak, idle_count, busy_count in zip(
            live.tolist(),
            count[live].tolist(),
            np.maximum.reduceat(utilization, where).tolist(),
            np.add.reduceat(idle, where, dtype=np.intp).tolist(),
            np.add.reduceat(busy, where, dtype=np.intp).tolist(),
            strict=True,
        ):
            distribution = scales[j].distribution
            distribution.count += size
            distribution.maximum = max(distribution.maximum, peak)
            distribution.idle += idle_count
            distribution.busy += busy_count
            distribution.histogram += histogram[j]
        return
    groups = 2 * len(scales)
    group = np.repeat(np.arange(0, groups, 2, dtype=np.intp), count) + ~full
    histogram = np.bincount(group * UTILIZATION_BINS + bins, minlength=groups * UTILIZATION_BINS)
    histogram = histogram.reshape(groups, UTILIZATION_BINS).astype(np.int64, copy=False)
    sizes = histogram.sum(axis=1).tolist()
    idle_groups = np.bincount(group[utilization < reference.idle_threshold], minlength=groups)
    busy_groups = np.bincount(group[utilization > reference.busy_threshold], minlength=groups)
    idle_list, busy_list = idle_groups.tolist(), busy_groups.tolist()
    full_max = np.maximum.reduceat(np.where(full, utilization, -1.0), where).tolist()
    partial_max = np.maximum.reduceat(np.where(full, -1.0, utilization), where).tolist()
    for position, j in enumerate(live.tolist()):
        scale = scales[j]
        for offset, distribution, peak in (
            (0, scale.distribution, full_max[position]),
            (1, scale.partial, partial_max[position]),
        ):
            size = sizes[2 * j + offset]
            if size == 0:
                continue
            distribution.count += size
            distribution.maximum = max(distribution.maximum, peak)
            distribution.idle += idle_list[2 * j + offset]
            distribution.busy += busy_list[2 * j + offset]
            distribution.histogram += histogram[2 * j + offset]


def holding_interval(end_ns: I64, first_start_ns: int, boundary: I64) -> I64:
    """For each sorted boundary b in (first_start_ns, end_ns[-1]], the first i with
    end_ns[i] >= b: the interval (end_ns[i-1], end_ns[i]] that holds it.

    Samples come at a steady pace, so the index is guessed from the mean interval and
    corrected by a step or two; np.searchsorted (2.7 ns a sample at 1 ms samples and 10 ms
    windows, a binary search per boundary) answers when the guesses do not settle.
    """
    n = int(end_ns.size)
    mean_interval = (int(end_ns[-1]) - first_start_ns) / n
    guess = np.ceil((boundary - first_start_ns) / mean_interval).astype(np.int64)
    guess -= 1
    # Two ufuncs rather than np.clip, whose Python wrapper costs more than the clipping.
    np.maximum(guess, 0, out=guess)
    np.minimum(guess, n - 1, out=guess)
    for _ in range(4):
        early = end_ns.take(guess) < boundary  # b lies after this interval
        # At guess 0, end_ns[-1] (>= every b) stands in; the mask below discards it.
        late = end_ns.take(guess - 1) >= boundary
        late &= guess > 0  # b lies at or before the previous interval's end
        if not early.any() and not late.any():
            return guess
        guess += early
        guess -= late
    found: I64 = np.searchsorted(end_ns, boundary, side="left")
    return found


def peak_envelope(end_ns: I64, utilization: F64, valid: B, bucket_ns: int) -> tuple[I64, F64]:
    """Largest valid utilization per wall-clock bucket: what a plot of a long series can show."""
    if not valid.any():
        return np.empty(0, np.int64), np.empty(0, np.float64)
    bucket = (end_ns[valid] - 1) // bucket_ns
    values = utilization[valid]
    starts = np.flatnonzero(np.diff(bucket, prepend=bucket[0] - 1))
    return bucket[starts] * bucket_ns, np.maximum.reduceat(values, starts)
