"""Which job held which port when, in a trace: written as the job table changes, read as spans.

``JobLog(trace).on_change`` is a job watcher listener (collector.jobs.watcher): on every
change it appends the whole table to the trace's side table (collector.trace.jobs, the file
format), each holding with the time it began, so a line lost to a full disk is repaired by
the next one and retention can drop old lines without losing a holding's start.
``read_job_spans(trace)`` reads it back as one ``JobSpan`` per job, port and stretch of time:
what ``burstscope report`` groups a trace's ports and bursts by.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from burstscope.collector.jobs.model import ROLES, RULES, Holding, Job, JobTable
from burstscope.collector.trace.jobs import (
    JobState,
    append_states,
    encode_state,
    read_states,
)
from burstscope.collector.trace.schema import TraceError

_LOG = logging.getLogger("burstscope.jobs")
# Lines kept for a retry while the side table cannot be written (a full disk): each says
# when a change happened; the newest alone would say who holds what now.
MAX_UNWRITTEN = 64

# What identifies a holding in force: the job as the table stated it, and the holding.
_Key = tuple[Job, Holding]


@dataclass(frozen=True, slots=True)
class JobSpan:
    """One port held by one job for one stretch of time (wall-clock ns, like the samples)."""

    job: Job
    device: str
    port: int
    role: str  # COMPUTE or STORAGE
    rule: str  # which rule gave the job the port (collector.jobs.model.RULES)
    start_ns: int
    end_ns: int | None  # None: still held when the recording ended (open)

    def holds(self, time_ns: int) -> bool:
        return self.start_ns <= time_ns and (self.end_ns is None or time_ns < self.end_ns)


@dataclass(frozen=True, slots=True)
class JobLogContents:
    spans: tuple[JobSpan, ...]
    problems: tuple[str, ...]  # lines that could not be read, one sentence per kind


class JobLog:
    """Appends the job table to ``trace``'s side table on every change; never raises."""

    def __init__(self, trace: Path) -> None:
        self.trace = trace
        self.lines_written = 0
        self.failures = 0  # changes whose line could not be written at once
        self._since: dict[_Key, int] = {}  # each holding in force, and when it began
        self._unwritten: deque[str] = deque(maxlen=MAX_UNWRITTEN)

    def on_change(self, time_ns: int, before: JobTable, after: JobTable) -> None:
        """A JobWatcher listener. ``before`` is not needed: the log keeps its own idea of
        what was in force, so a listener added after the watcher started loses nothing."""
        by_id = {job.job_id: job for job in after.jobs}
        since: dict[_Key, int] = {}
        for holding in after.holdings:
            job = by_id.get(holding.job_id)
            if job is not None:
                key = (job, holding)
                since[key] = self._since.get(key, time_ns)
        self._since = since
        holdings = [{**asdict(holding), "start_ns": start} for (_, holding), start in since.items()]
        self._unwritten.append(encode_state(time_ns, [asdict(j) for j in after.jobs], holdings))
        try:
            append_states(self.trace, list(self._unwritten))
        except TraceError as exc:
            self.failures += 1
            if self.failures == 1 or self.failures % 100 == 0:
                _LOG.warning(
                    "jobs: the trace's job table was not written (%s); %d changes wait for "
                    "the next one (%d failures)",
                    exc,
                    len(self._unwritten),
                    self.failures,
                )
            return
        self.lines_written += len(self._unwritten)
        self._unwritten.clear()


_JOB_FIELDS = tuple(f.name for f in fields(Job))


def _job(entry: dict[str, Any]) -> Job | None:
    """A Job from its stored fields; None when a field is missing or of the wrong type.
    Fields this burstscope does not know (a newer writer's additions) are ignored."""
    values: dict[str, Any] = {}
    for name in _JOB_FIELDS:
        if name not in entry:
            if name in ("job_id", "scheduler"):
                return None
            continue
        value = entry[name]
        wanted_float = name == "start_time"
        if wanted_float and isinstance(value, int | float) and not isinstance(value, bool):
            values[name] = float(value)
        elif not wanted_float and isinstance(value, str):
            values[name] = value
        else:
            return None
    return Job(**values)


def _holding(entry: dict[str, Any]) -> tuple[Holding, int] | None:
    text = ("job_id", "device", "role", "rule")
    if not all(isinstance(entry.get(name), str) for name in text):
        return None
    port, start = entry.get("port"), entry.get("start_ns")
    if not isinstance(port, int) or not isinstance(start, int) or isinstance(port, bool):
        return None
    if entry["role"] not in ROLES or entry["rule"] not in RULES:
        return None
    holding = Holding(entry["job_id"], entry["device"], port, entry["role"], entry["rule"])
    return holding, start


def _in_force(state: JobState) -> tuple[dict[_Key, int], int]:
    """A line's holdings with their starts, and how many entries did not read."""
    jobs: dict[str, Job] = {}
    bad = 0
    for entry in state.jobs:
        job = _job(entry)
        if job is None:
            bad += 1
        else:
            jobs[job.job_id] = job
    found: dict[_Key, int] = {}
    for entry in state.holdings:
        read = _holding(entry)
        job = jobs.get(read[0].job_id) if read is not None else None
        if read is None or job is None:
            bad += 1
            continue
        holding, start = read
        # A start after the line's time is a writer's clock step: the line is the later.
        found[(job, holding)] = min(start, state.time_ns)
    return found, bad


def read_job_log(trace: Path) -> JobLogContents:
    """The spans of ``trace``'s side table and what could not be read; empty without one."""
    states, problems = read_states(trace)
    spans: list[JobSpan] = []
    open_spans: dict[_Key, int] = {}
    bad = 0

    def close(key: _Key, start: int, end: int | None) -> None:
        job, holding = key
        spans.append(
            JobSpan(job, holding.device, holding.port, holding.role, holding.rule, start, end)
        )

    for state in states:
        found, wrong = _in_force(state)
        bad += wrong
        for key, start in list(open_spans.items()):
            if key not in found:
                close(key, start, state.time_ns)
                del open_spans[key]
        for key, start in found.items():
            open_spans.setdefault(key, start)
    for key, start in open_spans.items():
        close(key, start, None)
    if bad:
        problems.append(
            f"{str(trace)!r}: {bad} job or holding entr{'ies' if bad > 1 else 'y'} of the job "
            "table skipped: a field missing or of the wrong type"
        )
    spans.sort(key=lambda s: (s.start_ns, s.job.job_id, s.device, s.port, s.role))
    return JobLogContents(tuple(spans), tuple(problems))


def read_job_spans(trace: Path) -> list[JobSpan]:
    """Who held which port when in ``trace``; [] for a trace recorded without jobs. Lines
    that could not be read are logged (read_job_log returns them instead)."""
    contents = read_job_log(trace)
    for problem in contents.problems:
        _LOG.warning("jobs: %s", problem)
    return list(contents.spans)
