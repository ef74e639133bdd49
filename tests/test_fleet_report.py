"""Many nodes' traces: the fleet view against a generator's ground truth, on Dask and here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstscope.cli import main
from burstscope.cluster import LOCAL_QUIET, Cluster, dask_cluster, map_in
from burstscope.collector.trace import PortColumns, TraceInfo, TraceWriter, read_info, read_samples
from burstscope.detectors.config import Thresholds
from burstscope.detectors.fleet import MillisecondRuns, fleet_synchrony
from burstscope.errors import UsageError
from burstscope.report_model import analyze_paths
from burstscope.report_view import to_json

RATE = 50_000_000_000  # bytes per second
MS = 1_000_000
START_NS = 1_704_067_200_000_000_000  # a multiple of 15 s
SECONDS = 4


def write_node(
    path: Path, host: str, bursts: list[tuple[int, int]], ports: int = 2, trickle: int = 50
) -> None:
    """``SECONDS`` of 1 ms samples: every port at line rate in each [start, stop) ms of
    ``bursts`` and at 1/``trickle`` of it otherwise (2%). Exact timestamps, so the saturated
    milliseconds are exactly the burst milliseconds (a sample ending at ms m+1 covers ms m)."""
    ticks = SECONDS * 1000 + 1
    level = np.full(ticks, RATE // 1000 // trickle, dtype=np.int64)
    for start, stop in bursts:
        level[start + 1 : stop + 1] = RATE // 1000
    level[0] = 0
    counter = (np.cumsum(level) + 10**12).astype(np.uint64)
    stamps = START_NS + np.arange(ticks, dtype=np.int64) * MS
    rebaseline = np.zeros(ticks, dtype=np.bool_)
    rebaseline[0] = True
    writer = TraceWriter(path, info=TraceInfo(MS, "test", host, clock_offset_ns=0))
    writer.append(
        [
            PortColumns(
                f"mlx5_{p}", 1, RATE, stamps, counter, counter, np.full(ticks, 2_000), rebaseline
            )
            for p in range(ports)
        ]
    )
    writer.close()


# Ground truth: the job's collective saturates every node in [300, 340) of each second;
# nodes a and b also share [600, 610); node c alone bursts in [800, 805).
SHARED = [(s * 1000 + 300, s * 1000 + 340) for s in range(SECONDS)]
FLEET = {
    "a": [*SHARED, (600, 610)],
    "b": [*SHARED, (600, 610)],
    "c": [*SHARED, (800, 805)],
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("fleet")
    paths = []
    for host, bursts in FLEET.items():
        path = root / host
        path.mkdir()
        write_node(path, host, sorted(bursts))
        paths.append(path)
    return paths


# A job's step each second on four rails of four nodes; s2's comes 5 ms late in seconds 1
# and 3, first bytes and last. Between steps the rails trickle at 0.5%, under the 1% of
# line rate that makes a sample part of a step.
LATE_MS = 5
STRAGGLER_FLEET = {
    host: [
        (s * 1000 + 300 + late, s * 1000 + 340 + late)
        for s, late in enumerate([0, LATE_MS if host == "s2" else 0] * (SECONDS // 2))
    ]
    for host in ("s0", "s1", "s2", "s3")
}


@pytest.fixture(scope="module")
def straggler_fleet(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("stragglers")
    paths = []
    for host, bursts in STRAGGLER_FLEET.items():
        path = root / host
        path.mkdir()
        write_node(path, host, bursts, ports=4, trickle=200)
        paths.append(path)
    return paths


def report_json(paths: list[Path], cluster: Cluster | None = None) -> str:
    report = analyze_paths(paths, None, False, Thresholds(), cluster)
    return json.dumps(to_json(report), indent=2)


def test_a_local_cluster_gives_the_same_report_and_the_ground_truth(
    fleet: list[Path], straggler_fleet: list[Path]
) -> None:
    here = report_json(fleet)
    stragglers_here = report_json(straggler_fleet)
    with dask_cluster(2, None) as cluster:
        assert cluster is not None
        workers = cluster.client.scheduler_info()["workers"]
        assert len(workers) == 2
        # Dask's default MALLOC_TRIM_THRESHOLD_ makes numpy map every large array afresh.
        trim = cluster.client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
        assert set(trim.values()) == {None}
        # Nor the statistical profiler, which took the GIL from the tasks every 10 ms.
        profiling = cluster.client.run(
            lambda dask_worker: "profile" in dask_worker.periodic_callbacks
        )
        assert set(profiling.values()) == {False}
        for key, value in LOCAL_QUIET.items():
            assert set(cluster.client.run(dask_config, key).values()) == {value}, key
        distributed = report_json(fleet, cluster)
        stragglers_distributed = report_json(straggler_fleet, cluster)
    assert distributed == here
    assert stragglers_distributed == stragglers_here
    assert_the_straggler_is_found(json.loads(stragglers_here)["fleet"]["stragglers"])
    # Two ports a node are no training rails: no steps, no group.
    assert json.loads(here)["fleet"]["stragglers"]["groups"] == []

    sync = json.loads(here)["fleet"]["synchrony"]
    shared_ms = 40 * SECONDS
    # Milliseconds by how many nodes were saturated: all three in the collective, two in
    # a and b's extra, one in c's own.
    assert sync["concurrent_nodes_ms"] == [sync["concurrent_nodes_ms"][0], 5, 10, shared_ms]
    assert sync["peak_concurrent_nodes"] == 3
    assert sync["pairs"][0]["nodes"] == ["a", "b"]
    assert sync["pairs"][0]["together_ms"] == shared_ms + 10
    nodes = {n["node"]: n for n in json.loads(here)["fleet"]["nodes"]}
    assert nodes["a"]["saturated_ms"] == shared_ms + 10
    assert nodes["a"]["with_others_ms"] == [0, 10, shared_ms]
    assert nodes["c"]["with_others_ms"] == [5, 0, shared_ms]
    assert nodes["c"]["shared_share"] == round(shared_ms / (shared_ms + 5), 6)
    assert nodes["a"]["clock_offset_ns"] == 0


def assert_the_straggler_is_found(stragglers: dict[str, object]) -> None:
    (group,) = stragglers["groups"]  # type: ignore[index]
    assert group["job"] is None and group["nodes"] == ["s0", "s1", "s2", "s3"]
    assert group["steps_judged"] == SECONDS
    standings = {s["node"]: s for s in group["standings"]}
    assert [standings[h]["straggler_steps"] for h in group["nodes"]] == [0, 0, SECONDS // 2, 0]
    assert standings["s2"]["score"] == 0.5
    assert abs(standings["s2"]["lag_ns"]["max"] - LATE_MS * MS) <= MS // 2
    assert abs(standings["s2"]["excess_ns"]["max"] - LATE_MS * MS) <= MS // 2
    steps = group["steps"]
    assert [round((s["onset_ns"] - START_NS) / 1e9) for s in steps] == [1, 3]
    assert all(s["slow_rail"] is None and s["nodes"] == 4 for s in steps)
    assert [[late["node"] for late in s["stragglers"]] for s in steps] == [["s2"], ["s2"]]
    assert all(abs(s["stragglers"][0]["lag_ns"] - LATE_MS * MS) <= MS // 2 for s in steps)


def test_the_stragglers_section_names_the_late_node_and_its_steps(
    straggler_fleet: list[Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["report", *map(str, straggler_fleet)]) == 0
    out = capsys.readouterr().out
    part = out[out.index("stragglers across nodes") :]
    assert part.startswith("stragglers across nodes: 4 steps judged on 4 nodes"), part
    row = next(line for line in part.splitlines() if line.startswith("│ s2 "))
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    assert cells[:4] == ["s2", "4", "2", "50.0%"], row
    assert "steps with a straggler or a slow rail: 2 of 4" in part, part
    assert "  2024-01-01 00:00:01.30" in part and "late s2 +5.0" in part, part


def sweep_truth(sets: list[set[int]]) -> tuple[list[int], list[list[int]]]:
    count = len(sets)
    concurrent = [0] * (count + 1)
    for ms in set().union(*sets):
        concurrent[sum(ms in s for s in sets)] += 1
    shared = [[0] * count for _ in sets]
    for index, mine in enumerate(sets):
        for ms in mine:
            shared[index][sum(ms in s for s in sets) - 1] += 1
    return concurrent, shared


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sets(st.integers(0, 60), max_size=40), min_size=1, max_size=5))
def test_fleet_synchrony_counts_match_a_direct_count(sets: list[set[int]]) -> None:
    runs = [MillisecondRuns.from_milliseconds(np.array(sorted(s), dtype=np.int64)) for s in sets]
    found = fleet_synchrony([str(i) for i in range(len(sets))], runs)
    concurrent, shared = sweep_truth(sets)
    assert list(found.concurrent_ms[1:]) == concurrent[1:]
    assert [list(row) for row in found.with_others_ms] == shared
    for a, b, together in found.pairs:
        assert together == len(sets[a] & sets[b])
    union = MillisecondRuns.union(runs)
    assert union.milliseconds == len(set().union(*sets))


@st.composite
def small_fleets(draw: st.DrawFn) -> list[list[tuple[int, int]]]:
    nodes = draw(st.integers(2, 4))
    fleet = []
    for _ in range(nodes):
        starts = draw(st.lists(st.integers(1, SECONDS * 1000 - 30), max_size=4, unique=True))
        fleet.append([(s, s + draw(st.integers(1, 25))) for s in sorted(starts)])
    return fleet


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(small_fleets())
def test_the_distributed_report_is_the_single_process_one_bit_for_bit(
    tmp_path: Path, shared_cluster: Cluster, fleet: list[list[tuple[int, int]]]
) -> None:
    root = tmp_path / f"fleet-{abs(hash(str(fleet)))}"
    paths = []
    for index, bursts in enumerate(fleet):
        path = root / f"node{index}"
        path.mkdir(parents=True)
        merged: list[tuple[int, int]] = []
        for start, stop in bursts:  # overlapping runs are one run
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(stop, merged[-1][1]))
            else:
                merged.append((start, stop))
        write_node(path, f"node{index}", merged, ports=1)
        paths.append(path)
    assert report_json(paths, shared_cluster) == report_json(paths)


@pytest.fixture(scope="module")
def shared_cluster() -> object:
    with dask_cluster(2, None) as cluster:
        yield cluster


def run_cli(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "burstscope", *words], capture_output=True, text=True, check=False
    )


def test_bad_cluster_flags_are_one_line_and_status_2(fleet: list[Path]) -> None:
    zero = run_cli("report", str(fleet[0]), "--workers", "0")
    unreachable = run_cli("report", str(fleet[0]), "--scheduler", "tcp://127.0.0.1:9")
    missing = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['distributed'] = None\n"
            "from burstscope.cli import main\n"
            f"sys.exit(main(['report', {str(fleet[0])!r}, '--workers', '2']))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    for result, words in (
        (zero, "--workers must be at least 1"),
        (unreachable, "cannot reach the Dask scheduler"),
        (missing, "burstscope[fleet]"),
    ):
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and words in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_a_bad_trace_on_the_cluster_is_one_line_and_status_2(
    fleet: list[Path], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp_ns,device,port,colour\n1,mlx5_0,1,red\n")
    result = run_cli("report", str(fleet[0]), str(bad), str(fleet[1]), "--workers", "2")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"burstscope report: error: {str(bad)!r}: unknown column 'colour' (expected "
        "timestamp_us or timestamp_ns, device, port, (xmit_units, rcv_units, unit_bytes) or "
        "(xmit_bytes, rcv_bytes), line_rate_bytes_per_second, rebaseline, read_ns)\n"
    )


def die(path: str) -> None:
    os._exit(9)  # as the kernel's OOM killer would end a worker


def test_a_worker_that_dies_is_named_in_one_error_not_a_hang() -> None:
    with dask_cluster(1, None) as cluster, pytest.raises(UsageError) as error:
        map_in(cluster, die, [("node-7",)])
    assert str(error.value) == (
        "local cluster of 1 worker: 4 workers died running die on 'node-7' "
        "(killed, or out of memory?)"
    )


def dask_config(key: str) -> object:
    import dask

    return dask.config.get(key)


def test_simulated_fleet_nodes_share_the_job_and_record_their_host(tmp_path: Path) -> None:
    paths = []
    for host in ("gpu-a", "gpu-b"):
        path = tmp_path / host
        assert main(["simulate", "--duration", "8", "--host", host, "-o", str(path)]) == 0
        paths.append(path)
    infos = [read_info(p) for p in paths]
    assert [i.host for i in infos] == ["gpu-a", "gpu-b"]
    assert all(i.clock_offset_ns is not None and abs(i.clock_offset_ns) <= 20_000 for i in infos)
    assert all(i.interval_ns == MS for i in infos)
    fleet = json.loads(report_json(paths))["fleet"]
    # One job: most of each node's saturated time is shared with the other node.
    assert all(n["saturated_ms"] > 0 and n["shared_share"] > 0.8 for n in fleet["nodes"])


def test_the_compact_trace_directory_reads_as_one_table(fleet: list[Path]) -> None:
    duckdb = pytest.importorskip("duckdb")
    path = fleet[0]
    table = pq.read_table(path)
    assert table.num_rows == 2 * (SECONDS * 1000 + 1)
    rows = duckdb.sql(
        f"select count(*), count(distinct device), max(timestamp_us) - min(timestamp_us) "
        f"from read_parquet('{path}/*.parquet')"
    ).fetchall()
    assert rows == [(table.num_rows, 2, SECONDS * 1000 * MS // 1_000)]  # in microseconds
    # Bytes are units x unit_bytes, in SQL as in burstscope's reader.
    received = duckdb.sql(
        f"select sum(rcv_units * unit_bytes) from read_parquet('{path}/*.parquet')"
    ).fetchall()[0][0]
    assert int(received) == sum(int(s.rcv_bytes.sum(dtype=object)) for s in read_samples(path))
    column = pq.ParquetFile(next(path.glob("part-*.parquet"))).metadata.row_group(0).column(0)
    assert "DELTA_BINARY_PACKED" in column.encodings


def test_the_fleet_table_says_its_saturated_time_is_a_sum_over_port_directions(
    fleet: list[Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["report", *map(str, fleet)]) == 0
    out = capsys.readouterr().out
    fleet_part = out[out.index("fleet: saturated milliseconds") :]
    header = [line for line in fleet_part.splitlines() if line.startswith("┃")]
    assert "saturated summed" in header[0] and "over port directions" in header[1], out
    # Node a: 170 ms saturated (40 ms a second for 4 s, and 10 ms), on 2 ports x 2
    # directions: the sum is 680 ms, more than any millisecond count could be.
    row = next(line for line in out.splitlines() if line.startswith("│ a "))
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    assert cells[2:4] == ["170.0 ms", "680.0 ms"], row


def test_the_fleet_figure_counts_nodes_in_whole_numbers_and_its_legend_covers_no_bar(
    fleet: list[Path],
) -> None:
    from burstscope.plot import fleet_figure

    report = analyze_paths(fleet, None, True, Thresholds(), None)
    assert report.fleet is not None
    figure = fleet_figure(report.fleet)
    left, right = figure.axes
    low, high = left.get_xlim()
    ticks = [t for t in left.get_xticks() if low <= t <= high]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    legends = [right.get_legend(), *figure.legends]
    boxes = [legend.get_window_extent(renderer) for legend in legends if legend is not None]
    assert boxes
    bars = [patch.get_window_extent(renderer) for patch in right.patches if patch.get_height()]
    assert bars and not any(box.overlaps(bar) for box in boxes for bar in bars)


def test_report_plot_says_where_it_wrote(fleet: list[Path], tmp_path: Path) -> None:
    target = tmp_path / "fleet.png"
    result = run_cli("report", *map(str, fleet), "--json", "--plot", str(target))
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)  # stdout stays JSON
    assert result.stderr.splitlines() == [
        f"burstscope report: wrote {target}",
        f"burstscope report: wrote {tmp_path / 'fleet-fleet.png'}",
    ], result.stderr


def test_the_events_table_shows_brackets_in_names_as_text() -> None:
    from rich.console import Console

    from burstscope.collector.mqtt.messages import port_topic
    from burstscope.fleet_events import FleetView, render

    view = FleetView()
    topic = port_topic("h[1]", "mlx5_[bold]0", 1, "burst")
    body = '{"host":"h[red]1","device":"mlx5_[bold]0","port":1,"kind":"burst","run":1,"seq":1}'
    view.handle(topic, body.encode())
    console = Console(width=200, record=True, color_system=None, force_terminal=False)
    console.print(render(view, "mqtt://[::1]:1883"))
    text = console.export_text()
    assert "h[red]1" in text and "mlx5_[bold]0/1" in text, text


def test_the_fleet_table_never_cuts_a_node_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = []
    for host in ("node-[gpu]-0001.cluster.example", "b"):
        path = tmp_path / host.split(".")[0]
        path.mkdir()
        write_node(path, host, sorted(FLEET["a"]))
        paths.append(path)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["report", *map(str, paths)]) == 0
    out = capsys.readouterr().out
    assert "│ node-[gpu]-0001.cluster.example │" in out, out
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80, out
    assert "not shown at 80 columns: clock offset" in out, out
