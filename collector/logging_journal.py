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


def setup_logging(level: str = "info", under_journal: bool = False) -> None:
    """One line per event on stderr; under journald (JOURNAL_STREAM) the journal adds the time."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter(
            "%(levelname)s %(name)s: %(message)s"
            if under_journal
            else "%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    )
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
