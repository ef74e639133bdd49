"""A peak for every scrape interval the docs promise, held against a real Prometheus.

dashboards/README.md promises that the 75 s peak window loses no peak at any scrape interval
up to 60 s (a 15 s margin). Scaled down twentyfold here, through the agent's own constructor
arguments: windows of 0.75 s and 3.75 s, a 3 s scrape, the drain every 0.05 s (the agent's
1 s, scaled alike). Prometheus (Debian's ``prometheus``) scrapes the real agent sampling an
emulated node; once its scrape schedule is known, the emulated port carries one 60 ms burst
of a different height early in each of three scrape intervals (the hardest place: the
oldest sample a scrape must still cover). The ground truth is the agent's own trace,
recorded as it sampled, put through the same detectors: ``max_over_time`` of the long
window's gauge over each scrape interval must equal the trace's 1 ms maximum of it, and the
short window (the one the agent exported alone before) misses those peaks.
Skips without the binary; fails under BURSTSCOPE_REQUIRE_INTEGRATION=1.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from burstscope.testing import simulated_fleet
from burstscope.testing.emulated_node import CounterWriter, EmulatedNode, Load, agent_settings
from burstscope.testing.processes import free_port, wait_for
from tests.conftest import require_binary

pytestmark = pytest.mark.integration

SCALE = 20  # every duration below is the product's divided by this
SCRAPE_S = 60 / SCALE  # the longest promised scrape interval, 60 s
WINDOWS = (("750ms", 750_000_000), ("3.75s", 3_750_000_000))  # 15s and 75s, scaled
TIMEOUT_MS = round((SCRAPE_S - 0.5) * 1000)  # Prometheus wants it under the interval
DRAIN_S = 1.0 / SCALE  # AGENT_DRAIN_SECONDS, scaled
# Of line rate, one burst per scrape interval. The 1 ms maxima come out higher and vary (the
# emulated writer shares this process and steps every 0.5 ms, so samples jitter, clipped at
# 1): that is why the trace, not the height, is the truth. Each burst is 5.7 s before the
# scrape after next, beyond the 3.75 s window, so no interval's value can be its neighbour's.
HEIGHTS = (0.2, 0.05, 0.4)
BURST_S = 0.06
LEAD_S = SCRAPE_S / 10  # the burst starts this long after the interval's scrape
SERIES = 'burstscope_port_peak_utilization_ratio{device="mlx5_0",direction="transmit"'


@pytest.fixture
def prometheus_binary() -> str:
    return require_binary("prometheus")


def play_bursts(writer: CounterWriter, starts: list[float], stop: threading.Event) -> None:
    """One burst per start (wall-clock seconds), each at its height, from when this thread
    wakes (a late wake-up shifts a burst by milliseconds; the trace says where it fell)."""
    for start, height in zip(starts, HEIGHTS, strict=True):
        if stop.wait(max(0.0, start - time.time())):
            return
        writer.set_load("mlx5_0", "transmit", Load(height))
        if stop.wait(BURST_S):
            return
        writer.set_load("mlx5_0", "transmit", None)


def raw_samples(server: simulated_fleet.Prometheus, selector: str, at: float) -> list[Any]:
    answer = server.get("/api/v1/query", query=f"{selector}[5m]", time=f"{at:.3f}")
    result = answer["data"]["result"]
    return list(result[0]["values"]) if result else []


def trace_utilization(trace: Path, line_rate: int) -> tuple[np.ndarray, np.ndarray]:
    """(wall-clock ns, 1 ms utilization) of mlx5_0 transmit, through the same detectors."""
    from burstscope.collector.trace import read_samples
    from burstscope.detectors.analyzer import DirectionAnalyzer
    from burstscope.detectors.config import Thresholds

    analyzer = DirectionAnalyzer(line_rate, Thresholds(), 1_000_000, keep_bursts=False)
    stamps, utilization = [], []
    for piece in read_samples(trace):
        if piece.device != "mlx5_0":
            continue
        chunk = analyzer.feed(piece.timestamp_ns, piece.xmit_bytes, piece.rebaseline)
        stamps.append(chunk.timestamp_ns)
        utilization.append(np.where(chunk.valid, chunk.utilization, 0.0))
    return np.concatenate(stamps), np.concatenate(utilization)


@pytest.fixture
def scraped(prometheus_binary: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The agent scraped at 3 s while the bursts play; yields what the assertions need."""
    from burstscope.agent import Agent
    from burstscope.collector.trace import TraceWriter

    node = EmulatedNode(tmp_path / "node", ["mlx5_0"]).build()
    trace = tmp_path / "trace"
    trace.mkdir()
    writer = CounterWriter(node)
    port = free_port()
    settings = agent_settings(
        ["--source", "sysfs", "--sysfs-root", str(node.root), "--listen", f"127.0.0.1:{port}"]
    )
    agent = Agent(settings, TraceWriter(trace), drain_seconds=DRAIN_S, peak_windows=WINDOWS)
    prometheus_dir = tmp_path / "prometheus"
    prometheus_dir.mkdir()
    config = prometheus_dir / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {SCRAPE_S:g}s\n  scrape_timeout: {TIMEOUT_MS}ms\n"
        "scrape_configs:\n  - job_name: burstscope\n"
        f"    static_configs:\n      - targets: [{json.dumps(f'127.0.0.1:{port}')}]\n"
    )
    stop = threading.Event()
    stopped = False
    with writer.running_in_thread():
        agent.start()
        try:
            with simulated_fleet.running_prometheus(
                prometheus_binary, config, prometheus_dir / "data", free_port()
            ) as server:
                # The schedule: two scrapes give its phase; the bursts follow it.
                scrapes = wait_for(
                    lambda: (
                        (s := raw_samples(server, 'up{job="burstscope"}', time.time()))
                        and len(s) >= 2
                        and s
                    ),
                    60,
                    "two scrapes of the agent",
                )
                first = float(scrapes[-1][0])
                while first < time.time() + 1.0:
                    first += SCRAPE_S
                starts = [first + k * SCRAPE_S + LEAD_S for k in range(len(HEIGHTS))]
                player = threading.Thread(target=play_bursts, args=(writer, starts, stop))
                player.start()
                try:
                    end = starts[-1] - LEAD_S + SCRAPE_S  # the scrape closing the last one
                    wait_for(
                        lambda: any(
                            float(t) >= end - 0.5
                            for t, _ in raw_samples(server, SERIES + "}", time.time())
                        ),
                        (end - time.time()) + 60,
                        "the scrape after the last burst",
                    )
                finally:
                    stop.set()
                    player.join(10)
                stopped = True
                agent.stop()  # closes the trace: the ground truth is complete
                yield {
                    "server": server,
                    "starts": starts,
                    "trace": trace,
                    "line_rate": node.line_rate_bytes_per_second,
                }
        finally:
            if not stopped:
                agent.stop()
            shutil.rmtree(prometheus_dir / "data", ignore_errors=True)


