"""Logging fit for journald: one line per event, levels, and identical repeats rate-limited.

A port that fails every tick must not write a thousand lines a second into the journal
for months: after ``burst`` identical messages in ``interval`` seconds the rest are
dropped, and the next one let through after the interval says how many were dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

LEVELS = ("debug", "info", "warning", "error")


@dataclass(slots=True)
class _Window:
    started: float
    passed: int = 0
    suppressed: int = 0


class RepeatFilter(logging.Filter):
    """Lets at most ``burst`` identical records (logger, level, text) through per ``interval``.

    When a window with suppressed repeats has ended, the next identical record goes
    through with "(suppressed K repeats in the last N s)" appended, so the journal keeps
    one line per event and still says what was dropped.
    """

    def __init__(
        self,
        burst: int = 5,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 1024,
    ) -> None:
        super().__init__()
        if burst < 1 or interval <= 0:
            raise ValueError("burst must be >= 1 and interval positive")
        self.burst = burst
        self.interval = interval
        self.clock = clock
        self.max_keys = max_keys
        self._windows: dict[tuple[str, int, str], _Window] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        key = (record.name, record.levelno, record.getMessage())
        window = self._windows.get(key)
        if window is None or now - window.started >= self.interval:
            if window is None and len(self._windows) >= self.max_keys:
                self._forget(now)
            self._windows[key] = _Window(now, passed=1)
            if window is not None and window.suppressed:
                seconds = now - window.started
                record.msg = f"{key[2]} (suppressed {window.suppressed} repeats in {seconds:.0f} s)"
                record.args = None
            return True
        if window.passed < self.burst:
            window.passed += 1
            return True
        window.suppressed += 1
        return False

    def _forget(self, now: float) -> None:
        """Bound the memory: drop finished windows, or the oldest half if none has finished."""
        expired = [k for k, w in self._windows.items() if now - w.started >= self.interval]
        for key in expired or list(self._windows)[: len(self._windows) // 2]:
            del self._windows[key]


# syslog(3) priorities, as sd-daemon(3) prefixes lines: "<3>" error ... "<7>" debug.
# journald reads the prefix of each stderr line (SyslogLevelPrefix=yes, the default), so
# `journalctl -p warning` finds the warnings.
_PRIORITIES = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


class JournalFormatter(logging.Formatter):
    """Each line starts with its syslog priority, which journald turns into the entry's."""

    def format(self, record: logging.LogRecord) -> str:
        priority = _PRIORITIES.get(record.levelno, 6 if record.levelno < logging.WARNING else 4)
        return f"<{priority}>{super().format(record)}"


def stderr_is_journal() -> bool:
    """Whether stderr is the journal's stream: systemd sets JOURNAL_STREAM to its
    "device:inode" (systemd.exec(5)), which children inherit even when they write elsewhere."""
    import os

    device, _, inode = os.environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        status = os.fstat(2)
        return (status.st_dev, status.st_ino) == (int(device), int(inode))
    except (OSError, ValueError):
        return False


def setup_logging(level: str = "info", under_journal: bool = False) -> None:
    """One line per event on stderr; under journald (JOURNAL_STREAM) each line carries its
    priority and the journal adds the time."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JournalFormatter("%(levelname)s %(name)s: %(message)s")
        if under_journal
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
