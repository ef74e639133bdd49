"""The sampler, the ring and recording, run for real on this machine's counters."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest

from burstscope.collector.recorder import record
from burstscope.collector.ring import Field, Ring
from burstscope.collector.sampler import SamplerConfig, parse_interval
from burstscope.collector.sources.base import STATUS_REBASELINE, SampleRow
from burstscope.collector.sources.files import PURE_PYTHON_ENV, compiled_tick_available
from burstscope.collector.sources.netdev import NetdevSource
from burstscope.testing.processes import DEADLINE_SECONDS, wait_until


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1ms", 1_000_000),
        ("100us", 100_000),
        ("100µs", 100_000),
        ("0.5s", 500_000_000),
        ("2", 2_000_000_000),
        ("60s", 60_000_000_000),
        (" 250 us ", 250_000),
    ],
)
def test_parse_interval(text: str, expected: int) -> None:
    assert parse_interval(text) == expected


@pytest.mark.parametrize("text", ["99us", "61s", "0", "fast", "1 minute", "-1ms"])
def test_parse_interval_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="interval"):
        parse_interval(text)


def test_ring_returns_rows_in_order_and_counts_what_it_overwrote() -> None:
    ring = Ring.create(ports=2, capacity=8)
    try:
        row = SampleRow.for_ports(2)
        cursor = 0
        for tick in range(5):
            row.timestamp_ns[:] = [tick, tick]
            ring.write(row, lateness_ns=tick)
        cursor, rows = ring.read_since(cursor)
        assert (cursor, rows.first_row, rows.lost_rows) == (5, 0, 0)
        assert rows.lateness_ns.tolist() == [0, 1, 2, 3, 4]
        for tick in range(5, 25):
            row.timestamp_ns[:] = [tick, tick]
            ring.write(row, lateness_ns=tick)
        cursor, rows = ring.read_since(cursor)
        # 8 slots, one kept back for the row being written: the newest 7 survive.
        assert (cursor, rows.first_row, rows.lost_rows) == (25, 18, 13)
        assert rows.timestamp_ns[:, 1].tolist() == list(range(18, 25))
    finally:
        ring.close()


def _read(path: Path) -> dict[str, np.ndarray]:
    table = ds.dataset(path).to_table()
    unit = table["unit_bytes"].to_numpy().astype(np.uint64)
    return {
        "xmit_bytes": table["xmit_units"].to_numpy() * unit,
        "rebaseline": table["rebaseline"].to_numpy(),
        "timestamp_ns": table["timestamp_us"].to_numpy() * 1_000,
        "device": np.asarray(table["device"].to_pylist()),
    }


def test_record_loopback_at_one_millisecond(tmp_path: Path) -> None:
    out = tmp_path / "trace"
    out.mkdir()
    summary = record(NetdevSource(("lo",)), out, 2.0, SamplerConfig())
    columns = _read(out)
    rows = len(columns["timestamp_ns"])
    assert summary.rows == rows
    # Every tick of the 2 s is a row or counted as missed (a busy machine misses some).
    assert 1900 <= rows + summary.missed_ticks <= 2100, summary
    assert (np.diff(columns["timestamp_ns"]) > 0).all()
    # Honest time: the median spacing is the interval, and every tick is accounted for.
    assert abs(np.median(np.diff(columns["timestamp_ns"])) - 1e6) < 50_000
    assert summary.ticks == rows
    assert summary.lost_rows == 0
    assert columns["rebaseline"][0] and not columns["rebaseline"][1:].any()


@pytest.mark.parametrize("tick", ["compiled", "python"])
def test_samples_are_never_closer_than_half_an_interval(
    tick: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside two busy loops the sampler runs late; the deadlines right after a late tick are
    skipped and counted, never run at once (two samples microseconds apart turn one packet
    into a 'burst' at several times line rate). Both loops: C (run_ticks) and Python."""
    if tick == "python":
        monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    elif not compiled_tick_available():
        pytest.skip("built without the compiled tick")
    hog = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(2)]
    out = tmp_path / "trace"
    out.mkdir()
    try:
        summary = record(NetdevSource(("lo",)), out, 3.0, SamplerConfig())
    finally:
        for process in hogs:
            process.kill()
            process.wait()
    steps = np.diff(_read(out)["timestamp_ns"])
    assert steps.min() >= 500_000, (steps.min(), summary)
    assert 2900 <= summary.rows + summary.missed_ticks <= 3100, summary


