"""A command under test whose stderr is read as it comes, so tests wait for what it says;
the agent as such a command, and what tests ask its /metrics."""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Start-up on a loaded 2-core machine (numpy, pyarrow, a sampler process) can take seconds:
# a condition that holds on a quiet machine in 0.5 s gets this long before it fails.
DEADLINE_SECONDS = 60.0
# How long SIGTERM may take to stop the agent: the unit's TimeoutStopSec, after which systemd
# would kill it. A quiet machine takes under 0.5 s; a loaded one, with two CPU hogs and other
# test runs beside it, was seen to need 2.1 s.
STOP_SECONDS = 10.0


# tgkill(2)'s system call number. Python's os has no tgkill: os.kill signals the whole
# process (any thread may take it), signal.pthread_kill only a thread of this process. From
# the kernel's tables: arch/x86/entry/syscalls/syscall_64.tbl (234 tgkill) and
# include/uapi/asm-generic/unistd.h (__NR_tgkill 131), which arm64 uses.
TGKILL_SYSCALL = {"x86_64": 234, "aarch64": 131}


def signal_thread(pid: int, tid: int, signum: int) -> None:
    """Send ``signum`` to thread ``tid`` of process ``pid`` alone, as the kernel may hand a
    kill(2) to any thread (tgkill(2)); NotImplementedError on another architecture."""
    number = TGKILL_SYSCALL.get(platform.machine())
    if number is None:
        raise NotImplementedError(f"tgkill's system call number on {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, pid, tid, signum) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def main_thread_asleep(pid: int) -> bool:
    """Process ``pid``'s main thread is asleep (state S in /proc/PID/task/PID/stat, proc(5))
    now and again 0.1 s later: waiting, not between two waits."""

    def asleep() -> bool:
        stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "S"

    if not asleep():
        return False
    time.sleep(0.1)
    return asleep()


def other_threads(pid: int) -> list[int]:
    """The thread ids of process ``pid`` but its main thread's (whose id is ``pid``)."""
    return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid)


def wait_until(condition: Callable[[], bool], timeout: float = DEADLINE_SECONDS) -> bool:
    """Poll ``condition`` until it holds (True) or the deadline passes (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def wait_for(check: Callable[[], Any], timeout: float, what: str, poll: float = 0.5) -> Any:
    """The first true result of ``check`` (polled every ``poll`` s), or the test fails
    naming ``what`` once ``timeout`` s have passed."""
    # pytest only here: the benchmarks import this module where pytest need not be installed.
    import pytest

    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


class LoggedProcess:
    """``argv`` started now; its stderr lines collected in ``lines`` by a reader thread."""

    def __init__(self, argv: Sequence[str], **popen: Any) -> None:
        self.process = subprocess.Popen(list(argv), stderr=subprocess.PIPE, text=True, **popen)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_log(self, fragment: str, timeout: float = DEADLINE_SECONDS) -> str:
        """The first line containing ``fragment``; fails if the process ends or time runs out."""
        found: list[str] = []

        def logged() -> bool:
            found.extend(line for line in list(self.lines) if fragment in line)
            return bool(found) or self.process.poll() is not None

        wait_until(logged, timeout)
        if not found and self.process.poll() is not None:
            # It may have written the line just before exiting: read what is left.
            self._reader.join(5)
            found.extend(line for line in self.lines if fragment in line)
        if not found:
            raise AssertionError(f"{fragment!r} not logged; log: {self.lines}")
        return found[0]

    def stop(
        self,
        signum: int = signal.SIGTERM,
        timeout: float = DEADLINE_SECONDS,
        thread: int | None = None,
    ) -> int:
        """Send ``signum`` (to thread id ``thread`` alone if given), wait for the exit and for
        every line it wrote; the exit status. A process that does not exit in time fails the
        test with its last lines: for a Python one started with PYTHONFAULTHANDLER set, every
        thread's stack, which SIGABRT dumps."""
        if self.process.poll() is None:
            if thread is None:
                self.process.send_signal(signum)
            else:
                signal_thread(self.process.pid, thread, signum)
        try:
            status = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self._reader.join(10)
            tail = "\n".join(self.lines[-80:])
            raise AssertionError(
                f"still running {timeout:g} s after {signum!r}; log:\n{tail}"
            ) from None
        self._reader.join(timeout)
        return status

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)


