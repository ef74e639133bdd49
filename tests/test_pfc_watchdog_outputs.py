"""The PFC storm watchdog's outputs: metric families, the MQTT pfc_storm payload, its
settings from flags and file (bad ones: one line, status 2), and one in-process agent with it
on (the detector and its ground truth: tests/test_pfc_watchdog.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from burstscope.collector.exporter import HELP, pfc_watchdog_families
from burstscope.collector.mqtt.messages import Identity, pfc_storm_payload
from burstscope.collector.pfc_watchdog import PfcStormEvent, PfcWatchdog, WatchdogSettings
from burstscope.collector.simulation.pfc import InjectedStorm
from burstscope.collector.simulation.profiles import MS
from burstscope.collector.sources.sim_pause import SimPauseSource


def test_a_storm_is_two_events_on_the_port_topic() -> None:
    """A 0.6 s storm on the simulated node, polled at 50 ms: its start and end payloads."""
    zero = time.monotonic_ns()
    storm = InjectedStorm(1, "receive", 200 * MS, 600 * MS)
    source = SimPauseSource(seed=5, zero_monotonic_ns=zero, storms=(storm,))
    watchdog = PfcWatchdog([source], WatchdogSettings(enabled=True, interval_ns=50 * MS))
    said: list[PfcStormEvent] = []
    ended = threading.Event()
    watchdog.listeners.append(lambda event: (said.append(event), event.started or ended.set()))
    watchdog.start()
    try:
        assert ended.wait(20), said
    finally:
        watchdog.stop()
    identity = Identity("node1", 42, "1.0", 0.0, (("mlx5_1", 1),), 0.5)
    start, end = (pfc_storm_payload(identity, event) for event in said)
    assert (start["kind"], start["phase"], end["phase"]) == ("pfc_storm", "start", "end")
    assert (end["device"], end["port"], end["direction"], end["priority"]) == (
        "mlx5_1",
        1,
        "receive",
        3,
    )
    assert start["paused_fraction"] >= 0.8 and start["duration_seconds"] == 0
    assert end["duration_seconds"] > 0 and end["paused_seconds"] > 0
    assert end["basis"] == "duration" and end["window_seconds"] == 0.4
    assert end["run"] == 42 and end["jobs"] == []


def test_metric_families_are_per_node_and_per_port_only_in_storms() -> None:
    from burstscope.collector.pfc_watchdog import WatchdogFigures

    figures = WatchdogFigures(
        10, 1, 0.02, 3, {("mlx5_0", 1, "receive", 3): 0.95}, {("mlx5_0", 1): 1.5}
    )
    families = {f.name: f for f in pfc_watchdog_families(figures)}
    assert set(families) == {
        "burstscope_pfc_watchdog_polls",
        "burstscope_pfc_watchdog_errors",
        "burstscope_pfc_watchdog_read_seconds",
        "burstscope_pfc_storms",
        "burstscope_port_pfc_storm_paused_ratio",
        "burstscope_port_pfc_storm_seconds",
    }
    (ratio,) = families["burstscope_port_pfc_storm_paused_ratio"].samples
    assert ratio.labels == {
        "device": "mlx5_0",
        "port": "1",
        "direction": "receive",
        "priority": "3",
    }
    for family in families.values():
        assert (f"{family.name}_total" if family.type == "counter" else family.name) in HELP
    quiet = pfc_watchdog_families(WatchdogFigures(10, 0, 0.0, 0, {}, {}))
    assert {f.name for f in quiet} == {
        "burstscope_pfc_watchdog_polls",
        "burstscope_pfc_watchdog_errors",
        "burstscope_pfc_watchdog_read_seconds",
        "burstscope_pfc_storms",
    }


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("[pfc_watchdog]\nenabled = true\ninterval = 0.3\n", "at most half the window"),
        ("[pfc_watchdog]\nthreshold = 2\n", "pfc_watchdog.threshold must be in (0, 1]"),
        ("[pfc_watchdog]\nthreshold = 0.3\nend_threshold = 0.5\n", "end threshold"),
        ("[pfc_watchdog]\nwindow = 0\n", "pfc_watchdog.window must be between"),
    ],
)
def test_bad_watchdog_settings_are_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, message: str
) -> None:
    from burstscope.cli import main

    path = tmp_path / "agent.toml"
    path.write_text('[source]\nspec = "sim"\n' + config)
    assert main(["agent", "--check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "flag",
    ["--pfc-watchdog-interval=-1", "--pfc-watchdog-window=nan", "--pfc-watchdog-threshold=0"],
)
def test_bad_watchdog_flags_are_usage_errors(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    from burstscope.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["agent", "--source", "sim", flag, "--check-config", "/dev/null"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument" in err and "Traceback" not in err


def test_an_agent_with_the_watchdog_exports_its_polls(tmp_path: Path) -> None:
    """The one agent this file starts: the simulated node, the watchdog on at 20 Hz."""
    from burstscope.testing.emulated_node import running_agent, scrape
    from tests.conftest import SYSFS

    args = ("--source", "sim", "--pfc-watchdog", "--pfc-watchdog-interval", "0.05")
    with running_agent(SYSFS, *args) as (agent, url):
        watchdog = agent.pfc_watchdog
        assert watchdog is not None
        deadline = time.monotonic() + 20
        while watchdog.figures().polls < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        body = scrape(url)
    assert "burstscope_pfc_storms_total 0.0" in body
    polls = [
        line for line in body.splitlines() if line.startswith("burstscope_pfc_watchdog_polls_total")
    ]
    assert polls and float(polls[0].split()[-1]) >= 3
