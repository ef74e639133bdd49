"""``burstscope report`` grouped by job: the side table's jobs, their figures and iteration."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from burstscope.collector.jobs.model import (
    COMPUTE,
    EMPTY_TABLE,
    RULE_NUMA_NODE,
    RULE_PCIE_SWITCH,
    SLURM,
    Holding,
    Job,
    JobTable,
)
from burstscope.collector.jobs.spans import JobLog
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.trace import PortColumns, TraceWriter, read_samples
from burstscope.collector.trace.jobs import JOBS_FILE
from burstscope.detectors.config import Thresholds
from burstscope.detectors.periodicity import iteration_period
from burstscope.report_model import analyze_paths
from burstscope.report_view import print_table
from tests.conftest import compare_golden
from tests.test_report import in_repo as in_repo
from tests.test_report import report

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path("tests/fixtures/report")  # relative: the golden names sources as given
JOBS = FIXTURES / "jobs"
S = 1_000_000_000
MS = 1_000_000
# The iteration period a report finds on the simulated node, against the model's own step
# (its iterations' median length): within this share.
PERIOD_TOLERANCE = 0.005


def test_jobs_json_matches_golden(capsys: pytest.CaptureFixture[str], update_golden: bool) -> None:
    status, out, err = report(capsys, str(JOBS), "--json")
    assert status == 0, err
    compare_golden(REPO / FIXTURES / "jobs.golden.json", out, update_golden)
    document = json.loads(out)
    assert document["schema_version"] == 7
    jobs = {job["job_id"]: job for job in document["jobs"]}
    alice, bob = jobs["4242"], jobs["4243"]
    # mlx5_0 for 30 s and mlx5_1 until 15 s: 30 + 15 bursts of 40 ms, all in quiet windows.
    assert alice["compute"] == {
        "ports": 2,
        "saturated_seconds": 1.8,
        "saturated_seconds_in_quiet_windows": 1.8,
        "bursts": 45,
        "burst_bytes": 45 * 500_000_000,
    }
    assert alice["storage"]["ports"] == 1 and alice["storage"]["bursts"] == 6  # apart
    assert [p["end_ns"] for p in alice["ports"]] == [None, 1_700_000_025 * S, None]
    assert alice["iteration"]["period_seconds"] == 1.0
    assert bob["compute"]["saturated_seconds"] == 0.6 and bob["compute"]["bursts"] == 30
    assert bob["iteration"]["period_seconds"] == 0.5
    # mlx5_3 bursts too, but no job holds it: its 0.6 s go to nobody.
    ports = {(p["device"], p["direction"]): p for p in document["ports"]}
    assert ports[("mlx5_3", "transmit")]["bursts"]["saturated_seconds"] == 0.6
    assert document["warnings"] == []


@pytest.mark.parametrize("width", [80, 120, 200])
def test_jobs_table_fits_and_matches_golden(width: int, update_golden: bool) -> None:
    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    print_table(analyze_paths([JOBS], None, False, Thresholds()), console)
    lines = console.export_text().splitlines(keepends=True)
    jobs = "".join(lines[next(i for i, line in enumerate(lines) if "jobs: each job" in line) :])
    assert max(len(line) for line in jobs.splitlines()) <= width
    assert "…" not in jobs  # whole columns leave; a job id is never cut
    rows = [line.split()[1] for line in jobs.splitlines() if line.startswith("│")]
    assert rows == ["4242", "4242", "4243"], jobs
    for header in ("saturated", "hidden sat.", "iteration"):  # what stays at 80 columns
        assert header in jobs
    compare_golden(REPO / FIXTURES / f"jobs-{width}.golden.txt", jobs, update_golden)


def test_a_trace_without_jobs_prints_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same trace without its side table: no jobs table, an empty jobs list, and the
    ports' figures exactly those of the trace with it (cutting feeds changes nothing)."""
    bare = tmp_path / "bare"
    shutil.copytree(JOBS, bare)
    (bare / JOBS_FILE).unlink()
    status, with_jobs, _ = report(capsys, str(JOBS), "--json")
    status_bare, without, _ = report(capsys, str(bare), "--json")
    assert status == status_bare == 0
    first, second = json.loads(with_jobs), json.loads(without)
    assert second["jobs"] == []
    for entry in first["ports"] + second["ports"]:
        del entry["source"]
    assert first["ports"] == second["ports"]
    status, table, _ = report(capsys, str(bare))
    assert status == 0 and "jobs:" not in table and "job " not in table


