"""Fault injection against real agent processes: counters, disks, clients, crashes, configs.

Every case is one a node meets in the field: a counter file that returns garbage or an
error, a disk that fills, a process killed or stopped, clients that open connections and
say nothing, a configuration that looks fine. Each must stay with its port, interval,
recording or connection, and be counted and logged. FUSE serves the errors a plain file
cannot (EIO, EINVAL on read); those tests skip without /dev/fuse and mfusepy.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from burstscope.testing.fuse_tree import (
    FuseFiles,
    FuseMountError,
    fuse_unavailable,
    link_counters,
    served_files,
)
from burstscope.testing.processes import (
    DEADLINE_SECONDS,
    AgentProcess,
    fetch,
    free_port,
    wait_until,
)
from tests.conftest import integration_unavailable, require_binary, require_root
from tests.test_agent import make_certificates

PORT0 = Path("class/infiniband/mlx5_0/ports/1")
PORT1 = Path("class/infiniband/mlx5_1/ports/1")


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    started: list[AgentProcess] = []
    yield started
    for agent in started:
        agent.run.kill()


def write_counter(path: Path, text: str) -> None:
    """Rewrite a counter file in place: the sampler keeps its descriptor open.

    A shorter number is padded with leading zeros to the old length: written over a longer
    one and then truncated, the file would read "5\n3456789\n" between the write and the
    truncation, and a 1 ms sampler that reads it then refuses it as not a number (and
    rebaselines, so the reset the test writes is never seen as one)."""
    fd = os.open(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        digits = text.strip()
        if digits.isdigit() and len(text) < size:
            text = digits.rjust(size - 1, "0") + "\n"
        os.pwrite(fd, text.encode(), 0)
        os.ftruncate(fd, len(text))
    finally:
        os.close(fd)


def children(pid: int) -> list[int]:
    """Children of every thread: a restarted sampler is the pipeline thread's child."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def sampler_pid(agent: AgentProcess) -> int:
    """The sampler process among the agent's children (the other is the resource tracker)."""
    for child in children(agent.pid):
        with contextlib.suppress(OSError):
            if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes():
                return child
    raise AssertionError("no sampler process")


# -- 1. one bad counter value costs that port's interval only -----------------------------


def test_bad_data_counter_values_cost_only_their_port(sysfs_copy: Path, agents: list) -> None:
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--interval", "2ms")
    agents.append(agent)
    agent.wait_ready()
    cases = {
        ("mlx5_0", "port_xmit_data"): ("-1", "negative"),
        ("mlx5_1", "port_rcv_data"): ("1" * 38, "out_of_range"),
        ("mlx5_2", "port_xmit_data"): (str(2**62), "out_of_range"),
    }
    for (device, counter), (text, _) in cases.items():
        write_counter(sysfs_copy / f"class/infiniband/{device}/ports/1/counters/{counter}", text)
    for (device, counter), (_, reason) in cases.items():
        agent.wait_value(
            f'burstscope_port_refused_readings_total{{counter="{counter}",device="{device}",'
            f'port="1",reason="{reason}"}}',
            lambda v: v >= 1,
        )
        agent.run.wait_log(f"{device} port 1: counters/{counter} refused ({reason})")
    assert agent.ticks_advance(), "the sampler stopped"
    assert agent.value("burstscope_sampler_up ") == 1
    # Fixed: the port reads again from a new baseline and its total is the new value.
    write_counter(sysfs_copy / PORT0 / "counters/port_xmit_data", "1000\n")
    agent.wait_value(
        'burstscope_port_data_bytes_total{device="mlx5_0",direction="transmit",port="1"}', 4000
    )
    logged = [line for line in agent.run.lines if "mlx5_0 port 1: counters/port_xmit_data" in line]
    assert len(logged) == 1, logged  # once, not once per tick
    assert agent.stop() == 0
    assert "Traceback" not in agent.run.stderr


