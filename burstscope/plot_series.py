"""What ``report --plot`` draws for one port direction: the few series a figure needs.

An hour of 1 ms samples is 3.6 M points, more than a PNG has pixels: the report keeps the
15 s and 1 s windows, the finest scale's largest value per second, and a zoom of the finest
samples around the longest burst (report_model.py feeds them, plot.py draws them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from burstscope.detectors.analyzer import Chunk
from burstscope.detectors.config import NS_PER_SECOND

# The plot shows the finest scale as its largest value per second (an hour at 1 ms is
# 3.6 M points, more than a PNG has pixels), and a zoom of it as sampled: at least 200 ms
# centred on the longest burst, so bursts of a few milliseconds are wide enough to see.
PLOT_BUCKET_NS = NS_PER_SECOND
ZOOM_MIN_NS = 200_000_000
ZOOM_MARGIN_NS = 25_000_000  # each side of a burst longer than the minimum
# The samples kept to place a zoom around a burst that has just closed: a longer burst is
# zoomed on its last part.
ZOOM_MEMORY_NS = 2 * NS_PER_SECOND


def empty_int() -> npt.NDArray[np.int64]:
    return np.empty(0, dtype=np.int64)


def empty_float() -> npt.NDArray[np.float64]:
    return np.empty(0, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class PlotSeries:
    """What --plot draws for one port direction (all empty without --plot)."""

    coarse_end_ns: npt.NDArray[np.int64] = field(default_factory=empty_int)  # 15 s windows
    coarse_utilization: npt.NDArray[np.float64] = field(default_factory=empty_float)
    second_end_ns: npt.NDArray[np.int64] = field(default_factory=empty_int)  # 1 s windows
    second_utilization: npt.NDArray[np.float64] = field(default_factory=empty_float)
    peak_start_ns: npt.NDArray[np.int64] = field(default_factory=empty_int)  # finest max/s
    peak_utilization: npt.NDArray[np.float64] = field(default_factory=empty_float)
    zoom_end_ns: npt.NDArray[np.int64] = field(default_factory=empty_int)  # finest, as sampled
    zoom_utilization: npt.NDArray[np.float64] = field(default_factory=empty_float)
    zoom_valid: npt.NDArray[np.bool_] = field(default_factory=lambda: np.empty(0, dtype=np.bool_))
    zoom_burst_ns: tuple[int, int] | None = None  # the longest burst the zoom is centred on
    zoom_window_ns: tuple[int, int] = (0, 0)  # (start, end] of the zoom


@dataclass(slots=True)
class Zoom:
    """The finest samples in a window centred on the longest burst seen so far."""

    recent: list[npt.NDArray[Any]] = field(default_factory=list)  # time, utilization, valid
    longest_ns: int = 0
    burst: tuple[int, int] | None = None
    window: tuple[int, int] = (0, 0)
    kept: list[npt.NDArray[Any]] = field(default_factory=list)

    def feed(self, chunk: Chunk) -> None:
        arrived: list[npt.NDArray[Any]] = [chunk.timestamp_ns, chunk.utilization, chunk.valid]
        columns = arrived
        if self.recent:
            columns = [np.concatenate(pair) for pair in zip(self.recent, arrived, strict=True)]
        if columns[0].size:
            keep = columns[0] > int(columns[0][-1]) - ZOOM_MEMORY_NS
            self.recent = [column[keep] for column in columns]
        durations = chunk.bursts.duration_ns
        if durations.size and int(durations.max()) > self.longest_ns:
            # A new longest burst closed in this chunk: the chunk and the memory before it
            # hold its window up to the chunk's end; later chunks fill the rest.
            index = int(np.argmax(durations))
            start, end = int(chunk.bursts.start_ns[index]), int(chunk.bursts.end_ns[index])
            self.longest_ns = end - start
            self.burst = (start, end)
            length = max(ZOOM_MIN_NS, end - start + 2 * ZOOM_MARGIN_NS)
            middle = (start + end) // 2
            self.window = (middle - length // 2, middle - length // 2 + length)
            self.kept = self._inside(columns)
        elif self.kept and self.kept[0].size and int(self.kept[0][-1]) < self.window[1]:
            after = arrived[0] > int(self.kept[0][-1])
            later = self._inside([column[after] for column in arrived])
            self.kept = [np.concatenate(pair) for pair in zip(self.kept, later, strict=True)]

    def _inside(self, columns: list[npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
        if not columns:
            return []
        keep = (columns[0] > self.window[0]) & (columns[0] <= self.window[1])
        return [column[keep] for column in columns]

    def series(self) -> dict[str, Any]:
        if self.burst is None or not self.kept:
            return {}
        stamps, utilization, valid = self.kept
        return {
            "zoom_end_ns": stamps,
            "zoom_utilization": utilization,
            "zoom_valid": valid,
            "zoom_burst_ns": self.burst,
            "zoom_window_ns": self.window,
        }