def test_bad_side_table_lines_are_warnings_not_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace"
    shutil.copytree(JOBS, trace)
    with (trace / JOBS_FILE).open("a") as handle:
        handle.write('{"version": 1, "time_ns": 17')  # cut short by a crash
    status, out, err = report(capsys, str(trace), "--json")
    assert status == 0, err
    document = json.loads(out)
    assert len(document["jobs"]) == 2
    (warning,) = document["warnings"]
    assert "_jobs.jsonl" in warning and "1 line skipped (first: line 3)" in warning
    status, out, _ = report(capsys, str(trace))
    assert status == 0 and "warning: " in out and "line 3" in out


def bursting(ms: np.ndarray) -> np.ndarray:  # the samples the traffic saturates
    return (ms % 1000 >= 100) & (ms % 1000 < 140)


def held_trace(path: Path, change_s: float, shared: bool = False) -> None:
    """One 100 Gb/s port, 30 s at 1 ms: 40 ms at line rate from 100 ms into every second
    (quiet windows), held by job 1 until ``change_s`` and by job 2 after (``shared``: both,
    the whole time)."""
    path.mkdir()
    rate, n = 12_500_000_000, 30_000
    stamps = 1_700_000_010 * S + np.arange(n, dtype=np.int64) * MS
    ms = np.arange(n)
    busy = np.where(bursting(ms), 1.0, 0.01)
    counts = np.cumsum(np.round(busy * rate / 1000)).astype(np.uint64)
    first, second = Job("1", SLURM, "a"), Job("2", SLURM, "b")
    log = JobLog(path)
    start, change = int(stamps[0]) - S, int(stamps[0]) + round(change_s * S)
    one = JobTable.build([first], [Holding("1", "mlx5_0", 1, COMPUTE, RULE_PCIE_SWITCH)])
    two = JobTable.build([second], [Holding("2", "mlx5_0", 1, COMPUTE, RULE_PCIE_SWITCH)])
    both = JobTable.build(
        [first, second],
        [
            Holding("1", "mlx5_0", 1, COMPUTE, RULE_NUMA_NODE),
            Holding("2", "mlx5_0", 1, COMPUTE, RULE_NUMA_NODE),
        ],
    )
    if shared:
        log.on_change(start, EMPTY_TABLE, both)
    else:
        log.on_change(start, EMPTY_TABLE, one)
        log.on_change(change, one, two)
    writer = TraceWriter(path, piece_seconds=10)
    zeros = np.zeros(n, np.uint64)
    writer.append(
        [PortColumns("mlx5_0", 1, rate, stamps, counts, zeros, np.full(n, 1000), zeros > 0)]
    )
    writer.close()


@pytest.mark.parametrize("change_s", [7.5, 7.1204, 15.0, 22.1305])
def test_jobs_split_a_port_s_figures_where_the_holder_changes(
    tmp_path: Path, change_s: float
) -> None:
    """A change inside a burst, inside a 15 s window or on its end: each job gets the
    saturated time of its own samples, the hidden saturation of the windows in proportion,
    each burst goes to the job holding the port when it ended, and nothing is lost."""
    trace = tmp_path / "trace"
    held_trace(trace, change_s)
    result = analyze_paths([trace], None, False, Thresholds())
    (port,) = result.ports
    saturated = sum(d.summary.saturated_ns for d in port.directions)
    hidden = sum(d.summary.hidden_saturated_ns for d in port.directions)
    first, second = result.jobs
    assert first.compute.saturated_ns + second.compute.saturated_ns == saturated == 30 * 40 * MS
    # Every window is quiet: all saturated time is hidden, split as the samples were (to the
    # nanosecond: shares are rounded down).
    assert hidden == saturated
    for job in (first, second):
        assert 0 <= job.compute.saturated_ns - job.compute.hidden_saturated_ns <= 1
    # A sample belongs to the job holding the port when it ended; a burst likewise.
    ms = np.arange(30_000)
    before = ms * MS < round(change_s * S)
    assert first.compute.saturated_ns == int((bursting(ms) & before).sum()) * MS
    assert first.compute.bursts + second.compute.bursts == 30
    burst_ends = (np.arange(30) * 1000 + 139) * MS
    assert first.compute.bursts == int((burst_ends < round(change_s * S)).sum())


