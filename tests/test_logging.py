"""Logging fit for journald: identical repeats rate-limited, no timestamps under systemd."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from burstscope.logging_journal import RepeatFilter, setup_logging


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(message: str, *args: object, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord("burstscope.test", level, __file__, 1, message, args, None)


def test_repeats_beyond_the_burst_are_suppressed_then_counted() -> None:
    clock = Clock()
    limiter = RepeatFilter(burst=3, interval=60.0, clock=clock)
    passed = [limiter.filter(record("port %s failed", "mlx5_0")) for _ in range(10)]
    assert passed == [True] * 3 + [False] * 7
    # Other messages, levels and arguments are not held back by that one.
    assert limiter.filter(record("port %s failed", "mlx5_1"))
    assert limiter.filter(record("port %s failed", "mlx5_0", level=logging.ERROR))
    clock.now += 61
    after = record("port %s failed", "mlx5_0")
    assert limiter.filter(after)
    assert after.getMessage() == "port mlx5_0 failed (suppressed 7 repeats in 61 s)"
    # The new window starts clean: the next line has no note.
    following = record("port %s failed", "mlx5_0")
    assert limiter.filter(following)
    assert following.getMessage() == "port mlx5_0 failed"


def test_memory_stays_bounded() -> None:
    limiter = RepeatFilter(burst=1, interval=60.0, clock=Clock(), max_keys=8)
    for index in range(100):
        assert limiter.filter(record("event %d", index))
    assert len(limiter._windows) <= 8


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        RepeatFilter(burst=0)


@pytest.mark.parametrize(("under_journal", "has_time"), [(True, False), (False, True)])
def test_timestamps_only_outside_the_journal(under_journal: bool, has_time: bool) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        setup_logging("warning", under_journal)
        (handler,) = root.handlers
        assert root.level == logging.WARNING
        assert any(isinstance(f, RepeatFilter) for f in handler.filters)
        text = handler.format(record("one line"))
        assert text.endswith("WARNING burstscope.test: one line")
        if under_journal:
            # The syslog priority journald files the line under: journalctl -p warning.
            assert text == "<4>WARNING burstscope.test: one line"
        else:
            assert text != "WARNING burstscope.test: one line"  # a time stamp first
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_log_level_flag_is_validated() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "agent", "--log-level", "chatty"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )
    assert result.returncode == 2
    assert "--log-level" in result.stderr and "invalid choice" in result.stderr


def test_agent_lines_carry_syslog_priorities_under_journald(tmp_path: Path) -> None:
    """Where stderr is the journal's stream (JOURNAL_STREAM names its device and inode),
    every line starts with its <priority>; elsewhere none does."""
    for journal in (True, False):
        log = tmp_path / f"stderr-{journal}"
        with log.open("w") as stderr:
            status = os.fstat(stderr.fileno())
            stream = f"{status.st_dev}:{status.st_ino}" if journal else "1:2"
            result = subprocess.run(
                [sys.executable, "-m", "burstscope", "agent", "--source", "netdev:no-such-if"],
                stderr=stderr,
                env={**os.environ, "JOURNAL_STREAM": stream},
                timeout=60,
                check=False,
            )
        assert result.returncode == 2
        lines = [line for line in log.read_text().splitlines() if line]
        assert lines, "nothing logged"
        prefixed = [bool(re.match(r"<[0-7]>", line)) for line in lines]
        assert prefixed == [journal] * len(lines), lines
        assert not journal or lines[-1].startswith("<3>burstscope agent: error:")
