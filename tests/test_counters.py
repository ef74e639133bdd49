"""Counter arithmetic: one sequence-driven table, and streaming equals batch."""

from __future__ import annotations

import itertools
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstscope.detectors import counters
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


# One step of a counter sequence: traffic, a reset, a jump to just below all-ones (then
# saturation or a wrap), or a bad reading of 2**63 or more (garbage from a driver or a
# test tree). Traffic is most steps, so many chunks hold no bad reading and take the
# int64 branch (sampled_from draws each entry alike, so repeats weigh).
_STEPS = st.tuples(
    st.sampled_from(["add"] * 6 + ["reset", "below_top", "bad"]),
    st.one_of(st.integers(0, 100), st.integers(0, 2**20)),
)


def _readings(spec: CounterSpec, steps: list[tuple[str, int]]) -> list[int]:
    value, readings = 0, []
    for kind, amount in steps:
        if kind == "add":
            value += amount
            if spec.kind is CounterKind.SATURATING:
                value = min(value, spec.maximum)  # IBA PortCounters stop at all-ones
            elif spec.kind is CounterKind.WRAPPING:
                value %= spec.maximum + 1
            else:
                value %= 2**64  # the 64-bit register wraps
        elif kind == "below_top":
            value = max(spec.maximum - amount % 8, 0)
        elif kind == "bad":
            value = 2**63 + amount
        else:
            value = amount % 1024
        readings.append(value)
    return readings


@settings(max_examples=300)
@given(
    st.sampled_from([RESETTING_64, WRAPPING_32, SATURATING_8, SATURATING_16]),
    st.lists(st.tuples(_STEPS, st.booleans()), min_size=1, max_size=80),
    st.lists(st.integers(1, 12), min_size=1, max_size=12),
)
def test_exact_branch_equals_the_modular_rules(
    spec: CounterSpec, steps: list[tuple[tuple[str, int], bool]], cuts: list[int]
) -> None:
    """counter_deltas' int64 branch (readings below 2**63: the analyzers' usual chunk) gives
    the modulo-2**64 branch's deltas and flags, chunk by chunk, rebaselines included."""
    readings = _readings(spec, [step for step, _ in steps])
    marks = [mark for _, mark in steps]
    previous: int | None = None
    start = 0
    out = np.empty(len(readings), dtype=np.uint64)
    for cut in itertools.cycle(cuts):
        chunk, chunk_marks = readings[start : start + cut], marks[start : start + cut]
        if not chunk:
            break
        fast = counter_deltas(previous, chunk, spec, chunk_marks, out)
        with mock.patch.object(counters, "_below_2_63", return_value=False):
            general = counter_deltas(previous, chunk, spec, chunk_marks)
        for field in ("delta", "valid", "reset", "saturated"):
            assert getattr(fast, field).tolist() == getattr(general, field).tolist(), field
        previous = chunk[-1]
        start += cut


def test_readings_below_2_63_take_the_exact_branch() -> None:
    """The comparison above covers the branch the analyzers use; readings of 2**63 or more
    (and wrapping counters) take the modular one."""
    with mock.patch.object(counters, "_exact_deltas", wraps=counters._exact_deltas) as exact:
        counter_deltas(10, [20, 5, 2**62], RESETTING_64)
        counter_deltas(10, [20, 2**63], RESETTING_64)
        counter_deltas(10, [20, 5], WRAPPING_32)
    assert exact.call_count == 1


def test_a_reading_of_2_63_or_more_is_unknown_whichever_way_it_goes() -> None:
    """Down from all-ones by less than 2**63 is a reset; up by 2**63 or more, or down by more
    than 2**63 (all-ones to a small value), leaves the interval unknown."""
    deltas = counter_deltas(100, [U64_MAX, 200, 300], RESETTING_64)
    assert deltas.valid.tolist() == [False, False, True]
    assert deltas.reset.tolist() == [False, True, False]
    assert deltas.delta.tolist() == [0, 0, 100]