def test_a_port_two_jobs_hold_counts_for_both(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    held_trace(trace, 0, shared=True)
    first, second = analyze_paths([trace], None, False, Thresholds()).jobs
    assert first.compute == second.compute
    assert first.compute.saturated_ns == 30 * 40 * MS and first.compute.bursts == 30


@pytest.mark.parametrize(("profile", "seed"), [("moe", 0), ("moe", 3), ("dense", 1)])
def test_the_iteration_period_is_the_simulated_step(
    tmp_path: Path, profile: str, seed: int
) -> None:
    """A simulated node (collector.simulation) whose steps are known: 30 s of its trace,
    one job holding every rail and the storage port, reported; the period the report finds
    is the model's step, its iterations' median length, within PERIOD_TOLERANCE."""
    trace = tmp_path / "sim"
    simulated = subprocess.run(
        [sys.executable, "-m", "burstscope", "simulate", "--profile", profile,
         "--seed", str(seed), "--duration", "30", "--start", "fixed", "-o", str(trace)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr
    first = min(int(samples.timestamp_ns[0]) for samples in read_samples(trace))
    rails = [Holding("7", f"mlx5_{i}", 1, COMPUTE, RULE_PCIE_SWITCH) for i in range(8)]
    storage = Holding("7", "mlx5_8", 1, "storage", RULE_PCIE_SWITCH)
    table = JobTable.build([Job("7", SLURM, "sim")], [*rails, storage])
    JobLog(trace).on_change(first - S, EMPTY_TABLE, table)
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "report", str(trace), "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (job,) = json.loads(result.stdout)["jobs"]
    model = TrafficModel(profile, seed)
    model.extend_to(30 * S)
    steps = [block.end_ns - block.start_ns for block in model.blocks()]
    step = float(np.median(steps)) / S
    assert job["iteration"]["period_seconds"] == pytest.approx(step, rel=PERIOD_TOLERANCE)
    assert job["iteration"]["correlation"] > 0.5


def test_the_period_of_the_model_s_own_schedule() -> None:
    """The estimator alone on the simulated node's ground-truth bursts (no sampler): 40 s
    of each profile, three seeds each, within 0.01% of the median step (the module says so)."""
    for profile in ("moe", "dense"):
        for seed in range(3):
            model = TrafficModel(profile, seed)
            schedule = model.schedule(0, 40 * S)
            rails = schedule.port < 8
            found = iteration_period(
                schedule.start_ns[rails], schedule.end_ns[rails], schedule.bytes[rails], 0, 40 * S
            )
            step = float(np.median([b.end_ns - b.start_ns for b in model.blocks()]))
            assert found is not None
            assert found.period_ns == pytest.approx(step, rel=1e-4), (profile, seed)


@pytest.mark.parametrize(
    "starts",
    [
        [],  # no bursts
        [5 * S],  # one burst: nothing repeats
        [0, 11 * S, 13 * S],  # one pair 2 s apart is no period
        [0, 8 * S],  # fewer than three periods fit
    ],
)
def test_traffic_that_does_not_repeat_has_no_period(starts: list[int]) -> None:
    start = np.asarray(starts, np.int64)
    assert iteration_period(start, start + 40 * MS, np.full(start.size, 1e9), 0, 20 * S) is None


def test_random_bursts_have_no_period() -> None:
    rng = np.random.default_rng(5)
    start = np.sort(rng.integers(0, 60 * S, 200))
    found = iteration_period(start, start + 5 * MS, rng.uniform(1e6, 1e9, 200), 0, 60 * S)
    assert found is None