def test_slow_counter_out_of_range_costs_only_that_reading(sysfs_copy: Path, agents: list) -> None:
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--include", "mlx5_0")
    agents.append(agent)
    agent.wait_ready()
    symbol = sysfs_copy / PORT0 / "counters/symbol_error"
    errors = 'burstscope_port_errors_total{counter="symbol_error",device="mlx5_0",port="1"}'
    agent.wait_value(errors, 0)
    for text, reason in (("-1", "negative"), (str(2**64 + 5), "out_of_range")):
        write_counter(symbol, text)
        agent.wait_value(
            f'burstscope_port_refused_readings_total{{counter="symbol_error",device="mlx5_0",'
            f'port="1",reason="{reason}"}}',
            lambda v: v >= 1,
        )
    # The poller lives on: good values are read again and exported as the kernel shows
    # them (cumulative; Prometheus' rate() takes the drop from 10 back as a reset).
    write_counter(symbol, "10\n")
    agent.wait_value(errors, 10)
    write_counter(symbol, "13\n")
    agent.wait_value(errors, 13)
    assert agent.stop() == 0


def test_vanished_port_is_not_shown_active(sysfs_copy: Path, agents: list) -> None:
    agent = AgentProcess("--sysfs-root", str(sysfs_copy))
    agents.append(agent)
    agent.wait_ready()
    state = 'burstscope_port_state{device="mlx5_0",port="1"}'
    agent.wait_value(state, 4)
    # A plain file keeps answering through an open descriptor after a rename, so the port
    # goes away the way its files do while the driver tears it down: they read empty.
    active = (sysfs_copy / PORT0 / "state").read_text()
    for name in ("state", "counters/port_xmit_data"):
        write_counter(sysfs_copy / PORT0 / name, "")
    assert wait_until(lambda: agent.value(state) is None), "a port that is gone shows a state"
    agent.wait_value('burstscope_port_failed_reads_total{device="mlx5_0",port="1"}', bool)
    assert agent.value('burstscope_port_state{device="mlx5_1",port="1"}') == 4
    assert agent.ticks_advance()
    write_counter(sysfs_copy / PORT0 / "state", active)
    write_counter(sysfs_copy / PORT0 / "counters/port_xmit_data", "1\n")
    agent.wait_value(state, 4)
    assert agent.stop() == 0


def test_counter_reset_and_garbage_text_are_contained(sysfs_copy: Path, agents: list) -> None:
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--include", "mlx5_0")
    agents.append(agent)
    agent.wait_ready()
    data = sysfs_copy / PORT0 / "counters/port_rcv_data"
    write_counter(data, "5\n")  # below the fixture's value: a reset
    agent.wait_value('burstscope_port_data_resets_total{device="mlx5_0",port="1"}', 1)
    write_counter(data, "N/A (no PMA)\n")
    agent.wait_value(
        'burstscope_port_refused_readings_total{counter="port_rcv_data",device="mlx5_0",'
        'port="1",reason="not_a_number"}',
        lambda v: v >= 1,
    )
    assert agent.ticks_advance()
    assert agent.stop() == 0


# -- 2. supervised processes ----------------------------------------------------------------


def test_killed_sampler_is_restarted_and_counted(sysfs_copy: Path, agents: list) -> None:
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--include", "mlx5_0")
    agents.append(agent)
    agent.wait_ready()
    first = sampler_pid(agent)
    os.kill(first, signal.SIGKILL)
    agent.run.wait_log("the sampler process died (killed by SIGKILL)")
    agent.run.wait_log("sampler restarted")
    agent.wait_value('burstscope_restarts_total{component="sampler"}', 1)
    assert agent.value("burstscope_sampler_up ") == 1
    assert agent.ticks_advance()
    assert sampler_pid(agent) != first
    assert agent.stop() == 0


def test_stopped_sampler_is_noticed_by_its_heartbeat(sysfs_copy: Path, agents: list) -> None:
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--include", "mlx5_0")
    agents.append(agent)
    agent.wait_ready()
    os.kill(sampler_pid(agent), signal.SIGSTOP)
    agent.run.wait_log("the sampler process stalled")
    agent.wait_value('burstscope_restarts_total{component="sampler"}', 1)
    assert agent.ticks_advance()
    assert agent.stop() == 0


def test_sampler_that_keeps_dying_stops_the_agent(sysfs_copy: Path, agents: list) -> None:
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--include", "mlx5_0")
    agents.append(agent)
    agent.wait_ready()
    killed: set[int] = set()

    def kill_next() -> bool:
        if agent.run.process.poll() is not None:
            return True
        with contextlib.suppress(AssertionError, OSError):
            pid = sampler_pid(agent)
            if pid not in killed:
                killed.add(pid)
                os.kill(pid, signal.SIGKILL)
        return False

    assert wait_until(kill_next, 2 * DEADLINE_SECONDS)
    assert agent.run.process.wait() == 1
    agent.run.wait_log("giving up on the sampler")
    assert len(killed) == 5


