"""`report` with collective records: the tables, the command line's bad inputs, and the join
scored against ground truth: the simulated MoE node's own schedule of collectives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from burstscope import report_collectives, report_model
from burstscope.cli import main
from burstscope.collector.collectives.join import CollectiveLog
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import SECOND
from burstscope.collector.trace import (
    PortSamples,
    TraceInfo,
    TraceWriter,
    prepare_output,
    read_samples,
)
from burstscope.collector.tracegen import FIXED_EPOCH_NS, NodeTiming, simulate_trace
from burstscope.detectors.collective_join import HERMOD, CollectiveSpan, SpanIndex
from burstscope.detectors.config import Thresholds
from burstscope.report_collectives import CollectiveOptions, load
from burstscope.report_model import analyze_paths
from tests.conftest import FIXTURES

HERE = FIXTURES / "collectives"


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["report", *args])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two seconds of the MoE node, without records."""
    path = tmp_path_factory.mktemp("small") / "trace"
    model = TrafficModel("moe", 0)
    info = TraceInfo(1_000_000, "sim:moe", "gpu-node-07", 0)
    prepare_output(path)
    simulate_trace(model, TraceWriter(path, info=info), 2 * SECOND, node=NodeTiming(0))
    return path


def test_a_trace_without_records_has_no_collectives(
    small_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run_cli([str(small_trace), "--json"], capsys)
    assert status == 0 and json.loads(out)["collectives"] == []


def test_records_given_on_the_command_line_are_read_for_the_trace_host(
    small_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fixtures are of another time: read and counted, but no sample is under them.
    status, out, _ = run_cli(
        [
            str(small_trace),
            "--json",
            "--nccl-inspector",
            str(HERE / "inspector-verbose.log"),
            "--pytorch-trace",
            str(HERE / "pytorch-trace.json"),
        ],
        capsys,
    )
    assert status == 0
    (document,) = json.loads(out)["collectives"]
    assert document["records"] > 0 and set(document["sources"]) == {"nccl-inspector", "pytorch"}
    none = next(row for row in document["classes"] if row["name"] == "none")
    assert none["seconds"] > 1.9  # every labelled sample is under no collective
    status, out, _ = run_cli([str(small_trace), "--nccl-inspector", str(HERE)], capsys)
    assert status == 0 and "two lossless priorities" in out and "by collective" in out


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--collective-clock-offset", "soon"], "is not a duration"),
        (["--collective-ports", ","], "--collective-ports needs"),
        (["--nccl-inspector", "/nonexistent/dumps"], "do not exist"),
        (["--pytorch-trace", str(HERE / "inspector-plain.log")], "not JSON"),
    ],
)
def test_bad_collective_options_are_one_line_and_status_2(
    small_trace: Path, capsys: pytest.CaptureFixture[str], extra: list[str], fragment: str
) -> None:
    status, out, err = run_cli([str(small_trace), *extra], capsys)
    assert status == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in err


