"""The words of the outputs: scale names, and each finding of detectors.contrast as a line."""

from __future__ import annotations

import numpy as np
import pytest

from burstscope.detectors.analyzer import analyze
from burstscope.wording import scale_label, verdict
from tests.test_detectors import RATE, bursts_of, one_burst, series


@pytest.mark.parametrize(
    ("utilization", "expected"),
    [
        (
            one_burst(),
            "15-s average 0.13%, 1-ms peak 100%: 40 ms saturated inside windows that look "
            "under 25%",
        ),
        (np.zeros(20_000), "15-s average 0%, 1-ms peak 0%: quiet, no 1-ms sample above 50%"),
        (
            np.ones(20_000),
            "15-s average 100%, 1-ms peak 100%: saturated throughout; the 15-s view shows it",
        ),
        (bursts_of(0.7), "15-s average 30%, 1-ms peak 70%: 300 bursts above 50%, none saturated"),
        (
            bursts_of(1.0),
            "15-s average 31%, 1-ms peak 100%: 0.3 s saturated, all inside windows at or above 25%",
        ),
    ],
)
def test_each_finding_in_words(utilization: np.ndarray, expected: str) -> None:
    summary, _ = analyze(*series(utilization), RATE)
    assert verdict(summary) == expected


def test_a_series_without_one_usable_interval() -> None:
    summary, _ = analyze(*series([0.5]), RATE, rebaseline=[False, True])
    assert verdict(summary) == "no usable samples: every interval was a gap, reset or first reading"


def test_scale_names() -> None:
    assert [scale_label(n) for n in (500, 100_000, 1_000_000, 15 * 10**9, 1_500_000_000)] == [
        "500-ns",
        "100-us",
        "1-ms",
        "15-s",
        "1.5-s",
    ]
