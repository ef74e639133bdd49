"""discover and record from the command line: golden output and every bad input."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from burstscope.collector.trace import TraceInfo, read_info, read_samples, read_slow
from burstscope.collector.trace.schema import TIME_COLUMN
from burstscope.testing.processes import LoggedProcess, wait_until
from tests.conftest import FIXTURES, SYSFS


def burstscope(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "burstscope", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# The loopback has no speed of its own: a trace of it needs a stated line rate.
LOOPBACK = ["--source", "netdev:lo", "--line-rate", "10"]


def assert_usage_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_discover_json_matches_golden() -> None:
    result = burstscope("discover", "--sysfs-root", str(SYSFS), "--json")
    assert result.returncode == 0, result.stderr
    golden = json.loads((FIXTURES / "discovery.golden.json").read_text())
    assert json.loads(result.stdout) == golden


def test_discover_table_lists_ports_and_skips() -> None:
    result = burstscope("discover", "--sysfs-root", str(SYSFS))
    assert result.returncode == 0
    assert "mlx5_0" in result.stdout and "400" in result.stdout
    # mlx5_3 is kept, not sampled, and the table says why.
    assert "mlx5_3" in result.stdout and "N/A" in result.stdout


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["discover", "--sysfs-root", "/nonexistent-root"], ["'/nonexistent-root'"]),
        (["discover", "--sysfs-root", str(SYSFS), "--include", "("], ["--include", "regular"]),
        (["record", "--sysfs-root", "/nonexistent-root", "-o", "{out}"], ["nonexistent-root"]),
        (["record", "--source", "netdev:nosuchif0", "-o", "{out}"], ["unknown interface"]),
        (["record", "--source", "netdev:lo", "--interval", "10us", "-o", "{out}"], ["10us"]),
        (["record", "--source", "netdev:lo", "--interval", "2min", "-o", "{out}"], ["2min"]),
        (["record", "--source", "bogus", "-o", "{out}"], ["unknown source 'bogus'"]),
        (["record", "--source", "netdev:lo", "--exclude", "[", "-o", "{out}"], ["--exclude"]),
        (["record", "--source", "netdev:lo", "--line-rate", "0", "-o", "{out}"], ["--line-rate 0"]),
        (["top", "--source", "netdev:lo", "--line-rate", "1", "--duration", "0"], ["--duration 0"]),
        (["record", "--source", "netdev:lo", "--duration", "-1", "-o", "{out}"], ["-1"]),
        (["record", *LOOPBACK, "-o", "/proc/burstscope/x"], ["cannot write"]),
        (["record", *LOOPBACK, "-o", str(SYSFS)], ["not empty"]),
        # The loopback has no speed: refused now rather than by `report` later.
        (
            ["record", "--source", "netdev:lo", "-o", "{out}"],
            ["lo port 1: line rate unknown", "--line-rate GBITS", "--line-rate-for lo=GBITS"],
        ),
        (
            ["record", "--sysfs-root", str(SYSFS), "--include", "^none$", "-o", "{out}"],
            ["no InfiniBand or RoCE port"],
        ),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    args: list[str], fragments: list[str], tmp_path: Path
) -> None:
    out = str(tmp_path / "trace")
    result = burstscope(*[a.replace("{out}", out) for a in args])
    assert_usage_error(result, *fragments)


def test_record_fixture_tree_multiplies_data_counters_by_four(tmp_path: Path) -> None:
    out = tmp_path / "trace"
    result = burstscope("record", "--sysfs-root", str(SYSFS), "--duration", "1", "-o", str(out))
    assert result.returncode == 0, result.stderr
    table = ds.dataset(out).to_table().to_pylist()
    first = {row["device"]: row for row in reversed(table)}
    # irdma0 has no counters/: its bytes are hw_counters/ip4{Out,In}Octets, in bytes.
    assert set(first) == {"irdma0", "mlx5_0", "mlx5_1", "mlx5_2"}
    # The trace keeps the kernel's words (unit_bytes 4): 4 x the file is the bytes.
    assert first["mlx5_0"]["xmit_units"] == 91234567890
    assert first["mlx5_0"]["rcv_units"] == 87654321098
    assert first["mlx5_0"]["unit_bytes"] == 4
    assert (first["irdma0"]["xmit_units"], first["irdma0"]["unit_bytes"]) == (654321, 1)
    by_port = {(s.device, s.port): s for s in read_samples(out)}
    assert int(by_port[("mlx5_0", 1)].xmit_bytes[-1]) == 91234567890 * 4
    assert int(by_port[("mlx5_0", 1)].rcv_bytes[-1]) == 87654321098 * 4
    assert first["mlx5_0"]["line_rate_bytes_per_second"] == 50_000_000_000
    assert first["mlx5_1"]["line_rate_bytes_per_second"] == 25_000_000_000
    # The slow counters were polled once beside the samples, under _slow/ so the dataset
    # above (pyarrow skips "_" names) holds samples only; irdma0 has hw counters only.
    slow = {(s.device, s.port, s.name): s for s in read_slow(out)}
    assert int(slow[("mlx5_0", 1, "port_xmit_wait")].value[0]) == 4831  # the fixture file
    # Polled at the start, each second (once the machine is slow enough for a second to
    # pass) and once more at the end: the recording is covered to its end.
    wait = slow[("mlx5_0", 1, "port_xmit_wait")]
    assert wait.rebaseline.tolist() == [True] + [False] * (len(wait.rebaseline) - 1)
    last_sample = max(row["timestamp_us"] for row in table) * 1_000
    assert len(wait.value) >= 2 and wait.timestamp_ns[-1] >= last_sample - 200_000_000, wait
    assert slow[("mlx5_0", 1, "state")].spec is None
    # mlx5_3 is not sampled (N/A (no PMA)), but its state and rate are polled and recorded.
    assert {device for device, _, _ in slow} == {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "irdma0"}
    assert "slow counter readings" in result.stderr


def test_record_no_slow_writes_samples_only(tmp_path: Path) -> None:
    out = tmp_path / "trace"
    result = burstscope(
        "record", "--sysfs-root", str(SYSFS), "--duration", "0.3", "--no-slow", "-o", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert not (out / "_slow").exists() and read_slow(out) == []
    assert " 0 slow counter readings" in result.stderr


def test_sigterm_mid_recording_keeps_what_was_recorded(tmp_path: Path) -> None:
    out = tmp_path / "trace"
    recording = LoggedProcess(
        [sys.executable, "-m", "burstscope", "record", *LOOPBACK, "-o", str(out)]
    )
    try:
        recording.wait_log("sampling 1 port(s) every 1 ms")
        # The first piece closes after 5 s of samples; what follows it is still in memory.
        assert wait_until(lambda: bool(list(out.glob("part-*.parquet"))))
        pieces = ds.dataset(sorted(out.glob("part-*.parquet"))).to_table()
        status = recording.stop()
    finally:
        recording.kill()
    assert status == 0, recording.stderr
    # A piece spans 5 s of wall clock; its row count depends on how many ticks a loaded
    # machine let the sampler take, so the span is checked, not the count.
    times = pieces.column(TIME_COLUMN).to_pylist()
    assert max(times) - min(times) >= 4_500_000
    rows = ds.dataset(out).to_table().num_rows
    assert rows > pieces.num_rows  # the rows not yet in a piece were flushed, not lost
    assert f"recorded {rows} rows" in recording.stderr


def test_a_trace_recorded_on_a_loaded_machine_names_its_scale_by_its_interval(
    tmp_path: Path,
) -> None:
    """Two busy loops beside the recorder jitter its steps; the report still says 1 ms."""
    hog = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(2)]
    out = tmp_path / "trace"
    try:
        result = burstscope(
            "record",
            "--source",
            "netdev:lo",
            "--line-rate",
            "10",
            "--duration",
            "2",
            "-o",
            str(out),
        )
    finally:
        for process in hogs:
            process.kill()
            process.wait()
    assert result.returncode == 0, result.stderr
    assert read_info(out) == TraceInfo(1_000_000, "netdev:lo", socket.gethostname())
    report = burstscope("report", str(out), "--json")
    assert report.returncode == 0, report.stderr
    for port in json.loads(report.stdout)["ports"]:
        assert next(iter(port["scales"])) == "0.001", port["scales"].keys()
    table = burstscope("report", str(out))
    assert "1-ms max" in table.stdout, table.stdout


def test_killed_recording_keeps_closed_pieces(tmp_path: Path) -> None:
    """SIGKILL gives no chance to flush: every piece closed before it stays readable."""
    out = tmp_path / "trace"
    process = subprocess.Popen(
        [sys.executable, "-m", "burstscope", "record", *LOOPBACK, "-o", str(out)],
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not list(out.glob("part-*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    pieces = sorted(out.glob("part-*.parquet"))
    assert pieces, "no piece was closed within 30 s"
    # Each piece spans 5 s of wall clock (not a row count, which a loaded machine lowers).
    times = ds.dataset(pieces).to_table().column(TIME_COLUMN).to_pylist()
    assert max(times) - min(times) >= 4_500_000


def test_a_trace_needs_no_existing_parent_directory(tmp_path: Path) -> None:
    """`-o fleet/node-0` on a fresh directory, as in docs/fleet-analysis.md: every command
    that takes -o (record, simulate, demo: all through prepare_output) makes the parents."""
    recorded = tmp_path / "fresh" / "node-0" / "trace"
    result = burstscope("record", *LOOPBACK, "--duration", "0.3", "-o", str(recorded))
    assert result.returncode == 0, result.stderr
    assert list(recorded.glob("part-*.parquet"))
    simulated = tmp_path / "fleet" / "node-1"
    result = burstscope("simulate", "--duration", "0.2", "-o", str(simulated))
    assert result.returncode == 0, result.stderr
    assert list(simulated.glob("part-*.parquet"))


def test_the_line_rate_for_one_device_is_enough_for_a_trace(tmp_path: Path) -> None:
    out = tmp_path / "trace"
    result = burstscope(
        *("record", "--source", "netdev:lo", "--line-rate-for", "lo=10"),
        *("--duration", "0.3", "-o", str(out)),
    )
    assert result.returncode == 0, result.stderr
    report = burstscope("report", str(out), "--json")
    assert report.returncode == 0, report.stderr


@pytest.mark.parametrize(("given", "logged"), [("0.002", "2 ms"), ("500us", "500 us")])
def test_the_interval_is_logged_with_its_unit(given: str, logged: str, tmp_path: Path) -> None:
    """A bare number is seconds (documented in --help); the log says what was understood."""
    out = tmp_path / "trace"
    result = burstscope(
        "record", *LOOPBACK, "--interval", given, "--duration", "0.3", "-o", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert f"sampling 1 port(s) every {logged} into" in result.stderr


@pytest.mark.parametrize("command", ["record", "agent", "top", "simulate"])
def test_interval_help_states_unit_and_default(command: str) -> None:
    result = burstscope(command, "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "a bare number is seconds" in text and "(default 1ms" in text
