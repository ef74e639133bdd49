"""Streaming equals batch: any chunking of any series gives the identical summary and bursts."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from burstscope.detectors.analyzer import DirectionAnalyzer, analyze
from burstscope.detectors.bursts import Bursts
from burstscope.detectors.config import Thresholds

RATE = 1_000_000_000
MS = 1_000_000
# Small windows so a few hundred samples cross many boundaries at every scale, nested
# (the cascade) and not nested (each scale on its own), and the default 15 s ladder.
THRESHOLDS = [
    Thresholds(coarse_window_ns=30 * MS, windows_ns=(3 * MS, 6 * MS, 30 * MS), max_gap_ns=20 * MS),
    Thresholds(coarse_window_ns=10 * MS, windows_ns=(4 * MS, 10 * MS, 25 * MS), max_gap_ns=9 * MS),
    Thresholds(),
]
LEVELS = [0.0, 0.004, 0.3, 0.55, 0.95, 1.0, 1.3]  # 1.3: jitter, clipped


@st.composite
def traces(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int], int]:
    n = draw(st.integers(min_value=1, max_value=300))
    levels = draw(st.lists(st.sampled_from(LEVELS), min_size=n, max_size=n))
    # Mostly 1 ms; some jitter, duplicates (0), long steps (gaps at the small max_gap).
    steps = draw(
        st.lists(
            st.sampled_from([MS] * 8 + [MS - 37_000, MS + 41_000, 0, 7 * MS, 25 * MS, 2 * 10**9]),
            min_size=n,
            max_size=n,
        )
    )
    events = draw(
        st.lists(st.sampled_from(["", "", "", "", "reset", "rebaseline"]), min_size=n, max_size=n)
    )
    start = draw(st.sampled_from([1_700_000_000_000_000_000, 1_700_000_000_002_500_000, 0]))
    stamps = start + np.cumsum(np.asarray(steps, dtype=np.int64))
    per = np.round(np.asarray(levels) * RATE * np.asarray(steps) / 1e9).astype(np.int64)
    counter = (10**12 + np.cumsum(per)).astype(np.uint64)
    rebaseline = np.zeros(n, dtype=bool)
    for i, event in enumerate(events):
        if event == "reset":
            counter[i:] -= counter[i]  # back to zero: a decrease unless it already was
        elif event == "rebaseline":
            rebaseline[i] = True
    cuts = sorted(draw(st.lists(st.integers(min_value=0, max_value=n), max_size=8)))
    choice = draw(st.integers(min_value=0, max_value=len(THRESHOLDS) - 1))
    return stamps, counter, rebaseline, cuts, choice


@settings(max_examples=300, deadline=None)
@given(traces(), st.booleans())
def test_any_chunking_gives_the_batch_result(
    trace: tuple[np.ndarray, np.ndarray, np.ndarray, list[int], int], keep_bursts: bool
) -> None:
    stamps, counter, rebaseline, cuts, choice = trace
    thresholds = THRESHOLDS[choice]
    batch, batch_bursts = analyze(
        stamps, counter, RATE, thresholds, rebaseline, finest_interval_ns=MS
    )
    analyzer = DirectionAnalyzer(RATE, thresholds, MS, keep_bursts=keep_bursts)
    closed = []
    utilization = []
    edges = [0, *cuts, stamps.size]
    for low, high in itertools.pairwise(edges):
        chunk = analyzer.feed(stamps[low:high], counter[low:high], rebaseline[low:high])
        closed.append(chunk.bursts)
        utilization.append(chunk.utilization)
        assert not np.isnan(chunk.utilization).any()
        assert ((chunk.utilization >= 0) & (chunk.utilization <= 1)).all()
    closed.append(analyzer.finish().bursts)
    assert analyzer.summary() == batch
    assert Bursts.concatenate(closed) == batch_bursts
    assert analyzer.bursts() == (batch_bursts if keep_bursts else Bursts.empty())
    reference = DirectionAnalyzer(RATE, thresholds, MS)
    whole = reference.feed(stamps, counter, rebaseline)
    assert np.array_equal(np.concatenate(utilization), whole.utilization)
    reference.finish()
    assert np.array_equal(reference.saturated_seconds(), analyzer.saturated_seconds())
    assert batch.bursts.count == len(batch_bursts)
    assert batch.bursts.bytes_total == int(batch_bursts.bytes.sum())
