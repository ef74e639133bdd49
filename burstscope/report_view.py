"""What ``burstscope report`` shows: its JSON document and its rich table (no statistics here)."""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from burstscope.report_model import DirectionReport, PortReport, Report
from detectors.analyzer import Summary
from detectors.config import NS_PER_SECOND, Thresholds, scale_label
from detectors.congestion import CongestionShare
from detectors.contrast import contrast

DIGITS = 6  # JSON rounding: stable goldens, far below what a counter can resolve


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, DIGITS)


def direction_warnings(summary: Summary) -> list[str]:
    warnings = []
    if summary.resets:
        plural = "s" if summary.resets != 1 else ""
        warnings.append(
            f"{summary.resets} counter reset{plural}: the interval across each is left out"
        )
    if summary.gaps:
        gap = summary.thresholds.max_gap_ns / NS_PER_SECOND
        plural = "s" if summary.gaps != 1 else ""
        warnings.append(f"{summary.gaps} gap{plural} longer than {gap:g} s left out")
    if summary.valid_samples == 0:
        warnings.append("no usable samples")
    return warnings


DEFAULT_BUSY = Thresholds().busy


def direction_json(port: PortReport, direction: DirectionReport) -> dict[str, Any]:
    summary = direction.summary
    seen = contrast(summary)
    mean = _round(summary.mean_utilization)
    thresholds = summary.thresholds
    scales = {}
    for scale in summary.scales:
        figures = {
            "mean": mean,
            "max": _round(scale.maximum),
            "p99": _round(scale.p99),
            "idle_fraction": _round(scale.idle_fraction),
            # Share of windows above thresholds.busy (stated beside, under "thresholds").
            "fraction_busy": _round(scale.busy_fraction),
            "windows": scale.count,
        }
        if thresholds.busy == DEFAULT_BUSY:
            # The name of 0.1.0, kept for one release while it is still true (README).
            figures["fraction_above_25pct"] = figures["fraction_busy"]
        scales[scale.key] = figures
    stats = summary.bursts
    return {
        "source": port.source,
        "device": port.device,
        "port": port.port,
        "direction": direction.direction,
        "line_rate_bytes_per_second": summary.line_rate_bytes_per_second,
        "thresholds": {
            "burst": thresholds.burst,
            "saturated": thresholds.saturated,
            "idle": thresholds.idle,
            "busy": thresholds.busy,
        },
        "duration_seconds": _round(summary.duration_seconds),
        "mean_utilization": mean,
        "samples": summary.samples,
        "valid_samples": summary.valid_samples,
        "resets": summary.resets,
        "gaps": summary.gaps,
        "clipped_samples": summary.clipped_samples,
        "scales": scales,
        "bursts": {
            "count": stats.count,
            "duration_seconds": {
                "p50": _round(stats.duration_seconds(0.5)),
                "p99": _round(stats.duration_seconds(0.99)),
                "max": _round(stats.duration_ns_max / NS_PER_SECOND if stats.count else None),
            },
            "interarrival_seconds": {
                "p50": _round(stats.interarrival_seconds(0.5)),
                "p99": _round(stats.interarrival_seconds(0.99)),
                "max": _round(
                    stats.interarrival_ns_max / NS_PER_SECOND if stats.count > 1 else None
                ),
            },
            "bytes_total": stats.bytes_total,
            "saturated_seconds": _round(seen.saturated_seconds),
        },
        "hidden": {
            "peak_to_mean_ratio": _round(seen.peak_to_mean_ratio),
            "saturated_seconds_in_quiet_windows": _round(seen.saturated_seconds_in_quiet_windows),
            "idle_fraction_coarse": _round(seen.idle_fraction_coarse),
            "idle_fraction_finest": _round(seen.idle_fraction_finest),
        },
        "congestion": {
            name: {
                "increments": share.increments_total,
                "during_saturation": share.increments_during_saturation,
                "share": _round(share.share),
                "unknown_intervals": share.unknown_intervals,
            }
            for name, share in direction.congestion
        },
        "verdict": seen.verdict,
        "warnings": list(port.warnings) + direction_warnings(summary),
    }


