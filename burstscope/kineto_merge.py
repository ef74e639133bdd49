"""A rank's PyTorch profiler trace opened for merging: its clock, its pids, where its events end.

``torch.profiler`` writes Chrome trace-event JSON through Kineto (pytorch/kineto
``libkineto/src/output_json.cpp``). Events are added to it as text, inserted before the
closing bracket of its ``traceEvents`` list, so that every byte of the original stays as
Kineto wrote it: re-encoding would rewrite its "microseconds.nanoseconds" ``ts`` (a float
round trip loses the nanoseconds) and whatever else a reader relies on. The time base is
the one collector/collectives/pytorch_trace.py reads (Unix ns = ``baseTimeNanoseconds`` +
``ts`` x 1000; older traces have absolute ``ts``), and the events added use the same.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from burstscope.collector.collectives import pytorch_trace
from burstscope.collector.collectives.pytorch_trace import (
    DEFAULT_MAX_BYTES,
    PytorchTrace,
    TraceError,
    parse_trace,
    read_trace_bytes,
)
from burstscope.errors import UsageError

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder(parse_float=Decimal)


@dataclass(frozen=True, slots=True)
class MergeTarget:
    """A trace read for merging: its text around the end of ``traceEvents``, its clock."""

    path: Path
    head: str  # the text up to the closing bracket of traceEvents
    tail: str  # from that bracket on
    has_events: bool  # a comma goes before the first event added
    time_base: str  # pytorch_trace's BASE_TIME or ABSOLUTE
    base_ns: int  # Unix ns of ts 0
    free_pid: int  # above every numeric pid the trace uses
    extent_ns: tuple[int, int] | None  # first ts and last end of its events, Unix ns

    def write(self, file: Any, events: Iterable[str]) -> None:
        """The trace with ``events`` (JSON texts) added at the end of its list."""
        file.write(self.head)
        separator = ",\n" if self.has_events else "\n"
        for event in events:
            file.write(separator)
            file.write(event)
            separator = ",\n"
        file.write("\n")
        file.write(self.tail)


def open_target(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> MergeTarget:
    """Read the trace at ``path`` (``.json`` or ``.json.gz``, at most ``max_bytes``).

    Raises UsageError, one line naming the file, for an unreadable file, one that is not
    JSON or not a trace, and one whose time base cannot be known.
    """
    try:
        text = _read(path, max_bytes)
        document, close = _locate_events(text, str(path))
        trace = _quietly_parsed(document, str(path))
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    events: list[Any] = document["traceEvents"] if isinstance(document, dict) else document
    return MergeTarget(
        path=path,
        head=text[:close],
        tail=text[close:],
        has_events=bool(events),
        time_base=trace.time_base,
        base_ns=trace.base_unix_ns,
        free_pid=max((pid for pid in map(_pid, events) if pid is not None), default=0) + 1,
        extent_ns=_extent(events, trace.base_unix_ns),
    )


def _quietly_parsed(document: object, source: str) -> PytorchTrace:
    """The reader's view of the trace, for its time base. Its collectives are not used
    here, so the events it skips (logged as warnings) are not this command's news."""
    logger = logging.getLogger(pytorch_trace.__name__)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return parse_trace(document, None, source)
    finally:
        logger.setLevel(level)


def _read(path: Path, max_bytes: int) -> str:
    data = read_trace_bytes(path, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TraceError(f"{path}: not JSON (not UTF-8 at byte {error.start})") from None


def _locate_events(text: str, source: str) -> tuple[dict[str, Any] | list[Any], int]:
    """The decoded document and the index of its event list's closing bracket.

    The format has two forms: the JSON Object Format (``traceEvents`` among other keys)
    and the JSON Array Format (the list alone). The top level is walked here, each value
    decoded once by the json module, to learn where the list ends.
    """
    try:
        index = _skip_space(text, 0)
        if text.startswith("[", index):
            events, end = _DECODER.raw_decode(text, index)
            _expect_end(text, end)
            return events, end - 1
        if not text.startswith("{", index):
            raise ValueError(f"expected an object or a list at character {index}")
        document: dict[str, Any] = {}
        close = None
        index = _skip_space(text, index + 1)
        while not text.startswith("}", index):
            if not text.startswith('"', index):
                raise ValueError(f"expected a key at character {index}")
            key, index = _DECODER.raw_decode(text, index)
            index = _skip_space(text, index)
            if not text.startswith(":", index):
                raise ValueError(f"expected ':' at character {index}")
            index = _skip_space(text, index + 1)
            value, index = _DECODER.raw_decode(text, index)
            document[key] = value
            if key == "traceEvents" and isinstance(value, list):
                close = index - 1
            index = _skip_space(text, index)
            if text.startswith(",", index):
                index = _skip_space(text, index + 1)
            elif not text.startswith("}", index):
                raise ValueError(f"expected ',' or '}}' at character {index}")
        _expect_end(text, index + 1)
    except ValueError as error:  # json.JSONDecodeError is one
        raise TraceError(f"{source}: not JSON: {error}") from None
    if close is None:
        raise TraceError(f"{source}: no traceEvents list: not a Chrome trace")
    return document, close


def _skip_space(text: str, index: int) -> int:
    match = _WHITESPACE.match(text, index)  # always matches, if only nothing
    return match.end() if match else index


def _expect_end(text: str, index: int) -> None:
    rest = _skip_space(text, index)
    if rest != len(text):
        raise ValueError(f"extra data at character {rest}")


def _pid(event: object) -> int | None:
    """A numeric pid (Kineto writes numbers; some writers quote them)."""
    pid = event.get("pid") if isinstance(event, dict) else None
    if isinstance(pid, int) and not isinstance(pid, bool):
        return pid
    if isinstance(pid, str) and pid.isdigit():
        return int(pid)
    return None


def _extent(events: list[Any], base_ns: int) -> tuple[int, int] | None:
    """The first ``ts`` and the last ``ts + dur`` of the timed events, in Unix ns."""
    first: Decimal | None = None
    last: Decimal | None = None
    for event in events:
        if not isinstance(event, dict) or event.get("ph") == "M":
            continue
        ts, dur = _finite(event.get("ts")), _finite(event.get("dur", 0))
        if ts is None:
            continue
        end = ts + dur if dur is not None and dur >= 0 else ts
        first = ts if first is None or ts < first else first
        last = end if last is None or end > last else last
    if first is None or last is None:
        return None
    return base_ns + int(first * 1000), base_ns + int(last * 1000)


def _finite(value: object) -> Decimal | None:
    """A number of the trace (decoded with Decimal for its floats), None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        return None
    number = Decimal(value)
    return number if number.is_finite() else None