@pytest.mark.parametrize("tick", ["compiled", "python"])
def test_a_port_that_fails_mid_run_is_retried_and_rebaselined(
    tick: str, sysfs_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One port's counter turns unreadable for a while; the other keeps its cadence.

    Both ticks (collector/sources/files.py): the compiled core where it was built, and the
    pure-Python path it falls back to (the spawned sampler inherits the switch)."""
    if tick == "python":
        monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    elif not compiled_tick_available():
        pytest.skip("built without the compiled tick")
    bad = sysfs_copy / "class/net/dummy0/statistics/tx_bytes"
    source = NetdevSource(("ens1f1np1", "dummy0"), str(sysfs_copy))
    out = tmp_path / "trace"
    out.mkdir()

    sampling, done = threading.Event(), threading.Event()

    def break_and_mend() -> None:
        # Timed from the first samples, however long start-up took on a busy machine.
        assert sampling.wait(DEADLINE_SECONDS)
        time.sleep(0.3)
        bad.write_text("N/A (no PMA)\n")
        time.sleep(0.5)
        bad.write_text("777\n")
        time.sleep(0.5)
        done.set()

    fault = threading.Thread(target=break_and_mend)
    fault.start()
    summary = record(
        source, out, None, SamplerConfig(), should_stop=done.is_set, on_sampling=sampling.set
    )
    fault.join()
    columns = _read(out)
    healthy = columns["device"] == "ens1f1np1"
    broken = columns["device"] == "dummy0"
    assert summary.missing_samples > 300
    assert abs(healthy.sum() - summary.ticks) <= 1
    assert broken.sum() < healthy.sum() - 300
    # Back after the outage: the first reading is a new baseline, then ordinary samples.
    mended = np.flatnonzero(columns["xmit_bytes"][broken] == 777)
    assert mended.size > 50
    assert columns["rebaseline"][broken][mended[0]]
    assert not columns["rebaseline"][broken][mended[1:]].any()


def test_ring_header_reports_scheduling(tmp_path: Path) -> None:
    from burstscope.collector.sampler import Sampler

    sampler = Sampler(NetdevSource(("lo",)), SamplerConfig(interval_ns=500_000))
    try:
        ring = sampler.start()
        assert wait_until(lambda: ring.get(Field.TICKS) > 300)
        assert ring.get(Field.INTERVAL_NS) == 500_000
        assert ring.get(Field.PID) > 0
        assert ring.get(Field.WALL_OFFSET_NS) > 1_600_000_000 * 10**9
        rows = ring.read_since(0)[1]
        assert (rows.status[0] == STATUS_REBASELINE).all()
    finally:
        sampler.close()


def test_refused_scheduling_is_recorded_with_its_reason() -> None:
    """Priority 100 is past SCHED_FIFO's 99 and CPU 4095 does not exist: both are refused
    whatever the privileges, and the reasons reach the notes the agent logs."""
    from burstscope.collector.sampler import Sampler, tuning_notes

    config = SamplerConfig(realtime_priority=100, cpu=4095)
    sampler = Sampler(NetdevSource(("lo",)), config)
    try:
        ring = sampler.start()
        assert ring.get(Field.REALTIME) == 0 and ring.get(Field.CPU) == -1
        notes = tuning_notes(ring, config)
    finally:
        sampler.close()
    assert notes == [
        "SCHED_FIFO priority 100 refused (Invalid argument); sampling goes on under normal "
        "scheduling, with a longer lateness tail",
        "pinning the sampler to CPU 4095 refused (Invalid argument)",
    ]
    quiet = SamplerConfig(realtime_priority=None, cpu=-1)
    sampler = Sampler(NetdevSource(("lo",)), quiet)
    try:
        assert tuning_notes(sampler.start(), quiet) == []  # nothing asked, nothing refused
    finally:
        sampler.close()


def test_without_cap_sys_nice_the_recording_says_why_scheduling_is_normal(
    tmp_path: Path,
) -> None:
    # The kernel's own refusal: CAP_SYS_NICE gone from the bounding set, RLIMIT_RTPRIO 0.
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    done = subprocess.run(
        [
            setpriv,
            "--bounding-set=-sys_nice",
            "--inh-caps=-sys_nice",
            "prlimit",
            "--rtprio=0",
            sys.executable,
            "-m",
            "burstscope",
            "record",
            "--source",
            "netdev:lo",
            "--line-rate",
            "10",
            "--duration",
            "0.3",
            "-o",
            str(tmp_path / "trace"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if "setpriv" in done.stderr or "prlimit:" in done.stderr:
        pytest.skip(f"cannot drop CAP_SYS_NICE here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert "normal scheduling" in done.stderr
    assert (
        "burstscope record: SCHED_FIFO priority 10 refused (Operation not permitted): it "
        "needs CAP_SYS_NICE or an RLIMIT_RTPRIO at or above that priority" in done.stderr
    )


def test_an_eperm_with_cap_sys_nice_is_blamed_on_the_cgroups_real_time_budget(
    tmp_path: Path,
) -> None:
    """CAP_SYS_NICE present (bit 23 of CapEff) and SCHED_FIFO still refused: a cgroup v1 group
    without real-time runtime, as a container's is unless given one. Absent the capability,
    the capability is the reason."""
    from burstscope.collector.sampler import cgroup_rt_runtime, realtime_refusal_reason

    group = tmp_path / "cpu" / "libpod_parent" / "libpod-1"
    group.mkdir(parents=True)
    (group / "cpu.rt_runtime_us").write_text("0\n")
    cgroup = "4:memory:/libpod_parent/libpod-1\n1:cpu,cpuacct:/libpod_parent/libpod-1\n"
    assert cgroup_rt_runtime(cgroup, tmp_path) == (group / "cpu.rt_runtime_us", 0)
    # Inside the container the host's path is named but its own group is the root.
    (tmp_path / "cpu" / "cpu.rt_runtime_us").write_text("0\n")
    assert cgroup_rt_runtime("1:cpu:/elsewhere\n", tmp_path) == (
        tmp_path / "cpu" / "cpu.rt_runtime_us",
        0,
    )
    assert cgroup_rt_runtime("0::/user.slice\n", tmp_path) is None  # cgroup v2
    with_nice = "Name:\tx\nCapEff:\t0000000000800000\n"
    assert "its cgroup is what refuses" in realtime_refusal_reason(with_nice, "0::/\n")
    without = "Name:\tx\nCapEff:\t0000000000000000\n"
    assert realtime_refusal_reason(without, cgroup).startswith(
        ": it needs CAP_SYS_NICE or an RLIMIT_RTPRIO"
    )
