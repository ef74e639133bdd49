"""What the coarse view hides, per port direction: the figures and the finding they add up to."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from burstscope.detectors.analyzer import Summary
from burstscope.detectors.config import NS_PER_SECOND


class Finding(enum.Enum):
    """What the millisecond view shows that the coarse average does not, checked in order."""

    NO_SAMPLES = "no_samples"  # every interval was a gap, reset or first reading
    QUIET = "quiet"  # no finest sample reached the burst threshold
    HIDDEN_SATURATION = "hidden_saturation"  # saturated inside coarse windows under busy
    SATURATED_THROUGHOUT = "saturated_throughout"  # the mean itself is saturated
    UNSATURATED_BURSTS = "unsaturated_bursts"  # bursts, none of them saturated
    VISIBLE_SATURATION = "visible_saturation"  # saturated, only in windows at or above busy
    SATURATED = "saturated"  # saturated, in windows not yet settled either way


@dataclass(frozen=True, slots=True)
class Contrast:
    """What the coarse view hides, per port direction."""

    peak_to_mean_ratio: float | None  # None when the port carried nothing
    saturated_seconds: float
    hidden_saturated_seconds: float
    idle_fraction_coarse: float | None
    idle_fraction_finest: float | None
    finding: Finding


def finding(summary: Summary) -> Finding:
    t = summary.thresholds
    mean = summary.mean_utilization
    if mean is None:
        return Finding.NO_SAMPLES
    if (summary.finest.maximum or 0.0) < t.burst:
        return Finding.QUIET
    if summary.hidden_saturated_ns > 0:
        return Finding.HIDDEN_SATURATION
    if mean >= t.saturated:
        return Finding.SATURATED_THROUGHOUT
    if summary.saturated_ns == 0:
        return Finding.UNSATURATED_BURSTS
    if (summary.coarse.maximum or 0.0) >= t.busy:
        return Finding.VISIBLE_SATURATION
    return Finding.SATURATED


def contrast(summary: Summary) -> Contrast:
    return Contrast(
        peak_to_mean_ratio=summary.peak_to_mean_ratio,
        saturated_seconds=summary.saturated_ns / NS_PER_SECOND,
        hidden_saturated_seconds=summary.hidden_saturated_ns / NS_PER_SECOND,
        idle_fraction_coarse=summary.coarse.idle_fraction,
        idle_fraction_finest=summary.finest.idle_fraction,
        finding=finding(summary),
    )
