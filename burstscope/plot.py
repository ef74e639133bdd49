"""``report --plot``: the millisecond peak beside the 15-second average, and utilization CDFs.

One figure, PNG (150 dpi), SVG or PDF by the file's extension: per hot port direction the
whole trace and a zoom around its longest burst, then the utilization CDFs per scale.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from burstscope.detectors.config import NS_PER_SECOND
from burstscope.detectors.distributions import UTILIZATION_BINS
from burstscope.report_model import DirectionReport, Fleet, PortReport, Report
from burstscope.wording import scale_label

HOTTEST = 4  # port directions drawn over time; more makes the panels unreadable
FINE = "tab:red"
SECOND = "tab:orange"
COARSE = "tab:blue"
SATURATED = "tab:purple"
DPI = 150  # PNG; SVG and PDF are vector
FORMATS = (".png", ".svg", ".pdf")


def check_path(path: Path) -> None:
    """Refuse an output format before any work is done."""
    if path.suffix.lower() not in FORMATS:
        raise ValueError(
            f"--plot {str(path)!r}: the extension names the format: {', '.join(FORMATS)}"
        )


def _hottest(report: Report) -> list[tuple[PortReport, DirectionReport]]:
    """Most hidden saturation first: that is what the picture is for."""
    entries = [(p, d) for p in report.ports for d in p.directions]

    def heat(entry: tuple[PortReport, DirectionReport]) -> tuple[int, int, float]:
        summary = entry[1].summary
        return (
            summary.hidden_saturated_ns,
            summary.saturated_ns,
            summary.mean_utilization or 0.0,
        )

    return sorted(entries, key=heat, reverse=True)[:HOTTEST]


def _tag(direction: DirectionReport) -> str:
    return "tx" if direction.direction == "transmit" else "rx"


def write_plot(report: Report, path: Path) -> None:
    """The figure, in the format the extension names (see ``check_path``)."""
    check_path(path)
    import matplotlib

    matplotlib.use("Agg")  # no display: the report runs on servers
    import matplotlib.pyplot as plt

    hottest = _hottest(report)
    rows = max(1, len(hottest))
    figure = plt.figure(figsize=(13, 2.4 * rows + 4.6), layout="constrained")
    grid = figure.add_gridspec(rows + 1, 4, height_ratios=[1.0] * rows + [1.6])
    for row, (port, direction) in enumerate(hottest):
        last = row == rows - 1
        _timeline(figure.add_subplot(grid[row, :3]), port, direction, last)
        _zoom(figure.add_subplot(grid[row, 3]), direction, last)
    if hottest:
        _cdf(figure.add_subplot(grid[rows, :2]), hottest[0], log=False)
        _cdf(figure.add_subplot(grid[rows, 2:]), hottest[0], log=True)
    total = sum(len(p.directions) for p in report.ports)
    shown = (
        f"all {total} port directions"
        if len(hottest) == total
        else f"{len(hottest)} of {total} port directions shown: the {len(hottest)} with the "
        "most saturated time hidden in quiet windows"
    )
    figure.suptitle(
        f"burstscope: millisecond bursts beside the 15-second average\n{shown}",
        fontsize=12,
        weight="bold",
    )
    if hottest:
        # One legend for every panel, outside the data: under the title.
        handles, labels = figure.axes[0].get_legend_handles_labels()
        zoom_handles, zoom_labels = figure.axes[1].get_legend_handles_labels()
        figure.legend(
            handles + zoom_handles,
            labels + zoom_labels,
            loc="outside lower center",
            ncols=len(labels) + len(zoom_labels),
            fontsize=9,
            frameon=False,
        )
    figure.savefig(path, dpi=DPI)
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
    axes.axhline(
        thresholds.busy * 100,
        color="grey",
        linestyle=":",
        linewidth=1,
        label=f"{thresholds.busy * 100:g}% (Acme: rarely above)",
    )
    axes.axhline(
        thresholds.saturated * 100,
        color=SATURATED,
        linestyle="--",
        linewidth=0.8,
        label=f"{thresholds.saturated * 100:g}% (saturated)",
    )
    mean = summary.mean_utilization
    if mean is not None:
        # The mean sits on the x axis of an idle-heavy trace: say its value in words.
        axes.text(
            0.995,
            0.96,
            f"mean {_share(mean)} · {fine} peak {_share(summary.finest.maximum)}",
            transform=axes.transAxes,
            ha="right",
            va="top",
            fontsize=9,
            color=COARSE,
            bbox={"facecolor": "white", "edgecolor": COARSE, "alpha": 0.9, "pad": 2},
        )
    axes.set_ylim(0, 105)
    axes.set_xlim(0, max(end, 1e-9))
    axes.set_ylabel("% of line rate")
    hidden = summary.hidden_saturated_ns / NS_PER_SECOND
    saturated = summary.saturated_ns / NS_PER_SECOND
    axes.set_title(
        f"{port.label} {_tag(direction)}: {saturated:.1f} s saturated, {hidden:.1f} s of it "
        f"inside {coarse} windows under {thresholds.busy * 100:.0f}%",
        loc="left",
        fontsize=10,
    )
    axes.grid(alpha=0.3)
    if last:
        axes.set_xlabel("seconds since trace start")


def _share(value: float | None) -> str:
    if value is None:
        return "-"
    percent = value * 100
    return f"{percent:.1f}%" if percent < 10 else f"{percent:.0f}%"


def _zoom(axes: Any, direction: DirectionReport, last: bool) -> None:
    plot = direction.plot
    fine = scale_label(direction.summary.finest_interval_ns)
    axes.set_ylim(0, 105)
    axes.grid(alpha=0.3)
    if plot.zoom_end_ns.size == 0 or plot.zoom_burst_ns is None:
        axes.set_title(f"{fine} samples", loc="left", fontsize=9)
        axes.text(0.5, 0.5, "no bursts", ha="center", va="center", transform=axes.transAxes)
        return
    start, end = plot.zoom_burst_ns
    origin, stop = plot.zoom_window_ns
    span_ms = (stop - origin) / 1e6
    axes.set_title(
        f"{fine} samples, {span_ms:.0f} ms around\n"
        f"the longest burst ({(end - start) / 1e6:.0f} ms)",
        loc="left",
        fontsize=9,
    )
    axes.axvspan(
        (start - origin) / 1e6,
        (end - origin) / 1e6,
        color=FINE,
        alpha=0.12,
        linewidth=0,
        label="longest burst",
    )
    x = (plot.zoom_end_ns - origin) / 1e6
    y = np.where(plot.zoom_valid, plot.zoom_utilization * 100, np.nan)
    axes.step(x, y, where="pre", color=FINE, linewidth=0.9)
    axes.set_xlim(0, span_ms)
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


def fleet_plot_path(path: Path) -> Path:
    """Where --plot puts the fleet's picture: beside the ports' one, ``NAME-fleet.png``."""
    return path.with_name(f"{path.stem}-fleet{path.suffix or '.png'}")


def write_fleet_plot(fleet: Fleet, path: Path) -> None:
    """Milliseconds by nodes saturated at once, and per node what a scrape hides and shares."""
    import matplotlib.pyplot as plt

    figure = fleet_figure(fleet)
    figure.savefig(path, dpi=DPI)
    plt.close(figure)


def fleet_figure(fleet: Fleet) -> Any:
    """The fleet's figure (a matplotlib Figure), for write_fleet_plot to save."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    sync = fleet.synchrony
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5), layout="constrained")
    counts = list(range(1, len(sync.concurrent_ms)))
    left.bar(counts, [sync.concurrent_ms[k] / 1000 for k in counts], color=FINE)
    # A count of nodes: 1, 2, 3, never 1.5.
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_xlabel("nodes saturated in the same millisecond")
    left.set_ylabel("seconds")
    left.set_title("how many nodes saturate at once (what the spine sees)", loc="left")
    x = np.arange(len(fleet.nodes))
    hidden = [(c.hidden_share or 0.0) * 100 for c in fleet.contrast]
    shared = [(sync.shared_share(i) or 0.0) * 100 for i in range(len(fleet.nodes))]
    right.bar(x - 0.2, hidden, 0.4, color=COARSE, label="saturated time in 15-s windows < 25%")
    right.bar(x + 0.2, shared, 0.4, color=FINE, label="saturated time shared with another node")
    right.set_xticks(x, fleet.nodes, rotation=90, fontsize=7)
    right.set_ylim(0, 105)
    right.set_ylabel("% of the node's saturated time")
    # Beside the panel, not on it: bars reach 100% and "lower right" covered them.
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    right.set_title("per node", loc="left")
    figure.suptitle(
        "burstscope fleet: assumes node clocks agree to well under 1 ms (PTP)", fontsize=11
    )
    return figure
