"""detectors/throttle.py: counters to causes, limits, attribution to seconds, precedence."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstscope.detectors.counters import CounterKind, CounterSpec
from burstscope.detectors.throttle import (
    CAUSES,
    CLEAN,
    CREDIT,
    ECN,
    PFC,
    CauseSeconds,
    Evidence,
    ThrottleLimits,
    _touched,
    classify,
    classify_direction,
    counter_cause,
    evidence,
    long_burst_seconds,
)

S = 1_000_000_000
LIMITS = ThrottleLimits()


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("rx_prio3_pause_duration", PFC),  # the peer paused this port: its transmit
        ("tx_prio3_pause_duration", PFC),  # it paused its peer: its receive
        ("rx_prio0_pause", PFC),
        ("tx_pause_ctrl_phy", PFC),
        ("rp_cnp_handled", ECN),
        ("np_cnp_sent", ECN),
        ("np_ecn_marked_roce_packets", ECN),
        ("port_xmit_wait", CREDIT),
        ("rp_cnp_ignored", None),  # no direction: not evidence of either
        ("symbol_error", None),
        ("rx_prio3_bytes", None),
    ],
)
def test_each_congestion_counter_names_one_cause(name: str, cause: str | None) -> None:
    assert counter_cause(name) == cause


def _over(
    name: str, values: list[int], limits: ThrottleLimits = LIMITS, **kw: object
) -> list[bool]:
    times = [i * S for i in range(len(values))]
    found = evidence(name, times, values, limits, **kw)  # type: ignore[arg-type]
    assert found is not None
    return [bool(flag) for flag in found.over]


def test_limits_per_second_of_interval() -> None:
    # Pause durations in microseconds: 1 ms a second passes, 999 us does not.
    assert _over("rx_prio3_pause_duration", [0, 999, 1999, 1999]) == [False, False, True, False]
    # Frames and packets per second.
    assert _over("rx_prio3_pause", [0, 9, 19]) == [False, False, True]
    assert _over("rp_cnp_handled", [0, 99, 199]) == [False, False, True]
    # xmit_wait: any tick without the tick's length; with it, 0.1% of the time stalled.
    assert _over("port_xmit_wait", [0, 1, 1, 4000]) == [False, True, False, True]
    timed = ThrottleLimits(xmit_wait_tick_ns=256)
    assert _over("port_xmit_wait", [0, 3906, 7813], timed) == [False, False, True]


def test_an_unknown_interval_is_no_evidence() -> None:
    # A reset (the counter went backwards) and a rebaseline: those intervals say nothing.
    assert _over("np_cnp_sent", [0, 500, 10, 900]) == [False, True, False, True]
    marks = np.array([False, False, True, False])
    assert _over("np_cnp_sent", [0, 500, 900, 1400], rebaseline=marks) == [
        False,
        True,
        False,
        True,
    ]
    # A 32-bit PortCounter stuck at all-ones adds nothing: no evidence once stuck.
    stuck = CounterSpec(CounterKind.SATURATING, 32)
    top = (1 << 32) - 1
    assert _over("port_xmit_wait", [top - 5, top, top], spec=stuck) == [False, True, False]


def test_long_bursts_mark_every_second_they_overlap() -> None:
    starts = np.array([int(0.95 * S), 3 * S, int(5.5 * S)])
    ends = np.array([int(1.2 * S), int(3.05 * S), int(7.0 * S)])  # 250 ms, 50 ms, 1.5 s
    assert long_burst_seconds(starts, ends, 100_000_000).tolist() == [0, 1, 5, 6]
    assert long_burst_seconds(starts[:0], ends[:0], 1).tolist() == []


def test_an_interval_that_grazes_a_second_is_not_attributed_to_it() -> None:
    seconds = np.arange(5)
    start, end = np.array([50_000]), np.array([S + 50_000])  # a poll just after each second
    assert _touched(seconds, start, end, 50_000_000).tolist() == [True, False, False, False, False]
    # Without the guard it is congestion_share's rule: every second it overlaps.
    assert _touched(seconds, start, end, 0).tolist() == [True, True, False, False, False]
    # A short interval counts for the second holding at least half of it.
    assert _touched(
        seconds, np.array([2 * S - 10]), np.array([2 * S + 30]), 50_000_000
    ).tolist() == [
        False,
        False,
        True,
        False,
        False,
    ]


def _evidence(cause: str, intervals: list[tuple[int, int]], over: list[bool]) -> Evidence:
    return Evidence(
        cause,
        np.array([a for a, _ in intervals], dtype=np.int64),
        np.array([b for _, b in intervals], dtype=np.int64),
        np.array(over, dtype=np.bool_),
    )


def test_precedence_pfc_then_ecn_then_credit() -> None:
    seconds = np.arange(4)
    found = [
        _evidence(CREDIT, [(0, S), (S, 2 * S), (2 * S, 3 * S)], [True, True, True]),
        _evidence(ECN, [(S, 2 * S), (2 * S, 3 * S)], [True, True]),
        _evidence(PFC, [(2 * S, 3 * S), (3 * S, 4 * S)], [True, False]),
    ]
    causes = [CAUSES[c] for c in classify(seconds, found, 0).tolist()]
    assert causes == [CREDIT, ECN, PFC, CLEAN]


intervals = st.lists(
    st.tuples(st.integers(0, 20 * S), st.integers(1, 3 * S), st.booleans()), max_size=12
)


@settings(max_examples=60, deadline=None)
@given(
    seconds=st.sets(st.integers(0, 25), max_size=20),
    found=st.lists(st.tuples(st.sampled_from([PFC, ECN, CREDIT]), intervals), max_size=4),
    guard=st.integers(0, S - 1),
)
def test_every_second_gets_exactly_one_cause(
    seconds: set[int], found: list[tuple[str, list[tuple[int, int, bool]]]], guard: int
) -> None:
    candidates = np.array(sorted(seconds), dtype=np.int64)
    evidence_list = [
        _evidence(cause, [(a, a + n) for a, n, _ in chosen], [o for _, _, o in chosen])
        for cause, chosen in found
    ]
    causes = classify(candidates, evidence_list, guard)
    assert causes.shape == candidates.shape
    assert ((causes >= 0) & (causes < len(CAUSES))).all()
    # Brute force: the first cause in precedence with an interval past its limit that
    # overlaps the second by the guard (or half the interval, if that is less).
    for second, cause in zip(candidates.tolist(), causes.tolist(), strict=True):
        expected = CAUSES.index(CLEAN)
        for index in range(len(CAUSES) - 1):
            for name, chosen in found:
                for a, n, over in chosen:
                    overlap = min(a + n, (second + 1) * S) - max(a, second * S)
                    if name == CAUSES[index] and over and overlap >= max(min(guard, n // 2), 1):
                        expected = min(expected, index)
        assert cause == expected
    # Shares of the seconds classified sum to one; nothing moved past a limit: all clean.
    counts = CauseSeconds.of(causes)
    assert counts.total == candidates.size
    if counts.total:
        total = sum(counts.share(c) or 0.0 for c in CAUSES)
        assert total == pytest.approx(1.0)
    quiet = [Evidence(e.cause, e.start_ns, e.end_ns, np.zeros_like(e.over)) for e in evidence_list]
    assert (classify(candidates, quiet, guard) == CAUSES.index(CLEAN)).all()


class _Series:
    def __init__(self, name: str, values: list[int], spec: CounterSpec | None = None) -> None:
        self.name = name
        self.spec = spec or CounterSpec(CounterKind.RESETTING, 64)
        self.timestamp_ns = np.arange(len(values), dtype=np.int64) * S + 50_000
        self.value = np.array(values, dtype=np.uint64)
        self.rebaseline = np.zeros(len(values), dtype=np.bool_)


def test_a_direction_judges_pfc_by_durations_where_it_has_them() -> None:
    saturated = np.arange(4)
    empty = np.empty(0, np.int64)
    # Frames in second 1 but a pause too short to matter; durations say: not paused.
    series = [
        _Series("rx_prio3_pause", [0, 0, 50, 50, 50]),
        _Series("rx_prio3_pause_duration", [0, 0, 10, 5_000, 5_000]),
        _Series("np_cnp_sent", [0, 10_000, 20_000, 30_000, 40_000]),  # receive side: ignored
    ]
    found = classify_direction("transmit", saturated, empty, empty, series, LIMITS)
    assert found.judged and [CAUSES[c] for c in found.causes] == [CLEAN, CLEAN, PFC, CLEAN]
    # Without a duration counter the frames decide.
    found = classify_direction("transmit", saturated, empty, empty, series[:1], LIMITS)
    assert [CAUSES[c] for c in found.causes] == [CLEAN, PFC, CLEAN, CLEAN]
    # No congestion counter of that direction: not judged at all.
    found = classify_direction("receive", saturated, empty, empty, series[:2], LIMITS)
    assert not found.judged and found.counts.total == 0


def test_limits_are_checked() -> None:
    for bad in (
        {"long_burst_ns": 0},
        {"min_overlap_ns": S},
        {"pause_fraction": -1.0},
        {"stall_fraction": 2.0},
        {"xmit_wait_tick_ns": 0.0},
    ):
        with pytest.raises(ValueError):
            ThrottleLimits(**bad)
