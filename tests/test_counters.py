"""Counter arithmetic: one sequence-driven table, and streaming equals batch."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from burstscope.detectors.counters import (
    RESETTING_64,
    WRAPPING_32,
    CounterKind,
    CounterSpec,
    CounterTracker,
    counter_deltas,
)

SATURATING_8 = CounterSpec(CounterKind.SATURATING, 8)
SATURATING_16 = CounterSpec(CounterKind.SATURATING, 16)
U64_MAX = 2**64 - 1


@pytest.mark.parametrize(
    ("spec", "readings", "expected"),
    [
        # 64-bit: increments, then a reset re-baselines without a negative delta.
        (RESETTING_64, [10, 15, 15, 40, 3, 9], [None, 5, 0, 25, None, 6]),
        # Near the top of 64 bits the arithmetic stays exact.
        (RESETTING_64, [U64_MAX - 10, U64_MAX - 4, U64_MAX], [None, 6, 4]),
        # 32-bit wraps modulo 2**32.
        (WRAPPING_32, [2**32 - 3, 2, 10], [None, 5, 8]),
        # Saturating counters stop at all-ones: the climb to the top is known, then
        # nothing is invented until a clear (a decrease) re-baselines.
        (SATURATING_8, [250, 255, 255, 255, 0, 7], [None, 5, None, None, None, 7]),
        (SATURATING_16, [65_000, 65_535, 12], [None, 535, None]),
    ],
)
def test_counter_sequences(
    spec: CounterSpec, readings: list[int], expected: list[int | None]
) -> None:
    tracker = CounterTracker(spec)
    assert [tracker.update(value) for value in readings] == expected


def test_resets_and_saturation_are_reported() -> None:
    deltas = counter_deltas(None, [5, 9, 2, 4], RESETTING_64)
    assert deltas.resets == 1
    assert deltas.reset.tolist() == [False, False, True, False]
    saturating = counter_deltas(None, [1, 255, 255], SATURATING_8)
    assert saturating.saturated.tolist() == [False, True, True]


def test_rebaseline_hides_the_interval_across_a_reopen() -> None:
    deltas = counter_deltas(100, [110, 5_000, 5_010], RESETTING_64, [False, True, False])
    assert deltas.valid.tolist() == [True, False, True]
    assert deltas.delta.tolist() == [10, 0, 10]


@given(
    st.lists(st.integers(0, 2**40), min_size=1, max_size=60),
    st.lists(st.integers(1, 10), min_size=1, max_size=20),
    st.sampled_from([RESETTING_64, WRAPPING_32, SATURATING_16]),
)
def test_chunked_equals_whole(values: list[int], cuts: list[int], spec: CounterSpec) -> None:
    if spec.width_bits < 64:
        values = [v % (spec.maximum + 1) for v in values]
    whole = counter_deltas(None, values, spec)
    pieces, previous, start = [], None, 0
    for cut in [*cuts, len(values)]:
        chunk = values[start : start + cut]
        if not chunk:
            break
        pieces.append(counter_deltas(previous, chunk, spec))
        previous = chunk[-1]
        start += cut
    assert np.concatenate([p.delta for p in pieces]).tolist() == whole.delta.tolist()
    assert np.concatenate([p.valid for p in pieces]).tolist() == whole.valid.tolist()


@given(st.lists(st.integers(0, 2**62), min_size=2, max_size=50))
def test_valid_increments_never_negative_and_sum_to_the_climb(values: list[int]) -> None:
    deltas = counter_deltas(None, values, RESETTING_64)
    assert (deltas.delta >= 0).all()
    monotonic = all(b >= a for a, b in itertools.pairwise(values))
    if monotonic:
        assert int(deltas.delta.sum()) == values[-1] - values[0]
