"""What ``burstscope report`` shows: its JSON document and its rich table (no statistics here)."""

from __future__ import annotations

import dataclasses
import datetime
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape

from burstscope.collector.jobs.model import COMPUTE, STORAGE
from burstscope.detectors.analyzer import Summary
from burstscope.detectors.config import NS_PER_SECOND, Thresholds
from burstscope.detectors.congestion import CongestionShare
from burstscope.detectors.contrast import contrast
from burstscope.detectors.rails import KIND_NAMES, RailFinding, RailLimits, RailTable
from burstscope.detectors.stragglers import NodeStanding, StepLimits, StepVerdict
from burstscope.detectors.throttle import CAUSES, DIRECTION_CAUSES, Throttle
from burstscope.fitting import print_fitted
from burstscope.report_collectives_view import collectives_json, print_collectives
from burstscope.report_jobs import JobReport, RoleTotals
from burstscope.report_model import (
    DirectionReport,
    Fleet,
    NodeContrast,
    PortReport,
    RailReport,
    Report,
    StragglerGroup,
)
from burstscope.wording import byte_text, partial_window, scale_label, verdict

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
            # The name of 0.1.0, kept for one release while it is still true (docs/report.md).
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
            "saturated_seconds_in_quiet_windows": _round(seen.hidden_saturated_seconds),
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
        "throttle": throttle_json(direction.direction, direction.throttle),
        "verdict": verdict(summary),
        "warnings": list(port.warnings) + direction_warnings(summary),
    }


# The shape of `report --json` and `demo --json` (docs/report.md#json-outputs): 1 was
# 0.1.0's, without this key; 2 adds fraction_busy (fraction_above_25pct goes next release);
# 3 adds jobs (the trace's job table, grouped by job); 4 adds collectives (the records of
# NCCL's Inspector and PyTorch traces joined to the samples); 5 adds each direction's
# throttle (its saturated and long-burst seconds by cause, detectors/throttle.py); 6 adds
# rails (each node's training rails side by side per step, and the imbalanced ones); 7
# adds the fleet's stragglers (each job's steps across nodes, detectors/stragglers.py).
SCHEMA_VERSION = 7


def throttle_json(direction: str, throttle: Throttle | None) -> dict[str, Any] | None:
    """Seconds and share per cause this direction can have; None where no congestion
    counter was recorded (nothing to judge by)."""
    if throttle is None:
        return None
    counts = throttle.counts
    document: dict[str, Any] = {
        "seconds": counts.total,
        "causes": {
            cause: {
                "seconds": counts.seconds[CAUSES.index(cause)],
                "share": _round(counts.share(cause)),
            }
            for cause in DIRECTION_CAUSES[direction]
        },
    }
    if direction == "transmit":
        document["credit_judged_by"] = "stalled_time" if throttle.stalled_time else "presence"
    return document


def to_json(report: Report) -> dict[str, Any]:
    ports = [direction_json(p, d) for p in report.ports for d in p.directions]
    warnings = [
        f"{entry['source']}: {entry['device']} port {entry['port']} {entry['direction']}: {w}"
        for entry in ports
        for w in entry["warnings"]
    ] + list(report.job_warnings)
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
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "ports": ports,
        "synchrony": synchrony,
        "jobs": [job_json(job) for job in report.jobs],
        "collectives": [collectives_json(c) for c in report.collectives],
        "rails": [rails_json(r) for r in report.rails],
        "warnings": warnings,
    }
    if report.fleet is not None:
        document["fleet"] = fleet_json(report.fleet)
    return document


