"""The simulated job's nodes wait for each other: the honest model the straggler detector is
scored on (collector/simulation/stragglers.py), and each node's steps and their lags
(detectors/stragglers.py) on hand-made counters."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from burstscope.cli import main
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import SECOND
from burstscope.collector.simulation.stragglers import (
    EAGER_BYTES,
    JobGroup,
    Straggler,
)
from burstscope.detectors.arrays import I64
from burstscope.detectors.stragglers import (
    NodeStanding,
    NodeStep,
    RailStep,
    Standings,
    StepLimits,
    StepSplitter,
    StepVerdict,
    judge,
)

HOSTS = ("n0", "n1", "n2", "n3")
MS = 1_000_000


def _schedules(group: JobGroup, seconds: int) -> dict[str, tuple[I64, ...]]:
    out: dict[str, tuple[I64, ...]] = {}
    for host in group.hosts:
        model = TrafficModel("moe", 3, group=group, host=host)
        schedule = model.schedule(0, seconds * SECOND)
        out[host] = (schedule.port, schedule.direction, schedule.start_ns, schedule.end_ns)
    return out


def test_every_node_of_a_job_bursts_at_the_same_times_the_last_rank_sets() -> None:
    """The bulk of each step waits for the last rank: with or without a straggler, the
    nodes' burst schedules are equal to the nanosecond (eager sends are no bursts), and a
    straggler 7 ms late in step 2 moves every node's bursts of that step by its lateness."""
    clean = JobGroup(HOSTS, seed=3)
    late = JobGroup(HOSTS, (Straggler("n2", 7 * MS, first_step=2, last_step=2),), seed=3)
    schedules = {name: _schedules(group, 12) for name, group in (("clean", clean), ("late", late))}
    for name, by_host in schedules.items():
        first = by_host["n0"]
        for host in HOSTS[1:]:
            for a, b in zip(first, by_host[host], strict=True):
                np.testing.assert_array_equal(a, b, err_msg=f"{name}: {host} differs from n0")
    model = TrafficModel("moe", 3, group=late, host="n0")
    model.extend_to(12 * SECOND)
    step2 = next(b for b in model.blocks() if b.index == 2)
    # The shift of step 2's bursts is the change in its last arrival.
    shift = int(late.arrivals_ns(2).max() - clean.arrivals_ns(2).max())
    assert 6 * MS < shift <= 7 * MS
    clean_starts, late_starts = schedules["clean"]["n0"][2], schedules["late"]["n0"][2]
    in_step = (late_starts >= step2.start_ns) & (late_starts < step2.end_ns)
    moved = late_starts[in_step] - clean_starts[in_step]
    # The step's bursts before its first send (a receive from the previous stage, the
    # data loader's read) do not wait; every one after it moves by the shift.
    assert set(np.unique(moved).tolist()) == {0, shift}
    assert (moved == shift).sum() > 10 * (moved == 0).sum()


def test_an_early_node_sends_its_eager_bytes_when_it_arrives_and_the_straggler_none() -> None:
    group = JobGroup(HOSTS, (Straggler("n1", 9 * MS),), seed=3)
    for host in HOSTS:
        arrival = group.arrival(host, 1)
        model = TrafficModel("moe", 3, group=group, host=host)
        model.extend_to(10 * SECOND)
        block = next(b for b in model.blocks() if b.index == 1)
        # The first training-rail transmit item of the step: where the bulk or eager begins.
        rail = 0
        starts, rates = block.segment_start[2 * rail], block.segment_rate[2 * rail]
        sending = np.flatnonzero(rates > 1.0)
        first, second = int(starts[sending[0]]), int(starts[sending[1]])
        if host == "n1":  # the last to arrive: no eager send, its first item is the bulk
            assert arrival.own_ns == arrival.group_ns
            assert second - first > 1 * MS
        else:  # an eager send of EAGER_BYTES at line rate, the bulk group - own later
            length = int(starts[sending[0] + 1]) - first
            assert rates[sending[0]] * length == pytest.approx(EAGER_BYTES, rel=1e-4)
            assert second - first == pytest.approx(arrival.group_ns - arrival.own_ns, abs=200_000)


def test_a_group_slow_rail_slows_that_rail_on_every_node() -> None:
    from burstscope.collector.simulation.profiles import SLOW_RAIL, RailFault

    group = JobGroup(HOSTS, seed=3, rail_faults=(RailFault(5, SLOW_RAIL, 0.5),))
    for host in ("n0", "n3"):
        model = TrafficModel("moe", 3, group=group, host=host)
        assert model.rail_faults == group.rail_faults


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--straggler", "a:5"), "--straggler and --slow-rail need --job-hosts"),
        (("--job-hosts", "a,b"), "--job-hosts needs --host"),
        (("--host", "a", "--job-hosts", "a"), "two or more distinct host names"),
        (("--host", "a", "--job-hosts", "a,b", "--straggler", "c:5"), "'c' is not one of"),
        (("--host", "a", "--job-hosts", "a,b", "--straggler", "b:0"), "is not HOST:MS"),
        (("--host", "a", "--job-hosts", "a,b", "--straggler", "b:5:0"), "is not HOST:MS"),
        (("--host", "a", "--job-hosts", "a,b", "--slow-rail", "8:0.5"), "is not RAIL:FRACTION"),
        (("--host", "c", "--job-hosts", "a,b"), "--host 'c' is not one of --job-hosts"),
    ],
)
def test_bad_job_arguments_are_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    status = main(["simulate", "--duration", "1", "-o", str(tmp_path / "t"), *args])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_the_trace_records_its_injected_stragglers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "n0"
    args = ["--host", "n0", "--job-hosts", ",".join(HOSTS), "--straggler", "n3:4:2:1"]
    assert main(["simulate", "--seed", "3", "--duration", "12", "-o", str(out), *args]) == 0
    records = [json.loads(line) for line in (out / "_stragglers.jsonl").read_text().splitlines()]
    assert [(r["step"], r["host"], r["delay_ns"]) for r in records] == [
        (1, "n3", 4 * MS),
        (3, "n3", 4 * MS),
    ]
    assert all(r["start_ns"] < r["end_ns"] for r in records)