def test_a_bad_mapping_file_names_itself(
    small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mapping = tmp_path / "map.toml"
    mapping.write_text('"0x1" = "tensor"\n')
    status, _, err = run_cli(
        [str(small_trace), "--nccl-inspector", str(HERE), "--collective-map", str(mapping)],
        capsys,
    )
    assert status == 2 and "map.toml" in err and len(err.strip().splitlines()) == 1


def test_a_mapping_decides_the_class(
    small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = tmp_path / "dumps"
    records.mkdir()
    shutil.copy(HERE / "inspector-verbose.log", records / "gpu-node-07-pid1.log")
    first = json.loads((HERE / "inspector-verbose.golden.json").read_text())["records"][0][
        "communicator_id"
    ]
    mapping = tmp_path / "map.toml"
    mapping.write_text(f'"{first}" = "PP"\n')
    status, out, _ = run_cli(
        [
            str(small_trace),
            "--json",
            "--nccl-inspector",
            str(records),
            "--collective-map",
            str(mapping),
        ],
        capsys,
    )
    assert status == 0
    (document,) = json.loads(out)["collectives"]
    rows = {(r["name"], r["class"]) for r in document["collectives"]}
    assert any(kind == "PP" for _, kind in rows)


def test_clock_offset_is_parsed_with_its_sign() -> None:
    from burstscope.report_collectives import parse_offset

    assert parse_offset("-250us") == -250_000
    assert parse_offset("1.5ms") == 1_500_000
    assert parse_offset("0") == 0
    assert FIXED_EPOCH_NS > 0


# --- Ground truth: the simulated MoE node ---------------------------------------------------

HOST = "gpu-node-07"
SECONDS = 20
RAILS = [f"mlx5_{i}" for i in range(8)]


@pytest.fixture(scope="module", params=["moe", "moe-overlap"])
def moe(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 s of one node of a MoE job with the records its stack would write: moe (collisions
    of PP with DP only) and moe-overlap (gradient buckets during the backward: EP with DP)."""
    path = tmp_path_factory.mktemp(request.param) / "trace"
    status = main(
        [
            "simulate",
            "-o",
            str(path),
            "--profile",
            request.param,
            "--duration",
            str(SECONDS),
            "--host",
            HOST,
            "--collectives",
        ]
    )
    assert status == 0
    return path


def profile_of(trace: Path) -> str:
    return trace.parent.name.rstrip("0123456789")


def model_spans(profile: str) -> list[CollectiveSpan]:
    """The model's own schedule on the node's clock: the truth the records are scored against."""
    model = TrafficModel(profile, 0)
    schedule = model.collectives(0, (SECONDS + 1) * SECOND)
    node = NodeTiming.for_host(HOST, 0)
    shift = FIXED_EPOCH_NS + node.skew_ns + node.clock_offset_ns
    return [
        CollectiveSpan(
            int(start) + shift,
            int(end) + shift,
            name,
            kind,
            "model",
            "",
            None,
            None,
            None,
            None,
            "model",
        )
        for start, end, name, kind in zip(
            schedule.issue_ns.tolist(),
            schedule.end_ns.tolist(),
            schedule.collective_names(),
            schedule.class_names(),
            strict=True,
        )
    ]


def truth_masks(spans: list[CollectiveSpan], lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per sample (lo, hi], the classes of the spans overlapping it, counted directly: the
    spans starting before hi less those ending at or before lo (no span does both)."""
    out = np.zeros(lo.shape, dtype=np.int64)
    for bit, name in ((1, "EP"), (2, "PP"), (4, "DP")):
        starts = np.sort([s.start_ns for s in spans if s.kind == name])
        ends = np.sort([s.end_ns for s in spans if s.kind == name])
        overlapping = np.searchsorted(starts, hi, "left") - np.searchsorted(ends, lo, "right")
        out[overlapping > 0] |= bit
    return out


def rail_samples(path: Path) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per rail and direction: each sample's (lo, hi] and whether it is a burst sample."""
    threshold = Thresholds().burst
    parts: dict[str, list[PortSamples]] = {}
    for samples in read_samples(path):
        parts.setdefault(samples.device, []).append(samples)
    out = []
    for device in RAILS:
        stamps = np.concatenate([p.timestamp_ns for p in parts[device]])
        rates = parts[device][0].line_rate_bytes_per_second
        assert rates is not None
        rate = int(rates[0])
        for column in ("xmit_bytes", "rcv_bytes"):
            values = np.concatenate([getattr(p, column) for p in parts[device]]).astype(np.int64)
            lo, hi = stamps[:-1], stamps[1:]
            utilization = np.diff(values) / (rate * (hi - lo) / 1e9)
            out.append((lo, hi, utilization >= threshold))
    return out


def scored(path: Path, spans: list[CollectiveSpan]) -> tuple[float, int, int]:
    """Share of burst samples whose class set equals the truth; burst and collision samples."""
    index = SpanIndex(spans)
    truth_spans = model_spans(profile_of(path))
    right = total = collisions = 0
    for lo, hi, burst in rail_samples(path):
        truth = truth_masks(truth_spans, lo[burst], hi[burst])
        label = index.masks(lo[burst], hi[burst]).astype(np.int64) & HERMOD
        right += int((truth == label).sum())
        total += int(burst.sum())
        collisions += int(sum(bin(int(m)).count("1") >= 2 for m in truth))
    return right / total, total, collisions


def test_pytorch_traces_label_99_percent_of_burst_milliseconds_right(moe: Path) -> None:
    traces = sorted((moe / "collectives" / "pytorch").glob("*.json"))
    log = load(moe, CollectiveOptions(pytorch=tuple(traces)), HOST)
    assert log is not None and log.skipped == {}
    share, total, collisions = scored(moe, list(log.spans))
    print(f"pytorch: {share:.4f} of {total} burst samples right ({collisions} collision)")
    assert total > 5_000 and collisions > 0
    assert share >= 0.99


def test_verbose_inspector_dumps_label_what_they_can_see(moe: Path) -> None:
    """NCCL 2.29's Inspector logs collectives only, and NCCL runs AllToAll as point-to-point
    tasks: EP and PP never reach its log. Of the burst samples under neither, at least 99%
    get the right class set."""
    directory = moe / "collectives" / "nccl-inspector"
    log = load(moe, CollectiveOptions(inspector=(directory,)), HOST)
    assert log is not None and log.unplaced == 0 and log.skipped == {}
    index = SpanIndex(list(log.spans))
    truth_spans = model_spans(profile_of(moe))
    right = total = reachable_right = reachable = 0
    for lo, hi, burst in rail_samples(moe):
        truth = truth_masks(truth_spans, lo[burst], hi[burst])
        label = index.masks(lo[burst], hi[burst]).astype(np.int64) & HERMOD
        right += int((truth == label).sum())
        total += truth.size
        seen = (truth & 3) == 0  # no EP or PP in flight: what a 2.29 log can label
        reachable += int(seen.sum())
        reachable_right += int((truth[seen] == label[seen]).sum())
    print(
        f"inspector verbose: {right / total:.4f} of {total} burst samples right; "
        f"{reachable_right / reachable:.4f} of the {reachable} under neither EP nor PP"
    )
    assert reachable_right / reachable >= 0.99


def test_plain_inspector_dumps_place_nothing(moe: Path) -> None:
    directory = moe / "collectives" / "nccl-inspector-plain"
    log = load(moe, CollectiveOptions(inspector=(directory,)), HOST)
    assert log is not None and log.spans == () and log.unplaced == log.records > 0
    assert all(f.sampled_share is not None and 0 < f.sampled_share <= 1 for f in log.figures)


def test_the_collision_tables_equal_the_ones_from_the_models_schedule(
    moe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = tuple(sorted((moe / "collectives" / "pytorch").glob("*.json")))
    from_records = analyze_paths(
        [moe], None, False, Thresholds(), None, CollectiveOptions(pytorch=traces)
    ).collectives[0]
    truth = CollectiveLog(tuple(model_spans(profile_of(moe))), (), 0, 0, {}, ("model",), 0)
    monkeypatch.setattr(report_collectives, "load", lambda *args: truth)
    monkeypatch.setattr(report_model, "load", lambda *args: truth)
    from_model = analyze_paths(
        [moe], None, False, Thresholds(), None, CollectiveOptions(pytorch=traces)
    ).collectives[0]
    print([(p.pair, p.saturated_ns, p.runs) for p in from_model.pairs])
    collided = {p.pair for p in from_model.pairs if p.saturated_ns > 0}
    assert collided == (
        {("PP", "DP")} if profile_of(moe) == "moe" else {("EP", "DP"), ("PP", "DP")}
    )
    # Equal runs and orders; times equal but for a sample at a run's edge, where a kernel's
    # recorded start (a few microseconds after the model's issue) falls in the next sample.
    for got, want in zip(from_records.pairs, from_model.pairs, strict=True):
        assert (got.pair, got.runs, got.in_order, got.out_of_order, got.ties) == (
            want.pair,
            want.runs,
            want.in_order,
            want.out_of_order,
            want.ties,
        )
        assert got.saturated_ns == pytest.approx(want.saturated_ns, rel=1e-3)
    for mapping, truth_row in zip(from_records.mappings, from_model.mappings, strict=True):
        assert mapping.mapping == truth_row.mapping
        for name in ("ordered_ns", "unresolved_ns", "inverted_ns", "indifferent_ns"):
            assert getattr(mapping, name) == pytest.approx(getattr(truth_row, name), rel=1e-3)


def test_every_labelled_sample_is_counted_once(moe: Path) -> None:
    """The class sets partition the labelled ports' samples: their totals are the ports'."""
    report = analyze_paths([moe], None, False, Thresholds(), None, CollectiveOptions())
    (collectives,) = report.collectives
    assert collectives.ports and all("mlx5_8" not in p for p in collectives.ports)
    summaries = [
        d.summary
        for p in report.ports
        if f"{p.device}/{p.port} transmit" in collectives.ports
        for d in p.directions
    ]
    labelled = collectives.labelled
    assert labelled.saturated_ns == collectives.saturated_ns
    assert labelled.saturated_ns == sum(s.saturated_ns for s in summaries) > 0
    assert labelled.hidden_saturated_ns == sum(s.hidden_saturated_ns for s in summaries) > 0
    assert labelled.bytes == sum(s.bytes_total for s in summaries)
    assert labelled.duration_ns == sum(s.covered_ns for s in summaries)


def test_report_prints_the_tables_for_the_simulated_node(
    moe: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run_cli([str(moe)], capsys)
    assert status == 0
    for title in ("by class", "by collective", "collisions", "two lossless priorities"):
        assert title in out


def test_the_clock_offset_is_estimated_from_kernel_start_to_burst_onset(moe: Path) -> None:
    """Records joined as written: the lag is the stack's launch-to-wire time, well under a
    sample. Records whose clock is 3 ms behind: the estimate grows by those 3 ms, and the
    configured offset that corrects them brings it back."""
    traces = tuple(sorted((moe / "collectives" / "pytorch").glob("*.json")))

    def estimate(offset_ns: int) -> int:
        options = CollectiveOptions(pytorch=traces, offset_ns=offset_ns)
        report = analyze_paths([moe], None, False, Thresholds(), None, options)
        lag = report.collectives[0].residual_offset_ns
        assert lag is not None
        return lag

    aligned = estimate(0)
    print(f"kernel start to burst onset: {aligned / 1e3:.0f} us")
    assert 0 <= aligned < 300_000
    behind = estimate(-3_000_000)
    assert abs(behind - aligned - 3_000_000) < 100_000
