"""The PFC storm watchdog: the detector on arrays, scored against the storms the simulation
injected; the simulated pause counters; the poll thread and the sources it reads."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from burstscope.collector.pfc_watchdog import (
    PfcStormEvent,
    PfcWatchdog,
    WatchdogSettings,
    pause_sources,
)
from burstscope.collector.simulation.pfc import (
    InjectedStorm,
    LivePauses,
    PauseTimeline,
    place_storms,
    timeline,
)
from burstscope.collector.simulation.profiles import MS, SECOND
from burstscope.collector.sources.base import SlowReading
from burstscope.collector.sources.ethtool import PAUSE_STAT_PATTERN, EthtoolSource
from burstscope.collector.sources.sim import SimSlowSource
from burstscope.collector.sources.sim_pause import SimPauseSource
from burstscope.detectors.counters import RESETTING_64
from burstscope.detectors.pfc_watchdog import (
    StormWatch,
    WatchdogConfig,
    paused_ns_from_frames,
    storms,
)
from burstscope.testing.faults_pfc import (
    SHORT_MAGNITUDES_NS,
    TARGET_MAGNITUDES_NS,
    false_alarms,
    score_pfc_watchdog,
)

POLL = 100 * MS


def _polls(seconds: float, paused: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """10 Hz polls over ``seconds``; the increments of a port paused in [start, end) s."""
    times = np.arange(0, int(seconds * SECOND), POLL, dtype=np.int64)
    line = PauseTimeline(
        np.array([int(a * SECOND) for a, _ in paused], dtype=np.int64),
        np.array([int(b * SECOND) for _, b in paused], dtype=np.int64),
    )
    cumulative = line.paused_ns(times)
    increment = np.zeros(times.size, dtype=np.int64)
    increment[1:] = np.diff(cumulative)
    return times, increment


def test_a_storm_is_declared_once_a_window_is_mostly_paused_and_ends_with_it() -> None:
    times, increment = _polls(10, [(2.0, 4.0)])
    (storm,) = storms(times, increment)
    # 80% of a 400 ms window: 320 ms into the storm, at the next poll.
    assert storm.start_ns == int(2.4 * SECOND)
    # Over once the window is at most 20% paused: 80 ms of pause left in it.
    assert storm.end_ns == int(4.4 * SECOND)
    assert storm.peak_fraction == 1.0
    assert storm.paused_ns == int(1.6 * SECOND)


def test_hysteresis_one_storm_however_the_fraction_wavers() -> None:
    # Paused 90%, then 50% (neither starts nor ends one), then 90% again, then clear.
    cycles = [(2 + k * 0.1, 2 + k * 0.1 + 0.09) for k in range(10)]
    cycles += [(3 + k * 0.1, 3 + k * 0.1 + 0.05) for k in range(10)]
    cycles += [(4 + k * 0.1, 4 + k * 0.1 + 0.09) for k in range(10)]
    times, increment = _polls(8, cycles)
    assert len(storms(times, increment)) == 1
    # Congestion pauses of up to 250 ms in a window never make a storm.
    times, increment = _polls(8, [(1.0, 1.25), (3.0, 3.2), (3.5, 3.6)])
    assert storms(times, increment) == []


@pytest.mark.parametrize("seed", range(6))
def test_streaming_equals_batch_poll_by_poll(seed: int) -> None:
    """StormWatch (the live agent) and storms() (the scoring) declare the same storms from the
    same polls, unknown intervals (failed reads, resets) included."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.integers(80 * MS, 130 * MS, 600)).astype(np.int64)
    gaps = np.diff(times, prepend=times[0])
    paused = rng.random(600) < np.repeat(rng.random(30), 20)  # stretches of pause
    increment = np.where(paused, gaps, (gaps * rng.random(600) * 0.3).astype(np.int64))
    valid = rng.random(600) > 0.02
    config = WatchdogConfig(threshold=0.7, end_threshold=0.3)
    batch = storms(times, increment, config, valid)
    watch = StormWatch(config)
    events = [
        watch.update("port", int(t), int(i) if v and n else None)
        for n, (t, i, v) in enumerate(zip(times, increment, valid, strict=True))
    ]
    starts = [(e.time_ns, e.peak_fraction) for e in events if e is not None and e.started]
    ends = [(e.time_ns, e.peak_fraction, e.paused_ns) for e in events if e and not e.started]
    assert batch, "the sequence has storms"
    assert [s.start_ns for s in batch] == [t for t, _ in starts]
    closed = [s for s in batch if s.end_ns is not None]
    assert [(s.end_ns, s.peak_fraction, s.paused_ns) for s in closed] == ends