def free_port() -> int:
    """A loopback port nobody holds right now (the agent binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def find_mosquitto() -> str | None:
    """Debian's mosquitto (in /usr/sbin, off a user's PATH), or None."""
    found = shutil.which("mosquitto")
    return found or ("/usr/sbin/mosquitto" if os.access("/usr/sbin/mosquitto", os.X_OK) else None)


def start_broker(directory: Path, binary: str) -> tuple[subprocess.Popen[bytes], int]:
    """A bare mosquitto on a free loopback port, anonymous, no persistence (benchmarks)."""
    port = free_port()
    config = directory / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\n"
        + ("user root\n" if os.geteuid() == 0 else "")
    )
    process = subprocess.Popen(
        [binary, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("mosquitto did not start")


def fetch(url: str, context: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, timeout=5, context=context) as response:
        return str(response.read().decode())


def metric(body: str, line_prefix: str) -> float:
    """The value of the first exposition line starting with ``line_prefix``."""
    for line in body.splitlines():
        if line.startswith(line_prefix):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{line_prefix} not in exposition")


class AgentProcess:
    """``burstscope agent`` on a free loopback port, its stderr collected as it comes."""

    def __init__(self, *args: str, scheme: str = "http", **popen: Any) -> None:
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        # An agent that hangs on its way out shows every thread's stack (LoggedProcess.stop).
        popen["env"] = {**popen.get("env", os.environ), "PYTHONFAULTHANDLER": "1"}
        self.run = LoggedProcess(
            [
                sys.executable,
                "-m",
                "burstscope",
                "agent",
                "--listen",
                f"127.0.0.1:{self.port}",
                *args,
            ],
            stdout=subprocess.DEVNULL,
            **popen,
        )

    @property
    def pid(self) -> int:
        return self.run.process.pid

    @property
    def stderr(self) -> str:
        return self.run.stderr

    def scrape(self, context: ssl.SSLContext | None = None) -> str:
        """/metrics now; raises OSError while the agent does not answer."""
        return fetch(self.url + "/metrics", context)

    def value(self, prefix: str, context: ssl.SSLContext | None = None) -> float | None:
        """The value of the first line starting with ``prefix``; None when absent."""
        try:
            body = self.scrape(context)
        except OSError:
            return None
        for line in body.splitlines():
            if line.startswith(prefix):
                return float(line.rsplit(" ", 1)[1])
        return None

    def wait_value(
        self,
        prefix: str,
        check: object,
        timeout: float = DEADLINE_SECONDS,
        context: ssl.SSLContext | None = None,
    ) -> float:
        """The first value of ``prefix`` that equals ``check`` (or that ``check`` accepts)."""
        found: list[float] = []

        def holds() -> bool:
            assert self.run.process.poll() is None, f"agent exited; log: {self.run.lines}"
            value = self.value(prefix, context)
            if value is not None and (check(value) if callable(check) else value == check):
                found.append(value)
                return True
            return False

        assert wait_until(holds, timeout), f"{prefix} never met {check}; log: {self.run.lines}"
        return found[0]

    def wait_ready(self, context: ssl.SSLContext | None = None) -> str:
        """/metrics once the sampler has ticked."""
        self.wait_value("burstscope_sampler_ticks_total ", lambda v: v > 0, context=context)
        return self.scrape(context)

    def scrape_when(self, *fragments: str) -> str:
        """/metrics once every fragment is in it."""
        body: list[str] = [""]

        def ready() -> bool:
            assert self.run.process.poll() is None, f"agent exited; log: {self.run.lines}"
            try:
                body[0] = self.scrape()
            except OSError:
                return False
            return all(f in body[0] for f in fragments)

        assert wait_until(ready), f"{fragments} not in {body}; log: {self.run.lines}"
        return body[0]

    def ticks_advance(self) -> bool:
        before = self.value("burstscope_sampler_ticks_total ") or 0
        return wait_until(lambda: (self.value("burstscope_sampler_ticks_total ") or 0) > before)

    def stop(self, thread: int | None = None) -> int:
        """SIGTERM (to thread id ``thread`` alone if given), then the exit status once every
        line it wrote is read."""
        return self.run.stop(thread=thread)

    def kill(self) -> None:
        self.run.kill()
