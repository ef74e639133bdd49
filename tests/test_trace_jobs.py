"""The trace's job side table: written on every change, read back as spans, kept by retention."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest

from burstscope.collector.jobs.model import (
    COMPUTE,
    EMPTY_TABLE,
    KUBERNETES,
    RULE_NUMA_NODE,
    RULE_PCIE_SWITCH,
    RULE_WHOLE_NODE,
    SLURM,
    STORAGE,
    Holding,
    Job,
    JobTable,
)
from burstscope.collector.jobs.spans import JobLog, JobSpan, read_job_log, read_job_spans
from burstscope.collector.recording import JOBS_KEEP_MARGIN_SECONDS, Recording, Retention
from burstscope.collector.trace import PortColumns, TraceWriter
from burstscope.collector.trace.jobs import JOBS_FILE, compact_states, read_states

S = 1_000_000_000
T0 = 1_700_000_000 * S
ALICE = Job("4242", SLURM, "alice", "llama-pretrain", nodes="gpu-[001-004]", start_time=1.7e9)
BOB = Job("team-a/eval", KUBERNETES, "", "eval", namespace="team-a", pod="eval-0")
RAIL0 = Holding("4242", "mlx5_0", 1, COMPUTE, RULE_PCIE_SWITCH)
STORE = Holding("4242", "mlx5_8", 1, STORAGE, RULE_WHOLE_NODE)
SHARED = Holding("team-a/eval", "mlx5_0", 1, COMPUTE, RULE_NUMA_NODE)


def table(*rows: tuple[Job, Holding]) -> JobTable:
    return JobTable.build(list({job for job, _ in rows}), [holding for _, holding in rows])


def test_changes_read_back_as_spans_with_their_starts_and_ends(tmp_path: Path) -> None:
    log = JobLog(tmp_path)
    first = table((ALICE, RAIL0), (ALICE, STORE))
    both = table((ALICE, RAIL0), (ALICE, STORE), (BOB, SHARED))
    log.on_change(T0, EMPTY_TABLE, first)
    log.on_change(T0 + 10 * S, first, both)  # bob starts: alice's holdings keep their start
    log.on_change(T0 + 20 * S, both, table((BOB, SHARED)))  # alice ends
    log.on_change(T0 + 25 * S, table((BOB, SHARED)), EMPTY_TABLE)
    log.on_change(T0 + 30 * S, EMPTY_TABLE, first)  # alice's next job of the same id
    assert log.lines_written == 5 and log.failures == 0
    assert read_job_spans(tmp_path) == [
        JobSpan(ALICE, "mlx5_0", 1, COMPUTE, RULE_PCIE_SWITCH, T0, T0 + 20 * S),
        JobSpan(ALICE, "mlx5_8", 1, STORAGE, RULE_WHOLE_NODE, T0, T0 + 20 * S),
        JobSpan(BOB, "mlx5_0", 1, COMPUTE, RULE_NUMA_NODE, T0 + 10 * S, T0 + 25 * S),
        JobSpan(ALICE, "mlx5_0", 1, COMPUTE, RULE_PCIE_SWITCH, T0 + 30 * S, None),
        JobSpan(ALICE, "mlx5_8", 1, STORAGE, RULE_WHOLE_NODE, T0 + 30 * S, None),
    ]
    # Each line is the whole table in force, with every holding's own start.
    lines = [json.loads(line) for line in (tmp_path / JOBS_FILE).read_text().splitlines()]
    assert lines[1]["version"] == 1 and lines[1]["time_ns"] == T0 + 10 * S
    assert {(h["device"], h["job_id"], h["start_ns"]) for h in lines[1]["holdings"]} == {
        ("mlx5_0", "4242", T0),
        ("mlx5_8", "4242", T0),
        ("mlx5_0", "team-a/eval", T0 + 10 * S),
    }
    assert lines[1]["jobs"][0] == {
        "job_id": "4242", "scheduler": "slurm", "user": "alice", "name": "llama-pretrain",
        "step": "", "nodes": "gpu-[001-004]", "start_time": 1.7e9, "namespace": "", "pod": "",
    }  # fmt: skip
    assert (tmp_path / JOBS_FILE).stat().st_mode & 0o007 == 0  # like the pieces


def test_a_trace_without_a_side_table_has_no_spans(tmp_path: Path) -> None:
    assert read_job_spans(tmp_path) == []
    assert read_job_log(tmp_path).problems == ()


def test_a_line_that_cannot_be_written_waits_for_the_next_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trace = tmp_path / "trace"  # not there yet: every write fails
    log = JobLog(trace)
    first = table((ALICE, RAIL0))
    with caplog.at_level(logging.WARNING, "burstscope.jobs"):
        log.on_change(T0, EMPTY_TABLE, first)
        log.on_change(T0 + 5 * S, first, EMPTY_TABLE)
    assert log.failures == 2 and log.lines_written == 0
    assert len([r for r in caplog.records if "was not written" in r.message]) == 1
    trace.mkdir()
    log.on_change(T0 + 9 * S, EMPTY_TABLE, first)  # the retry writes all three, in order
    assert log.lines_written == 3
    assert read_job_spans(trace) == [
        JobSpan(ALICE, "mlx5_0", 1, COMPUTE, RULE_PCIE_SWITCH, T0, T0 + 5 * S),
        JobSpan(ALICE, "mlx5_0", 1, COMPUTE, RULE_PCIE_SWITCH, T0 + 9 * S, None),
    ]


def good_line(time_ns: int, job_id: str = "4242") -> dict[str, object]:
    return {
        "version": 1,
        "time_ns": time_ns,
        "jobs": [{"job_id": job_id, "scheduler": "slurm", "user": "alice"}],
        "holdings": [
            {"job_id": job_id, "device": "mlx5_0", "port": 1, "role": "compute",
             "rule": "pcie_switch", "start_ns": time_ns}
        ],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"version": 1, "time_ns": 17', "not JSON"),  # cut short by a crash
        ("[1, 2]", "not a JSON object"),
        (json.dumps({**good_line(T0 + S), "version": 2}), "version 2 is not one"),
        (json.dumps({**good_line(T0 + S), "time_ns": "soon"}), "no integer time_ns"),
        (json.dumps({**good_line(T0 + S), "jobs": {}}), "jobs is not a list"),
        (json.dumps({**good_line(T0 + S), "holdings": [1]}), "holdings is not a list"),
        (json.dumps(good_line(T0 - S)), "time_ns goes backwards"),
    ],
)
def test_a_line_that_does_not_read_is_skipped_and_said(
    tmp_path: Path, line: str, reason: str
) -> None:
    rows = [json.dumps(good_line(T0)), line, json.dumps(good_line(T0 + 2 * S, "77"))]
    (tmp_path / JOBS_FILE).write_text("\n".join(rows) + "\n")
    contents = read_job_log(tmp_path)
    (problem,) = contents.problems
    assert "1 line skipped (first: line 2)" in problem and reason in problem, problem
    assert [(s.job.job_id, s.start_ns, s.end_ns) for s in contents.spans] == [
        ("4242", T0, T0 + 2 * S),
        ("77", T0 + 2 * S, None),
    ]


@pytest.mark.parametrize(
    "entry",
    [
        {"jobs": [{"job_id": "4242"}]},  # no scheduler
        {"jobs": [{"job_id": "4242", "scheduler": "slurm", "user": 7}]},
        {"jobs": [{"job_id": "4242", "scheduler": "slurm", "start_time": "noon"}]},
        {"holdings": [{"job_id": "4242", "device": "mlx5_0", "port": "1", "role": "compute",
                       "rule": "pcie_switch", "start_ns": T0}]},
        {"holdings": [{"job_id": "4242", "device": "mlx5_0", "port": 1, "role": "boss",
                       "rule": "pcie_switch", "start_ns": T0}]},
        {"holdings": [{"job_id": "nobody", "device": "mlx5_0", "port": 1, "role": "compute",
                       "rule": "pcie_switch", "start_ns": T0}]},
    ],
)  # fmt: skip
def test_an_entry_of_the_wrong_shape_is_skipped_and_counted(
    tmp_path: Path, entry: dict[str, object]
) -> None:
    (tmp_path / JOBS_FILE).write_text(json.dumps({**good_line(T0), **entry}) + "\n")
    contents = read_job_log(tmp_path)
    assert contents.spans == ()
    (problem,) = contents.problems
    assert "entr" in problem and "skipped" in problem


def test_fields_a_newer_writer_adds_are_ignored(tmp_path: Path) -> None:
    line = good_line(T0)
    line["jobs"][0]["priority"] = "high"  # type: ignore[index]
    (tmp_path / JOBS_FILE).write_text(json.dumps(line) + "\n")
    (span,) = read_job_spans(tmp_path)
    assert span.job == Job("4242", SLURM, "alice")


def test_compaction_keeps_the_line_in_force_and_each_holding_s_start(tmp_path: Path) -> None:
    log = JobLog(tmp_path)
    first = table((ALICE, RAIL0))
    both = table((ALICE, RAIL0), (BOB, SHARED))
    log.on_change(T0, EMPTY_TABLE, first)
    log.on_change(T0 + 10 * S, first, both)
    log.on_change(T0 + 20 * S, both, table((BOB, SHARED)))
    before = read_job_spans(tmp_path)
    assert compact_states(tmp_path, T0 + 5 * S) == 0  # the first line is still in force
    assert compact_states(tmp_path, T0 + 15 * S) == 1
    states, problems = read_states(tmp_path)
    assert [s.time_ns for s in states] == [T0 + 10 * S, T0 + 20 * S] and problems == []
    # Alice's span still starts at T0: the kept line carries the start of each holding.
    assert read_job_spans(tmp_path) == before
    assert compact_states(tmp_path / "nowhere", T0) == 0


def write_piece(writer: TraceWriter, start_ns: int) -> None:
    stamps = start_ns + np.arange(10, dtype=np.int64) * 1_000_000
    writer.append(
        [
            PortColumns(
                "mlx5_0", 1, 50_000_000_000, stamps,
                np.arange(10, dtype=np.uint64) * np.uint64(4),
                np.zeros(10, dtype=np.uint64),
                np.full(10, 1_000, dtype=np.int64),
                np.zeros(10, dtype=np.bool_),
            )
        ]
    )  # fmt: skip
    writer.flush()


def test_retention_keeps_what_remaining_pieces_need_and_removes_the_rest(
    tmp_path: Path,
) -> None:
    """Pieces older than max_age go; the side table drops the lines no remaining sample
    needs, and an old run's trace goes whole once its last piece is gone."""
    now = time.time()
    root = tmp_path / "rec"
    old_run, run = root / "20000101T000000Z", root / "now"
    for trace in (old_run, run):
        trace.mkdir(parents=True)
    old_log = JobLog(old_run)
    old_log.on_change(T0, EMPTY_TABLE, table((ALICE, RAIL0)))
    (old_run / "part-000000.parquet").write_bytes(b"x" * 100)
    os.utime(old_run / "part-000000.parquet", (now - 3 * 86400, now - 3 * 86400))

    hours = [int((now - h * 3600) * 1e9) for h in (30, 26, 2)]  # three changes, oldest first
    log = JobLog(run)
    log.on_change(hours[0], EMPTY_TABLE, table((ALICE, RAIL0)))  # alice starts 30 h ago
    log.on_change(hours[1], EMPTY_TABLE, table((ALICE, RAIL0), (BOB, SHARED)))
    log.on_change(hours[2], EMPTY_TABLE, table((BOB, SHARED)))  # alice ends 2 h ago
    writer = TraceWriter(run, piece_seconds=60)
    recording = Recording(writer, root, Retention(max_age_seconds=86400))
    write_piece(writer, hours[0])
    write_piece(writer, hours[2])
    pieces = sorted(run.glob("part-*.parquet"))
    closed = now - 25 * 3600  # the first piece: older than a day
    os.utime(pieces[0], (closed, closed))
    recording.close()  # retention runs after the last piece
    assert not old_run.exists()  # its last piece went: its side table and directory too
    assert [p.name for p in run.glob("part-*.parquet")] == [pieces[1].name]
    states, _ = read_states(run)
    # Kept: the line in force JOBS_KEEP_MARGIN_SECONDS before the deleted piece closed
    # (bob's start, 26 h ago) and every later one; alice's start 30 h ago rides in it.
    assert closed - JOBS_KEEP_MARGIN_SECONDS > hours[1] / 1e9
    assert [s.time_ns for s in states] == hours[1:]
    assert read_job_spans(run) == [
        JobSpan(ALICE, "mlx5_0", 1, COMPUTE, RULE_PCIE_SWITCH, hours[0], hours[2]),
        JobSpan(BOB, "mlx5_0", 1, COMPUTE, RULE_NUMA_NODE, hours[1], None),
    ]