def rails_json(rails: RailReport) -> dict[str, Any]:
    """One node's rails: the steps, and per direction each step's bytes, peak and burst
    seconds per rail (rows: steps, columns: rails) and the findings."""
    table = rails.directions[0][1]
    return {
        "source": rails.source,
        "rails": list(rails.rails),
        "steps": {
            "start_ns": table.start_ns.tolist(),
            "end_ns": table.end_ns.tolist(),
            "period_ns": table.period_ns.tolist(),
        },
        "directions": {
            name: {
                "bytes": np.rint(table.bytes).astype(np.int64).tolist(),
                "peak": [[_round(v) for v in row] for row in table.peak.tolist()],
                "burst_seconds": [
                    [_round(v / NS_PER_SECOND) for v in row] for row in table.burst_ns.tolist()
                ],
                "findings": [_finding_json(rails, table, f) for f in findings],
            }
            for name, table, findings in rails.directions
        },
    }


def _finding_json(rails: RailReport, table: RailTable, finding: RailFinding) -> dict[str, Any]:
    return {
        "rail": rails.rails[finding.rail],
        "kind": KIND_NAMES[finding.kind],
        "first_step": finding.first_step,
        "last_step": finding.last_step,
        "steps_flagged": finding.steps_flagged,
        "start_ns": int(table.start_ns[finding.first_step]),
        "end_ns": int(table.end_ns[finding.last_step]),
    }


def _totals_json(totals: RoleTotals, ports: int) -> dict[str, Any]:
    return {
        "ports": ports,
        "saturated_seconds": _round(totals.saturated_ns / NS_PER_SECOND),
        "saturated_seconds_in_quiet_windows": _round(totals.hidden_saturated_ns / NS_PER_SECOND),
        "bursts": totals.bursts,
        "burst_bytes": totals.burst_bytes,
    }


def job_json(report: JobReport) -> dict[str, Any]:
    """One job of a trace: who, which ports when, its figures per role, its iteration."""
    job, iteration = report.job, report.iteration
    return {
        "source": report.source,
        **dataclasses.asdict(job),
        "start_ns": report.start_ns,
        "end_ns": report.end_ns,
        "ports": [
            {
                "device": span.device,
                "port": span.port,
                "role": span.role,
                "rule": span.rule,
                "start_ns": span.start_ns,
                "end_ns": span.end_ns,
            }
            for span in report.spans
        ],
        "compute": _totals_json(report.compute, len(report.ports(COMPUTE))),
        "storage": _totals_json(report.storage, len(report.ports(STORAGE))),
        "iteration": None
        if iteration is None
        else {
            "period_seconds": _round(iteration.period_ns / NS_PER_SECOND),
            "correlation": _round(iteration.correlation),
            "bin_seconds": _round(iteration.bin_ns / NS_PER_SECOND),
        },
    }


CLOCK_NOTE = (
    "cross-node synchrony compares wall-clock milliseconds: it assumes the nodes' clocks "
    "agree to well under 1 ms (PTP)"
)


def _contrast_json(contrast: NodeContrast) -> dict[str, Any]:
    return {
        "saturated_seconds": _round(contrast.saturated_ns / NS_PER_SECOND),
        "saturated_seconds_in_quiet_windows": _round(contrast.hidden_saturated_ns / NS_PER_SECOND),
        "hidden_share": _round(contrast.hidden_share),
        "finest_fraction_above_25pct": _round(
            contrast.finest_busy / contrast.finest_count if contrast.finest_count else None
        ),
        "coarse_fraction_above_25pct": _round(
            contrast.coarse_busy / contrast.coarse_count if contrast.coarse_count else None
        ),
    }


def fleet_json(fleet: Fleet) -> dict[str, Any]:
    """The fleet section: per node and fleet-wide contrast, cross-node synchrony, and the
    stragglers across nodes."""
    sync = fleet.synchrony
    offsets = [o for o in fleet.clock_offsets_ns if o is not None]
    return {
        "nodes": [
            {
                "node": name,
                "clock_offset_ns": offset,
                **_contrast_json(node_contrast),
                "saturated_ms": sync.saturated_ms[index],
                "shared_share": _round(sync.shared_share(index)),
                "with_others_ms": list(sync.with_others_ms[index]),
            }
            for index, (name, offset, node_contrast) in enumerate(
                zip(fleet.nodes, fleet.clock_offsets_ns, fleet.contrast, strict=True)
            )
        ],
        "total": _contrast_json(fleet.total),
        "synchrony": {
            "note": CLOCK_NOTE,
            "largest_clock_offset_ns": max((abs(o) for o in offsets), default=None),
            "concurrent_nodes_ms": list(sync.concurrent_ms),
            "peak_concurrent_nodes": sync.peak_concurrency,
            "pairs": [
                {
                    "nodes": [fleet.nodes[a], fleet.nodes[b]],
                    "together_ms": together,
                    "share_of_first": _round(together / sync.saturated_ms[a]),
                    "share_of_second": _round(together / sync.saturated_ms[b]),
                }
                for a, b, together in sync.pairs
            ],
        },
        "stragglers": stragglers_json(fleet.stragglers, fleet.straggler_limits),
    }


