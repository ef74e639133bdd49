"""``report --plot``: the millisecond peak beside the 15-second average, and utilization CDFs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from burstscope.report_model import DirectionReport, PortReport, Report
from detectors.config import NS_PER_SECOND, scale_label
from detectors.distributions import UTILIZATION_BINS

HOTTEST = 4  # port directions drawn over time; more makes the panels unreadable
FINE = "tab:red"
SECOND = "tab:orange"
COARSE = "tab:blue"


def _hottest(report: Report) -> list[tuple[PortReport, DirectionReport]]:
    """Most hidden saturation first: that is what the picture is for."""
    entries = [(p, d) for p in report.ports for d in p.directions]

    def heat(entry: tuple[PortReport, DirectionReport]) -> tuple[int, int, float]:
        summary = entry[1].summary
        return (
            summary.saturated_ns_in_quiet_windows,
            summary.saturated_ns,
            summary.mean_utilization or 0.0,
        )

    return sorted(entries, key=heat, reverse=True)[:HOTTEST]


def _tag(direction: DirectionReport) -> str:
    return "tx" if direction.direction == "transmit" else "rx"


def write_plot(report: Report, path: Path) -> None:
    """One PNG: per hot port direction the whole trace and a 2 s zoom, then CDFs per scale."""
    import matplotlib

    matplotlib.use("Agg")  # no display: the report runs on servers
    import matplotlib.pyplot as plt

    hottest = _hottest(report)
    rows = max(1, len(hottest))
    figure = plt.figure(figsize=(13, 2.3 * rows + 4.0), layout="constrained")
    grid = figure.add_gridspec(rows + 1, 4, height_ratios=[1.0] * rows + [1.6])
    for row, (port, direction) in enumerate(hottest):
        last = row == rows - 1
        _timeline(figure.add_subplot(grid[row, :3]), port, direction, last)
        _zoom(figure.add_subplot(grid[row, 3]), direction, last)
    if hottest:
        _cdf(figure.add_subplot(grid[rows, :2]), hottest[0], log=False)
        _cdf(figure.add_subplot(grid[rows, 2:]), hottest[0], log=True)
    figure.suptitle(
        "burstscope: millisecond bursts beside the 15-second average", fontsize=13, weight="bold"
    )
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _timeline(axes: Any, port: PortReport, direction: DirectionReport, last: bool) -> None:
    summary = direction.summary
    plot = direction.plot
    thresholds = summary.thresholds
    fine = scale_label(summary.finest_interval_ns)
    coarse = scale_label(thresholds.coarse_window_ns)
    origin = summary.first_ns or 0
    end = ((summary.last_ns or origin) - origin) / NS_PER_SECOND

    def windows(end_ns: Any, utilization: Any, length_ns: int) -> tuple[Any, Any]:
        # Step from each window's start, clipped to the trace: partial windows at the edges.
        starts = np.clip((end_ns - length_ns - origin) / NS_PER_SECOND, 0, end)
        x = np.append(starts, min(end, starts[-1] + length_ns / NS_PER_SECOND))
        return x, np.append(utilization, utilization[-1]) * 100

    if plot.peak_start_ns.size:
        x = np.clip((plot.peak_start_ns - origin) / NS_PER_SECOND, 0, end)
        axes.fill_between(
            np.append(x, end),
            np.append(plot.peak_utilization, plot.peak_utilization[-1]) * 100,
            step="post",
            color=FINE,
            alpha=0.25,
            linewidth=0,
            label=f"{fine} peak (max per second)",
        )
    if plot.second_end_ns.size:
        x, y = windows(plot.second_end_ns, plot.second_utilization, NS_PER_SECOND)
        axes.step(x, y, where="post", color=SECOND, linewidth=1.0, label="1-s mean")
    if plot.coarse_end_ns.size:
        x, y = windows(plot.coarse_end_ns, plot.coarse_utilization, thresholds.coarse_window_ns)
        axes.step(x, y, where="post", color=COARSE, linewidth=2.5, label=f"{coarse} mean (scrape)")
    axes.axhline(thresholds.busy * 100, color="grey", linestyle=":", linewidth=1)
    axes.set_ylim(0, 105)
    axes.set_xlim(0, max(end, 1e-9))
    axes.set_ylabel("% of line rate")
    hidden = summary.saturated_ns_in_quiet_windows / NS_PER_SECOND
    saturated = summary.saturated_ns / NS_PER_SECOND
    axes.set_title(
        f"{port.label} {_tag(direction)}: {saturated:.1f} s saturated, {hidden:.1f} s of it "
        f"inside {coarse} windows under {thresholds.busy * 100:.0f}%",
        loc="left",
        fontsize=10,
    )
    axes.legend(loc="center right", fontsize=8, framealpha=0.9)
    axes.grid(alpha=0.3)
    if last:
        axes.set_xlabel("seconds since trace start")


def _zoom(axes: Any, direction: DirectionReport, last: bool) -> None:
    plot = direction.plot
    fine = scale_label(direction.summary.finest_interval_ns)
    axes.set_ylim(0, 105)
    axes.grid(alpha=0.3)
    axes.set_title(f"{fine} samples around the first burst", loc="left", fontsize=9)
    if plot.zoom_end_ns.size == 0:
        axes.text(0.5, 0.5, "no bursts", ha="center", va="center", transform=axes.transAxes)
        return
    x = (plot.zoom_end_ns - plot.zoom_end_ns[0]) / 1e6
    y = np.where(plot.zoom_valid, plot.zoom_utilization * 100, np.nan)
    axes.step(x, y, where="pre", color=FINE, linewidth=0.8)
    if last:
        axes.set_xlabel("ms")


def _cdf(axes: Any, entry: tuple[PortReport, DirectionReport], log: bool) -> None:
    """Utilization CDF per scale for the hottest port direction, from its histograms."""
    import matplotlib.pyplot as plt

    port, direction = entry
    edges = np.arange(1, UTILIZATION_BINS + 1) / UTILIZATION_BINS * 100
    colours = plt.get_cmap("plasma")
    scales = direction.summary.scales
    for index, scale in enumerate(scales):
        counts = np.asarray(scale.histogram, dtype=np.float64)
        total = counts.sum()
        if total == 0:
            continue
        share = np.cumsum(counts) / total
        label = f"{scale_label(scale.length_ns)} ({scale.count} windows)"
        colour = colours(0.85 * index / max(1, len(scales) - 1))
        if log:
            # 1 - CDF on a log axis shows the rare saturated milliseconds a linear CDF hides.
            tail = 1 - share
            keep = tail > 0
            x = np.append(0, edges[keep])
            y = np.append(1.0, tail[keep])
            axes.step(x, y, where="post", color=colour, linewidth=1.5, label=label)
        else:
            x = np.append(0, edges)
            y = np.append(0, share)
            axes.step(x, y, where="post", color=colour, linewidth=1.5, label=label)
    axes.set_xlabel("% of line rate")
    axes.set_xlim(0, 101)
    axes.grid(alpha=0.3)
    name = f"{port.label} {_tag(direction)}"
    if log:
        axes.set_yscale("log")
        axes.set_ylabel("share of windows above")
        axes.set_title(f"{name}: tail (1 - CDF) per scale", loc="left", fontsize=10)
    else:
        axes.set_ylim(0, 1.02)
        axes.set_ylabel("share of windows at or below")
        axes.set_title(f"{name}: utilization CDF per scale", loc="left", fontsize=10)
        axes.legend(loc="lower right", fontsize=8)