def test_frames_bound_the_paused_time_by_the_largest_pause_a_frame_can_ask() -> None:
    # 65535 quanta x 512 bit times at 400 Gb/s: 83.88 us a frame, never above the interval.
    assert paused_ns_from_frames([1, 0, 10_000], [POLL] * 3, 400e9).tolist() == [
        83_884,
        0,
        POLL,
    ]
    with pytest.raises(ValueError, match="link speed"):
        paused_ns_from_frames([1], [POLL], 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window_ns": 0}, "window"),
        ({"threshold": 0.0}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": 0.5, "end_threshold": 0.5}, "end threshold"),
    ],
)
def test_a_config_that_cannot_work_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WatchdogConfig(**kwargs)  # type: ignore[arg-type]


NODES = 6


def test_scored_against_injected_storms_of_half_a_second_to_five() -> None:
    """The issue's figures, against the simulation's ground truth: 6 nodes, one simulated
    hour, 16 storms of 0.5-5 s a node; a clean hour of the 6 for false alarms. (The issue's
    24-node fleet is bench/culprits.py's, through the same functions.)"""
    score = score_pfc_watchdog(seed=7, nodes=NODES, seconds=3600)
    clean = false_alarms(seed=7, nodes=NODES, seconds=3600)
    short = score_pfc_watchdog(
        seed=7, nodes=NODES, seconds=600, magnitudes_ns=SHORT_MAGNITUDES_NS, repeats=2
    )
    print(
        f"\nPFC watchdog: precision {score.precision:.3f} recall {score.recall:.3f} "
        f"({score.injected} storms of 0.5-5 s); smallest magnitude found "
        f"{(score.smallest_found_ns or 0) / 1e9:g} s; recall below it "
        + ", ".join(f"{m / 1e9:g} s {r:.2f}" for m, r in short.recall_by_magnitude.items())
        + f"; false alarms on a clean {NODES}-node hour: {clean}"
    )
    assert score.injected == NODES * 2 * len(TARGET_MAGNITUDES_NS)
    assert score.precision >= 0.95 and score.recall >= 0.95
    assert score.smallest_found_ns == TARGET_MAGNITUDES_NS[0]
    assert clean <= 1
    assert short.recall_by_magnitude[SHORT_MAGNITUDES_NS[0]] < 0.95  # 200 ms is no storm


def test_the_pause_model_counts_what_its_intervals_hold() -> None:
    line = PauseTimeline(np.array([10, 5, 40]), np.array([20, 12, 45]))  # overlap merges
    assert line.paused_ns([0, 5, 11, 15, 20, 30, 42, 100]).tolist() == [0, 0, 6, 10, 15, 15, 17, 20]
    storm = InjectedStorm(2, "receive", 5 * SECOND, 2 * SECOND)
    offline = timeline(3, 2, "receive", 130 * SECOND, (storm,))
    live = LivePauses(3, 2, "receive", (storm,))
    times = np.arange(0, 130 * SECOND, 250 * MS)
    read = [live.paused_ns_at(int(t)) for t in times]
    assert read == offline.paused_ns(times).tolist()
    assert place_storms(1, (SECOND, 2 * SECOND), 9, 100 * SECOND) == place_storms(
        1, (SECOND, 2 * SECOND), 9, 100 * SECOND
    )


def _reading(name: str, value: int, device: str = "mlx5_0") -> SlowReading:
    return SlowReading(device, 1, name, value, RESETTING_64)


