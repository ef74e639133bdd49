"""The agent's recording: a trace writer that degrades instead of failing, and retention.

A recording is a side output. When a piece cannot be written (a full disk, EMFILE, a
read-only remount) the recording pauses: the unwritten piece is dropped and counted, one
line is logged, the state shows in the snapshot (``burstscope_recording_paused``, an MQTT
event), and writing is retried with capped backoff. Detection, /metrics and MQTT go on
untouched, memory stays bounded by one piece, and a stop never raises.

Retention works like Prometheus' ``--storage.tsdb.retention.size`` and ``.time``: after each
closed piece, the oldest pieces under the recording directory (every run's trace) are
deleted until the total is within ``max_bytes`` and none is older than ``max_age``. A
trace's job side table (collector.trace.jobs) keeps what its remaining pieces need and goes
with its last piece.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from burstscope.collector.trace import (
    PIECE_PREFIX,
    SLOW_DIRECTORY,
    SLOW_PREFIX,
    PortColumns,
    SlowRow,
)
from burstscope.collector.trace.jobs import compact_states, remove_states

if TYPE_CHECKING:  # the writer loads pyarrow, which an agent that does not record never needs
    from burstscope.collector.trace import TraceWriter

_LOG = logging.getLogger("burstscope.recording")
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]i?B|B)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w|y)\s*$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
# A deleted piece's samples end before its file was written (its mtime), and the next
# piece's begin after them; the samples' clock (CLOCK_MONOTONIC plus an offset fixed at
# start) may drift from the file clock over a long run. The job side table keeps the table
# in force this long before the newest deleted piece's mtime: a few lines more, never one
# a remaining sample needs.
JOBS_KEEP_MARGIN_SECONDS = 600.0


def parse_size(value: int | str) -> int:
    """Bytes from 1000000, "512MB" or "10GiB" (Prometheus' retention.size units)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size like 512MB or 10GiB")
    if isinstance(value, int):
        number = value
    else:
        match = _SIZE.match(value)
        if match is None:
            raise ValueError(f"{value!r} is not a size like 512MB or 10GiB")
        number = round(float(match.group(1)) * _SIZE_UNITS[(match.group(2) or "B").lower()])
    if number <= 0:
        raise ValueError(f"{value!r} must be more than 0 bytes")
    return number


def parse_age(value: str) -> float:
    """Seconds from "90s", "12h", "15d" or "2w" (Prometheus' retention.time units)."""
    match = _AGE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{value!r} is not an age like 12h, 15d or 2w")
    seconds = float(match.group(1)) * _AGE_UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"{value!r} must be longer than 0")
    return seconds


@dataclass(frozen=True, slots=True)
class Retention:
    max_bytes: int | None = None
    max_age_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class RecordingHealth:
    """What readers see of the recording."""

    paused: bool
    pauses: int  # times writing failed and the recording paused
    dropped_rows: int  # samples not recorded while paused or in a piece that failed
    last_error: str | None
    bytes_kept: int  # bytes of closed pieces under the recording directory
    deleted_pieces: int  # pieces deleted by retention


def _pieces(root: Path) -> list[tuple[float, int, Path]]:
    """(mtime, size, path) of every closed piece under ``root`` (all runs)."""
    found = []
    for pattern in (f"*/{PIECE_PREFIX}*.parquet", f"*/{SLOW_DIRECTORY}/{SLOW_PREFIX}*.parquet"):
        for path in root.glob(pattern):
            try:
                stat = path.stat()
            except OSError:
                continue
            found.append((stat.st_mtime, stat.st_size, path))
    found.sort()
    return found


