"""A command under test whose stderr is read as it comes, so tests wait for what it says."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

# Start-up on a loaded 2-core machine (numpy, pyarrow, a sampler process) can take seconds:
# a condition that holds on a quiet machine in 0.5 s gets this long before it fails.
DEADLINE_SECONDS = 60.0
# How long SIGTERM may take to stop the agent: the unit's TimeoutStopSec, after which systemd
# would kill it. A quiet machine takes under 0.5 s; a loaded one, with two CPU hogs and other
# test runs beside it, was seen to need 2.1 s.
STOP_SECONDS = 10.0


def wait_until(condition: Callable[[], bool], timeout: float = DEADLINE_SECONDS) -> bool:
    """Poll ``condition`` until it holds (True) or the deadline passes (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


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

    def stop(self, signum: int = signal.SIGTERM, timeout: float = DEADLINE_SECONDS) -> int:
        """Send ``signum``, wait for the exit and for every line it wrote; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        status = self.process.wait(timeout)
        self._reader.join(timeout)
        return status

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)
