"""sd_notify and the watchdog: unit checks, then the agent against a real AF_UNIX socket."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from burstscope.sdnotify import Notifier, Watchdog, heartbeat_recent, watchdog_period
from burstscope.testing.processes import STOP_SECONDS, fetch, free_port, wait_until


class NotifySocket:
    """A bound AF_UNIX datagram socket standing in for systemd; collects (time, message)."""

    def __init__(self, address: str | bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.05)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            self.messages.append((time.monotonic(), data.decode()))

    def wait_for(self, text: str, timeout: float = 20.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, message in list(self.messages):
                if text in message.splitlines():
                    return at
            time.sleep(0.01)
        raise AssertionError(f"{text!r} not received; got {self.messages[-5:]}")

    def count(self, text: str, since: float, until: float | None = None) -> int:
        end = until if until is not None else float("inf")
        return sum(1 for at, m in list(self.messages) if since <= at < end and text in m)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1)
        self.sock.close()


def test_notify_reaches_a_path_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    receiver = NotifySocket(path)
    try:
        notifier = Notifier({"NOTIFY_SOCKET": path})
        assert notifier.ready("sampling")
        receiver.wait_for("READY=1", 2)
        assert receiver.messages[0][1] == "READY=1\nSTATUS=sampling"
    finally:
        receiver.close()


def test_notify_reaches_an_abstract_socket() -> None:
    name = f"burstscope-test-{os.getpid()}-{time.monotonic_ns()}"
    receiver = NotifySocket(b"\0" + name.encode())
    try:
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).notify("WATCHDOG=1")
        receiver.wait_for("WATCHDOG=1", 2)
    finally:
        receiver.close()


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert not notifier.notify("READY=1")


def test_a_failing_send_is_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")})
    with caplog.at_level(logging.ERROR, logger="burstscope.sdnotify"):
        assert not notifier.notify("WATCHDOG=1")
        assert not notifier.notify("WATCHDOG=1")
    failures = [r for r in caplog.records if "sd_notify" in r.getMessage()]
    assert len(failures) == 1
    assert "nobody-listens" in failures[0].getMessage()


@pytest.mark.parametrize(
    ("environ", "period"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "10000000"}, 5.0),
        ({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": str(os.getpid())}, 5.0),
        ({"WATCHDOG_USEC": "10000000", "WATCHDOG_PID": "1"}, None),  # someone else's
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
    ],
)
def test_watchdog_period(environ: dict[str, str], period: float | None) -> None:
    assert watchdog_period(environ) == period


def test_heartbeat_recent() -> None:
    now = time.monotonic_ns()
    assert heartbeat_recent(now, 1_000_000, 1.0)
    assert not heartbeat_recent(now - 2_000_000_000, 1_000_000, 1.0)
    assert not heartbeat_recent(0, 1_000_000, 1.0)  # never ticked
    # A 10 s sampling interval is allowed two intervals between ticks.
    assert heartbeat_recent(now - 15_000_000_000, 10_000_000_000, 1.0)


def test_watchdog_pings_only_while_healthy(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    receiver = NotifySocket(path)
    healthy = threading.Event()
    healthy.set()
    watchdog = Watchdog(Notifier({"NOTIFY_SOCKET": path}), 0.02, healthy.is_set)
    try:
        watchdog.start()
        receiver.wait_for("WATCHDOG=1", 2)
        healthy.clear()
        time.sleep(0.1)
        quiet_from = time.monotonic()
        time.sleep(0.2)
        assert receiver.count("WATCHDOG=1", quiet_from) == 0
        healthy.set()
        time.sleep(0.2)
        assert receiver.count("WATCHDOG=1", quiet_from) > 0
    finally:
        watchdog.stop()
        receiver.close()


def sampler_pid(agent_pid: int) -> int:
    """The agent's sampler process: the child named "burstscope: sampler" (setproctitle)."""
    children: list[int] = []
    for task in Path(f"/proc/{agent_pid}/task").iterdir():
        text = (task / "children").read_text().split()
        children += [int(pid) for pid in text]
    for pid in children:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        if command.strip() == b"burstscope: sampler":
            return pid
    raise AssertionError(f"no sampler among the agent's children {children}")


@pytest.fixture
def notified_agent(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], NotifySocket, int]]:
    path = str(tmp_path / "notify")
    receiver = NotifySocket(path)
    port = free_port()
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="200000")  # ping every 100 ms
    env.pop("WATCHDOG_PID", None)
    process = subprocess.Popen(
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
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process, receiver, port
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=5)
        receiver.close()


def test_agent_ready_watchdog_and_stalled_sampler(
    notified_agent: tuple[subprocess.Popen[str], NotifySocket, int],
) -> None:
    process, receiver, port = notified_agent
    receiver.wait_for("READY=1")
    # READY=1 comes only once /metrics is bound and the first drain fed the sampler's
    # rows through: the data counters, absent before, are there from READY on.
    body = fetch(f"http://127.0.0.1:{port}/metrics")
    assert "burstscope_sampler_ticks_total" in body
    assert 'burstscope_port_data_bytes_total{device="lo",direction="transmit"' in body
    ready = next(m for _, m in receiver.messages if "READY=1" in m)
    assert "STATUS=sampling 1 port(s) from netdev" in ready
    assert wait_until(lambda: receiver.count("WATCHDOG=1", 0) >= 3)

    sampler = sampler_pid(process.pid)
    os.kill(sampler, signal.SIGSTOP)
    try:
        time.sleep(0.5)  # the heartbeat goes stale after one ping period
        stalled_from = time.monotonic()
        time.sleep(0.6)
        assert receiver.count("WATCHDOG=1", stalled_from) == 0, "pings went on while stalled"
    finally:
        os.kill(sampler, signal.SIGCONT)
    resumed_from = time.monotonic()
    assert wait_until(lambda: receiver.count("WATCHDOG=1", resumed_from) >= 2), "no resume"

    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
    assert time.monotonic() - started < STOP_SECONDS
    receiver.wait_for("STOPPING=1", 1)
    assert "withholding watchdog pings" in stderr
    assert "watchdog pings resume" in stderr