# -- 3. recording failures never stop detection ------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    require_root()
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True
    )
    if result.returncode != 0:
        integration_unavailable(f"cannot mount a tmpfs: {result.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_pauses_recording_not_detection(
    tmp_path: Path, sysfs_copy: Path, small_disk: Path, agents: list
) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(f'[recording]\npath = "{small_disk}/rec"\npiece_seconds = 0.2\n')
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--config", str(config))
    agents.append(agent)
    agent.wait_ready()
    agent.run.wait_log("recording paused")
    agent.wait_value("burstscope_recording_paused ", 1)
    # Detection goes on: a new counter value reaches /metrics while the disk is full.
    write_counter(sysfs_copy / PORT0 / "counters/port_xmit_data", "123456789\n")
    agent.wait_value(
        'burstscope_port_data_bytes_total{device="mlx5_0",direction="transmit",port="1"}',
        4 * 123456789,
    )
    assert agent.ticks_advance()
    agent.wait_value("burstscope_recording_dropped_samples_total ", lambda v: v > 0)
    # Room again: the recording resumes by itself.
    for piece in sorted((small_disk / "rec").glob("*/part-*.parquet"))[:-1]:
        piece.unlink()
    agent.run.wait_log("recording resumed")
    agent.wait_value("burstscope_recording_paused ", 0)
    # Full again at the stop: SIGTERM still exits cleanly.
    filler = small_disk / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as out:
        out.write(b"\0" * (1 << 20))
    assert agent.stop() == 0
    assert "Traceback" not in agent.run.stderr
    assert "TraceError" not in agent.run.stderr


