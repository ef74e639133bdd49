"""collector/throttle_live.py: the agent's seconds by cause, as a drain-by-drain feed sees them."""

from __future__ import annotations

import numpy as np

from burstscope.collector.slow_poller import CounterState, SlowSnapshot
from burstscope.collector.sources.base import PortSpec
from burstscope.collector.throttle_live import FAMILY, LiveThrottle
from burstscope.detectors.analyzer import DirectionAnalyzer

S = 1_000_000_000
MS = 1_000_000
RATE = 12_500_000_000  # 100 Gb/s
WALL0 = 1_700_000_000 * S  # wall clock of second 0
OFFSET = WALL0 - 5 * S  # CLOCK_MONOTONIC reads 5 s at WALL0
SPEC = PortSpec("mlx5_0", 1, RATE)


def _second_of_samples(second: int) -> tuple[np.ndarray, np.ndarray]:
    """1 ms samples of one second: 50 ms at line rate, the rest at 1%."""
    times = WALL0 + second * S + np.arange(1, 1001, dtype=np.int64) * MS
    rates = np.where(np.arange(1000) < 50, RATE, RATE // 100)
    bytes_per_ms = rates // 1000
    start = second * (50 * (RATE // 1000) + 950 * (RATE // 100 // 1000))
    return times, (start + np.cumsum(bytes_per_ms)).astype(np.uint64)


def _snapshot(polls: dict[str, int], second: int) -> SlowSnapshot:
    """The poller's state after its poll 20 ms into ``second`` + 1 (monotonic clock): less
    than the 50 ms an interval must reach into a second to count there."""
    when = WALL0 + (second + 1) * S + 20 * MS - OFFSET
    counters = {
        ("mlx5_0", 1, name): CounterState("port", "mlx5_0", 1, name, value, value, 0, False, when)
        for name, value in polls.items()
    }
    return SlowSnapshot(counters, ())


def test_live_seconds_by_cause_settle_behind_the_samples() -> None:
    analyzer = DirectionAnalyzer(RATE, keep_bursts=False, saturated_second_retention=120)
    live = LiveThrottle()
    assert list(live.families()) == []  # absent until a second is judged
    # Per second's poll: what each counter added in that second (transmit side counters).
    added = {
        3: {"rx_prio3_pause_duration": 5_000, "port_xmit_wait": 900},  # paused 5 ms
        4: {"rx_prio3_pause_duration": 2_000},
        6: {"rp_cnp_handled": 4_000},  # throttled by CNPs
        8: {"port_xmit_wait": 7},  # credit wait, by presence
    }
    totals = dict.fromkeys(("rx_prio3_pause_duration", "rp_cnp_handled", "port_xmit_wait"), 0)
    # The first poll lands before the samples: no interval into it.
    live.observe(_snapshot(totals, -1), OFFSET)
    assert live.totals() == {}
    for second in range(12):
        times, values = _second_of_samples(second)
        live.feed(SPEC, "transmit", analyzer.feed(times, values), analyzer)
        for name, value in added.get(second, {}).items():
            totals[name] += value
        live.observe(_snapshot(totals, second), OFFSET)
    # Seconds settle 3 s behind the samples: 0 .. 8 by now (second 0's first sample has no
    # interval into it, so its saturation starts at 1 ms: still a saturated second).
    # Second 3 was paused and waited for credits: paused (precedence).
    assert live.totals() == {"transmit": (2, 1, 1, 5)}
    for second in range(12, 15):
        times, values = _second_of_samples(second)
        live.feed(SPEC, "transmit", analyzer.feed(times, values), analyzer)
        live.observe(_snapshot(totals, second), OFFSET)
    assert live.totals() == {"transmit": (2, 1, 1, 8)}
    (family,) = live.families()
    assert family.name + "_total" == FAMILY
    assert {(s.labels["direction"], s.labels["cause"]): s.value for s in family.samples} == {
        ("transmit", "pfc"): 2,
        ("transmit", "ecn"): 1,
        ("transmit", "credit"): 1,
        ("transmit", "clean"): 8,
    }


def test_a_direction_without_congestion_counters_is_never_judged() -> None:
    analyzer = DirectionAnalyzer(RATE, keep_bursts=False, saturated_second_retention=120)
    live = LiveThrottle()
    for second in range(8):
        times, values = _second_of_samples(second)
        live.feed(SPEC, "receive", analyzer.feed(times, values), analyzer)
        # Only a transmit-side counter is read: the receive side has nothing to go by.
        live.observe(_snapshot({"port_xmit_wait": 0}, second), OFFSET)
    assert live.totals() == {}
    assert list(live.families()) == []