def test_the_poller_reads_durations_and_falls_back_to_frames() -> None:
    """Durations where the driver has them (frames of that priority then ignored); frames
    with the link speed elsewhere; a reset is an unknown interval, not a storm."""
    watchdog = PfcWatchdog([], WatchdogSettings(enabled=True), lambda d, p: 50_000_000_000)
    said: list[PfcStormEvent] = []
    watchdog.listeners.append(said.append)
    for poll in range(40):
        t = poll * POLL
        paused = min(max(poll - 5, 0), 20)  # fully paused from poll 6 to poll 25
        duration = 1_000 + paused * 100_000
        frames = 10 + paused * 2_000  # 2,000 frames a poll: 168 ms of pause at most
        watchdog.feed(
            [
                _reading("rx_prio3_pause_duration", duration),
                _reading("rx_prio3_pause", 5 + poll * 3),  # ignored: the duration says it
                _reading("tx_prio4_pause", frames, "mlx5_1"),
                _reading("rx_bytes_phy", poll),  # not a pause counter
            ],
            t,
        )
    kinds = [(s.device, s.direction, s.priority, s.started, s.basis) for s in said]
    assert kinds == [
        ("mlx5_0", "receive", 3, True, "duration"),
        ("mlx5_1", "transmit", 4, True, "frames"),
        ("mlx5_0", "receive", 3, False, "duration"),
        ("mlx5_1", "transmit", 4, False, "frames"),
    ]
    figures = watchdog.figures()
    assert figures.storms == 2 and figures.storming == {}
    # Declared at poll 9 (the window of polls 6-9 all paused), counted from poll 10 to 25.
    assert figures.storm_seconds[("mlx5_0", 1)] == pytest.approx(1.6)
    # A counter that goes back (driver reload): no increment across it, no storm.
    quiet = PfcWatchdog([], WatchdogSettings(enabled=True))
    for poll, value in enumerate([10**9, 10**9 + 1, 5, 6, 7, 8, 9]):
        assert quiet.feed([_reading("rx_prio3_pause_duration", value)], poll * POLL) == []


def test_sources_offer_their_pause_counters_alone() -> None:
    ethtool = EthtoolSource("eth9", device="mlx5_0", port=1).pause_counters()
    assert (ethtool.interface, ethtool.pattern, ethtool.device) == (
        "eth9",
        PAUSE_STAT_PATTERN,
        "mlx5_0",
    )
    assert ethtool.name == "pfc-watchdog:eth9"
    (sim,) = pause_sources([SimSlowSource(seed=4, zero_monotonic_ns=0), object()])  # type: ignore[list-item]
    assert isinstance(sim, SimPauseSource) and sim.seed == 4


def test_a_live_storm_is_started_and_ended_once_on_the_poll_thread() -> None:
    """The thread at 50 ms polls on the simulated node: a 0.8 s storm injected 0.3 s after
    start is declared once and ended once, with the events a listener (MQTT) gets."""
    zero = time.monotonic_ns()
    storm = InjectedStorm(0, "transmit", 300 * MS, 800 * MS)
    source = SimPauseSource(seed=11, zero_monotonic_ns=zero, storms=(storm,))
    settings = WatchdogSettings(enabled=True, interval_ns=50 * MS)
    watchdog = PfcWatchdog([source], settings)
    said: list[PfcStormEvent] = []
    ended = threading.Event()

    def listen(event: PfcStormEvent) -> None:
        said.append(event)
        if not event.started:
            ended.set()

    watchdog.listeners.append(listen)
    watchdog.start()
    try:
        assert ended.wait(20), said
    finally:
        watchdog.stop()
    assert [(s.device, s.direction, s.priority, s.started) for s in said] == [
        ("mlx5_0", "transmit", 3, True),
        ("mlx5_0", "transmit", 3, False),
    ]
    start = said[0]
    assert start.paused_fraction >= 0.8
    figures = watchdog.figures()
    assert figures.polls > 0 and figures.errors == 0 and figures.storms == 1
    assert said[1].time_ns > said[1].start_ns and said[1].peak_fraction >= 0.8
