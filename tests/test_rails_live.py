"""Rails side by side in the agent: detectors.rails.LiveRails over 15 s windows, its
families on /metrics, and the mark in ``top`` (tests/test_rails.py: the report's)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from burstscope.collector.exporter import BurstscopeCollector
from burstscope.collector.simulation.profiles import LIGHT_RAIL, SECOND, SLOW_RAIL, RailFault
from burstscope.collector.snapshot import TIMING_BUCKETS_SECONDS, RailVerdicts
from burstscope.detectors.bursts import Bursts
from burstscope.detectors.rails import LIGHT, SLOW, LiveRails, rail_groups
from burstscope.testing.faults_rails import live_flags
from burstscope.top_view import plain_lines, table
from tests.test_top_view import snapshot

WINDOW = 15 * SECOND
RATE = 50_000_000_000


def windows(first: int, count: int, utilization: float) -> tuple[np.ndarray, ...]:
    ends = (first + np.arange(1, count + 1, dtype=np.int64)) * WINDOW
    return ends, np.full(count, utilization), np.full(count, WINDOW, np.int64)


def burst(end_ns: int, peak: float) -> Bursts:
    return Bursts(
        np.array([end_ns - 50_000_000]),
        np.array([end_ns]),
        np.array([1]),
        np.array([peak]),
        np.array([peak]),
    )


def test_a_rail_light_in_four_of_five_windows_is_flagged_and_the_storage_nic_never() -> None:
    live: LiveRails[str] = LiveRails()
    rails = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    for window in range(6):
        for name in [*rails, "mlx5_8"]:
            light = name == "mlx5_3" and window != 2  # one odd window among them
            quiet = name == "mlx5_8"  # the storage NIC moves little while the rails train
            share = 0.05 if quiet else (0.1 if light else 0.2)
            for direction in ("transmit", "receive"):
                live.feed(
                    name,
                    direction,
                    RATE,
                    windows(window, 1, share),
                    burst(int((window + 1) * WINDOW - SECOND), 1.0),
                )
        groups = rail_groups([(name, RATE) for name in [*rails, "mlx5_8"]], storage={"mlx5_8"})
        flagged = live.judge(groups)
        assert flagged == ({} if window < 4 else {"mlx5_3": LIGHT}), window
    assert live.judged == set(rails)
    live.forget(set(rails[:2]))
    assert live.judge(groups) == {}  # two rails left: no median to judge by


def test_a_slow_rail_peaks_lower_and_windows_stay_bounded() -> None:
    live: LiveRails[int] = LiveRails(keep=6)
    for window in range(20):
        for rail in range(4):
            peak = 0.5 if rail == 1 else 1.0
            live.feed(rail, "transmit", RATE, windows(window, 1, 0.2), burst(0, 0.0))
            end = int((window + 1) * WINDOW - SECOND)
            live.feed(rail, "transmit", RATE, windows(window, 0, 0.0), burst(end, peak))
    assert live.judge(dict.fromkeys(range(4), 0)) == {1: SLOW}
    assert max(len(w.ends) for w in live._windows.values()) == 6


def test_the_agents_verdict_on_the_simulated_node_after_its_fault_and_none_before() -> None:
    for kind, fraction, expected in ((LIGHT_RAIL, 0.6, LIGHT), (SLOW_RAIL, 0.5, SLOW)):
        found = live_flags(5, 120, [RailFault(4, kind, fraction, 20 * SECOND)])
        assert list(found) == [4] and found[4][0] == expected
        # Four windows of 15 s after the fault at least, at most two more.
        assert 20 * SECOND + 4 * WINDOW <= found[4][1] <= 20 * SECOND + 7 * WINDOW
    assert live_flags(6, 120) == {}


def test_metrics_count_the_flagged_rails_and_name_each_while_it_is_flagged() -> None:
    node = snapshot(2)
    buckets = np.zeros(len(TIMING_BUCKETS_SECONDS) + 1, np.int64)
    base = replace(
        node, health=replace(node.health, lateness_buckets=buckets, read_buckets=buckets)
    )

    def scrape(verdicts: RailVerdicts) -> str:
        registry = CollectorRegistry()
        registry.register(BurstscopeCollector(lambda: replace(base, rails=verdicts), "0"))
        return generate_latest(registry).decode()

    assert "burstscope_rail" not in scrape(RailVerdicts())  # absent until rails are judged
    healthy = scrape(RailVerdicts({}, 8))
    assert "burstscope_rails_imbalanced 0.0" in healthy
    assert "burstscope_rail_imbalanced{" not in healthy
    flagged = scrape(RailVerdicts({("mlx5_3", 1): SLOW}, 8))
    assert "burstscope_rails_imbalanced 1.0" in flagged
    assert 'burstscope_rail_imbalanced{device="mlx5_3",kind="slow",port="1"} 1.0' in flagged


def test_top_marks_the_flagged_rail_in_its_rows_and_caption() -> None:
    view = replace(snapshot(2), rails=RailVerdicts({("mlx5_3", 1): LIGHT}, 9))
    console = Console(width=200, record=True, color_system=None, force_terminal=False)
    console.print(table(view, width=200))
    text = console.export_text()
    assert text.count("mlx5_3/1 light") == 3  # both rows and the caption
    assert "mlx5_3/1 light rail beside its peers" in text
    lines = [line for line in plain_lines(view, SECOND) if " rail=" in line]
    assert [line.split()[1:3] for line in lines] == [
        ["mlx5_3/1", "transmit"],
        ["mlx5_3/1", "receive"],
    ]