def to_json(report: Report) -> dict[str, Any]:
    ports = [direction_json(p, d) for p in report.ports for d in p.directions]
    warnings = [
        f"{entry['source']}: {entry['device']} port {entry['port']} {entry['direction']}: {w}"
        for entry in ports
        for w in entry["warnings"]
    ]
    synchrony = [
        {
            "source": source,
            "direction": direction,
            "ports": list(matrix.labels),
            "matrix": [[_round(v) for v in row] for row in matrix.matrix],
            "node": _round(matrix.node),
        }
        for source, direction, matrix in report.synchrony
    ]
    return {"ports": ports, "synchrony": synchrony, "warnings": warnings}


# CSI sequences, other ESC sequences, then any remaining C0/C1 control character.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x1f\x7f-\x9f]")


def _label(port: PortReport) -> str:
    """A port as the table names it: no terminal control and no rich markup from the trace."""
    return escape(printable(port.label))


def printable(text: str) -> str:
    """``text`` without terminal control: a trace (or a device name) is input, and
    printing ESC sequences from it could retitle, recolour or rewrite the terminal."""
    return _CONTROL.sub("", text)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.1f} ms"


def congestion_line(shares: tuple[tuple[str, CongestionShare], ...]) -> str | None:
    """E.g. ``congestion in saturated seconds: port_xmit_wait 97% of 2.5e+08``; None if quiet."""
    parts = [
        f"{name} {_percent(share.share)} of {share.increments_total:,}"
        for name, share in shares
        if share.increments_total > 0
    ]
    if not parts:
        return None
    return "congestion in saturated seconds: " + ", ".join(parts)


def print_table(report: Report, console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            # Piped or redirected: rich would assume 80 columns and fold every number.
            console = Console(width=132)
    if not report.ports:
        console.print("no ports in the input")
        return
    first = report.ports[0].directions[0].summary
    coarse = scale_label(first.thresholds.coarse_window_ns)
    fine = scale_label(first.finest_interval_ns)
    table = Table(title="burstscope report: millisecond bursts beside the 15-second average")
    for column in (
        "port",
        "dir",
        f"{coarse} mean",
        f"{fine} p99",
        f"{fine} max",
        "saturated",
        "hidden sat.",
        "bursts",
        "burst p50",
        "burst p99",
    ):
        table.add_column(column, justify="left" if column in ("port", "dir") else "right")
    verdicts = []
    for port in report.ports:
        for direction in port.directions:
            summary = direction.summary
            seen = contrast(summary)
            stats = summary.bursts
            hidden = seen.saturated_seconds_in_quiet_windows
            table.add_row(
                _label(port),
                "tx" if direction.direction == "transmit" else "rx",
                _percent(summary.mean_utilization),
                _percent(summary.finest.p99),
                _percent(summary.finest.maximum),
                _duration(seen.saturated_seconds),
                f"[bold red]{_duration(hidden)}[/]" if hidden > 0 else _duration(hidden),
                str(stats.count),
                _duration(stats.duration_seconds(0.5)),
                _duration(stats.duration_seconds(0.99)),
            )
            tag = "tx" if direction.direction == "transmit" else "rx"
            verdicts.append(f"{_label(port)} {tag}: {seen.verdict}")
            line = congestion_line(direction.congestion)
            if line:
                verdicts.append(f"{_label(port)} {tag}: {line}")
            verdicts += [
                f"[yellow]{_label(port)} {tag}: warning: {w}[/]"
                for w in list(port.warnings) + direction_warnings(summary)
            ]
    console.print(table)
    for line in verdicts:
        console.print(line, highlight=False)
    for source, direction_name, matrix in report.synchrony:
        node = matrix.node
        text = "-" if node is None else f"{node:.2f}"
        console.print(
            f"rail synchrony ({direction_name}, {source}): {text} "
            "(mean share of one port's burst time that another port also bursts)",
            highlight=False,
        )
