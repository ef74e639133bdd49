"""A block cut where the line rate changes: one table of blocks, and any chunking agrees."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from burstscope.detectors.line_rate import RateRun, rate_runs

OLD, NEW, THIRD = 50_000_000_000, 25_000_000_000, 12_500_000_000


@pytest.mark.parametrize(
    ("rates", "in_force", "expected"),
    [
        ([], OLD, []),
        # The usual block: the rate in force throughout.
        ([OLD, OLD, OLD], OLD, [(0, 3, OLD)]),
        # A block that starts at a new rate is one run of it.
        ([NEW, NEW], OLD, [(0, 2, NEW)]),
        # The live cut: rows before the reading at the old rate, the rest at the new.
        ([OLD, OLD, NEW, NEW, NEW], OLD, [(0, 2, OLD), (2, 5, NEW)]),
        ([OLD, NEW, THIRD], OLD, [(0, 1, OLD), (1, 2, NEW), (2, 3, THIRD)]),
        # Unknown rows (0) keep the rate in force before them, even across a block start.
        ([0, 0, NEW], OLD, [(0, 2, OLD), (2, 3, NEW)]),
        ([0, 0], OLD, [(0, 2, OLD)]),
        ([NEW, 0, NEW, 0], OLD, [(0, 4, NEW)]),
        ([OLD, 0, NEW], OLD, [(0, 2, OLD), (2, 3, NEW)]),
        # Nothing known yet: the runs carry 0 until a row states a rate.
        ([0, 0, OLD], 0, [(0, 2, 0), (2, 3, OLD)]),
    ],
)
def test_rate_runs(rates: list[int], in_force: int, expected: list[tuple[int, int, int]]) -> None:
    runs = rate_runs(np.array(rates, dtype=np.int64), in_force)
    assert runs == [RateRun(slice(start, stop), rate) for start, stop, rate in expected]


def _per_row(runs: list[RateRun], size: int) -> list[int]:
    rows = [-1] * size
    for run in runs:
        rows[run.rows] = [run.rate] * (run.rows.stop - run.rows.start)
    return rows


@given(
    rates=st.lists(st.sampled_from([0, OLD, NEW, THIRD]), max_size=40),
    in_force=st.sampled_from([0, OLD, NEW]),
    cut=st.integers(min_value=0, max_value=40),
)
def test_runs_cover_the_block_and_any_chunking_agrees(
    rates: list[int], in_force: int, cut: int
) -> None:
    array = np.array(rates, dtype=np.int64)
    runs = rate_runs(array, in_force)
    # Contiguous, never empty, each a change from the one before.
    starts = [run.rows.start for run in runs]
    assert starts == [0, *[run.rows.stop for run in runs[:-1]]][: len(runs)]
    assert (runs[-1].rows.stop if runs else 0) == len(rates)
    assert all(run.rows.stop > run.rows.start for run in runs)
    assert all(a.rate != b.rate for a, b in pairwise(runs))
    # Each row's rate is the last one stated at or before it (in_force before any).
    expected, current = [], in_force
    for rate in rates:
        current = rate or current
        expected.append(current)
    whole = _per_row(runs, len(rates))
    assert whole == expected
    # A drain boundary anywhere gives every row the same rate.
    cut = min(cut, len(rates))
    first = rate_runs(array[:cut], in_force)
    carried = first[-1].rate if first else in_force
    second = rate_runs(array[cut:], carried)
    assert _per_row(first, cut) + _per_row(second, len(rates) - cut) == whole