class Recording:
    """Wraps the run's TraceWriter; append() and close() never raise."""

    def __init__(
        self,
        writer: TraceWriter,
        root: Path | None = None,
        retention: Retention | None = None,
    ) -> None:
        self.writer = writer
        self.root = root if root is not None else writer.path.parent
        self.retention = retention or Retention()
        self.paused = False
        self.pauses = 0
        self.dropped_rows = 0
        self.deleted_pieces = 0
        self.last_error: str | None = None
        self._retry_at = 0.0
        self._backoff = FIRST_RETRY_SECONDS
        self.bytes_kept = sum(size for _, size, _ in _pieces(self.root))

    @property
    def path(self) -> Path:
        return self.writer.path

    def health(self) -> RecordingHealth:
        return RecordingHealth(
            self.paused,
            self.pauses,
            self.dropped_rows,
            self.last_error,
            self.bytes_kept,
            self.deleted_pieces,
        )

    def append(self, columns: Sequence[PortColumns], slow: Sequence[SlowRow]) -> None:
        if self.paused and time.monotonic() < self._retry_at:
            self.dropped_rows += sum(len(port.timestamp_ns) for port in columns)
            return
        pieces = self.writer.pieces_written
        try:
            self.writer.append_slow(slow)
            self.writer.append(columns)
        except Exception as exc:  # any failure to record stays with the recording
            self._pause(exc)
            return
        if self.writer.pieces_written > pieces:
            if self.paused:
                self.paused = False
                self._backoff = FIRST_RETRY_SECONDS
                _LOG.warning(
                    "recording resumed in %s (%d samples were not recorded)",
                    self.path,
                    self.dropped_rows,
                )
            self._retain()

    def _pause(self, exc: BaseException) -> None:
        dropped = self.writer.discard_pending()
        self.dropped_rows += dropped
        self.pauses += 1
        self.last_error = str(exc)
        self._retry_at = time.monotonic() + self._backoff
        if not self.paused:
            _LOG.error(
                "recording paused: %s; %d samples dropped, detection, /metrics and MQTT go "
                "on; retrying every %g s at most",
                exc,
                dropped,
                MAX_RETRY_SECONDS,
            )
        self.paused = True
        self._backoff = min(self._backoff * 2, MAX_RETRY_SECONDS)
        # Room may come from retention itself: a full disk frees once old pieces go.
        self._retain()

    def _retain(self) -> None:
        pieces = _pieces(self.root)
        total = sum(size for _, size, _ in pieces)
        limit, max_age = self.retention.max_bytes, self.retention.max_age_seconds
        oldest_allowed = time.time() - max_age if max_age is not None else None
        deleted_until: dict[Path, float] = {}  # per trace, the newest deleted piece's mtime
        for mtime, size, path in pieces:
            over_size = limit is not None and total > limit
            too_old = oldest_allowed is not None and mtime < oldest_allowed
            if not (over_size or too_old):
                break
            try:
                path.unlink()
            except OSError as exc:
                _LOG.warning("retention: cannot delete %s: %s", path, exc.strerror)
                continue
            total -= size
            self.deleted_pieces += 1
            trace = path.parent.parent if path.parent.name == SLOW_DIRECTORY else path.parent
            deleted_until[trace] = max(mtime, deleted_until.get(trace, mtime))
        for trace, mtime in deleted_until.items():
            if trace != self.path and not _has_pieces(trace):
                remove_states(trace)
                _remove_if_empty(trace)
            else:
                compact_states(trace, int((mtime - JOBS_KEEP_MARGIN_SECONDS) * 1e9))
        self.bytes_kept = total

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception as exc:
            dropped = self.writer.discard_pending()
            self.dropped_rows += dropped
            self.last_error = str(exc)
            _LOG.error("recording: the last piece (%d samples) was not written: %s", dropped, exc)
            return
        self._retain()


def _has_pieces(trace: Path) -> bool:
    patterns = (f"{PIECE_PREFIX}*.parquet", f"{SLOW_DIRECTORY}/{SLOW_PREFIX}*.parquet")
    return any(next(trace.glob(pattern), None) is not None for pattern in patterns)


def _remove_if_empty(trace: Path) -> None:
    for directory in (trace / SLOW_DIRECTORY, trace):
        with contextlib.suppress(OSError):  # not empty, or already gone
            os.rmdir(directory)
