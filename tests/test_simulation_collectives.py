"""The simulated node's collectives: the model's schedule as ground truth, and the logs written.

`burstscope simulate --collectives` writes NCCL Inspector dumps (verbose and plain) and PyTorch
traces; here they are read back with the project's own readers and held against the model's
schedule (CollectiveSchedule) on the node's clock.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from burstscope.cli import main
from burstscope.collector.collectives.nccl_inspector import InspectorReader, InspectorRecord
from burstscope.collector.collectives.pytorch_trace import PytorchTrace, read_trace
from burstscope.collector.jobs.model import COMPUTE, STORAGE
from burstscope.collector.jobs.spans import read_job_log
from burstscope.collector.simulation.collective_logs import (
    COLLECTIVES_DIR,
    INSPECTOR_DIR,
    INSPECTOR_PLAIN_DIR,
    PYTORCH_DIR,
    CollectiveLogs,
)
from burstscope.collector.simulation.collective_times import SPAN_END_LAG_US, SPAN_START_LAG_US
from burstscope.collector.simulation.collectives import (
    ALL_GATHER,
    COLLECTIVE_NAMES,
    DP,
    DP_GROUP,
    EP,
    GPUS_PER_NODE,
    GROUPS,
    PP,
    REDUCE_SCATTER,
    SEND,
    CollectiveSchedule,
    NodePlace,
    collision_ns,
    concat_schedules,
)
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import (
    MIN_BURST_NS,
    MIN_GAP_NS,
    MOE,
    MOE_OVERLAP,
    PORTS,
    PROFILES,
    SECOND,
    TRAINING_PORTS,
    JobShape,
)
from burstscope.collector.simulation.workload import plan_iteration
from burstscope.collector.trace import TraceInfo, TraceWriter
from burstscope.collector.trace.jobs import JOBS_FILE, encode_state, read_states
from burstscope.collector.tracegen import (
    FIXED_EPOCH_NS,
    NodeTiming,
    SimulatedScheduler,
    simulate_trace,
    simulated_job,
)
from burstscope.detectors.analyzer import analyze

HOST = "gpu-node-07"
SEED = 5
SECONDS = 8


def simulate(path: Path, *args: str) -> Path:
    assert main(["simulate", "--seed", str(SEED), "--duration", str(SECONDS), "-o", str(path),
                 *args]) == 0  # fmt: skip
    return path


def wall_offset(host: str, seed: int = SEED) -> int:
    node = NodeTiming.for_host(host, seed)
    return node.skew_ns + FIXED_EPOCH_NS + node.clock_offset_ns


def inspector_records(folder: Path) -> dict[str, list[InspectorRecord]]:
    """Every record of every file, by file name; no file may have a skip."""
    found = {}
    for path in sorted(folder.glob("*.log")):
        reader = InspectorReader(path, hostname=HOST)
        records = reader.read()
        assert reader.caught_up
        reader.finish()
        assert not reader.skipped and reader.other_host == 0
        found[path.name] = records
    return found


def truth(seconds: float = SECONDS, seed: int = SEED) -> CollectiveSchedule:
    # Every collective the trace's chunks gave the logs: issued in [0, ticks x 1 ms).
    return TrafficModel("moe", seed).collectives(0, int(seconds * SECOND) + 1_000_000)


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return simulate(tmp_path_factory.mktemp("sim") / "trace", "--host", HOST, "--collectives")


def test_schedule_is_deterministic_and_the_same_however_time_is_walked() -> None:
    whole = TrafficModel("moe", 3).collectives(0, 20 * SECOND)
    walker = TrafficModel("moe", 3)
    bounds = np.sort(np.random.default_rng(1).integers(0, 20 * SECOND, 25))
    parts = []
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), 20 * SECOND], strict=True):
        parts.append(walker.collectives(lo, hi))
        walker.forget_before(lo)
    walked = concat_schedules(parts)
    assert len(whole) > 400
    for name in CollectiveSchedule.__slots__:
        assert np.array_equal(getattr(whole, name), getattr(walked, name)), name
    other = TrafficModel("moe", 4).collectives(0, 20 * SECOND)
    assert not np.array_equal(whole.end_ns[:100], other.end_ns[:100])


def test_one_iteration_has_hermod_types_in_1f1b_order() -> None:
    schedule = truth(4)
    # An iteration ends with the all-gather of the updated shard.
    iteration = schedule.take(np.arange(int(np.argmax(schedule.collective == ALL_GATHER)) + 1))
    names = iteration.collective_names()
    per_pass = 2 * MOE.layers + 2
    assert len(iteration) == 2 * MOE.micro_batches * per_pass + MOE.gradient_buckets + 1
    assert names[:per_pass] == ["Recv", *["AllToAll"] * (2 * MOE.layers), "Send"]
    assert names[-MOE.gradient_buckets - 1 :] == ["ReduceScatter"] * 4 + ["AllGather"]
    assert set(iteration.kind.tolist()) == {EP, PP, DP}
    # Backward runs the layers in reverse; the micro-batches of each direction count up.
    forward = iteration.take((iteration.kind == EP) & (iteration.forward == 1))
    backward = iteration.take((iteration.kind == EP) & (iteration.forward == 0))
    assert forward.layer[:8].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert backward.layer[:8].tolist() == [3, 3, 2, 2, 1, 1, 0, 0]
    assert sorted(set(forward.micro_batch.tolist())) == list(range(MOE.micro_batches))
    assert np.all(iteration.end_ns > iteration.issue_ns)
    assert np.all(np.diff(iteration.issue_ns) > 0)
    # DP is the largest group, by ranks and by nodes.
    assert max(GROUPS, key=lambda g: (g.n_ranks, g.nnodes)).kind == DP


@pytest.mark.parametrize("shape", [MOE, MOE_OVERLAP], ids=["moe", "moe-overlap"])
def test_every_wire_item_lies_in_its_one_collective(shape: JobShape) -> None:
    plan = plan_iteration(shape, np.random.default_rng((SEED, 0)), 1_000, checkpoint=False)
    chain = plan.collectives
    events = len(chain.identities)
    seen = np.zeros(events, dtype=np.int64)
    ends = np.full(events, np.iinfo(np.int64).min)
    for channel in range(2 * TRAINING_PORTS):
        items = plan.channels[channel]
        assert np.all((items.event >= 0) & (items.event < events))
        assert np.all(items.start_ns >= chain.issue_ns[items.event])
        assert np.all(items.end_ns <= chain.rank_end_ns[items.event, channel // 2])
        np.maximum.at(ends, items.event, items.end_ns)
        seen += np.bincount(items.event, minlength=events)
    assert np.all(seen >= TRAINING_PORTS)  # every collective loads every rail
    assert np.array_equal(ends, chain.rank_end_ns.max(axis=1))
    for storage in plan.channels[2 * TRAINING_PORTS :]:
        assert np.all(storage.event == -1)


@pytest.mark.parametrize("profile", tuple(PROFILES))
def test_bursts_on_the_rails_lie_inside_collectives_in_flight(profile: str) -> None:
    model = TrafficModel(profile, SEED)
    bursts = model.schedule(0, 30 * SECOND)
    schedule = model.collectives(0, 30 * SECOND)
    rails = bursts.port < TRAINING_PORTS
    # The union of the in-flight spans, as disjoint intervals; each burst lies in one.
    order = np.argsort(schedule.issue_ns)
    merged: list[list[int]] = []
    for issue, stop in zip(
        schedule.issue_ns[order].tolist(), schedule.end_ns[order].tolist(), strict=True
    ):
        if merged and issue <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([issue, stop])
    lows = np.array([m[0] for m in merged])
    highs = np.array([m[1] for m in merged])
    start, end = bursts.start_ns[rails], bursts.end_ns[rails]
    assert len(start) > 10
    which = np.searchsorted(lows, start, side="right") - 1
    assert np.all(which >= 0)
    assert np.all(end <= highs[which])


def test_logs_parse_with_no_skips_and_carry_collectives_only(trace: Path) -> None:
    root = trace / COLLECTIVES_DIR
    verbose = inspector_records(root / INSPECTOR_DIR)
    plain = inspector_records(root / INSPECTOR_PLAIN_DIR)
    assert len(verbose) == len(plain) == GPUS_PER_NODE
    names = {r.collective for records in verbose.values() for r in records}
    assert names == {"ReduceScatter", "AllGather"}  # no Send/Recv, no AllToAll (NCCL 2.29)
    for name, records in verbose.items():
        assert [(r.communicator_id, r.sequence_number) for r in records] == [
            (r.communicator_id, r.sequence_number) for r in plain[name]
        ]
        assert all(r.kernel_channels and r.start_us for r in records)
        assert all(r.kernel_channels is None and r.start_us is None for r in plain[name])
        assert all(r.n_ranks == 16 and r.nnodes == 16 for r in records)
    traces = [read_trace(p) for p in sorted((root / PYTORCH_DIR).glob("*.pt.trace.json"))]
    assert len(traces) == GPUS_PER_NODE
    schedule = truth()
    for found in traces:
        assert not found.skipped
        assert len(found.kernels) == len(found.calls) == len(schedule)
        collectives = {k.metadata.collective for k in found.kernels if k.metadata}
        assert collectives == {"send", "recv", "all_to_all", "_reduce_scatter_base",
                               "_allgather_base"}  # fmt: skip


def test_verbose_spans_are_the_models_in_flight_spans(trace: Path) -> None:
    schedule = truth()
    offset = wall_offset(HOST)
    place = NodePlace.for_host(HOST, SEED, 0, int(schedule.stage[0]))
    row_of = {
        (place.communicator_id(DP_GROUP, rank), COLLECTIVE_NAMES[code], sequence): (rank, row)
        for rank in range(GPUS_PER_NODE)
        for row, (code, sequence) in enumerate(
            zip(schedule.collective.tolist(), schedule.sequence.tolist(), strict=True)
        )
        if code in (REDUCE_SCATTER, ALL_GATHER)
    }
    node_span: dict[int, list[int]] = defaultdict(list)
    records = inspector_records(trace / COLLECTIVES_DIR / INSPECTOR_DIR)
    for record in (r for found in records.values() for r in found):
        key = (record.communicator_id, record.collective, record.sequence_number)
        rank, row = row_of[key]
        assert record.kernel_channels is not None
        start = min(c.start_us for c in record.kernel_channels if c.start_us) * 1000
        stop = max(c.stop_us for c in record.kernel_channels if c.stop_us) * 1000
        issue = int(schedule.issue_ns[row]) + offset
        last = int(schedule.rank_end_ns[row, rank]) + offset
        assert SPAN_START_LAG_US[0] * 1000 <= start - issue <= SPAN_START_LAG_US[1] * 1000
        assert SPAN_END_LAG_US[0] * 1000 <= stop - last <= SPAN_END_LAG_US[1] * 1000
        node_span[row].append(stop)
    assert len(node_span) == np.isin(schedule.collective, [REDUCE_SCATTER, ALL_GATHER]).sum()
    for row, stops in node_span.items():
        if len(stops) == GPUS_PER_NODE:  # the node's end is its last rank's
            lag = max(stops) - (int(schedule.end_ns[row]) + offset)
            assert SPAN_END_LAG_US[0] * 1000 <= lag <= SPAN_END_LAG_US[1] * 1000


def test_pytorch_kernels_cover_the_models_in_flight_spans(trace: Path) -> None:
    schedule = truth()
    offset = wall_offset(HOST)
    traces = sorted((trace / COLLECTIVES_DIR / PYTORCH_DIR).glob("*.pt.trace.json"))
    starts = np.array([[k.start_unix_ns for k in read_trace(p).kernels] for p in traces])
    ends = np.array([[k.end_unix_ns for k in read_trace(p).kernels] for p in traces])
    order = np.argsort(schedule.issue_ns, kind="stable")
    issue, end = schedule.issue_ns[order] + offset, schedule.end_ns[order] + offset
    assert np.all((starts.min(axis=0) - issue >= 2_000) & (starts.min(axis=0) - issue <= 6_000))
    assert np.all((ends.max(axis=0) - end >= 500) & (ends.max(axis=0) - end <= 2_000))


def write_logs(path: Path, interval_us: int, all_to_all: str | None = None) -> Path:
    """The logs alone, through the Python API: 10 s of seed SEED."""
    path.mkdir()
    node = NodeTiming.for_host(HOST, SEED)
    logs = CollectiveLogs(
        path, HOST, SEED, wall_offset(HOST), interval_us, all_to_all, pytorch_ranks=(0,)
    )
    info = TraceInfo(1_000_000, "sim:moe", HOST, node.clock_offset_ns)
    model = TrafficModel("moe", SEED)
    simulate_trace(model, TraceWriter(path, info=info), 10 * SECOND, node=node,
                   collective_logs=logs)  # fmt: skip
    return path / COLLECTIVES_DIR


def test_a_long_dump_interval_samples_and_the_sequence_numbers_show_it(tmp_path: Path) -> None:
    every = inspector_records(write_logs(tmp_path / "short", 500) / INSPECTOR_DIR)
    sampled = inspector_records(write_logs(tmp_path / "long", 25_000) / INSPECTOR_DIR)
    count = sum(map(len, every.values()))
    assert 0 < sum(map(len, sampled.values())) < count
    gaps = 0
    for records in sampled.values():
        by_collective = defaultdict(list)
        for r in records:
            by_collective[(r.communicator_id, r.collective)].append(r.sequence_number)
        for numbers in by_collective.values():
            assert numbers == sorted(numbers)
            gaps += int((np.diff(numbers) > 1).sum())
    assert gaps > 0
    # At 500 us nothing is lost: each rank's DP communicator shows every sequence number.
    schedule = truth(10)
    dp = int(np.isin(schedule.collective, [REDUCE_SCATTER, ALL_GATHER]).sum())
    assert count == dp * GPUS_PER_NODE


def test_all_to_all_can_be_logged_under_a_name(tmp_path: Path) -> None:
    records = inspector_records(write_logs(tmp_path / "a2a", 500, "All2All") / INSPECTOR_DIR)
    found = [r for rs in records.values() for r in rs if r.collective == "All2All"]
    assert found and all(r.n_ranks == 8 and r.bus_bandwidth_gbs == 0.0 for r in found)


def test_same_seed_same_bytes_and_no_logs_unless_asked(tmp_path: Path, trace: Path) -> None:
    again = simulate(tmp_path / "again", "--host", HOST, "--collectives")
    files = sorted(p.relative_to(trace) for p in trace.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for name in files:
        assert (trace / name).read_bytes() == (again / name).read_bytes(), name
    plain = simulate(tmp_path / "plain", "--host", HOST)
    assert not (plain / COLLECTIVES_DIR).exists()
    assert not (plain / JOBS_FILE).exists()


def kernels(trace: Path) -> PytorchTrace:
    return read_trace(trace / COLLECTIVES_DIR / PYTORCH_DIR / f"{trace.name}-rank0.pt.trace.json")


def test_two_nodes_of_one_job_see_the_same_collectives_on_their_own_clocks(
    tmp_path: Path,
) -> None:
    a = simulate(tmp_path / "gpu-a", "--host", "gpu-a", "--collectives")
    b = simulate(tmp_path / "gpu-b", "--host", "gpu-b", "--collectives")
    shift = wall_offset("gpu-b") - wall_offset("gpu-a")
    assert shift != 0
    ka, kb = kernels(a).kernels, kernels(b).kernels
    assert [(k.kernel, k.metadata) for k in ka] != []
    assert [(k.metadata.collective, k.metadata.sequence_number) for k in ka if k.metadata] == [
        (k.metadata.collective, k.metadata.sequence_number) for k in kb if k.metadata
    ]
    assert all(y.start_unix_ns - x.start_unix_ns == shift for x, y in zip(ka, kb, strict=True))
    assert all(y.end_unix_ns - x.end_unix_ns == shift for x, y in zip(ka, kb, strict=True))
    # The Inspector's microseconds: the same shift, to within their flooring.
    starts: dict[str, dict[tuple[str, str, int], int]] = {}
    for node in (a, b):
        starts[node.name] = {
            (r.communicator_id, r.collective, r.sequence_number): r.start_us or 0
            for path in (node / COLLECTIVES_DIR / INSPECTOR_DIR).glob("*.log")
            for r in InspectorReader(path).read()
        }
    common = starts["gpu-a"].keys() & starts["gpu-b"].keys()
    assert len(common) > 0.9 * len(starts["gpu-a"])  # DP communicators span both nodes
    for key in common:
        assert abs((starts["gpu-b"][key] - starts["gpu-a"][key]) * 1000 - shift) < 1000


@pytest.mark.parametrize("value", ["0", "-5", "abc", "1.5", ""])
def test_a_bad_dump_interval_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    out = tmp_path / "out"
    status = main(["simulate", "--duration", "1", "-o", str(out), "--collectives",
                   "--inspector-dump-interval", value])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "--inspector-dump-interval" in err
    assert "Traceback" not in err
    assert not out.exists()


# --- moe-overlap: gradient buckets reduce-scattered during the last backward pass ----------

OVERLAP = "moe-overlap"


def test_overlap_buckets_collide_with_the_all_to_alls_and_the_send() -> None:
    """Per 20 s of seed SEED: the classes' in-flight time together on the host. The plain
    MoE job reduces after its backward: only its last send meets DP there."""
    window = 20 * SECOND
    overlap = TrafficModel(OVERLAP, SEED).collectives(0, window)
    plain = TrafficModel("moe", SEED).collectives(0, window)
    found = {
        name: [collision_ns(s, a, b, 0, window) for a, b in ((EP, DP), (PP, DP), (EP, PP))]
        for name, s in (("overlap", overlap), ("plain", plain))
    }
    print({name: [f"{ns / 1e6:.0f} ms" for ns in pairs] for name, pairs in found.items()})
    ep_dp, pp_dp, _ = found["overlap"]
    assert ep_dp > 400_000_000 and pp_dp > 50_000_000
    assert found["plain"][0] == 0 and found["plain"][1] < 20_000_000
    assert ep_dp > 20 * found["plain"][1]


def test_overlap_buckets_go_out_in_the_last_backward_and_the_optimizer_waits() -> None:
    schedule = TrafficModel(OVERLAP, SEED).collectives(0, 4 * SECOND)
    iteration = schedule.take(np.arange(int(np.argmax(schedule.collective == ALL_GATHER)) + 1))
    buckets = np.flatnonzero(iteration.collective == REDUCE_SCATTER)
    assert len(buckets) == MOE_OVERLAP.gradient_buckets == 2 * MOE_OVERLAP.layers
    last = MOE_OVERLAP.micro_batches - 1
    follower = iteration.take(buckets + 1)
    # Each bucket is issued beside the last backward's next all-to-all, the last beside its
    # send to the previous stage: it queues on the rails with them.
    assert follower.class_names() == ["EP"] * 7 + ["PP"]
    assert follower.collective[-1] == SEND
    assert np.all((follower.micro_batch == last) & (follower.forward == 0))
    assert np.all(follower.issue_ns - iteration.issue_ns[buckets] == MIN_GAP_NS)
    assert np.all(iteration.end_ns[buckets] > follower.issue_ns)  # in flight together
    # The last backward issues them: no bucket before its first all-to-all.
    first = np.flatnonzero((iteration.micro_batch == last) & (iteration.forward == 0))[0]
    assert buckets[0] > first
    # The optimizer waits for every bucket before its shard is all-gathered.
    assert iteration.end_ns[buckets].max() < iteration.issue_ns[-1]


def test_overlap_keeps_the_wire_resolvable_and_the_fifteen_second_mean_low() -> None:
    plan = plan_iteration(MOE_OVERLAP, np.random.default_rng((SEED, 3)), 0, checkpoint=False)
    for items in plan.channels[: 2 * TRAINING_PORTS]:
        assert np.all(items.end_ns - items.start_ns >= MIN_BURST_NS)
        gaps = items.start_ns[1:] - items.end_ns[:-1]
        assert np.all((gaps == 0) | (gaps >= MIN_GAP_NS))  # FIFO, and each gap seen at 1 ms
    model = TrafficModel(OVERLAP, SEED)
    edges = np.arange(0, 8 * 15 * SECOND + 1, 15 * SECOND)
    for values in model.counters_at(edges):
        means = np.diff(values[:TRAINING_PORTS]) / (PORTS[0].bytes_per_ns * 15 * SECOND)
        assert means.min() > 0.15 and means.max() < 0.25


def test_overlap_bursts_are_found_by_a_1ms_sampler() -> None:
    seconds = 20
    model = TrafficModel(OVERLAP, SEED)
    schedule = TrafficModel(OVERLAP, SEED).schedule(0, seconds * SECOND)
    ticks = np.arange(0, seconds * SECOND + 1, 1_000_000) + 400_000
    xmit, rcv = model.counters_at(ticks)
    for port in range(TRAINING_PORTS):
        for direction, values in enumerate((xmit, rcv)):
            _, bursts = analyze(ticks, values[port], PORTS[port].line_rate_bytes_per_second)
            truth = schedule.select(port, direction)
            inside = (truth.start_ns > ticks[0]) & (truth.end_ns < ticks[-1])
            found = (bursts.start_ns > ticks[0]) & (bursts.end_ns < ticks[-1])
            assert found.sum() == inside.sum() > 100


# --- The job table of a node written with --collectives --------------------------------------


def test_the_job_table_holds_the_rails_for_compute_and_the_storage_nic(trace: Path) -> None:
    contents = read_job_log(trace)
    assert contents.problems == ()
    start = wall_offset(HOST)  # the job's first iteration begins at model time 0
    job = simulated_job(SEED, 0, MOE.name, start)
    holdings = [
        {"job_id": job.job_id, "device": p.device, "port": 1, "role": role,
         "rule": "whole_node", "start_ns": start}
        for p, role in zip(PORTS, [COMPUTE] * TRAINING_PORTS + [STORAGE], strict=True)
    ]  # fmt: skip
    expected = {"job_id": job.job_id, "scheduler": "slurm", "user": job.user,
                "name": "moe-pretrain", "step": "", "nodes": "", "start_time": start / 1e9,
                "namespace": "", "pod": ""}  # fmt: skip
    assert (trace / JOBS_FILE).read_text() == encode_state(start, [expected], holdings)
    assert [(s.device, s.role, s.start_ns, s.end_ns) for s in contents.spans] == [
        (h["device"], h["role"], start, None) for h in holdings
    ]


def test_report_groups_the_simulated_node_by_its_job(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(trace), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    (job,) = document["jobs"]
    assert job["job_id"] == simulated_job(SEED, 0, "", 0).job_id and job["end_ns"] is None
    roles = {p["device"]: p["role"] for p in job["ports"]}
    assert roles == {f"mlx5_{i}": COMPUTE for i in range(8)} | {"mlx5_8": STORAGE}
    (collectives,) = document["collectives"]
    assert collectives["ports"] and not any("mlx5_8" in p for p in collectives["ports"])
    assert main(["report", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "jobs: each job's ports" in out and "moe-pretrain" in out


def test_idle_heavy_jobs_begin_and_end_around_their_collectives(tmp_path: Path) -> None:
    """Every collective of job k lies inside job k's holdings; the table is empty while
    the fabric idles between jobs."""
    seconds = 900
    offset = wall_offset(HOST, 0)
    scheduler = SimulatedScheduler(tmp_path, HOST, 0, offset)
    info = TraceInfo(10_000_000, "sim:idle-heavy", HOST, 0)
    simulate_trace(TrafficModel("idle-heavy", 0), TraceWriter(tmp_path, info=info),
                   seconds * SECOND, 10_000_000, scheduler=scheduler)  # fmt: skip
    contents = read_job_log(tmp_path)
    assert contents.problems == ()
    states, _ = read_states(tmp_path)
    assert [len(s.jobs) for s in states] == [1, 0] * (len(states) // 2) and len(states) >= 4
    truth = TrafficModel("idle-heavy", 0).collectives(0, seconds * SECOND)
    spans = {s.job.job_id: s for s in contents.spans if s.device == "mlx5_0"}
    assert len(spans) == scheduler.jobs == len(set(truth.job.tolist())) >= 2
    for number in sorted(set(truth.job.tolist())):
        span = spans[simulated_job(0, number, "", 0).job_id]
        mine = truth.take(truth.job == number)
        assert span.start_ns <= int(mine.issue_ns.min()) + offset
        assert span.end_ns is None or int(mine.end_ns.max()) + offset <= span.end_ns
    ordered = sorted(spans.values(), key=lambda s: s.start_ns)
    assert all(a.end_ns is not None and a.end_ns < b.start_ns
               for a, b in itertools.pairwise(ordered))  # fmt: skip