# -- the detector on hand-made counters -------------------------------------------------

LINE = 50 * SECOND  # bytes per second of a 400 Gb/s rail


def _feed(splitter: StepSplitter, rails: int, moved: np.ndarray, start_ns: int = 0) -> None:
    """``moved``: bytes per 1 ms sample (rails x samples), read at the end of each ms."""
    stamps = start_ns + MS * np.arange(1, moved.shape[1] + 1, dtype=np.int64)
    for rail in range(rails):
        values = np.concatenate(([0], np.cumsum(moved[rail])))
        splitter.feed(f"r{rail}", LINE, np.concatenate(([start_ns], stamps)), values)


def test_a_step_is_its_rails_first_to_last_bytes_closed_by_a_quiet_stretch() -> None:
    splitter = StepSplitter("n0", MS)
    moved = np.zeros((3, 250), dtype=np.int64)
    moved[:, 10:40] = 50 * MS // 1000 * 1000  # line rate: 50 MB a ms
    moved[1, 45] = 10_000_000  # rail 1 goes on 5 ms later (a 5 ms gap is inside a step)
    moved[:, 200:210] = 25_000_000  # the next step, after 155 ms of quiet
    _feed(splitter, 3, moved)
    steps = splitter.close()
    assert len(steps) == 1  # the second is not over: 40 ms read after it, not 50 of quiet
    (step,) = steps
    assert (step.onset_ns, step.end_ns) == (10 * MS, 46 * MS)
    assert [r.rail for r in step.rails] == ["r0", "r1", "r2"]
    assert step.rails[1].bytes == 30 * 50_000_000 + 10_000_000
    assert step.rails[0].peak == 1.0 and step.rails[0].latest_ns == 10 * MS
    (last,) = splitter.close(final=True)
    assert (last.onset_ns, last.end_ns, last.rails[0].peak) == (200 * MS, 210 * MS, 0.5)
    # Half a millisecond of line rate in the first sample: it began 0.5 ms before its end
    # at the latest.
    assert last.latest_ns == 200 * MS + MS // 2


def _step(host: str, onset_ms: float, end_ms: float, latest_ms: float | None = None) -> NodeStep:
    onset, end = round(onset_ms * MS), round(end_ms * MS)
    latest = round((latest_ms if latest_ms is not None else onset_ms) * MS)
    rails = (RailStep("r0", onset, end, 1, 1.0, latest),)
    return NodeStep(host, onset, end, MS, rails, (), latest)


def test_the_last_node_is_a_straggler_only_past_the_clocks_and_the_sample_grid() -> None:
    # Step 1: n3 arrives 3 ms after the others (a straggler). Step 2: n2 is one sample
    # behind, which the grid alone can make (its latest onset overlaps the median's).
    steps = [
        _step("n0", 0, 400, 0.9),
        _step("n1", 0, 400, 0.9),
        _step("n2", 0, 400, 0.9),
        _step("n3", 3, 401, 3),
        _step("n0", 1000, 1400, 1000.9),
        _step("n1", 1000, 1400, 1000.9),
        _step("n2", 1001, 1400, 1001.5),
        _step("n3", 1000, 1400, 1000.9),
    ]
    first, second = judge(steps)
    assert first.stragglers == ("n3",) and first.lag_ns[3] == 3 * MS
    assert first.lag_at_least_ns[3] == 3 * MS - 900_000
    assert second.stragglers == ()
    assert second.lag_ns[2] == MS and second.lag_at_least_ns[2] == 100_000
    standings = {s.host: s for s in _standings([first, second])}
    assert standings["n3"].straggler_steps == 1 and standings["n3"].score == 0.5
    assert standings["n3"].lag_quantiles_ns == (0, 3 * MS, 3 * MS)


def _standings(verdicts: list[StepVerdict]) -> list[NodeStanding]:
    table = Standings()
    for verdict in verdicts:
        table.add(verdict)
    return table.standings()


def test_a_node_that_split_its_step_differently_has_no_excess_and_fewer_nodes_no_verdict() -> None:
    steps = [_step("n0", 0, 400), _step("n1", 0, 400), _step("n2", 0, 3700)]
    (verdict,) = judge(steps)
    assert verdict.excess_ns == (0, 0, None)
    assert judge(steps[:2]) == []
    assert judge(steps[:2], StepLimits(min_nodes=2)) != []
