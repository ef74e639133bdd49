"""The words the outputs put on detector results: scale names and the verdict line."""

from __future__ import annotations

from decimal import Decimal

from burstscope.detectors.analyzer import Summary
from burstscope.detectors.config import NS_PER_MICROSECOND, NS_PER_SECOND
from burstscope.detectors.contrast import Finding, finding


def byte_text(value: int) -> str:
    """A byte count as a person reads it: 4.8 TB, 1.7 GB, 512 B."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def scale_label(interval_ns: int) -> str:
    """A human name for a scale: "1-ms", "100-us", "15-s"."""
    for unit, size in (("s", NS_PER_SECOND), ("ms", 1_000_000), ("us", NS_PER_MICROSECOND)):
        if interval_ns >= size:
            return f"{format((Decimal(interval_ns) / size).normalize(), 'f')}-{unit}"
    return f"{interval_ns}-ns"


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


def is_partial(summary: Summary) -> bool:
    """Whether the trace is shorter than one coarse window: its "15-s" figures cover less."""
    return summary.duration_seconds * NS_PER_SECOND < summary.thresholds.coarse_window_ns


def partial_window(summary: Summary) -> str | None:
    """The line a report prints when its shortest trace does not fill one coarse window."""
    if not is_partial(summary):
        return None
    coarse = scale_label(summary.thresholds.coarse_window_ns)
    span = _seconds(round(summary.duration_seconds * NS_PER_SECOND))
    return (
        f"partial window: the trace covers {span}, less than one {coarse} window, so its "
        f"{coarse} figures are over those {span}"
    )


def verdict(summary: Summary) -> str:
    """One line: e.g. "15-s average 12%, 1-ms peak 100%: 3.1 s saturated inside windows that
    look under 25%"; plain wording for a quiet port and for one saturated throughout."""
    found = finding(summary)
    if found is Finding.NO_SAMPLES:
        return "no usable samples: every interval was a gap, reset or first reading"
    t = summary.thresholds
    coarse = scale_label(t.coarse_window_ns)
    fine = scale_label(summary.finest_interval_ns)
    peak = summary.finest.maximum or 0.0
    average = _percent(summary.mean_utilization)
    if is_partial(summary):
        # A scrape would not have seen a whole window yet: say what the average covers.
        span = _seconds(round(summary.duration_seconds * NS_PER_SECOND))
        head = f"average {average} over {span} (a partial {coarse} window)"
    else:
        head = f"{coarse} average {average}"
    head += f", {fine} peak {_percent(peak)}"
    saturated = _seconds(summary.saturated_ns)
    bursts = summary.bursts.count
    tail = {
        Finding.QUIET: f"quiet, no {fine} sample above {_percent(t.burst)}",
        Finding.HIDDEN_SATURATION: (
            f"{_seconds(summary.hidden_saturated_ns)} saturated inside windows that look "
            f"under {_percent(t.busy)}"
        ),
        Finding.SATURATED_THROUGHOUT: f"saturated throughout; the {coarse} view shows it",
        Finding.UNSATURATED_BURSTS: (
            f"{bursts} burst{'s' if bursts != 1 else ''} above {_percent(t.burst)}, none saturated"
        ),
        Finding.VISIBLE_SATURATION: (
            f"{saturated} saturated, all inside windows at or above {_percent(t.busy)}"
        ),
        Finding.SATURATED: f"{saturated} saturated",
    }
    return f"{head}: {tail[found]}"
