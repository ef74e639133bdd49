"""The agent's /metrics on the fixture tree: golden exposition, promtool lint, series budget.

The agent is the real in-process ``Agent`` (sampler process, pipeline, HTTP server) on a
free loopback port, scraped over HTTP. The fixture tree's counters never move, so every
series except the agent's own timing is deterministic; those volatile values are replaced
by ``<volatile>`` (the series and their labels stay in the golden file).
Regenerate: ``pytest tests/test_exposition.py --update-golden``.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burstscope.testing.emulated_node import EmulatedNode, running_agent, scrape
from tests.conftest import FIXTURES, SYSFS, compare_golden, require_binary

GOLDEN = FIXTURES / "exposition.golden.prom"
SERIES_BUDGET_PER_PORT = 60
# Families whose values depend on time or on the machine: ticks, timing, sample counts,
# poll counts, whether the sampler got SCHED_FIFO, and the agent's own CPU and memory.
VOLATILE = (
    "burstscope_port_utilization_ratio",
    "burstscope_sampler_ticks_total",
    "burstscope_sampler_missed_ticks_total",
    "burstscope_sampler_lateness_seconds",
    "burstscope_sampler_realtime",
    "burstscope_source_read_duration_seconds",
    "burstscope_source_errors_total",
    "burstscope_scrape_duration_seconds",
    "burstscope_sampler_cpu_seconds_total",
    "burstscope_sampler_resident_memory_bytes",
    # prometheus-client's ProcessCollector: the agent process's own CPU, memory, fds.
    "process_",
)
SAMPLE = re.compile(
    r"^(?P<series>(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?) (?P<value>\S+)$"
)


def scrape_when_complete(agent: Any, url: str, timeout: float = 10.0) -> str:
    """A scrape taken once every port has drained samples and the first slow poll landed."""
    deadline = time.monotonic() + timeout
    while True:
        snapshot = agent.pipeline.snapshot()
        drained = all(
            view.live.samples > 0 for port in snapshot.ports for view in port.directions.values()
        )
        polled = snapshot.slow is not None and snapshot.slow.counters
        if (drained and polled) or time.monotonic() > deadline:
            return scrape(url)
        time.sleep(0.05)


def normalize(exposition: str) -> str:
    out = []
    for line in exposition.splitlines():
        match = SAMPLE.match(line)
        if match and match.group("name").startswith(VOLATILE):
            line = f"{match.group('series')} <volatile>"
        out.append(line)
    return "\n".join(out) + "\n"


def series_per_port(exposition: str) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    for line in exposition.splitlines():
        if line.startswith("#"):
            continue
        device = re.search(r'device="([^"]*)"', line)
        port = re.search(r'port="([^"]*)"', line)
        if device and port:
            counts[(device.group(1), port.group(1))] += 1
    return counts


@pytest.fixture(scope="module")
def fixture_scrape() -> Iterator[str]:
    with running_agent(SYSFS) as (agent, url):
        yield scrape_when_complete(agent, url)


@pytest.fixture(scope="module")
def nine_port_scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("node9")
    node = EmulatedNode(root, [f"mlx5_{index}" for index in range(9)]).build()
    with running_agent(node.root) as (agent, url):
        yield scrape_when_complete(agent, url)


def test_golden_exposition(fixture_scrape: str, update_golden: bool) -> None:
    compare_golden(GOLDEN, normalize(fixture_scrape), update_golden)


def test_every_help_family_is_declared_once(fixture_scrape: str) -> None:
    helps = re.findall(r"^# HELP (\S+) ", fixture_scrape, flags=re.MULTILINE)
    assert len(helps) == len(set(helps))
    from burstscope.collector.exporter import HELP

    # PFC families need ethtool on a real netdev, which the fixture tree cannot provide;
    # EFA's RDMA bytes, a stuck counter and a renegotiation are in tests/test_hardware.py;
    # MQTT families appear only when the agent publishes to a broker.
    # Recording families appear only when the agent records; refused readings only once a
    # file returned something no counter can hold; the finest honest interval once the
    # sampler's first 2 s are judged (tests/test_probe.py); job families only while a job
    # runs (tests/test_jobs_*.py); collective families with a dump directory
    # (tests/test_collectives_agent.py).
    conditional = (
        "burstscope_job_",
        # Silence under a job while a job holds a port that moved (tests/test_silence.py);
        # ports below their peers where two ports share a device model (the hardware tree).
        "burstscope_port_silent_under_job",
        "burstscope_port_below_peers",
        # Throttled seconds once a saturated or long-burst second of a port with congestion
        # counters is judged (tests/test_throttle_live.py); the fixture node saturates none.
        "burstscope_throttled_seconds_total",
        "burstscope_collective_",
        "burstscope_mqtt_",
        "burstscope_recording_",
        "burstscope_port_refused_",
        "burstscope_sampler_finest_interval_",
        # The PFC storm watchdog's, with [pfc_watchdog] enabled (tests/test_pfc_watchdog.py).
        "burstscope_pfc_",
        "burstscope_port_pfc_storm_",
        # Rails side by side once three rails of one line rate have five common 15 s windows
        # (tests/test_rails_live.py).
        "burstscope_rail",
        # Step summaries published, with MQTT ([steps] publish; tests/test_step_summaries.py).
        "burstscope_steps_",
        # The lean profile's per-node histogram and bursts ([metrics] profile = "lean";
        # tests/test_profiles.py).
        "burstscope_node_",
    )
    absent = {name for name in set(HELP) - set(helps) if not name.startswith(conditional)}
    assert absent == {
        "burstscope_port_pfc_pause_frames_total",
        "burstscope_port_pfc_pause_seconds_total",
        "burstscope_port_rdma_bytes_total",
        "burstscope_port_rate_changes_total",
        "burstscope_port_stuck_at_all_ones",
    }
    # prometheus-client's ProcessCollector families are the library's, not ours.
    assert {h for h in set(helps) - set(HELP) if not h.startswith("process_")} == set()


@pytest.mark.parametrize("which", ["fixture", "nine_ports"])
def test_promtool_check_metrics_is_clean(
    which: str, fixture_scrape: str, nine_port_scrape: str
) -> None:
    body = fixture_scrape if which == "fixture" else nine_port_scrape
    result = subprocess.run(
        [require_binary("promtool"), "check", "metrics"],
        input=body,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@pytest.mark.parametrize("which", ["fixture", "nine_ports"])
def test_series_budget_per_port(which: str, fixture_scrape: str, nine_port_scrape: str) -> None:
    body = fixture_scrape if which == "fixture" else nine_port_scrape
    counts = series_per_port(body)
    # The fixture tree: four sampled ports and mlx5_3, kept unsampled (N/A (no PMA)).
    assert len(counts) == (5 if which == "fixture" else 9)
    # Room is left for the PFC pause counters of one enabled priority (receive, transmit)
    # and its pause duration once it has paused, which only a real mlx5 netdev provides.
    over = {port: n for port, n in counts.items() if n + 3 > SERIES_BUDGET_PER_PORT}
    assert over == {}


def test_series_per_port_within_budget_without_slow_counters(nine_port_scrape: str) -> None:
    """The part of the budget the 1 ms path owns: what every port exports, whatever its HCA."""
    slow = (
        "burstscope_port_state",
        "burstscope_port_link_downed",
        "burstscope_port_transmit_wait",
        "burstscope_port_errors",
        "burstscope_port_congestion_packets",
        "burstscope_port_pfc_",
    )
    fast = "\n".join(line for line in nine_port_scrape.splitlines() if not line.startswith(slow))
    counts = series_per_port(fast)
    assert len(counts) == 9
    assert max(counts.values()) <= SERIES_BUDGET_PER_PORT


def test_not_sampled_reason_is_an_enumerated_label(fixture_scrape: str) -> None:
    """The label is a code from a closed set, named in HELP; the sentence stays in the log."""
    from burstscope.collector.discovery import NOT_SAMPLED_REASONS
    from burstscope.collector.exporter import HELP

    reasons = re.findall(
        r'^burstscope_port_not_sampled\{[^}]*reason="([^"]*)"', fixture_scrape, re.M
    )
    # mlx5_3's counters/port_xmit_data reads "N/A (no PMA)".
    assert reasons == ["no_pma"]
    help_text = HELP["burstscope_port_not_sampled"]
    assert [code for code in (*NOT_SAMPLED_REASONS, "other") if code not in help_text] == []


@pytest.mark.parametrize(
    ("tree", "expected"),
    [
        ("fixture", {"mlx5_3": "no_pma"}),
        ("hardware", {"i40iw0": "no_pma", "rxe0": "rxe"}),
    ],
)
def test_discovery_names_why_a_port_is_not_sampled(tree: str, expected: dict[str, str]) -> None:
    from burstscope.collector.discovery import NOT_SAMPLED_REASONS, discover

    root = SYSFS if tree == "fixture" else FIXTURES / "hardware" / "sys"
    found = discover(root).unsampled
    assert {port.device: port.not_sampled_reason for port in found} == expected
    assert all(port.not_sampled_reason in NOT_SAMPLED_REASONS for port in found)
    assert all(port.not_sampled for port in found)  # the sentence discover prints