def stragglers_json(groups: tuple[StragglerGroup, ...], limits: StepLimits) -> dict[str, Any]:
    """Per job: each node's standing over the judged steps, and every step in which a node
    was a straggler or a rail was slow (the text shows the first few)."""
    return {
        "limits": dataclasses.asdict(limits),
        "groups": [
            {
                "job": group.job,
                "nodes": list(group.nodes),
                "steps_judged": group.judged,
                "resolution_ns": group.resolution_ns,
                "standings": [_standing_json(standing) for standing in group.standings],
                "steps": [_verdict_json(verdict) for verdict in group.flagged],
            }
            for group in groups
        ],
    }


def _quantiles_json(quantiles: tuple[int, int, int] | None) -> dict[str, int] | None:
    if quantiles is None:
        return None
    return dict(zip(("p50", "p90", "max"), quantiles, strict=True))


def _standing_json(standing: NodeStanding) -> dict[str, Any]:
    return {
        "node": standing.host,
        "steps": standing.steps,
        "straggler_steps": standing.straggler_steps,
        "score": _round(standing.score),
        "lag_ns": _quantiles_json(standing.lag_quantiles_ns),
        "excess_ns": _quantiles_json(standing.excess_quantiles_ns),
    }


def _verdict_json(verdict: StepVerdict) -> dict[str, Any]:
    lags = dict(zip(verdict.nodes, verdict.lag_ns, strict=True))
    least = dict(zip(verdict.nodes, verdict.lag_at_least_ns, strict=True))
    return {
        "onset_ns": verdict.onset_ns,
        "nodes": len(verdict.nodes),
        "stragglers": [
            {"node": host, "lag_ns": lags[host], "lag_at_least_ns": least[host]}
            for host in verdict.stragglers
        ],
        "slow_rail": verdict.slow_rail,
    }


# A node's saturated time adds its port directions' (8 ports: up to 16 x the trace's length).
SUMMED = "saturated summed\nover port directions"


