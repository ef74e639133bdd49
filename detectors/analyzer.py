"""One port direction, streaming: utilization, scales, bursts and the contrast, chunk by chunk."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from burstscope.detectors.arrays import F64, I64, B
from burstscope.detectors.bursts import Bursts, BurstStats, BurstTracker
from burstscope.detectors.config import NS_PER_SECOND, Thresholds, nominal_interval_ns
from burstscope.detectors.counters import RESETTING_64, Deltas, counter_deltas
from burstscope.detectors.distributions import UTILIZATION_BINS
from burstscope.detectors.scales import (
    Distribution,
    Intervals,
    ScaleStats,
    Windows,
    WindowScale,
    advance_scales,
)

# Per-sample work arrays of up to this many samples are kept and reused by an analyzer:
# a fresh array above glibc's mmap threshold (128 KiB) is fresh pages, and faulting them
# in cost more than the arithmetic on them (measured: 6 ns vs 0.4 ns a sample).
SCRATCH_LIMIT = 1 << 16
# Independent counters for the finest histogram: samples of one level fall in one bin, and
# bincount's increments of one counter wait on each other (measured 2.4 vs 1.2 ns a sample).
HISTOGRAM_LANES = 4

# analyze() feeds the streaming path in blocks this size: results are identical whatever
# the block size. 64 Ki samples keep every temporary at 512 KiB: measured 3x faster than
# 256 Ki blocks, whose 2 MiB temporaries are fresh pages (faults) on every allocation.
BATCH_BLOCK = 1 << 16


@dataclass(frozen=True, slots=True)
class Chunk:
    """What one ``feed`` produced, for live consumers (exporter, terminal view)."""

    timestamp_ns: I64  # end of each sample's interval
    utilization: F64  # per sample, clipped to 1; 0 where not valid (never NaN)
    valid: B  # the interval is a measurement (not first, reset, rebaseline or gap)
    bursts: Bursts  # bursts that ended in or at the edge of this chunk
    windows: dict[str, Windows]  # windows closed in this chunk, keyed by scale
    # Indices of the samples at or above the saturated threshold, in time order.
    saturated: npt.NDArray[np.intp] = field(default_factory=lambda: np.empty(0, np.intp))


@dataclass(frozen=True, slots=True)
class Summary:
    """Everything the report needs about one port direction; equal for any chunking."""

    line_rate_bytes_per_second: int
    finest_interval_ns: int
    first_ns: int | None
    last_ns: int | None
    samples: int
    valid_samples: int
    covered_ns: int  # time inside valid intervals
    bytes_total: int  # bytes inside valid intervals
    resets: int  # counter went backwards: the interval is unknown
    rebaselines: int
    gaps: int  # intervals longer than max_gap_ns
    clipped_samples: int  # utilization above 1 (timestamp jitter), clipped
    saturated_ns: int
    hidden_saturated_ns: int  # saturated time inside coarse windows below busy
    scales: tuple[ScaleStats, ...]  # finest first
    bursts: BurstStats
    thresholds: Thresholds
    # Line time used, when the line rate changed during the series (each interval divided
    # by the rate in force); None: one rate throughout, and bytes_total says it exactly.
    busy_ns: float | None = None

    @property
    def duration_seconds(self) -> float:
        if self.first_ns is None or self.last_ns is None:
            return 0.0
        return (self.last_ns - self.first_ns) / NS_PER_SECOND

    @property
    def mean_utilization(self) -> float | None:
        """Time-weighted over covered time: the same at every scale."""
        if self.covered_ns == 0:
            return None
        if self.busy_ns is not None:
            return min(self.busy_ns / self.covered_ns, 1.0)
        rate = self.line_rate_bytes_per_second
        return min(self.bytes_total * (NS_PER_SECOND / rate) / self.covered_ns, 1.0)

    @property
    def finest(self) -> ScaleStats:
        return self.scales[0]

    def scale(self, length_ns: int) -> ScaleStats | None:
        return next((s for s in self.scales if s.length_ns == length_ns), None)

    @property
    def coarse(self) -> ScaleStats:
        found = self.scale(self.thresholds.coarse_window_ns)
        assert found is not None
        return found

    @property
    def peak_to_mean_ratio(self) -> float | None:
        """Finest-scale max over the mean; None when the port carried nothing."""
        mean = self.mean_utilization
        peak = self.finest.maximum
        if mean is None or peak is None or mean <= 0.0:
            return None
        return peak / mean


@dataclass(slots=True)
class _Counts:
    samples: int = 0
    valid: int = 0
    resets: int = 0
    rebaselines: int = 0
    gaps: int = 0
    clipped: int = 0
    saturated_ns: int = 0
    hidden_saturated_ns: int = 0


class WorkArrays:
    """Per-sample work arrays reused from one feed to the next.

    Nothing in them outlives a feed, so analyzers fed one after another in one thread (a
    report's port directions) may share one: one set of arrays stays in the caches instead
    of one per direction, and memory holds one set rather than dozens.
    """

    def __init__(self, size: int = 0) -> None:
        self._allocate(size)

    def reserve(self, n: int) -> WorkArrays | None:
        """These arrays, at least ``n`` long; None for a feed too long to keep arrays for."""
        if n > SCRATCH_LIMIT:
            return None
        if self.size < n:
            self._allocate(n)
        return self

    def _allocate(self, size: int) -> None:
        self.size = size
        self.duration = np.empty(size, dtype=np.int64)
        self.raw = np.empty(size, dtype=np.uint64)
        self.bytes_after = np.empty(size, dtype=np.int64)
        self.covered = np.empty(size, dtype=np.int64)
        self.scaled = np.empty(size, dtype=np.float64)
        self.index = np.empty(size, dtype=np.intp)
        self.lanes = np.arange(size, dtype=np.intp) % HISTOGRAM_LANES


@dataclass(slots=True)
class _Carry:
    """The last sample of the previous chunk and the running integer sums."""

    timestamp_ns: int | None = None
    cumulative_bytes: int | None = None
    bytes_total: int = 0  # sum of valid deltas: what window means divide
    covered_ns: int = 0  # sum of valid interval durations: what they divide by
    first_ns: int | None = None
    pending_saturated: dict[int, int] = field(default_factory=dict)  # coarse window end -> ns
    busy_ns: float = 0.0  # sum of valid delta x (1e9 / rate in force)
    rate_changed: bool = False


class DirectionAnalyzer:
    """Feeds of (timestamp, cumulative bytes) for one port direction, in time order.

    Memory is bounded with ``keep_bursts=False``: histograms, counts, one open burst and
    one open window per scale. ``saturated_second_retention`` bounds the set of wall-clock
    seconds that held saturation (None keeps all of them, as a report does).
    ``work_arrays`` may be shared with analyzers fed in the same thread (never during one
    of this analyzer's feeds); by default the analyzer has its own.
    """

    def __init__(
        self,
        line_rate_bytes_per_second: int,
        thresholds: Thresholds | None = None,
        finest_interval_ns: int = 1_000_000,
        keep_bursts: bool = True,
        saturated_second_retention: int | None = None,
        work_arrays: WorkArrays | None = None,
    ) -> None:
        if line_rate_bytes_per_second <= 0:
            raise ValueError("line rate must be positive")
        if finest_interval_ns <= 0:
            raise ValueError("finest interval must be positive")
        self.thresholds = thresholds or Thresholds()
        self.line_rate_bytes_per_second = int(line_rate_bytes_per_second)
        self.finest_interval_ns = int(finest_interval_ns)
        self.keep_bursts = keep_bursts
        self._scale = NS_PER_SECOND / self.line_rate_bytes_per_second
        t = self.thresholds
        self._finest = Distribution(t.idle, t.busy)
        self._windows = [
            WindowScale(length, self._scale, Distribution(t.idle, t.busy))
            for length in t.window_scales(self.finest_interval_ns)
        ]
        self._coarse = next(w for w in self._windows if w.length_ns == t.coarse_window_ns)
        self._bursts = BurstTracker(t.burst, self._scale)
        self._kept_bursts: list[Bursts] = []
        self._counts = _Counts()
        self._carry = _Carry()
        self._retention = saturated_second_retention
        self._saturated_seconds: deque[int] = deque()
        self._finished = False
        self._work_arrays = WorkArrays() if work_arrays is None else work_arrays

    # Running totals the pipeline's live views read on every drain, without recomputation.
    @property
    def saturated_ns(self) -> int:
        return self._counts.saturated_ns

    @property
    def hidden_saturated_ns(self) -> int:
        """Saturated time settled inside coarse windows whose mean was below busy."""
        return self._counts.hidden_saturated_ns

    @property
    def resets(self) -> int:
        return self._counts.resets

    @property
    def finest_histogram(self) -> I64:
        """Counts of valid samples per 0.001-wide utilization bin (a Prometheus histogram)."""
        return self._finest.histogram.copy()

    def saturated_seconds(self) -> I64:
        """Sorted wall-clock second indices (ns // 1e9) that held a saturated sample."""
        return np.fromiter(self._saturated_seconds, dtype=np.int64, count=-1)

    def bursts(self) -> Bursts:
        """Every burst closed so far (empty unless keep_bursts)."""
        return Bursts.concatenate(self._kept_bursts)

    def retune(self, thresholds: Thresholds) -> None:
        """New utilization thresholds for samples fed from now on (a live config reload).

        Every running total (bytes, saturated time, bursts, histograms) is kept, so the
        counters exported from them stay monotonic; only the classification of future
        samples changes. An open burst closes under the old threshold when its run ends.
        Window lengths and the gap limit shape state already carried and cannot change.
        """
        old = self.thresholds
        if (thresholds.coarse_window_ns, thresholds.max_gap_ns, thresholds.windows_ns) != (
            old.coarse_window_ns,
            old.max_gap_ns,
            old.windows_ns,
        ):
            raise ValueError("window lengths and max_gap_ns cannot change while running")
        self.thresholds = thresholds
        for distribution in [
            self._finest,
            *(w.distribution for w in self._windows),
            *(w.partial for w in self._windows),
        ]:
            distribution.idle_threshold = thresholds.idle
            distribution.busy_threshold = thresholds.busy
        self._bursts.threshold = thresholds.burst

    def set_line_rate(self, line_rate_bytes_per_second: int) -> None:
        """Divide samples fed from now on by a new line rate (the link renegotiated).

        Every running total is kept. A window or burst open across the change is divided
        by the rate in force when it closes; samples and the mean use the rate of their own
        interval.
        """
        rate = int(line_rate_bytes_per_second)
        if rate <= 0:
            raise ValueError("line rate must be positive")
        if rate == self.line_rate_bytes_per_second:
            return
        self._carry.rate_changed = True
        self.line_rate_bytes_per_second = rate
        self._scale = NS_PER_SECOND / rate
        for window in self._windows:
            window.set_bytes_to_utilization(self._scale)
        self._bursts.bytes_to_utilization = self._scale

    def feed(
        self,
        timestamp_ns: npt.ArrayLike,
        cumulative_bytes: npt.ArrayLike,
        rebaseline: npt.ArrayLike | None = None,
    ) -> Chunk:
        if self._finished:
            raise RuntimeError("feed after finish")
        end = np.asarray(timestamp_ns, dtype=np.int64)
        values = np.asarray(cumulative_bytes, dtype=np.uint64)
        n = int(end.size)
        if n == 0:
            return _empty_chunk()
        carry = self._carry
        first_start = int(end[0]) if carry.timestamp_ns is None else carry.timestamp_ns
        scratch = self._work_arrays.reserve(n)
        duration = np.empty(n, dtype=np.int64) if scratch is None else scratch.duration[:n]
        duration[0] = int(end[0]) - first_start
        np.subtract(end[1:], end[:-1], out=duration[1:])
        marks = None if rebaseline is None else np.asarray(rebaseline, dtype=np.bool_)
        rebaselines = 0 if marks is None else int(np.count_nonzero(marks))
        deltas = counter_deltas(
            carry.cumulative_bytes,
            values,
            RESETTING_64,
            marks if rebaselines else None,
            None if scratch is None else scratch.raw,
        )
        intervals, utilization, gaps = self._intervals(first_start, end, duration, deltas, scratch)
        invalid = 0 if intervals.all_valid else n - int(np.count_nonzero(intervals.valid))
        peak = float(utilization.max())
        clipped = 0
        if peak > 1.0:
            # Few samples exceed 1 (timestamp jitter): setting them is one pass fewer than
            # np.minimum over every sample, with the same values.
            above = np.flatnonzero(utilization > 1.0)
            clipped = int(above.size)
            utilization[above] = 1.0
            peak = 1.0

        self._add_finest(utilization, invalid, peak, scratch)
        saturated = self._track_saturation(intervals, utilization)
        closed = self._bursts.feed(intervals, utilization)
        if self.keep_bursts and len(closed):
            self._kept_bursts.append(closed)
        windows: dict[str, Windows] = {}
        advanced = advance_scales(self._windows, intervals)
        for scale, closed_windows in zip(self._windows, advanced, strict=True):
            if closed_windows.end_ns.size:
                windows[scale.key] = closed_windows
                if scale is self._coarse:
                    self._settle_hidden(closed_windows)

        counts = self._counts
        counts.samples += n
        counts.valid += n - invalid
        counts.resets += deltas.resets
        counts.gaps += gaps
        counts.clipped += clipped
        counts.rebaselines += rebaselines
        self._carry_over(intervals, int(values[-1]))
        return Chunk(end, utilization, intervals.valid, closed, windows, saturated)

    def _intervals(
        self,
        first_start: int,
        end: I64,
        duration: I64,
        deltas: Deltas,
        scratch: WorkArrays | None,
    ) -> tuple[Intervals, F64, int]:
        """The chunk's intervals, each sample's utilization and the number of gaps."""
        n = int(end.size)
        valid, delta, gaps, divisor = deltas.valid, deltas.delta, 0, duration
        shortest = int(duration.min())
        if shortest < 0:
            raise ValueError("timestamps go backwards")
        if shortest == 0 or int(duration.max()) > self.thresholds.max_gap_ns:
            # Whatever the counter says, two readings at one instant measure nothing, and
            # neither does an interval longer than max_gap_ns (the sampler was stopped).
            long = duration > self.thresholds.max_gap_ns
            gaps = int(np.count_nonzero(long))
            valid = valid & (duration > 0) & ~long
            delta = np.where(valid, delta, 0)
            divisor = np.maximum(duration, 1)
        if scratch is None:
            utilization = delta * self._scale / divisor
        else:  # the same two operations, the product in reused memory
            scaled = np.multiply(delta, self._scale, out=scratch.scaled[:n])
            utilization = np.divide(scaled, divisor)
        all_valid = int(np.count_nonzero(valid)) == n
        covered_after = None
        if not all_valid:
            # where(valid, duration, 0), summed in place in reused memory when there is some
            covered_after = np.multiply(
                duration, valid, out=None if scratch is None else scratch.covered[:n]
            )
            np.cumsum(covered_after, out=covered_after)
            covered_after += self._carry.covered_ns
        bytes_after = np.cumsum(delta, out=None if scratch is None else scratch.bytes_after[:n])
        bytes_after += self._carry.bytes_total
        intervals = Intervals(
            first_start_ns=first_start,
            end_ns=end,
            delta=delta,
            duration_ns=duration,
            valid=valid,
            all_valid=all_valid,
            bytes_after=bytes_after,
            covered_after=covered_after,
            covered_start=self._carry.covered_ns,
        )
        return intervals, utilization, gaps

    def _carry_over(self, intervals: Intervals, last_value: int) -> None:
        """The running sums and the last sample, for the next feed."""
        carry = self._carry
        end, bytes_after = intervals.end_ns, intervals.bytes_after
        if carry.first_ns is None:
            carry.first_ns = int(end[0])
        carry.timestamp_ns = int(end[-1])
        carry.cumulative_bytes = last_value
        carry.busy_ns += float(bytes_after[-1] - carry.bytes_total) * self._scale
        carry.bytes_total = int(bytes_after[-1])
        carry.covered_ns = (
            carry.covered_ns + int(end[-1]) - intervals.first_start_ns
            if intervals.covered_after is None
            else int(intervals.covered_after[-1])
        )

    def finish(self) -> Chunk:
        """Close the open burst and the open window of every scale; feeding ends here."""
        if self._finished:
            return _empty_chunk()
        self._finished = True
        carry = self._carry
        closed = self._bursts.finish()
        if self.keep_bursts and len(closed):
            self._kept_bursts.append(closed)
        windows: dict[str, Windows] = {}
        for scale in self._windows:
            closed_windows = scale.finish(carry.bytes_total, carry.covered_ns, carry.timestamp_ns)
            if closed_windows.end_ns.size:
                windows[scale.key] = closed_windows
                if scale is self._coarse:
                    self._settle_hidden(closed_windows)
        return Chunk(
            np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.bool_), closed, windows
        )

    def summary(self) -> Summary:
        counts = self._counts
        carry = self._carry
        scales = [self._finest.stats(self.finest_interval_ns)]
        scales += [w.stats() for w in self._windows]
        return Summary(
            line_rate_bytes_per_second=self.line_rate_bytes_per_second,
            finest_interval_ns=self.finest_interval_ns,
            first_ns=carry.first_ns,
            last_ns=carry.timestamp_ns,
            samples=counts.samples,
            valid_samples=counts.valid,
            covered_ns=carry.covered_ns,
            bytes_total=carry.bytes_total,
            resets=counts.resets,
            rebaselines=counts.rebaselines,
            gaps=counts.gaps,
            clipped_samples=counts.clipped,
            saturated_ns=counts.saturated_ns,
            hidden_saturated_ns=counts.hidden_saturated_ns,
            scales=tuple(scales),
            bursts=self._bursts.stats(),
            thresholds=self.thresholds,
            busy_ns=carry.busy_ns if carry.rate_changed else None,
        )

    def _add_finest(
        self, utilization: F64, invalid: int, peak: float, scratch: WorkArrays | None
    ) -> None:
        # Invalid samples carry utilization 0: count everything, then take them out of
        # bin 0 and the idle count rather than compressing the array first.
        finest = self._finest
        valid_count = int(utilization.size) - invalid
        if valid_count == 0:
            return
        histogram = _finest_bins(utilization, scratch)
        histogram[0] -= invalid
        finest.histogram += histogram
        finest.count += valid_count
        finest.maximum = max(finest.maximum, peak)
        finest.idle += int(np.count_nonzero(utilization < finest.idle_threshold)) - invalid
        finest.busy += int(np.count_nonzero(utilization > finest.busy_threshold))

    def _track_saturation(self, intervals: Intervals, utilization: F64) -> npt.NDArray[np.intp]:
        """Saturated time per coarse window and the seconds it touched; returns the indices
        of the saturated samples."""
        saturated = np.flatnonzero(utilization >= self.thresholds.saturated)
        if saturated.size == 0:
            return saturated
        start = intervals.start_at(saturated)
        end = intervals.end_ns[saturated]
        duration = intervals.duration_ns[saturated]
        running = np.cumsum(duration)  # saturated ns up to each sample's end
        self._counts.saturated_ns += int(running[-1])
        # Hidden saturation is settled when the coarse window the sample ends in closes;
        # a sample ending exactly on a boundary belongs to the window that ends there.
        length = self.thresholds.coarse_window_ns
        first_window = (int(end[0]) - 1) // length + 1
        last_window = (int(end[-1]) - 1) // length + 1
        pending = self._carry.pending_saturated
        if last_window - first_window < saturated.size:
            # Few windows (the usual chunk): each window's end found among the sorted sample
            # ends, rather than a division per saturated sample. Every window holds the
            # first sample's end or a later one, so each search finds at least one.
            windows = np.arange(first_window, last_window + 1, dtype=np.int64) * length
            upto = running[np.searchsorted(end, windows, side="right") - 1]
            sums = upto.copy()
            sums[1:] -= upto[:-1]
            found = np.flatnonzero(sums)
            window_ends, totals = windows[found].tolist(), sums[found].tolist()
        else:
            window_end = ((end - 1) // length + 1) * length
            # Sorted already (time order), so runs replace a sort-based unique.
            first = np.flatnonzero(np.diff(window_end, prepend=window_end[0] - 1))
            window_ends = window_end[first].tolist()
            totals = np.add.reduceat(duration, first).tolist()
        for window, total in zip(window_ends, totals, strict=True):
            pending[window] = pending.get(window, 0) + total
        # The seconds a saturated interval touches, for congestion attribution: the second
        # of its start and the second of its last nanosecond. Intervals do not overlap, so
        # both are sorted.
        low = int(start[0]) // NS_PER_SECOND
        high = (int(end[-1]) - 1) // NS_PER_SECOND
        if high - low < saturated.size:
            # A second s holds a start in [s, s + 1) or an end in (s, s + 1]: counted by
            # searching the few second boundaries, not by a division per sample.
            edges = np.arange(low, high + 2, dtype=np.int64) * NS_PER_SECOND
            starts_before = np.searchsorted(start, edges, side="left")
            ends_upto = np.searchsorted(end, edges, side="right")
            touched = starts_before[1:] > starts_before[:-1]
            touched |= ends_upto[1:] > ends_upto[:-1]
            seconds = np.flatnonzero(touched) + low
        else:
            seconds = np.empty(2 * start.size, dtype=np.int64)
            seconds[0::2] = start // NS_PER_SECOND
            seconds[1::2] = (end - 1) // NS_PER_SECOND
            seconds = seconds[np.flatnonzero(np.diff(seconds, prepend=seconds[0] - 1))]
        kept = self._saturated_seconds
        if kept:
            seconds = seconds[seconds > kept[-1]]
        kept.extend(seconds.tolist())
        if self._retention is not None:
            while kept and kept[0] <= kept[-1] - self._retention:
                kept.popleft()
        return saturated

    def _settle_hidden(self, windows: Windows) -> None:
        pending = self._carry.pending_saturated
        if not pending:
            return
        busy = self.thresholds.busy
        for window_end, value in zip(
            windows.end_ns.tolist(), windows.utilization.tolist(), strict=True
        ):
            saturated = pending.pop(window_end, 0)
            if saturated and value < busy:
                self._counts.hidden_saturated_ns += saturated


def _finest_bins(utilization: F64, scratch: WorkArrays | None) -> I64:
    """distributions.utilization_bins, in reused memory and with HISTOGRAM_LANES counters."""
    n = int(utilization.size)
    if scratch is None:
        scratch = WorkArrays(n)
    index = scratch.index[:n]
    # The product is cast to integers (truncation, as astype) in numpy's small buffers as
    # it is computed: one pass over the samples, not a float array and a cast of it.
    np.multiply(utilization, UTILIZATION_BINS, out=index, casting="unsafe")
    index *= HISTOGRAM_LANES
    index += scratch.lanes[:n]
    counts = np.bincount(index, minlength=(UTILIZATION_BINS + 1) * HISTOGRAM_LANES)
    # The lanes' counts summed by strided adds: a few microseconds less than a reshape's
    # sum along its short axis.
    per_bin = counts[0::HISTOGRAM_LANES].copy()
    for lane in range(1, HISTOGRAM_LANES):
        per_bin += counts[lane::HISTOGRAM_LANES]
    # Exactly 1.0 belongs to the last bin, [0.999, 1.0].
    per_bin[UTILIZATION_BINS - 1] += per_bin[UTILIZATION_BINS]
    result: I64 = per_bin[:UTILIZATION_BINS].astype(np.int64, copy=False)
    return result


def _empty_chunk() -> Chunk:
    return Chunk(
        np.empty(0, np.int64), np.empty(0, np.float64), np.empty(0, np.bool_), Bursts.empty(), {}
    )


def analyze(
    timestamp_ns: npt.ArrayLike,
    cumulative_bytes: npt.ArrayLike,
    line_rate_bytes_per_second: int,
    thresholds: Thresholds | None = None,
    rebaseline: npt.ArrayLike | None = None,
    finest_interval_ns: int | None = None,
    keep_bursts: bool = True,
) -> tuple[Summary, Bursts]:
    """The whole series at once; identical to feeding it in any chunks and finishing."""
    end = np.asarray(timestamp_ns, dtype=np.int64)
    values = np.asarray(cumulative_bytes, dtype=np.uint64)
    marks = None if rebaseline is None else np.asarray(rebaseline, dtype=np.bool_)
    if finest_interval_ns is None:
        finest_interval_ns = nominal_interval_ns(end) if end.size > 1 else 1_000_000
    analyzer = DirectionAnalyzer(
        line_rate_bytes_per_second, thresholds, finest_interval_ns, keep_bursts
    )
    for first in range(0, int(end.size), BATCH_BLOCK):
        block = slice(first, first + BATCH_BLOCK)
        analyzer.feed(end[block], values[block], None if marks is None else marks[block])
    analyzer.finish()
    return analyzer.summary(), analyzer.bursts()
