"""Rail imbalance (detectors.rails): its invariants, and its score against injected faults."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import LIGHT_RAIL, SECOND, SLOW_RAIL, RailFault
from burstscope.detectors.bursts import Bursts
from burstscope.detectors.rails import (
    BALANCED,
    BIN_NS,
    LIGHT,
    SLOW,
    RailBins,
    RailLimits,
    flagged_now,
    rail_table,
    step_verdicts,
    verdicts,
)
from burstscope.testing.faults_rails import score_rails, simulate_rails

RAILS = 8
MS = 1_000_000
steps_and_rails = st.tuples(st.integers(1, 12), st.integers(3, 9))


def busy_steps(draw: st.DrawFn, steps: int, rails: int) -> tuple[np.ndarray, np.ndarray]:
    nbytes = np.array(
        draw(st.lists(st.floats(1e6, 1e10), min_size=steps * rails, max_size=steps * rails))
    ).reshape(steps, rails)
    peak = np.array(
        draw(st.lists(st.floats(0.5, 1.0), min_size=steps * rails, max_size=steps * rails))
    ).reshape(steps, rails)
    return nbytes, peak


@st.composite
def tables(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    steps, rails = draw(steps_and_rails)
    return busy_steps(draw, steps, rails)


@given(st.integers(1, 12), st.integers(3, 9), st.floats(1e6, 1e10), st.floats(0.01, 1.0))
def test_identical_rails_are_never_flagged(steps: int, rails: int, size: float, top: float) -> None:
    nbytes = np.full((steps, rails), size)
    peak = np.full((steps, rails), top)
    codes, _ = step_verdicts(nbytes, peak, [0] * rails)
    assert (codes == BALANCED).all()


@given(tables(), st.floats(1e-3, 1e3))
@settings(max_examples=50)
def test_scaling_every_rails_bytes_equally_changes_nothing(
    table: tuple[np.ndarray, np.ndarray], scale: float
) -> None:
    nbytes, peak = table
    peers = [0] * nbytes.shape[1]
    before = step_verdicts(nbytes, peak, peers)
    after = step_verdicts(nbytes * scale, peak, peers)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[1], after[1])


@given(tables(), st.data())
@settings(max_examples=50)
def test_a_rail_with_no_bytes_while_its_peers_move_is_always_light(
    table: tuple[np.ndarray, np.ndarray], data: st.DataObject
) -> None:
    nbytes, peak = table
    rail = data.draw(st.integers(0, nbytes.shape[1] - 1))
    nbytes[:, rail] = 0.0
    peak[:, rail] = 0.0
    codes, judged = step_verdicts(nbytes, peak, [0] * nbytes.shape[1])
    assert (codes[:, rail] == LIGHT).all() and judged[:, rail].all()


@given(tables())
@settings(max_examples=50)
def test_a_rail_outside_every_peer_group_is_never_judged(
    table: tuple[np.ndarray, np.ndarray],
) -> None:
    nbytes, peak = table
    nbytes[:, -1] = 0.0  # the storage NIC moving nothing while the rails train
    peers = [0] * (nbytes.shape[1] - 1) + [-1]
    codes, judged = step_verdicts(nbytes, peak, peers)
    assert codes[:, -1].tolist() == [BALANCED] * len(codes) and not judged[:, -1].any()


def test_a_group_of_two_has_no_median_to_judge_by_and_idle_peers_judge_nothing() -> None:
    nbytes = np.array([[1e9, 0.0, 5e8, 5e8]])
    peak = np.array([[1.0, 0.0, 0.2, 0.2]])
    codes, judged = step_verdicts(nbytes, peak, [0, 0, 1, 1])
    assert not judged.any() and not codes.any()


def test_a_slow_rail_needs_a_lower_peak_and_a_longer_drain() -> None:
    nbytes = np.array([[1e9, 1e9, 1e9, 1e9], [1e9, 1e9, 1e9, 1e9]])
    peak = np.array([[1.0, 1.0, 1.0, 0.5], [1.0, 1.0, 1.0, 0.9]])
    codes, _ = step_verdicts(nbytes, peak, [0] * 4)
    assert codes[:, 3].tolist() == [SLOW, BALANCED]


def test_one_odd_step_is_no_verdict_four_of_five_is() -> None:
    codes = np.zeros((12, 3), np.int64)
    judged = np.ones((12, 3), np.bool_)
    codes[2, 0] = LIGHT
    codes[[5, 6, 8, 9], 1] = SLOW
    found = verdicts(codes, judged, RailLimits())
    assert [(f.rail, f.kind, f.first_step, f.last_step, f.steps_flagged) for f in found] == [
        (1, SLOW, 5, 9, 4)
    ]
    assert flagged_now(codes[:10], judged[:10]) == {1: SLOW}
    assert flagged_now(codes, judged) == {}  # steps 10 and 11 balanced: 3 of the last 5


def test_steps_not_judged_are_skipped_not_counted_against_a_rail() -> None:
    codes = np.zeros((7, 3), np.int64)
    codes[[0, 1, 3, 5], 2] = LIGHT
    judged = np.ones((7, 3), np.bool_)
    judged[[2, 4], 2] = False  # idle steps between
    assert [(f.rail, f.first_step, f.last_step) for f in verdicts(codes, judged)] == [(2, 0, 5)]


def test_rail_bins_take_the_windows_bytes_and_the_bursts_peaks_and_time() -> None:
    bins = RailBins()
    ends = np.arange(1, 5, dtype=np.int64) * BIN_NS  # four 10 ms windows, aligned
    utilization = np.array([0.1, 0.6, 0.2, 0.0])
    covered = np.array([BIN_NS, BIN_NS, BIN_NS // 2, BIN_NS])
    burst = Bursts(
        np.array([12_000_000]),
        np.array([27_000_000]),
        np.array([9_000_000]),
        np.array([0.95]),
        np.array([0.6]),
    )
    bins.feed(ends[:2], utilization[:2], covered[:2], 1_000_000_000, Bursts.empty())
    bins.feed(ends[2:], utilization[2:], covered[2:], 1_000_000_000, burst)
    nbytes, peak = bins.grid(0, 4)
    # Bytes: utilization x covered time x rate (1 GB/s: 1 MB a millisecond).
    np.testing.assert_allclose(nbytes, [1e6, 6e6, 1e6, 0.0])
    # The burst's peak goes to the bin it starts in; a bin without one keeps its mean.
    np.testing.assert_allclose(peak, [0.1, 0.95, 0.2, 0.0])
    # The burst's 15 ms, shared by the steps it crosses.
    between = bins.burst_ns_between(np.array([0, 15, 20]) * MS, np.array([15, 20, 40]) * MS)
    assert between.tolist() == [3 * MS, 5 * MS, 7 * MS]
    assert bins.span() == (0, 4)
    table = rail_table(
        [bins, bins, bins],
        np.array([0, BIN_NS]),
        np.array([BIN_NS, 3 * BIN_NS]),
        np.zeros(2, np.int64),
    )
    np.testing.assert_allclose(table.bytes[:, 0], [1e6, 7e6])
    np.testing.assert_allclose(table.peak[:, 1], [0.1, 0.95])


def test_the_default_node_is_the_same_with_no_faults_and_faults_change_only_their_rail() -> None:
    window = (0, 8 * SECOND)
    plain = TrafficModel("moe", 4).schedule(*window)
    late = TrafficModel("moe", 4, rail_faults=(RailFault(2, SLOW_RAIL, 0.5, 100 * SECOND),))
    assert np.array_equal(late.schedule(*window).start_ns, plain.start_ns)
    # Inside the first iteration (3.3 s) the other rails and the storage NIC move the same
    # bytes; the slow rail fewer. Its iteration then lasts longer: everything after shifts.
    times = np.arange(1, 7, dtype=np.int64) * SECOND // 2
    slow = TrafficModel("moe", 4, rail_faults=(RailFault(2, SLOW_RAIL, 0.5),)).counters_at(times)
    base = TrafficModel("moe", 4).counters_at(times)
    others = [0, 1, 3, 4, 5, 6, 7, 8]
    assert np.array_equal(slow[0][others], base[0][others])
    assert (slow[0][2] < base[0][2]).any() and (slow[0][2] <= base[0][2]).all()
    with pytest.raises(ValueError, match="fraction"):
        RailFault(2, LIGHT_RAIL, 0.0)
    with pytest.raises(ValueError, match="training rail"):
        RailFault(8, LIGHT_RAIL, 0.5)


@pytest.mark.parametrize(
    ("kind", "fraction", "found"),
    [(SLOW_RAIL, 0.5, 1), (SLOW_RAIL, 0.8, 1), (LIGHT_RAIL, 0.5, 1), (LIGHT_RAIL, 0.85, 1)],
)
def test_injected_rails_are_found_on_their_rail_and_kind_without_false_alarms(
    kind: str, fraction: float, found: int
) -> None:
    fault = RailFault(5, kind, fraction, 20 * SECOND)
    score = score_rails(simulate_rails(11, 50, [fault]), [fault])
    assert (score.found, score.false_alarms) == (found, 0)


def test_a_clean_node_raises_no_alarm() -> None:
    node = simulate_rails(12, 60)
    assert node.findings == ((), ())
    assert (node.tables[0].period_ns > 0).all()  # the MoE step, 3.309 s, every minute
