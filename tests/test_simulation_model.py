"""The traffic model: determinism, the line-rate cap, and the schedule as ground truth."""

from __future__ import annotations

import numpy as np
import pytest

from burstscope.collector.simulation.cursor import CounterCursor
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import MIN_GAP_NS, PROFILES, SECOND
from burstscope.collector.simulation.workload import fifo

PROFILE_NAMES = tuple(PROFILES)


def random_times(seconds: int, count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.sort(rng.integers(0, seconds * SECOND, count))


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_same_seed_same_traffic_and_schedule(profile: str) -> None:
    times = random_times(120, 5_000)
    a, b = TrafficModel(profile, 7), TrafficModel(profile, 7)
    assert all(
        np.array_equal(x, y)
        for x, y in zip(a.counters_at(times), b.counters_at(times), strict=True)
    )
    sa, sb = a.schedule(0, 120 * SECOND), b.schedule(0, 120 * SECOND)
    assert len(sa) > 0
    assert sa.rows() == sb.rows()
    other = TrafficModel(profile, 8).schedule(0, 120 * SECOND)
    assert sa.rows() != other.rows()


def test_walking_in_chunks_and_forgetting_changes_nothing() -> None:
    times = random_times(90, 9_000, seed=1)
    whole = TrafficModel("moe", 3).counters_at(times)
    walker = TrafficModel("moe", 3)
    parts = []
    for chunk in np.array_split(times, 30):
        parts.append(walker.counters_at(chunk))
        walker.forget_before(int(chunk[-1]))
    assert len(walker.blocks()) <= 3  # bounded memory
    for direction in range(2):
        assert np.array_equal(
            np.concatenate([p[direction] for p in parts], axis=1), whole[direction]
        )


def test_cursor_reads_the_same_integers_as_the_vectorised_path() -> None:
    times = random_times(30, 3_000, seed=2)
    xmit, rcv = TrafficModel("moe", 4).counters_at(times)
    cursor = CounterCursor(TrafficModel("moe", 4))
    for i, t in enumerate(times.tolist()):
        for port in range(9):
            assert cursor.bytes_at(2 * port, t) == xmit[port, i]
            assert cursor.bytes_at(2 * port + 1, t) == rcv[port, i]
    assert len(cursor.model.blocks()) <= 2


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_no_interval_carries_more_than_line_rate(profile: str) -> None:
    model = TrafficModel(profile, 5)
    # Random grids, a fine regular one, and every segment boundary itself.
    fine = np.arange(0, 20 * SECOND, 50_000)
    coarse = random_times(300, 20_000, seed=5)
    for times in (fine, coarse):
        xmit, rcv = model.counters_at(times)
        dt = np.diff(times)
        for port, spec in enumerate(model.ports):
            for values in (xmit[port], rcv[port]):
                moved = np.diff(values)
                assert (moved >= 0).all()
                assert (moved <= spec.bytes_per_ns * dt).all()
    # The busiest 1 ms is at line rate: the cap binds, it is not just never reached.
    xmit, _ = model.counters_at(np.arange(0, 300 * SECOND, 1_000_000))
    assert np.diff(xmit[0]).max() >= 0.95 * 50 * 1_000_000


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_schedule_bytes_are_the_integral_of_the_counters(profile: str) -> None:
    model = TrafficModel(profile, 6)
    span = 200 * SECOND
    schedule = model.schedule(0, span)
    assert len(schedule) > 100
    xmit_start, rcv_start = model.counters_at(schedule.start_ns)
    xmit_end, rcv_end = model.counters_at(schedule.end_ns)
    rows = np.arange(len(schedule))
    start = np.where(
        schedule.direction == 0, xmit_start[schedule.port, rows], rcv_start[schedule.port, rows]
    )
    end = np.where(
        schedule.direction == 0, xmit_end[schedule.port, rows], rcv_end[schedule.port, rows]
    )
    assert np.array_equal(end - start, schedule.bytes)
    line = np.array([p.bytes_per_ns for p in model.ports])[schedule.port]
    duration = schedule.end_ns - schedule.start_ns
    assert (schedule.bytes >= 0.5 * line * duration).all()  # every burst is above 50%
    assert (schedule.bytes <= line * duration).all()


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_fifteen_second_means_follow_from_the_schedule(profile: str) -> None:
    """Bytes in each 15 s window = the schedule's bursts (pro rata at edges) + the trickle."""
    model = TrafficModel(profile, 9)
    edges = np.arange(0, 20 * 15 * SECOND + 1, 15 * SECOND)
    xmit, rcv = model.counters_at(edges)
    schedule = model.schedule(0, int(edges[-1]))
    trickle = model.profile.trickle
    for port, spec in enumerate(model.ports):
        for direction, values in enumerate((xmit, rcv)):
            mine = schedule.select(port, direction)
            counted = np.diff(values[port]) / (spec.bytes_per_ns * 15 * SECOND)
            overlap = np.clip(
                np.minimum(mine.end_ns[None, :], edges[1:, None])
                - np.maximum(mine.start_ns[None, :], edges[:-1, None]),
                0,
                None,
            )
            fraction = overlap / np.maximum(mine.end_ns - mine.start_ns, 1)[None, :]
            burst_bytes = (fraction * mine.bytes[None, :]).sum(axis=1)
            quiet = 15 * SECOND - overlap.sum(axis=1)
            expected = (burst_bytes + quiet * spec.bytes_per_ns * trickle) / (
                spec.bytes_per_ns * 15 * SECOND
            )
            # Pro rata is exact for a burst at one rate; queued bursts mix rates slightly.
            assert np.abs(counted - expected).max() < 0.005


def test_fifo_queues_back_to_back_and_leaves_no_unresolvable_gap() -> None:
    arrival = np.array([[0, 1_000, 10_000_000, 14_500_000, 30_000_000]], dtype=np.int64)
    duration = np.full((1, 5), 4_000_000, dtype=np.int64)
    start, end = fifo(arrival, duration)
    # The second queues behind the first; the third would leave a 2 ms gap, too short for
    # a 1 ms sampler to see, so it goes 3 ms after; the fourth then queues behind it.
    assert start.tolist() == [[0, 4_000_000, 11_000_000, 15_000_000, 30_000_000]]
    assert end.tolist() == [[4_000_000, 8_000_000, 15_000_000, 19_000_000, 34_000_000]]
    gaps = start[0, 1:] - end[0, :-1]
    assert ((gaps == 0) | (gaps >= MIN_GAP_NS)).all()


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown profile 'sparse' .*moe"):
        TrafficModel("sparse")