def print_fleet(fleet: Fleet, console: Console) -> None:
    """Per node: saturated time, how much a 15 s scrape hides, how much is shared."""
    sync = fleet.synchrony
    columns = [
        _Column("node", 0),
        _Column("clock\noffset", 4),
        _Column("saturated\nany port", 0),
        _Column(SUMMED, 1),
        _Column("hidden in\n<25% windows", 0),
        _Column("shared with\n>=1 node", 2),
        _Column("shared with\nall others", 3),
    ]
    everyone = len(fleet.nodes) - 1
    cells = [
        (
            escape(printable(name)),
            "-" if offset is None else f"{offset / 1000:+.1f} us",
            _duration(sync.saturated_ms[index] / 1000),
            _duration(node_contrast.saturated_ns / NS_PER_SECOND),
            _percent(node_contrast.hidden_share),
            _percent(sync.shared_share(index)),
            _percent(sync.shared_share(index, everyone)),
        )
        for index, (name, offset, node_contrast) in enumerate(
            zip(fleet.nodes, fleet.clock_offsets_ns, fleet.contrast, strict=True)
        )
    ]
    total = fleet.total
    cells.append(
        (
            "[bold]fleet[/]",
            "",
            "",
            _duration(total.saturated_ns / NS_PER_SECOND),
            _percent(total.hidden_share),
            "",
            "",
        )
    )

    print_fitted(
        console,
        "fleet: saturated milliseconds, what 15-second windows hide, who shares",
        columns,
        [{c.header: cell for c, cell in zip(columns, row, strict=True)} for row in cells],
        # No cell is cut: a node's name or a figure cut short misleads.
        lambda c: {"justify": "left" if c.header == "node" else "right"},
    )
    busiest = ", ".join(
        f"{k} nodes {ms} ms" for k, ms in enumerate(sync.concurrent_ms) if k >= 1 and ms
    )
    console.print(f"milliseconds by nodes saturated at once: {busiest or 'none'}", highlight=False)
    for a, b, together in sync.pairs[:5]:
        console.print(
            f"together most: {escape(printable(fleet.nodes[a]))} + "
            f"{escape(printable(fleet.nodes[b]))}: {together} ms",
            highlight=False,
        )
    offsets = [o for o in fleet.clock_offsets_ns if o is not None]
    recorded = (
        f"largest recorded clock offset {max(abs(o) for o in offsets) / 1000:.1f} us"
        if offsets
        else "no clock offsets recorded"
    )
    console.print(
        "note: 'saturated any port' counts a millisecond once however many of the node's "
        "ports saturate in it; the sum adds each port direction's, so it can exceed the "
        "trace's length",
        highlight=False,
    )
    console.print(f"note: {CLOCK_NOTE}; {recorded}", highlight=False)


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


@dataclass(frozen=True, slots=True)
class _Column:
    header: str
    priority: int  # narrow terminals drop the highest first; 0 is never dropped

    @property
    def justify(self) -> str:
        return "left" if self.header in ("port", "dir") else "right"