def test_long_window_keeps_every_peak_at_the_longest_promised_scrape(
    scraped: dict[str, Any],
) -> None:
    server: simulated_fleet.Prometheus = scraped["server"]
    now = time.time()
    long_samples = raw_samples(server, SERIES + ',window="3.75s"}', now)
    stamps = [float(t) for t, _ in long_samples]
    times, utilization = trace_utilization(scraped["trace"], scraped["line_rate"])

    def trace_max(start: float, end: float) -> float:
        inside = (times > int(start * 1e9)) & (times <= int(end * 1e9))
        assert inside.any(), (start, end)
        return float(utilization[inside].max())

    def promql_max(window: str, start: float, end: float) -> float:
        # Prometheus 2 selects [end - range, end] inclusive: a range 1 ms short of the
        # interval holds only this interval's scrape.
        milliseconds = round((end - start) * 1000) - 1
        expr = f'max_over_time({SERIES},window="{window}"}}[{milliseconds}ms])'
        return _at(server, expr, end)

    compared, short_missed = [], 0
    for start in scraped["starts"]:
        # The scrape-aligned interval holding this burst: (scrape before it, next scrape].
        before = max(t for t in stamps if t < start)
        after = min(t for t in stamps if t > start)
        truth = trace_max(before, after)
        assert truth > 0.0  # the burst is in the trace
        compared.append((promql_max("3.75s", before, after), truth))
        short_missed += promql_max("750ms", before, after) < truth
    assert [seen for seen, _ in compared] == pytest.approx([t for _, t in compared], rel=1e-12)
    # The short window (15 s unscaled, all the agent exported before) misses them here.
    assert short_missed == len(HEIGHTS)


def _at(server: simulated_fleet.Prometheus, expr: str, at: float) -> float:
    result = server.get("/api/v1/query", query=expr, time=f"{at:.3f}")["data"]["result"]
    assert result, expr
    return float(result[0]["value"][1])
