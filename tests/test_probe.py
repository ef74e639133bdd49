"""What this node can honestly resolve: ``discover --probe`` and the agent judge the finest
interval from the sampler's own reads, one judgement for both (detectors.read_cost).

FUSE serves data counters whose every read sleeps a known time first, as a firmware-backed
mlx5 read takes its time; every bound is computed from that injected delay, never from what
a run printed. FUSE adds its own 50-200 us per read, so the delay is milliseconds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from burstscope.detectors.read_cost import (
    INTERVAL_GRAIN_NS,
    MARGIN,
    Spread,
    finest_interval_ns,
    spread,
    tick_read_windows,
)
from burstscope.testing.fuse_tree import (
    FuseFiles,
    FuseMountError,
    fuse_unavailable,
    link_counters,
    served_files,
)
from burstscope.testing.processes import AgentProcess
from tests.conftest import integration_unavailable
from tests.test_cli_core import assert_usage_error, burstscope

# Injected before every data counter read: two ports, two files each, read in every tick.
DELAY_NS = 2_000_000
FILES_PER_TICK = 4
DEVICES = ("mlx5_0", "mlx5_1")
GAUGE = "burstscope_sampler_finest_interval_seconds "
WARNING = "is finer than the finest honest interval"


def rounded_up(nanoseconds: int) -> int:
    return -(-nanoseconds // INTERVAL_GRAIN_NS) * INTERVAL_GRAIN_NS


# -- the judgement, on arrays ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("stamps", "reads", "read", "expected"),
    [
        # Two ports read one after the other: the first's start to the second's end.
        ([[1_000, 3_000]], [[200, 400]], [[True, True]], [3_200 - 900]),
        # A port not read that tick (failed, held) does not stretch the window.
        ([[1_000, 9_000]], [[200, 400]], [[True, False]], [200]),
        # A tick with no read at all is no tick of the judgement.
        (
            [[1_000, 9_000], [5_000, 5_000]],
            [[200, 400], [0, 0]],
            [[False, False], [True, True]],
            [0],
        ),
    ],
)
def test_tick_read_window_spans_first_start_to_last_end(
    stamps: list[list[int]], reads: list[list[int]], read: list[list[bool]], expected: list[int]
) -> None:
    windows = tick_read_windows(
        np.array(stamps, np.int64), np.array(reads, np.int64), np.array(read, bool)
    )
    assert windows.tolist() == expected


def test_spread_takes_observed_values() -> None:
    # Of 1..100 the 50th percentile falls between the 50th and 51st values, the 99th between
    # the 99th and 100th: each is the value above, one that was measured.
    assert spread(list(range(1, 101))) == Spread(51, 100, 100, 100)
    assert spread([7, 3, 5]) == Spread(5, 7, 7, 3)
    assert spread([]) is None


@pytest.mark.parametrize(
    ("p99_ns", "finest_ns"),
    [
        (10_000, INTERVAL_GRAIN_NS),  # 20 us of reads: the sampler's finest interval
        (50_000, 100_000),  # exactly one grain
        (50_001, 200_000),  # just over: the next grain
        (8_000_000, 16_000_000),
    ],
)
def test_finest_interval_is_twice_the_p99_window_rounded_up(p99_ns: int, finest_ns: int) -> None:
    assert MARGIN == 2
    assert finest_interval_ns(Spread(0, p99_ns, p99_ns, 1)) == finest_ns


# -- discover --probe and the agent on real reads -------------------------------------------


@pytest.fixture
def slow_counters(tmp_path: Path, sysfs_copy: Path) -> Iterator[FuseFiles]:
    """mlx5_0's and mlx5_1's data counters on FUSE, every read DELAY_NS late."""
    reason = fuse_unavailable()
    if reason is not None:
        integration_unavailable(reason)
    names = [f"{device}_{what}" for device in DEVICES for what in ("xmit", "rcv")]
    try:
        with served_files(tmp_path, names) as files:
            for device in DEVICES:
                link_counters(sysfs_copy, device, files, f"{device}_xmit", f"{device}_rcv")
            files.control(f"delay {DELAY_NS / 1e9}")
            yield files
    except FuseMountError as exc:
        integration_unavailable(str(exc))


def probe_json(sysfs: Path, interval: str = "1ms") -> dict:  # type: ignore[type-arg]
    result = burstscope(
        "discover", "--sysfs-root", str(sysfs), "--include", "mlx5_[01]", "--probe",
        "--interval", interval, "--json", timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    probe: dict = json.loads(result.stdout)["probe"]  # type: ignore[type-arg]
    return probe


def test_probe_sees_the_injected_read_time(slow_counters: FuseFiles, sysfs_copy: Path) -> None:
    probe = probe_json(sysfs_copy)
    window = FILES_PER_TICK * DELAY_NS  # every read of the tick sleeps DELAY_NS first
    for when in ("back_to_back", "at_interval"):
        assert probe["tick_read_window"][when]["p50_ns"] >= window, probe
        for port in probe["ports"]:
            assert port[when]["p50_ns"] >= 2 * DELAY_NS, probe  # two files per port
    assert probe["finest_interval_ns"] >= rounded_up(MARGIN * window), probe
    assert probe["finest_interval_ns"] > probe["interval_ns"]


def test_agent_warns_when_its_interval_is_finer_than_its_reads_allow(
    slow_counters: FuseFiles, sysfs_copy: Path
) -> None:
    agent = AgentProcess(
        "--sysfs-root", str(sysfs_copy), "--include", "mlx5_[01]", "--interval", "1ms"
    )
    try:
        agent.wait_ready()
        line = agent.run.wait_log(WARNING)
        assert "--interval 1 ms" in line
        finest = agent.wait_value(GAUGE, lambda v: v > 0)
        assert finest >= rounded_up(MARGIN * FILES_PER_TICK * DELAY_NS) / 1e9
        assert f"sample at {finest * 1e3:g} ms or coarser" in line
        assert agent.stderr.count(WARNING) == 1  # once, not every drain
    finally:
        agent.kill()


def test_tmpfs_reads_fit_a_millisecond(sysfs_copy: Path) -> None:
    """No delay: the fixture tree's tmpfs reads cost microseconds, so 1 ms fits."""
    result = burstscope(
        "discover", "--sysfs-root", str(sysfs_copy), "--include", "mlx5_[01]", "--probe",
        timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    found = re.search(r"finest honest interval ([\d.]+) ms", result.stdout)
    assert found is not None, result.stdout
    assert float(found.group(1)) <= 1.0
    assert "--interval 1 ms fits" in result.stdout
    agent = AgentProcess(
        "--sysfs-root", str(sysfs_copy), "--include", "mlx5_[01]", "--interval", "1ms"
    )
    try:
        agent.wait_ready()
        assert agent.wait_value(GAUGE, lambda v: v > 0) <= 0.001
        agent.run.wait_log("--interval 1 ms fits")
        assert WARNING not in agent.stderr
    finally:
        agent.kill()


def test_probe_refuses_a_bad_interval(sysfs_copy: Path) -> None:
    result = burstscope("discover", "--sysfs-root", str(sysfs_copy), "--probe", "--interval", "5x")
    assert_usage_error(result, "--interval", "5x")


def test_gauge_is_absent_until_judged(sysfs_copy: Path) -> None:
    """At 2 s the judgement waits for 20 ticks (40 s): until then no guess is exported."""
    agent = AgentProcess(
        "--sysfs-root", str(sysfs_copy), "--include", "mlx5_[01]", "--interval", "2s"
    )
    try:
        body = agent.wait_ready()
        assert "burstscope_sampler_interval_seconds 2.0" in body
        assert GAUGE not in body
    finally:
        agent.kill()


def test_probe_table_fits_80_columns_when_piped(sysfs_copy: Path) -> None:
    """Piped, the probe's table is 80 columns wide like the ports table: back-to-back columns
    leave first and the footer names them; device, port and the paced figures stay whole."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "discover", "--sysfs-root", str(sysfs_copy),
         "--include", "mlx5_[01]", "--probe"],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    table = result.stdout[result.stdout.index("data counter read cost") :].splitlines()
    verdict = [line for line in table if line.startswith("finest honest interval")]
    assert len(verdict) == 1, result.stdout  # one line however long, for grep
    assert all(len(line) <= 80 for line in table if line not in verdict), result.stdout
    body = "\n".join(table)
    for header in ("device", "port", "paced p50", "paced p99"):
        assert header in body, result.stdout
    for device in DEVICES:
        assert re.search(rf"\b{device}\b", body), result.stdout
    assert "not shown at 80 columns: " in body and "b2b" in body, result.stdout