def print_table(report: Report, console: Console | None = None) -> None:
    """The report at the console's width: the real terminal's, or 80 columns when piped
    (rich's default; COLUMNS overrides it). Whole columns leave, a port is never cut."""
    if console is None:
        console = Console()
    if not report.ports:
        console.print("no ports in the input")
        return
    first = report.ports[0].directions[0].summary
    coarse = scale_label(first.thresholds.coarse_window_ns)
    fine = scale_label(first.finest_interval_ns)
    columns = [
        _Column("port", 0),
        _Column("dir", 0),
        _Column(f"{coarse} mean", 0),
        _Column(f"{fine} p99", 2),
        _Column(f"{fine} max", 0),
        _Column("saturated", 1),
        _Column("hidden sat.", 0),
        _Column("bursts", 3),
        _Column("burst p50", 4),
        _Column("burst p99", 5),
    ]
    cells: list[dict[str, str]] = []
    verdicts = []
    for port in report.ports:
        for direction in port.directions:
            summary = direction.summary
            seen = contrast(summary)
            stats = summary.bursts
            hidden = seen.hidden_saturated_seconds
            values = (
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
            cells.append({c.header: v for c, v in zip(columns, values, strict=True)})
            tag = "tx" if direction.direction == "transmit" else "rx"
            verdicts.append(f"{_label(port)} {tag}: {escape(verdict(summary))}")
            line = congestion_line(direction.congestion)
            if line:
                verdicts.append(f"{_label(port)} {tag}: {escape(line)}")
            line = throttle_line(direction.direction, direction.throttle)
            if line:
                verdicts.append(f"{_label(port)} {tag}: {escape(line)}")
            verdicts += [
                f"[yellow]{_label(port)} {tag}: warning: {escape(printable(w))}[/]"
                for w in list(port.warnings) + direction_warnings(summary)
            ]
    longest = max(len(printable(port.label)) for port in report.ports)

    print_fitted(
        console,
        "burstscope report: millisecond bursts beside the 15-second average",
        columns,
        cells,
        # The port names the row: never cut, whatever the width.
        lambda c: {"justify": c.justify, "min_width": longest if c.header == "port" else None},
    )
    for line in verdicts:
        console.print(line, highlight=False)
    shortest = min(
        (d.summary for p in report.ports for d in p.directions), key=lambda s: s.duration_seconds
    )
    partial = partial_window(shortest)
    if partial:
        console.print(partial, highlight=False)
    for source, direction_name, matrix in report.synchrony:
        node = matrix.node
        text = "-" if node is None else f"{node:.2f}"
        console.print(
            f"rail synchrony ({direction_name}, {escape(printable(source))}): {text} "
            "(mean share of one port's burst time that another port also bursts)",
            highlight=False,
        )
    note = throttle_note(report)
    if note:
        console.print(note, highlight=False)
    for rails in report.rails:
        print_rails(rails, console)
    if report.jobs:
        print_jobs(report.jobs, console)
    if report.collectives:
        print_collectives(report.collectives, console)
    for warning in report.job_warnings:
        console.print(f"[yellow]warning: {escape(printable(warning))}[/]", highlight=False)
    if report.fleet is not None:
        print_fleet(report.fleet, console)
        print_stragglers(report.fleet.stragglers, report.fleet.straggler_limits, console)


# Steps listed in the text; JSON lists every one.
STEP_LINES = 10


def print_stragglers(
    groups: tuple[StragglerGroup, ...], limits: StepLimits, console: Console
) -> None:
    """Per job: each node's lags and excesses over the judged steps, then the steps with a
    straggler or a slow rail (the first STEP_LINES)."""
    if not groups:
        console.print(
            "stragglers: no steps (no node had three training rails or more of one rate)",
            highlight=False,
        )
        return
    for group in groups:
        print_straggler_group(group, limits, console)
    if not any(group.judged for group in groups):
        return
    console.print(
        "note: lag is when a node's first bytes of a step left against the median node's, "
        "to a sample; excess, its last bytes against the median's. A straggler lags by the "
        "clock error and one sample or more, and its first bytes came at least the clock "
        "error and the ranks' jitter after the median's could have; the nodes' clocks are "
        f"taken to agree within {limits.clock_error_ns / 1000:g} us (PTP)",
        highlight=False,
    )


def print_straggler_group(group: StragglerGroup, limits: StepLimits, console: Console) -> None:
    who = "stragglers across nodes" + (
        "" if group.job is None else f" of job {printable(group.job)}"
    )
    called = (
        f" (a step is judged on {limits.min_nodes} nodes or more)"
        if group.resolution_ns is None
        else f"; late: a lag of {group.resolution_ns / 1e6:.2f} ms or more, "
        f"{limits.sure_ns / 1e6:.2f} ms at least"
    )
    console.print(
        f"{escape(who)}: {group.judged:,} steps judged on {len(group.nodes)} nodes{called}",
        highlight=False,
    )
    if not group.judged:
        return
    columns = [
        _Column("node", 0),
        _Column("steps", 0),
        _Column("straggler\nsteps", 0),
        _Column("score", 0),
        _Column("lag p50\n(ms)", 1),
        _Column("lag p90\n(ms)", 3),
        _Column("lag max\n(ms)", 0),
        _Column("excess p50\n(ms)", 2),
        _Column("excess p90\n(ms)", 4),
        _Column("excess max\n(ms)", 1),
    ]
    rows = []
    for standing in group.standings:
        lag = standing.lag_quantiles_ns
        excess = standing.excess_quantiles_ns or (None, None, None)
        values = (
            escape(printable(standing.host)),
            f"{standing.steps:,}",
            f"{standing.straggler_steps:,}",
            _percent(standing.score)
            if not standing.straggler_steps
            else f"[bold red]{_percent(standing.score)}[/]",
            *(_milliseconds(ns) for ns in lag),
            *(_milliseconds(ns) for ns in excess),
        )
        rows.append({c.header: v for c, v in zip(columns, values, strict=True)})
    longest = max(len(printable(standing.host)) for standing in group.standings)
    print_fitted(
        console,
        "each node's lag and excess over the judged steps",
        columns,
        rows,
        lambda c: {
            "justify": "left" if c.header == "node" else "right",
            "min_width": longest if c.header == "node" else None,
        },
    )
    console.print(
        f"steps with a straggler or a slow rail: {len(group.flagged):,} of {group.judged:,}",
        highlight=False,
    )
    for step in group.flagged[:STEP_LINES]:
        console.print(f"  {_utc(step.onset_ns)}: {_verdict_text(step)}", highlight=False)
    if len(group.flagged) > STEP_LINES:
        console.print(
            f"  and {len(group.flagged) - STEP_LINES:,} more (--json lists every one)",
            highlight=False,
        )


def _verdict_text(verdict: StepVerdict) -> str:
    lags = dict(zip(verdict.nodes, verdict.lag_ns, strict=True))
    late = ", ".join(
        f"{escape(printable(host))} {_milliseconds(lags[host])} ms" for host in verdict.stragglers
    )
    rail = "-" if verdict.slow_rail is None else escape(printable(verdict.slow_rail))
    return f"late {late or '-'}; slow rail {rail}"


def _milliseconds(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:+.2f}"


def _utc(ns: int) -> str:
    """Wall-clock nanoseconds as a UTC time to the millisecond."""
    seconds, rest = divmod(ns, NS_PER_SECOND)
    stamp = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return f"{stamp:%Y-%m-%d %H:%M:%S}.{rest // 1_000_000:03d} UTC"


_LIMITS = RailLimits()
_WHY = {
    "light": f"bytes under {_LIMITS.light_below:g}x its peers'",
    "slow": f"peak under {_LIMITS.slow_peak_below:g}x, drain over {_LIMITS.slow_drain_above:g}x",
}


def print_rails(rails: RailReport, console: Console) -> None:
    """A node's rails side by side: per rail and direction the median step's bytes (and
    against its peers'), peak and burst time, then the imbalanced stretches and why."""
    table = rails.directions[0][1]
    steps = int(table.start_ns.size)
    periods = table.period_ns[table.period_ns > 0]
    what = (
        f"{steps} steps of the job's period ({float(np.median(periods)) / 1e9:.3f} s)"
        if periods.size
        else f"{steps} windows of 1 s (no period repeats)"
    )
    if periods.size and periods.size < steps:
        what += f", {steps - periods.size} of them 1 s windows"
    console.print(
        f"rails of {escape(printable(rails.source))}: {what}; the median step",
        highlight=False,
    )
    if steps == 0:
        return
    console.print(
        f"  {'rail':<{max(len(r) for r in rails.rails)}} dir {'bytes':>9} {'vs peers':>8} "
        f"{'peak':>6} {'burst':>8}  flagged",
        highlight=False,
    )
    width = max(len(r) for r in rails.rails)
    notes = []
    for column, label in enumerate(rails.rails):
        for name, direction, findings in rails.directions:
            tag = "tx" if name == "transmit" else "rx"
            own = direction.bytes[:, column]
            others = np.delete(direction.bytes, column, axis=1)
            peers = np.median(others, axis=1) if others.shape[1] else own
            ratio = np.divide(own, peers, out=np.ones_like(own), where=peers > 0)
            flagged = [f for f in findings if f.rail == column]
            kinds = sorted({KIND_NAMES[f.kind] for f in flagged})
            console.print(
                f"  {escape(printable(label)):<{width}} {tag} "
                f"{byte_text(round(float(np.median(own)))):>9} {float(np.median(ratio)):>8.2f} "
                f"{_percent(float(np.median(direction.peak[:, column]))):>6} "
                f"{_duration(float(np.median(direction.burst_ns[:, column])) / 1e9):>8}  "
                + (f"[bold red]{', '.join(kinds)}[/]" if kinds else "-"),
                highlight=False,
            )
            origin = int(direction.start_ns[0])
            notes += [
                f"  {escape(printable(label))} {tag} {KIND_NAMES[f.kind]} in {f.steps_flagged} "
                f"steps, {(int(direction.start_ns[f.first_step]) - origin) / 1e9:.1f}-"
                f"{(int(direction.end_ns[f.last_step]) - origin) / 1e9:.1f} s: "
                f"{_WHY[KIND_NAMES[f.kind]]}"
                for f in flagged
            ]
    for note in notes:
        console.print(note, highlight=False)


def throttle_line(direction: str, throttle: Throttle | None) -> str | None:
    """E.g. ``31 saturated or long-burst seconds by cause: pfc 0, ecn 20 (64.5%), ...``;
    None where no congestion counter was recorded for the direction or it has no such second."""
    if throttle is None or throttle.counts.total == 0:
        return None
    counts = throttle.counts
    parts = []
    for cause in DIRECTION_CAUSES[direction]:
        seconds = counts.seconds[CAUSES.index(cause)]
        parts.append(
            f"{cause} {seconds} ({_percent(counts.share(cause))})" if seconds else f"{cause} 0"
        )
    return f"{counts.total} saturated or long-burst seconds by cause: " + ", ".join(parts)


def throttle_note(report: Report) -> str | None:
    """What the cause lines rest on, once under the table; None without any."""
    judged = [(d.direction, d.throttle) for p in report.ports for d in p.directions if d.throttle]
    if not judged:
        return None
    note = (
        "causes: one per second, pfc before ecn before credit; slow counters are read once "
        "a second, so a cause can land one second early or late"
    )
    if any(name == "transmit" and not t.stalled_time for name, t in judged):
        note += (
            "; credit means port_xmit_wait moved at all (its tick is unknown without "
            "--xmit-wait-tick)"
        )
    return note


# Left-justified: the names; the rest are figures.
_JOB_TEXT = ("job", "role", "user", "name")


def print_jobs(jobs: tuple[JobReport, ...], console: Console) -> None:
    """Per job its compute ports, then its storage ports apart: saturated time, what 15 s
    windows hide, bursts, and the iteration period its bursts repeat at."""
    columns = [
        _Column("job", 0),
        _Column("role", 0),
        _Column("ports", 2),
        _Column("saturated", 0),
        _Column("hidden sat.", 0),
        _Column("bursts", 3),
        _Column("burst bytes", 4),
        _Column("iteration", 1),
        _Column("user", 5),
        _Column("name", 6),
    ]
    cells = []
    lines = []
    for job in jobs:
        identity = escape(printable(job.job.job_id))
        for role, totals in ((COMPUTE, job.compute), (STORAGE, job.storage)):
            ports = job.ports(role)
            if not ports:
                continue
            hidden = totals.hidden_saturated_ns / NS_PER_SECOND
            iteration = job.iteration if role == COMPUTE else None
            values = (
                identity,
                role,
                str(len(ports)),
                _duration(totals.saturated_ns / NS_PER_SECOND),
                f"[bold red]{_duration(hidden)}[/]" if hidden > 0 else _duration(hidden),
                str(totals.bursts),
                byte_text(totals.burst_bytes),
                "-" if iteration is None else f"{iteration.period_ns / NS_PER_SECOND:.3f} s",
                escape(printable(job.job.user)) or "-",
                escape(printable(job.job.name)) or "-",
            )
            cells.append({c.header: v for c, v in zip(columns, values, strict=True)})
        held = "; ".join(
            f"{role} {' '.join(escape(printable(p)) for p in job.ports(role))}"
            for role in (COMPUTE, STORAGE)
            if job.ports(role)
        )
        who = ", ".join(
            escape(printable(part))
            for part in (job.job.scheduler, job.job.user, job.job.name)
            if part
        )
        lines.append(f"job {identity} ({who}): {held}")
    longest = max(len(printable(job.job.job_id)) for job in jobs)
    print_fitted(
        console,
        "jobs: each job's ports while it held them (the trace's job table)",
        columns,
        cells,
        lambda c: {
            "justify": "left" if c.header in _JOB_TEXT else "right",
            "min_width": longest if c.header == "job" else None,
        },
    )
    for line in lines:
        console.print(line, highlight=False)
    console.print(
        "note: a port two jobs hold counts for both; iteration: the lag at which its compute "
        "bursts repeat",
        highlight=False,
    )