def test_out_of_descriptors_pauses_recording_then_resumes(
    tmp_path: Path, sysfs_copy: Path, agents: list
) -> None:
    require_root()  # raising another process's limit back needs CAP_SYS_RESOURCE
    config = tmp_path / "agent.toml"
    config.write_text(f'[recording]\npath = "{tmp_path}/rec"\npiece_seconds = 0.2\n')
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--config", str(config))
    agents.append(agent)
    agent.wait_ready()
    assert wait_until(lambda: any((tmp_path / "rec").glob("*/part-*.parquet")))
    limits = resource.prlimit(agent.pid, resource.RLIMIT_NOFILE)
    # Well below what is open: descriptors a scrape or a poll holds for a moment close and
    # reopen, so a limit of exactly the count would leave the writer room now and then.
    in_use = len(os.listdir(f"/proc/{agent.pid}/fd"))
    resource.prlimit(agent.pid, resource.RLIMIT_NOFILE, (in_use // 2, limits[1]))
    try:
        agent.run.wait_log("recording paused")
        assert "Too many open files" in agent.run.wait_log("recording paused")
    finally:
        resource.prlimit(agent.pid, resource.RLIMIT_NOFILE, limits)
    agent.run.wait_log("recording resumed")
    agent.wait_value("burstscope_recording_pauses_total ", lambda v: v >= 1)
    assert agent.ticks_advance()
    assert agent.stop() == 0


def test_retention_keeps_the_newest_pieces_within_max_bytes(
    tmp_path: Path, sysfs_copy: Path, agents: list
) -> None:
    root = tmp_path / "rec"
    old_run = root / "20000101T000000Z"
    old_run.mkdir(parents=True)
    (old_run / "part-000000.parquet").write_bytes(b"x" * 1000)
    os.utime(old_run / "part-000000.parquet", (0, 0))
    config = tmp_path / "agent.toml"
    config.write_text(
        f'[recording]\npath = "{root}"\npiece_seconds = 0.2\nmax_bytes = "60kB"\nmax_age = "1d"\n'
    )
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--config", str(config))
    agents.append(agent)
    agent.wait_ready()
    agent.wait_value("burstscope_recording_deleted_pieces_total ", lambda v: v >= 3)
    assert not old_run.exists()  # older than max_age: gone first, directory and all
    kept = agent.value("burstscope_recording_bytes ")
    assert kept is not None and kept <= 60_000
    assert agent.stop() == 0
    pieces = sorted(root.glob("*/part-*.parquet"))
    total = sum(piece.stat().st_size for piece in pieces)
    assert total <= 60_000 + max(piece.stat().st_size for piece in pieces)
    numbers = [int(piece.stem.split("-")[1]) for piece in pieces]
    assert numbers and numbers[0] > 0 and numbers == list(range(numbers[0], numbers[-1] + 1))
    for path in (*pieces, root / pieces[0].parent.name):
        assert path.stat().st_mode & 0o007 == 0, f"{path} is world-accessible"


# -- 4. the HTTP front ------------------------------------------------------------------------


def test_silent_connection_does_not_block_https_scrapes(
    tmp_path: Path, sysfs_copy: Path, agents: list
) -> None:
    require_binary("openssl")
    certs = make_certificates(tmp_path)
    agent = AgentProcess(
        "--sysfs-root",
        str(sysfs_copy),
        "--include",
        "mlx5_0",
        "--tls-cert",
        str(certs["server"]),
        "--tls-key",
        str(certs["server-key"]),
        scheme="https",
    )
    agents.append(agent)
    agent.run.wait_log("metrics on")
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    silent = [socket.create_connection(("127.0.0.1", agent.port)) for _ in range(3)]
    try:
        started = time.monotonic()
        assert wait_until(
            lambda: agent.value("burstscope_sampler_ticks_total ", context) is not None
        )
        assert time.monotonic() - started < 5
    finally:
        for connection in silent:
            connection.close()
    assert agent.stop() == 0


def test_idle_connections_do_not_stop_a_scrape(sysfs_copy: Path, agents: list) -> None:
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--include", "mlx5_0")
    agents.append(agent)
    agent.wait_ready()
    idle = []
    try:
        for _ in range(150):
            idle.append(socket.create_connection(("127.0.0.1", agent.port)))
        started = time.monotonic()
        body = agent.scrape()
        assert "burstscope_sampler_ticks_total" in body
        assert time.monotonic() - started < 2
    finally:
        for connection in idle:
            connection.close()
    assert agent.stop() == 0


def test_storm_of_concurrent_scrapes_is_answered(sysfs_copy: Path, agents: list) -> None:
    agent = AgentProcess("--sysfs-root", str(sysfs_copy))
    agents.append(agent)
    agent.wait_ready()
    missed_before = agent.value("burstscope_sampler_missed_ticks_total ") or 0
    barrier = threading.Barrier(200)

    def scrape(_: int) -> float:
        barrier.wait()
        started = time.monotonic()
        with urllib.request.urlopen(agent.url + "/metrics", timeout=20) as response:
            assert b"burstscope_sampler_ticks_total" in response.read()
        return time.monotonic() - started

    # Prometheus scrapes from another machine; 200 local client threads are a test's own
    # load, so they keep off the CPU the sampler pins itself to (the last allowed one): on
    # loopback the receiving side's softirq work runs on the sending CPU, ahead of any task.
    allowed = os.sched_getaffinity(0)
    clients = allowed - {max(allowed)} or allowed
    os.sched_setaffinity(0, clients)
    try:
        with ThreadPoolExecutor(200) as pool:
            durations = sorted(pool.map(scrape, range(200)))
    finally:
        os.sched_setaffinity(0, allowed)
    p99 = durations[int(0.99 * len(durations)) - 1]
    print(f"200 concurrent scrapes: p50 {durations[100]:.3f} s, p99 {p99:.3f} s")
    assert len(durations) == 200
    assert p99 <= 1.0, durations[-10:]
    missed = (agent.value("burstscope_sampler_missed_ticks_total ") or 0) - missed_before
    assert missed <= 2, f"{missed} ticks missed during the storm"
    assert agent.stop() == 0


def test_name_filter_oversized_headers_and_traversal(sysfs_copy: Path, agents: list) -> None:
    agent = AgentProcess("--sysfs-root", str(sysfs_copy), "--include", "mlx5_0")
    agents.append(agent)
    agent.wait_ready()
    body = fetch(
        agent.url + "/metrics?name[]=burstscope_sampler_ticks_total&name[]=burstscope_port_state"
    )
    names = {line.split("{")[0].split(" ")[0] for line in body.splitlines() if line[:1] != "#"}
    assert names == {"burstscope_sampler_ticks_total", "burstscope_port_state"}
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as raw:
        raw.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
        assert raw.recv(100).split(b" ")[1] in (b"400", b"431")
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as raw:
        raw.sendall(b"GET /../../etc/passwd HTTP/1.0\r\n\r\n")
        assert b" 404 " in raw.recv(100)
    assert "burstscope_sampler_ticks_total" in agent.scrape()
    assert agent.stop() == 0


# -- 5. one validation path ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "line", "fragment"),
    [
        ("source", "slow_interval = 1e308", "source.slow_interval must be between 1 s"),
        ("source", "slow_interval = nan", "source.slow_interval must be between 1 s"),
        ("recording", "piece_seconds = inf", "recording.piece_seconds must be between"),
        ("mqtt", 'url = "http://x"', "mqtt.url 'http://x' is not"),
        ("source", 'spec = "sims"', "unknown source 'sims'"),
        ("sampler", 'spin = "10s"', "sampler.spin 10000 ms must be shorter"),
        ("recording", 'max_bytes = "lots"', "recording.max_bytes"),
        ("recording", 'max_age = "forever"', "recording.max_age"),
    ],
)
def test_check_config_refuses_what_the_agent_would(
    tmp_path: Path, sysfs_copy: Path, table: str, line: str, fragment: str
) -> None:
    recordings = tmp_path / "recordings"
    tables = {
        "source": [f'sysfs_root = "{sysfs_copy}"'],
        "listen": [f'address = "127.0.0.1:{free_port()}"'],
        "recording": [f'path = "{recordings}"'],
    }
    tables.setdefault(table, []).append(line)
    config = tmp_path / "agent.toml"
    config.write_text(
        "".join(f"[{name}]\n" + "\n".join(keys) + "\n" for name, keys in tables.items())
    )
    for argv in (["--check-config", str(config)], ["--config", str(config)]):
        result = subprocess.run(
            [sys.executable, "-m", "burstscope", "agent", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert result.returncode == 2, (argv, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert fragment in result.stderr, result.stderr
        assert not recordings.exists()


def test_check_config_accepts_what_starts(tmp_path: Path, sysfs_copy: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text(
        f'[source]\nsysfs_root = "{sysfs_copy}"\nslow_interval = 2.5\n'
        f'[recording]\npath = "{tmp_path}/rec"\npiece_seconds = 5.0\nmax_bytes = "10GiB"\n'
        'max_age = "15d"\n[sampler]\nspin = "100us"\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "agent", "--check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "configuration is valid" in result.stdout, result.stderr
    assert not (tmp_path / "rec").exists()


# -- 6. FUSE: errors a plain file cannot produce ----------------------------------------------


@pytest.fixture
def fuse_counters(tmp_path: Path, sysfs_copy: Path) -> Iterator[FuseFiles]:
    """mlx5_0's data counters served by FUSE; control "xmit EIO" to fail its reads."""
    require_root()
    reason = fuse_unavailable()
    if reason is not None:
        integration_unavailable(reason)
    try:
        with served_files(tmp_path, ("xmit", "rcv")) as files:
            link_counters(sysfs_copy, "mlx5_0", files, "xmit", "rcv")
            yield files
    except FuseMountError as exc:
        integration_unavailable(str(exc))


@pytest.mark.parametrize("error", ["EIO", "EINVAL"])
def test_read_errors_cost_only_their_port(
    fuse_counters: FuseFiles, sysfs_copy: Path, agents: list, error: str
) -> None:
    agent = AgentProcess(
        "--sysfs-root", str(sysfs_copy), "--include", "mlx5_[01]", "--interval", "5ms"
    )
    agents.append(agent)
    agent.wait_ready()
    transmit = 'burstscope_port_data_bytes_total{device="mlx5_0",direction="transmit",port="1"}'
    agent.wait_value(transmit, 400)
    fuse_counters.control(f"xmit {error}")
    agent.wait_value(
        f'burstscope_port_refused_readings_total{{counter="port_xmit_data",device="mlx5_0",'
        f'port="1",reason="{error}"}}',
        lambda v: v >= 1,
    )
    agent.run.wait_log(f"counters/port_xmit_data refused ({error})")
    assert agent.value('burstscope_port_failed_reads_total{device="mlx5_1",port="1"}') == 0
    assert agent.ticks_advance()
    if error == "EIO":
        # No sample of the port in the last 15 s while the others are read: no 15 s peak,
        # rather than the last one read (the peak's HELP says so).
        peak = (
            'burstscope_port_peak_utilization_ratio{{device="{}",direction="receive",port="1",'
            'window="15s"}}'
        )
        assert wait_until(lambda: agent.value(peak.format("mlx5_0")) is None, 60)
        assert agent.value(peak.format("mlx5_1")) is not None
    fuse_counters.control("xmit ok")
    fuse_counters.control("xmit 300")
    agent.wait_value(transmit, 1200)
    if error == "EIO":
        agent.wait_value(peak.format("mlx5_0"), lambda v: v >= 0)
    assert agent.stop() == 0


def test_fuse_counter_values_that_no_counter_can_hold(
    fuse_counters: FuseFiles, sysfs_copy: Path, agents: list
) -> None:
    agent = AgentProcess(
        "--sysfs-root", str(sysfs_copy), "--include", "mlx5_0", "--interval", "5ms"
    )
    agents.append(agent)
    agent.wait_ready()
    for value, reason in (("-7", "negative"), (str(2**64), "out_of_range")):
        fuse_counters.control(f"rcv {value}")
        agent.wait_value(
            f'burstscope_port_refused_readings_total{{counter="port_rcv_data",device="mlx5_0",'
            f'port="1",reason="{reason}"}}',
            lambda v: v >= 1,
        )
    assert agent.ticks_advance()
    assert agent.stop() == 0


def test_fault_log_lines_name_port_counter_and_reason() -> None:
    # The reasons a status byte can carry round-trip through the ring's encoding.
    from burstscope.collector.sources.base import bad_errno_status, bad_status, describe_bad_status

    assert describe_bad_status(bad_status(1, 1)) == ("port_rcv_data", "negative")
    assert describe_bad_status(bad_errno_status(0, 5)) == ("port_xmit_data", "EIO")
    assert describe_bad_status(bad_errno_status(1, 22)) == ("port_rcv_data", "EINVAL")
    assert re.fullmatch(r"errno \d+|E\w+", describe_bad_status(bad_errno_status(0, 999))[1])


def test_trace_and_spool_files_are_not_world_readable(tmp_path: Path) -> None:
    import numpy as np

    from burstscope.collector.mqtt.spool import SqliteSpool
    from burstscope.collector.trace import PortColumns, TraceWriter, prepare_output

    previous = os.umask(0)  # run by hand with a permissive umask
    try:
        trace = tmp_path / "trace"
        prepare_output(trace)
        writer = TraceWriter(trace, 1.0)
        count = 10
        writer.append(
            [
                PortColumns(
                    "mlx5_0",
                    1,
                    0,
                    np.arange(count, dtype=np.int64),
                    np.arange(count, dtype=np.uint64),
                    np.arange(count, dtype=np.uint64),
                    np.zeros(count, dtype=np.int64),
                    np.zeros(count, dtype=np.bool_),
                )
            ]
        )
        writer.close()
        spool = SqliteSpool(str(tmp_path / "spool"), 10)
        spool.close()
    finally:
        os.umask(previous)
    (piece,) = trace.glob("part-*.parquet")
    assert piece.stat().st_mode & 0o777 == 0o640
    assert trace.stat().st_mode & 0o777 == 0o750
    for path in (tmp_path / "spool").iterdir():
        assert path.stat().st_mode & 0o077 == 0, path


def test_recording_pauses_drops_and_resumes_without_raising(tmp_path: Path) -> None:
    import numpy as np

    from burstscope.collector.recording import Recording
    from burstscope.collector.trace import PortColumns, TraceWriter

    writer = TraceWriter(tmp_path / "missing" / "trace", 0.001)  # its directory is absent
    recording = Recording(writer, tmp_path)

    def columns(start: int) -> list[PortColumns]:
        stamps = np.arange(start, start + 5_000_000, 1_000_000, dtype=np.int64)
        values = np.arange(len(stamps), dtype=np.uint64)
        zeros = np.zeros(len(stamps), dtype=np.int64)
        flags = np.zeros(len(stamps), dtype=np.bool_)
        return [PortColumns("mlx5_0", 1, 0, stamps, values, values, zeros, flags)]

    recording.append(columns(0), [])
    health = recording.health()
    assert health.paused and health.pauses == 1 and health.dropped_rows == 5
    assert "cannot write" in (health.last_error or "")
    recording.append(columns(10_000_000), [])  # within the backoff: dropped, not buffered
    assert recording.health().dropped_rows == 10 and not writer._pending
    (tmp_path / "missing" / "trace").mkdir(parents=True)
    recording._retry_at = 0.0  # the backoff has passed
    recording.append(columns(20_000_000), [])
    assert not recording.health().paused and writer.pieces_written == 1
    recording.close()
