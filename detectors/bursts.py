"""Bursts after Zhang et al. (IMC 2017): maximal runs of valid samples above a threshold."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from burstscope.detectors.arrays import F64, I64
from burstscope.detectors.distributions import DURATION_BINS, duration_bins, duration_quantile
from burstscope.detectors.scales import Intervals


@dataclass(frozen=True, slots=True)
class Bursts:
    """Bursts in column form, in time order."""

    start_ns: I64  # start of the first interval in the run
    end_ns: I64  # end of the last interval
    bytes: I64
    peak_utilization: F64
    mean_utilization: F64  # bytes / duration / line rate

    @property
    def duration_ns(self) -> I64:
        return self.end_ns - self.start_ns

    def __len__(self) -> int:
        return int(self.start_ns.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Bursts):
            return NotImplemented
        return all(
            np.array_equal(getattr(self, name), getattr(other, name))
            for name in ("start_ns", "end_ns", "bytes", "peak_utilization", "mean_utilization")
        )

    __hash__ = None  # type: ignore[assignment]

    @staticmethod
    def empty() -> Bursts:
        return Bursts(
            np.empty(0, np.int64),
            np.empty(0, np.int64),
            np.empty(0, np.int64),
            np.empty(0, np.float64),
            np.empty(0, np.float64),
        )

    @staticmethod
    def concatenate(parts: list[Bursts]) -> Bursts:
        if not parts:
            return Bursts.empty()
        return Bursts(
            np.concatenate([p.start_ns for p in parts]),
            np.concatenate([p.end_ns for p in parts]),
            np.concatenate([p.bytes for p in parts]),
            np.concatenate([p.peak_utilization for p in parts]),
            np.concatenate([p.mean_utilization for p in parts]),
        )


@dataclass(frozen=True, slots=True)
class BurstStats:
    """Counts and distributions of the bursts closed so far."""

    count: int
    bytes_total: int
    duration_ns_total: int
    duration_ns_max: int
    duration_histogram: tuple[int, ...]  # log bins, see distributions.py
    interarrival_histogram: tuple[int, ...]
    interarrival_ns_max: int

    def duration_seconds(self, q: float) -> float | None:
        return duration_quantile(self.duration_histogram, q, self.duration_ns_max)

    def interarrival_seconds(self, q: float) -> float | None:
        return duration_quantile(self.interarrival_histogram, q, self.interarrival_ns_max)


@dataclass(slots=True)
class _OpenBurst:
    start_ns: int
    end_ns: int
    bytes: int
    peak: float


@dataclass(slots=True)
class BurstTracker:
    """Finds runs chunk by chunk; a run still going at a chunk's end stays open."""

    threshold: float
    bytes_to_utilization: float  # 1e9 / line rate
    count: int = 0
    bytes_total: int = 0
    duration_ns_total: int = 0
    duration_ns_max: int = 0
    interarrival_ns_max: int = 0
    duration_histogram: I64 = field(default_factory=lambda: np.zeros(DURATION_BINS, np.int64))
    interarrival_histogram: I64 = field(default_factory=lambda: np.zeros(DURATION_BINS, np.int64))
    previous_start_ns: int | None = None
    open: _OpenBurst | None = None

    def feed(self, intervals: Intervals, utilization: F64) -> Bursts:
        """Bursts closed by this chunk. Invalid samples have utilization 0, so they end runs."""
        above = utilization > self.threshold
        if not above.any():
            return self._close_open() if self.open is not None else Bursts.empty()
        # Run edges from the changes between neighbours: a pass over bytes, not int8 diffs.
        changes = np.flatnonzero(above[1:] != above[:-1]) + 1
        if above[0]:
            changes = np.concatenate(([0], changes))
        if above[-1]:
            changes = np.concatenate((changes, [above.size]))
        first = changes[0::2]
        stop = changes[1::2]  # exclusive
        last = stop - 1
        starts = intervals.start_at(first)
        ends = intervals.end_ns[last]
        run_bytes = intervals.bytes_after[last] - intervals.bytes_before_at(first)
        # Samples between runs sit at or below the threshold, so reducing from one run's
        # first sample to the next run's first sample gives the run's own peak.
        peaks = np.maximum.reduceat(utilization, first)

        if self.open is not None:
            if first[0] == 0:
                starts[0] = self.open.start_ns
                run_bytes[0] += self.open.bytes
                peaks[0] = max(peaks[0], self.open.peak)
                self.open = None
                closed_before = Bursts.empty()
            else:
                closed_before = self._close_open()
        else:
            closed_before = Bursts.empty()

        if stop[-1] == utilization.size:
            self.open = _OpenBurst(
                int(starts[-1]), int(ends[-1]), int(run_bytes[-1]), float(peaks[-1])
            )
            starts, ends, run_bytes, peaks = starts[:-1], ends[:-1], run_bytes[:-1], peaks[:-1]
        closed = self._record(starts, ends, run_bytes, peaks)
        if len(closed_before):
            return Bursts.concatenate([closed_before, closed])
        return closed

    def finish(self) -> Bursts:
        return self._close_open() if self.open is not None else Bursts.empty()

    def _close_open(self) -> Bursts:
        burst = self.open
        assert burst is not None
        self.open = None
        return self._record(
            np.array([burst.start_ns], np.int64),
            np.array([burst.end_ns], np.int64),
            np.array([burst.bytes], np.int64),
            np.array([burst.peak], np.float64),
        )

    def _record(self, starts: I64, ends: I64, run_bytes: I64, peaks: F64) -> Bursts:
        if starts.size == 0:
            return Bursts.empty()
        durations = ends - starts
        means = np.minimum(run_bytes * self.bytes_to_utilization / durations, 1.0)
        self.count += int(starts.size)
        self.bytes_total += int(run_bytes.sum())
        self.duration_ns_total += int(durations.sum())
        self.duration_ns_max = max(self.duration_ns_max, int(durations.max()))
        self.duration_histogram += duration_bins(durations)
        if self.previous_start_ns is None:
            gaps = np.diff(starts)
        else:
            gaps = np.diff(starts, prepend=np.int64(self.previous_start_ns))
        if gaps.size:
            self.interarrival_ns_max = max(self.interarrival_ns_max, int(gaps.max()))
            self.interarrival_histogram += duration_bins(gaps)
        self.previous_start_ns = int(starts[-1])
        return Bursts(starts, ends, run_bytes, peaks, means)

    def stats(self) -> BurstStats:
        return BurstStats(
            count=self.count,
            bytes_total=self.bytes_total,
            duration_ns_total=self.duration_ns_total,
            duration_ns_max=self.duration_ns_max,
            duration_histogram=tuple(int(c) for c in self.duration_histogram),
            interarrival_histogram=tuple(int(c) for c in self.interarrival_histogram),
            interarrival_ns_max=self.interarrival_ns_max,
        )
