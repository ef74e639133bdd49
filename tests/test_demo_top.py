"""demo and top end to end: the simulated node through the real agent, a real terminal."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from burstscope.testing.processes import free_port, metric, wait_until
from tests.conftest import require_binary
from tests.test_cli_core import assert_usage_error, burstscope


def test_demo_json_reports_the_run_and_serves_metrics(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "run"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "burstscope",
            "demo",
            "--duration",
            "10",
            "--json",
            "--listen",
            f"127.0.0.1:{port}",
            "-o",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = (
        'burstscope_port_peak_utilization_ratio{device="mlx5_0",direction="transmit",'
        'port="1",window="15s"}'
    )
    # The simulated node's slow counters: congestion rises with its saturated milliseconds.
    wait = 'burstscope_port_transmit_wait_total{device="mlx5_0",port="1"}'
    cnp = 'burstscope_port_congestion_packets_total{counter="np_cnp_sent",device="mlx5_0",port="1"}'
    body = ""

    def served() -> bool:
        nonlocal body
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                body = answer.read().decode()
            return metric(body, peak) >= 0.95 and metric(body, wait) > 0 and metric(body, cnp) > 0
        except (OSError, AssertionError, ValueError):
            return process.poll() is not None  # not serving yet, or gone: stop asking then

    assert wait_until(served), "the demo never served its metrics"
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert metric(body, peak) >= 0.95
    assert metric(body, wait) > 0
    assert metric(body, cnp) > 0
    report = json.loads(stdout)
    assert len(report["ports"]) == 18
    rail = next(
        p for p in report["ports"] if p["device"] == "mlx5_0" and p["direction"] == "transmit"
    )
    assert rail["line_rate_bytes_per_second"] == 50_000_000_000
    assert rail["scales"]["0.001"]["max"] >= 0.95
    assert rail["mean_utilization"] < 0.3
    assert rail["bursts"]["count"] > 50
    assert list(out.glob("part-*.parquet"))
    # The agent recorded the slow counters too, so the report puts congestion beside bursts:
    # the simulated node's port_xmit_wait only rises in saturated milliseconds.
    assert list((out / "_slow").glob("slow-*.parquet"))
    wait = rail["congestion"]["port_xmit_wait"]
    assert wait["increments"] > 0 and wait["share"] > 0.9, wait


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--profile", "llama"], "unknown profile 'llama'"),
        (["--duration", "-3"], "--duration -3 must be positive"),
        (["--duration", "1", "-o", "/proc/burstscope-demo"], "cannot write"),
        (["--duration", "1", "--listen", "nowhere"], "is not ADDR:PORT"),
    ],
)
def test_demo_bad_input(args: list[str], fragment: str) -> None:
    assert_usage_error(burstscope("demo", *args), fragment)


def test_top_prints_plain_lines_when_not_a_terminal() -> None:
    result = burstscope("top", "--source", "sim:dense", "--duration", "2.5", "--every", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # One line per port direction each second (the last at the deadline), not per refresh.
    assert 18 <= len(lines) <= 3 * 18 and len(lines) % 18 == 0, lines
    assert any("mlx5_0/1 transmit" in line and "peak15s=" in line for line in lines)
    assert any("peak1s=" in line and "(15s over first" in line for line in lines)
    # The congestion counters the table shows (the simulated node's, polled at 1 Hz).
    assert any("mlx5_0/1" in line and " ecn_run=" in line and " cnp_run=" in line for line in lines)


def test_top_every_must_be_sane() -> None:
    assert_usage_error(burstscope("top", "--source", "sim", "--every", "0"), "--every 0 must be")


def test_top_in_a_real_terminal_quits_on_q(tmp_path: Path) -> None:
    tmux = require_binary("tmux")
    session = f"bs-top-{time.monotonic_ns()}"
    done = tmp_path / "status"
    # pytest exports COLUMNS; the view must size itself from the real terminal.
    top = f"{sys.executable} -m burstscope top --source sim:moe"
    command = f"env -u COLUMNS -u LINES {top}; echo $? > {done}"
    subprocess.run(
        [tmux, "new-session", "-d", "-s", session, "-x", "220", "-y", "40", command], check=True
    )
    try:
        screen = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "mlx5_7/1" not in screen:
            time.sleep(0.5)
            screen = subprocess.run(
                [tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout
        assert "1-ms peak" in screen and "mlx5_7/1" in screen and "400 Gb/s" in screen
        subprocess.run([tmux, "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not done.exists():
            time.sleep(0.2)
        assert done.exists() and done.read_text().strip() == "0"
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], capture_output=True)


def test_demo_publishes_burst_events_over_mqtt(tmp_path: Path) -> None:
    from tests.test_mqtt_broker import Broker, Subscriber

    broker = Broker(tmp_path)
    broker.start()
    url = f"mqtt://127.0.0.1:{broker.port}"
    subscriber = Subscriber(url)
    try:
        result = burstscope(
            "demo",
            "--duration",
            "4",
            "--json",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--mqtt",
            url,
        )
        assert result.returncode == 0, result.stderr
        assert subscriber.wait_for(lambda: len(subscriber.events()) > 20, 15)
        events = subscriber.events()
        bursts = [e for e in events if e.get("device", "").startswith("mlx5_") and "bytes" in e]
        assert bursts and all(e["peak_utilization"] > 0.5 for e in bursts)
        seqs = sorted({e["seq"] for e in events})
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # no gap
    finally:
        subscriber.stop()
        broker.kill()


def test_the_demos_closing_hints_work_as_printed(tmp_path: Path) -> None:
    """A new shell has no activated venv: the printed commands must run as they are."""
    program = Path(sys.executable).with_name("burstscope")
    result = subprocess.run(
        [str(program), "demo", "--duration", "2", "--listen", f"127.0.0.1:{free_port()}",
         "-o", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    hints = {
        line.split(": ", 1)[0]: line.split(": ", 1)[1]
        for line in result.stdout.splitlines()
        if line.startswith(("Report on it again: ", "With a figure: "))
    }
    assert set(hints) == {"Report on it again", "With a figure"}, result.stdout
    for command in hints.values():
        rerun = subprocess.run(
            shlex.split(command), capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        assert rerun.returncode == 0, (command, rerun.stderr)
    assert (tmp_path / "run.png").stat().st_size > 10_000
