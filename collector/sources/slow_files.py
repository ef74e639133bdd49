"""Sysfs files read at <= 1 Hz on kept-open descriptors: failures counted, never fatal.

Shared by the PortCounters and hw_counters sources: which files and how to parse them
differ, the mechanics do not. ``os.pread(fd, n, 0)`` re-runs the driver's show() on every
call (fs/kernfs/file.c); a file that fails (EINVAL when the PMA query fails, ENODEV after
hot unplug) is left out of that poll and counted; ENODEV and ENOENT close the descriptor
and the file is reopened on the next poll.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from burstscope.detectors.counters import CounterSpec

# Enough for "400 Gb/sec (4X NDR)" and any decimal counter.
_READ_BYTES = 64


@dataclass(frozen=True, slots=True)
class SlowFile:
    device: str
    port: int
    name: str  # the reading's name
    path: Path
    counter: CounterSpec | None  # None for gauges


class SlowFiles:
    """Open descriptors on a list of SlowFile; ``read_errors`` and ``last_error`` report."""

    def __init__(self) -> None:
        self.files: list[SlowFile] = []
        self._fds: list[int] = []
        self.read_errors = 0
        self.last_error: str | None = None

    def open(self, files: list[SlowFile]) -> None:
        self.close()
        self.files = files
        self._fds = [-1] * len(files)
        for index in range(len(files)):
            self._open_one(index)

    def fail(self, file: SlowFile, reason: str) -> None:
        self.read_errors += 1
        self.last_error = f"{file.device}/{file.port} {file.path.name}: {reason}"

    def _open_one(self, index: int) -> bool:
        file = self.files[index]
        try:
            self._fds[index] = os.open(file.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            self.fail(file, exc.strerror or str(exc))
            return False
        return True

    def read(self, index: int) -> str | None:
        """The file's text, or None (counted) when it cannot be read now."""
        file = self.files[index]
        if self._fds[index] < 0 and not self._open_one(index):
            return None
        fd = self._fds[index]
        try:
            return os.pread(fd, _READ_BYTES, 0).decode("ascii", "replace").strip()
        except OSError as exc:
            self.fail(file, f"{errno.errorcode.get(exc.errno or 0, 'error')} ({exc.strerror})")
            if exc.errno in (errno.ENODEV, errno.ENOENT):
                os.close(fd)
                self._fds[index] = -1
            return None

    def read_integer(self, index: int) -> int | None:
        """The file as an integer; "N/A (no PMA)" and other text count as a failed read."""
        text = self.read(index)
        if text is None:
            return None
        try:
            return int(text)
        except ValueError:
            self.fail(self.files[index], f"reads {text[:40]!r}")
            return None

    def close(self) -> None:
        for fd in self._fds:
            if fd >= 0:
                os.close(fd)
        self._fds = []
        self.files = []
