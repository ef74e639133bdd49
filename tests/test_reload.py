"""SIGHUP: thresholds retuned live, filters restart the sampler, MQTT moves, the rest waits."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from burstscope.detectors.analyzer import DirectionAnalyzer
from burstscope.detectors.config import Thresholds
from burstscope.testing.processes import (
    DEADLINE_SECONDS,
    STOP_SECONDS,
    LoggedProcess,
    fetch,
    free_port,
    metric,
)
from tests.conftest import SYSFS

RATE = 1_000_000_000  # bytes per second
MS = 1_000_000


def series(
    start_ms: int, count: int, utilization: float, first_bytes: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64]]:
    timestamps = (np.arange(count, dtype=np.int64) + start_ms + 1) * MS
    steps = np.full(count, int(utilization * RATE / 1000), dtype=np.uint64)
    return timestamps, np.cumsum(steps) + np.uint64(first_bytes)


def test_retune_changes_future_samples_and_keeps_totals() -> None:
    analyzer = DirectionAnalyzer(RATE, Thresholds(), MS, keep_bursts=True)
    t, v = series(0, 100, 0.95, 0)
    analyzer.feed(np.concatenate([[0], t]), np.concatenate([[0], v]).astype(np.uint64))
    saturated, bursts_before = analyzer.saturated_ns, analyzer.summary().bursts.count
    assert saturated == 100 * MS and bursts_before == 0  # one burst, still open

    analyzer.retune(Thresholds(burst=0.97, saturated=0.99, busy=0.3))
    t, v = series(100, 100, 0.95, int(v[-1]))
    chunk = analyzer.feed(t, v)
    # 95% is neither saturated nor a burst any more: the open burst closes, nothing new.
    assert analyzer.saturated_ns == saturated
    assert len(chunk.bursts) == 1 and analyzer.summary().bursts.count == 1
    assert analyzer.summary().bytes_total == 200 * int(0.95 * RATE / 1000)
    assert analyzer.summary().thresholds.saturated == 0.99


def test_retune_refuses_window_changes() -> None:
    analyzer = DirectionAnalyzer(RATE, Thresholds(), MS)
    with pytest.raises(ValueError, match="window lengths"):
        analyzer.retune(Thresholds(coarse_window_ns=30_000_000_000))


class ConfiguredAgent(LoggedProcess):
    """The agent started from a config file only (its listen address comes from the file)."""

    def __init__(self, config: Path) -> None:
        self.config = config
        super().__init__([sys.executable, "-m", "burstscope", "agent", "--config", str(config)])

    def reload(self, text: str) -> None:
        self.config.write_text(text)
        self.process.send_signal(signal.SIGHUP)


def config_text(port: int, include: str, burst: float, saturated: float, extra: str = "") -> str:
    return (
        f'[source]\nspec = "sysfs"\nsysfs_root = "{SYSFS}"\ninclude = "{include}"\n'
        f"[thresholds]\nburst = {burst}\nsaturated = {saturated}\n"
        f'[listen]\naddress = "127.0.0.1:{port}"\n{extra}'
    )


def wait_metrics(url: str, fragment: str, timeout: float = DEADLINE_SECONDS) -> str:
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        try:
            body = fetch(url)
            if fragment in body:
                return body
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{fragment!r} not served; last body had {len(body)} bytes")


def test_sighup_applies_live_settings_logs_restart_ones_and_survives_bad_files(
    tmp_path: Path,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    config = tmp_path / "agent.toml"
    config.write_text(config_text(port, "^mlx5_0$", 0.5, 0.9))
    agent = ConfiguredAgent(config)
    ticks = "burstscope_sampler_ticks_total "
    count = 'burstscope_port_utilization_ratio_count{device="mlx5_0",direction="transmit",port="1"}'
    try:
        first = wait_metrics(url, count)
        assert 'device="mlx5_1"' not in first

        # Thresholds, the device filter and MQTT change live (a broker that does not answer
        # yet is accepted: messages spool); the listen address needs a restart.
        agent.reload(
            config_text(
                free_port(), "^mlx5_[01]$", 0.4, 0.8, '[mqtt]\nurl = "mqtt://127.0.0.1:1"\n'
            )
        )
        assert "burst=0.4 saturated=0.8" in agent.wait_log("reload: thresholds applied")
        restart = agent.wait_log("needs a restart; running unchanged")
        assert "listen.address" in restart and "source" not in restart
        agent.wait_log("reload: mqtt publishing to mqtt://127.0.0.1:1")
        assert "added mlx5_1/1" in agent.wait_log("reload: sampler restarted on 2 port(s)")
        second = wait_metrics(url, 'device="mlx5_1"')
        time.sleep(0.3)
        third = fetch(url)
        # Kept ports keep their detectors: counters stay monotonic across the restart.
        assert metric(third, count) >= metric(second, count) >= metric(first, count)
        assert metric(third, ticks) > 0

        # A file that fails validation changes nothing and says so in one line.
        agent.reload(config_text(port, "^mlx5_0$", 0.5, 2))
        failed = agent.wait_log("reload failed, keeping the previous configuration")
        assert "thresholds.saturated must be in (0, 1], not 2" in failed
        time.sleep(0.3)
        assert 'device="mlx5_1"' in fetch(url)
    finally:
        started = time.monotonic()
        agent.process.send_signal(signal.SIGTERM)
        status = agent.process.wait(10)
        seconds = time.monotonic() - started
    assert status == 0, agent.lines
    assert seconds < STOP_SECONDS
    assert agent.lines[-1].endswith("stopped")


def test_sighup_without_a_config_file_changes_nothing() -> None:
    port = free_port()
    agent = LoggedProcess(
        [
            sys.executable,
            "-m",
            "burstscope",
            "agent",
            "--source",
            "netdev:lo",
            "--line-rate",
            "10",
            "--listen",
            f"127.0.0.1:{port}",
        ]
    )
    try:
        wait_metrics(f"http://127.0.0.1:{port}/metrics", "burstscope_sampler_ticks_total")
        agent.process.send_signal(signal.SIGHUP)
        agent.wait_log("reload: no --config file was given; nothing to reload")
        assert agent.process.poll() is None  # SIGHUP's default action would have killed it
    finally:
        status = agent.stop()
    assert status == 0, agent.lines
