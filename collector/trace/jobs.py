"""The trace's side table of which job held which port when: ``_jobs.jsonl`` beside the pieces.

One JSON object per line, each the whole job table from its ``time_ns`` on, until the next
line (the last holds until the recording ended)::

    {"version": 1, "time_ns": 1700000000000000000,
     "jobs": [{"job_id": "4242", "scheduler": "slurm", "user": "alice", ...}],
     "holdings": [{"job_id": "4242", "device": "mlx5_0", "port": 1, "role": "compute",
                   "rule": "pcie_switch", "start_ns": 1699999990000000000}]}

A line is written when the table changes (a job starts or ends on the node, a holding
moves), so the file stays small: a few hundred bytes a change. Each line repeats the whole
table, with each holding's own start, so any suffix of the file still says who held what
from its first line on: retention (collector.recording) drops the lines older than the
oldest piece it keeps, except the one in force then, and a line lost to a full disk is
repaired by the next. The leading underscore keeps the file out of the samples when
pyarrow, pandas or Spark read the trace directory as one table.

This module knows the file, not the job model (collector.jobs.spans turns lines into jobs
and spans): the recording's retention compacts the side table of any run's trace.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burstscope.collector.trace.schema import PIECE_MODE, TraceError

JOBS_FILE = "_jobs.jsonl"
# The version of a line's shape; a reader skips lines of a version it does not know (a newer
# burstscope wrote them) and says so: the samples stay readable without the jobs.
JOBS_VERSION = 1
KNOWN_JOBS_VERSIONS = (1,)

# Appends come from the job watcher's thread, compaction from the recording's: one lock
# for both, so no append lands in a file that compaction is about to replace.
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class JobState:
    """One line: the job table from ``time_ns`` on, as plain JSON objects."""

    time_ns: int
    jobs: tuple[dict[str, Any], ...]
    holdings: tuple[dict[str, Any], ...]


def jobs_path(trace: Path) -> Path:
    return trace / JOBS_FILE


def encode_state(
    time_ns: int, jobs: Sequence[Mapping[str, Any]], holdings: Sequence[Mapping[str, Any]]
) -> str:
    """One line of the side table, newline included."""
    line = {
        "version": JOBS_VERSION,
        "time_ns": int(time_ns),
        "jobs": [dict(job) for job in jobs],
        "holdings": [dict(holding) for holding in holdings],
    }
    return json.dumps(line, separators=(",", ":"), sort_keys=True) + "\n"


def append_states(trace: Path, lines: Sequence[str]) -> None:
    """Append whole lines; TraceError naming the file when it cannot be written."""
    path = jobs_path(trace)
    with _LOCK:
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PIECE_MODE)
            with os.fdopen(descriptor, "a", encoding="utf-8") as handle:
                handle.write("".join(lines))
        except OSError as exc:
            raise TraceError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


def _decode(text: str) -> JobState | str:
    """A line's state, or why it cannot be read (a short reason, for a count)."""
    try:
        line = json.loads(text)
    except ValueError:
        return "not JSON (a line cut short by a crash?)"
    if not isinstance(line, dict):
        return "not a JSON object"
    version = line.get("version")
    if version not in KNOWN_JOBS_VERSIONS or isinstance(version, bool):
        return f"version {version!r} is not one this burstscope reads (a newer one wrote it)"
    time_ns, jobs, holdings = line.get("time_ns"), line.get("jobs"), line.get("holdings")
    if not isinstance(time_ns, int) or isinstance(time_ns, bool):
        return "no integer time_ns"
    if not isinstance(jobs, list) or not all(isinstance(job, dict) for job in jobs):
        return "jobs is not a list of objects"
    if not isinstance(holdings, list) or not all(isinstance(h, dict) for h in holdings):
        return "holdings is not a list of objects"
    return JobState(time_ns, tuple(jobs), tuple(holdings))


def read_states(trace: Path) -> tuple[list[JobState], list[str]]:
    """The side table's lines in time order, and one sentence per kind of line that could
    not be read (with how many); ([], []) for a trace without one."""
    path = jobs_path(trace)
    with _LOCK:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            return [], [f"{str(path)!r}: cannot read the job table: {exc.strerror or exc}"]
    states: list[JobState] = []
    refused: dict[str, list[int]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        decoded = _decode(raw)
        if isinstance(decoded, str):
            refused.setdefault(decoded, []).append(number)
            continue
        if states and decoded.time_ns < states[-1].time_ns:
            refused.setdefault("time_ns goes backwards", []).append(number)
            continue
        states.append(decoded)
    problems = [
        f"{str(path)!r}: {len(lines)} line{'s' if len(lines) > 1 else ''} skipped "
        f"(first: line {lines[0]}): {reason}"
        for reason, lines in refused.items()
    ]
    return states, problems


def compact_states(trace: Path, keep_from_ns: int) -> int:
    """Drop the lines no sample from ``keep_from_ns`` on needs: every line before the one in
    force at ``keep_from_ns`` (that one stays, with each holding's own start). Returns the
    lines dropped; a side table that cannot be rewritten is left as it was (0)."""
    path = jobs_path(trace)
    with _LOCK:
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        except OSError:
            return 0
        first = 0
        for index, raw in enumerate(lines):
            decoded = _decode(raw)
            if isinstance(decoded, JobState) and decoded.time_ns <= keep_from_ns:
                first = index
            elif isinstance(decoded, JobState):
                break
        if first == 0:
            return 0
        temporary = path.with_name(f".{path.name}.tmp")
        try:
            temporary.write_text("".join(lines[first:]), encoding="utf-8")
            os.chmod(temporary, PIECE_MODE)
            os.replace(temporary, path)
        except OSError:
            with contextlib.suppress(OSError):
                temporary.unlink()
            return 0
        return first


def remove_states(trace: Path) -> None:
    """The side table of a trace whose last piece retention deleted: nothing to attribute."""
    with _LOCK, contextlib.suppress(OSError):
        jobs_path(trace).unlink()
