"""The contrast a person reads: the millisecond peak beside the 15-second average, in one line."""

from __future__ import annotations

from dataclasses import dataclass

from burstscope.detectors.analyzer import Summary
from burstscope.detectors.config import NS_PER_SECOND, scale_label


@dataclass(frozen=True, slots=True)
class Contrast:
    """What the coarse view hides, per port direction."""

    peak_to_mean_ratio: float | None  # None when the port carried nothing
    saturated_seconds: float
    hidden_saturated_seconds: float
    idle_fraction_coarse: float | None
    idle_fraction_finest: float | None
    verdict: str


def _percent(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 0.1 or value == 0.0:
        return f"{value * 100:.0f}%"
    return f"{value * 100:.2g}%"


def _seconds(ns: int) -> str:
    seconds = ns / NS_PER_SECOND
    if seconds >= 10:
        return f"{seconds:.0f} s"
    if seconds >= 0.1:
        return f"{seconds:.1f} s"
    return f"{seconds * 1000:.0f} ms"


def verdict(summary: Summary) -> str:
    """One line: e.g. "15-s average 12%, 1-ms peak 100%: 3.1 s saturated inside windows that
    look under 25%"; plain wording for a quiet port and for one saturated throughout."""
    t = summary.thresholds
    mean = summary.mean_utilization
    if mean is None:
        return "no usable samples: every interval was a gap, reset or first reading"
    coarse = scale_label(t.coarse_window_ns)
    fine = scale_label(summary.finest_interval_ns)
    peak = summary.finest.maximum or 0.0
    head = f"{coarse} average {_percent(mean)}, {fine} peak {_percent(peak)}"
    coarse_max = summary.coarse.maximum or 0.0
    if peak < t.burst:
        return f"{head}: quiet, no {fine} sample above {_percent(t.burst)}"
    hidden = summary.hidden_saturated_ns
    if hidden > 0:
        return (
            f"{head}: {_seconds(hidden)} saturated inside windows that look under "
            f"{_percent(t.busy)}"
        )
    if mean >= t.saturated:
        return f"{head}: saturated throughout; the {coarse} view shows it"
    bursts = summary.bursts.count
    if summary.saturated_ns == 0:
        return (
            f"{head}: {bursts} burst{'s' if bursts != 1 else ''} above {_percent(t.burst)}, "
            f"none saturated"
        )
    if coarse_max >= t.busy:
        return (
            f"{head}: {_seconds(summary.saturated_ns)} saturated, all inside windows "
            f"at or above {_percent(t.busy)}"
        )
    return f"{head}: {_seconds(summary.saturated_ns)} saturated"


def contrast(summary: Summary) -> Contrast:
    return Contrast(
        peak_to_mean_ratio=summary.peak_to_mean_ratio,
        saturated_seconds=summary.saturated_ns / NS_PER_SECOND,
        hidden_saturated_seconds=summary.hidden_saturated_ns / NS_PER_SECOND,
        idle_fraction_coarse=summary.coarse.idle_fraction,
        idle_fraction_finest=summary.finest.idle_fraction,
        verdict=verdict(summary),
    )
