"""Running figures of one port direction for live consumers: the exporter and the terminal view.

Fed the analyzer's chunks, it keeps what a scrape or a screen refresh asks for without
recomputation: cumulative histogram buckets (never reset, so several Prometheus servers
scraping at different intervals all see consistent counters), trailing peaks and means
over fixed windows, and a short history for sparklines. Memory is bounded: a few hundred
slots whatever the run length. "Now" is always a timestamp passed in, never a clock read.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from burstscope.detectors.analyzer import Chunk
from burstscope.detectors.arrays import F64, I64

# Dense near 1, so "what share of milliseconds were >= 90%" is a bucket ratio that sums
# across ports and nodes (1 - le=0.9 / +Inf).
# No 0.99 bound: it paid for the decade burst-duration buckets below within the 60-series
# budget; no 0.75 bound: it paid for the 75 s peak window (the exporter's PEAK_WINDOWS), and
# no query reads it. 0.9 (saturated), 0.95 (BurstscopeBurstSaturation) and 1.0 (line rate, above it
# only timestamp jitter) stay.
UTILIZATION_BUCKETS = (0.01, 0.1, 0.25, 0.5, 0.9, 0.95, 1.0)
# One bucket per decade from 1 ms (one sample) to 10 s (a stalled collective), so p50 and
# p99 of any burst length are interpolated inside one decade, not between 5 and 50 ms.
# Five bounds, not more: the exporter keeps every port at or under 60 series.
BURST_DURATION_BUCKETS_SECONDS = (0.001, 0.01, 0.1, 1.0, 10.0)
SLOT_NS = 100_000_000  # trailing peaks are resolved to 100 ms slots
# Kept history: the longest trailing peak window the exporter offers (75 s) with room.
HISTORY_NS = 90_000_000_000
_MEAN_SCALE = "1"  # trailing means come from closed 1-second windows


def cumulative_counts(values: F64, bounds: tuple[float, ...]) -> I64:
    """Per "le" bound (plus +Inf last): how many values are <= it, Prometheus style."""
    index = np.searchsorted(np.asarray(bounds), values, side="left")
    counts = np.bincount(index, minlength=len(bounds) + 1)
    return np.cumsum(counts).astype(np.int64)


@dataclass(slots=True)
class LiveDirection:
    """Everything live about one (port, direction); update() with each analyzer Chunk."""

    samples: int = 0
    utilization_sum: float = 0.0
    utilization_buckets: I64 = field(
        default_factory=lambda: np.zeros(len(UTILIZATION_BUCKETS) + 1, dtype=np.int64)
    )
    bursts: int = 0
    burst_bytes: int = 0
    burst_seconds_sum: float = 0.0
    burst_duration_buckets: I64 = field(
        default_factory=lambda: np.zeros(len(BURST_DURATION_BUCKETS_SECONDS) + 1, dtype=np.int64)
    )
    first_ns: int | None = None  # the first sample: trailing windows are partial before
    latest_ns: int | None = None
    latest_utilization: float | None = None
    # (slot start ns, max utilization in the slot) for the last HISTORY_NS.
    slots: deque[tuple[int, float]] = field(default_factory=deque)
    # (window end ns, utilization, covered ns) of closed 1-second windows.
    seconds: deque[tuple[int, float, int]] = field(default_factory=deque)
    # (wall-clock second, bursts that ended in it), for the trailing burst rate.
    burst_ends: deque[tuple[int, int]] = field(default_factory=deque)

    def copy(self) -> LiveDirection:
        """An independent copy for a reader, at the cost of the few arrays and deques held.

        The deques hold immutable tuples, so copying the deques copies everything; a
        ``copy.deepcopy`` would walk every tuple and cost tens of times more.
        """
        return LiveDirection(
            samples=self.samples,
            utilization_sum=self.utilization_sum,
            utilization_buckets=self.utilization_buckets.copy(),
            bursts=self.bursts,
            burst_bytes=self.burst_bytes,
            burst_seconds_sum=self.burst_seconds_sum,
            burst_duration_buckets=self.burst_duration_buckets.copy(),
            first_ns=self.first_ns,
            latest_ns=self.latest_ns,
            latest_utilization=self.latest_utilization,
            slots=deque(self.slots),
            seconds=deque(self.seconds),
            burst_ends=deque(self.burst_ends),
        )

    def update(self, chunk: Chunk) -> None:
        valid = chunk.valid
        utilization = chunk.utilization[valid]
        if utilization.size:
            self.samples += int(utilization.size)
            self.utilization_sum += float(utilization.sum())
            self.utilization_buckets += cumulative_counts(utilization, UTILIZATION_BUCKETS)
            self.latest_utilization = float(utilization[-1])
            self._add_slots(chunk.timestamp_ns[valid], utilization)
        if chunk.timestamp_ns.size:
            if self.first_ns is None:
                self.first_ns = int(chunk.timestamp_ns[0])
            self.latest_ns = int(chunk.timestamp_ns[-1])
        bursts = chunk.bursts
        if len(bursts):
            seconds = bursts.duration_ns / 1e9
            self.bursts += len(bursts)
            self.burst_bytes += int(bursts.bytes.sum())
            self.burst_seconds_sum += float(seconds.sum())
            self.burst_duration_buckets += cumulative_counts(
                seconds, BURST_DURATION_BUCKETS_SECONDS
            )
            ends, counts = np.unique(bursts.end_ns // 1_000_000_000, return_counts=True)
            for second, count in zip(ends.tolist(), counts.tolist(), strict=True):
                if self.burst_ends and self.burst_ends[-1][0] == second:
                    self.burst_ends[-1] = (second, self.burst_ends[-1][1] + count)
                else:
                    self.burst_ends.append((second, count))
        closed = chunk.windows.get(_MEAN_SCALE)
        if closed is not None:
            for end, value, covered in zip(
                closed.end_ns.tolist(),
                closed.utilization.tolist(),
                closed.covered_ns.tolist(),
                strict=True,
            ):
                self.seconds.append((end, value, covered))
        self._expire()

    def _add_slots(self, timestamps: I64, utilization: F64) -> None:
        slot = timestamps // SLOT_NS
        starts = np.flatnonzero(np.diff(slot, prepend=slot[0] - 1))
        maxima = np.maximum.reduceat(utilization, starts)
        for index, peak in zip(slot[starts].tolist(), maxima.tolist(), strict=True):
            start = index * SLOT_NS
            if self.slots and self.slots[-1][0] == start:
                self.slots[-1] = (start, max(self.slots[-1][1], peak))
            else:
                self.slots.append((start, peak))

    def _expire(self) -> None:
        if self.latest_ns is None:
            return
        horizon = self.latest_ns - HISTORY_NS
        while self.slots and self.slots[0][0] + SLOT_NS <= horizon:
            self.slots.popleft()
        while self.seconds and self.seconds[0][0] <= horizon:
            self.seconds.popleft()
        while self.burst_ends and (self.burst_ends[0][0] + 1) * 1_000_000_000 <= horizon:
            self.burst_ends.popleft()

    def peak(self, window_ns: int, now_ns: int) -> float | None:
        """Highest sample utilization whose 100 ms slot overlaps (now - window, now]."""
        # Slots are in time order: walk back from the newest until one ends before the
        # window, so a 15 s peak reads 150 slots, not the whole minute (a scrape asks 36).
        horizon = now_ns - window_ns
        highest: float | None = None
        for start, peak in reversed(self.slots):
            if start + SLOT_NS <= horizon:
                break
            if highest is None or peak > highest:
                highest = peak
        return highest

    def mean(self, window_ns: int, now_ns: int) -> float | None:
        """Time-weighted mean over the closed 1 s windows ending in (now - window, now]."""
        covered = 0
        weighted = 0.0
        for end, value, window_covered in self.seconds:
            if end > now_ns - window_ns:
                covered += window_covered
                weighted += value * window_covered
        return weighted / covered if covered else None

    def history(self, seconds: int, now_ns: int) -> list[float]:
        """Per-second peaks for the last ``seconds`` seconds, oldest first (0 where quiet)."""
        first = now_ns // 1_000_000_000 - seconds + 1
        out = [0.0] * seconds
        for start, peak in self.slots:
            index = start // 1_000_000_000 - first
            if 0 <= index < seconds:
                out[index] = max(out[index], peak)
        return out

    def seen_ns(self, window_ns: int, now_ns: int) -> int:
        """How much of the trailing window has samples: less than it only at the start."""
        if self.first_ns is None:
            return 0
        return max(0, min(window_ns, now_ns - self.first_ns))

    def burst_rate(self, window_ns: int, now_ns: int) -> float:
        """Bursts per second that ended in the trailing window (whole seconds), over the
        part of it seen so far (at least a second), so a young view does not read low."""
        first = (now_ns - window_ns) // 1_000_000_000
        ended = sum(count for second, count in self.burst_ends if second > first)
        return ended / max(self.seen_ns(window_ns, now_ns) / 1e9, 1.0)
