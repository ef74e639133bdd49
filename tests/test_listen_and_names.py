"""What the agent says it binds, and the names its processes show in ps."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from burstscope.testing.processes import LoggedProcess, fetch, free_port, wait_until

SIM = ["--source", "sim", "--log-level", "info"]


def agent(*args: str) -> LoggedProcess:
    return LoggedProcess([sys.executable, "-m", "burstscope", "agent", *SIM, *args])


def test_port_zero_binds_a_free_port_and_logs_it() -> None:
    """--listen 127.0.0.1:0: the kernel picks the port; the log names the one bound."""
    process = agent("--listen", "127.0.0.1:0")
    try:
        line = process.wait_log("metrics on ")
        found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", line)
        assert found is not None, process.stderr
        port = int(found.group(1))
        assert port != 0
        assert "burstscope_" in fetch(f"http://127.0.0.1:{port}/metrics")
    finally:
        process.kill()


def test_all_interfaces_are_logged_as_bound() -> None:
    """--listen :PORT binds every IPv4 interface: the log says 0.0.0.0, not http://:PORT."""
    port = free_port()
    process = agent("--listen", f":{port}")
    try:
        line = process.wait_log("metrics on ")
        assert f"metrics on http://0.0.0.0:{port}/metrics" in line, process.stderr
    finally:
        process.kill()


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _children(pid: int) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        parent = re.search(r"^PPid:\s+(\d+)$", text, re.MULTILINE)
        if parent is not None and int(parent.group(1)) == pid:
            found.append(int(status.parent.name))
    return found


def test_the_agent_and_its_sampler_are_named_in_ps() -> None:
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("no /proc: the process names are read from /proc/PID/cmdline")
    process = agent("--listen", "127.0.0.1:0")
    try:
        process.wait_log("metrics on ")
        pid = process.process.pid
        assert wait_until(
            lambda: any(_cmdline(c) == "burstscope: sampler" for c in _children(pid))
        ), [_cmdline(c) for c in _children(pid)]
        assert _cmdline(pid).startswith("burstscope: agent --source sim"), _cmdline(pid)
        assert not [c for c in _children(pid) if "multiprocessing.spawn" in _cmdline(c)]
    finally:
        process.kill()
