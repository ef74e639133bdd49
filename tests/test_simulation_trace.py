"""``burstscope simulate``: the trace it writes, the Acme picture on idle-heavy, and bad input."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from burstscope.cli import main
from burstscope.collector.simulation.congestion import XMIT_WAIT_PER_MS
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import SECOND
from burstscope.collector.trace import read_slow
from burstscope.collector.tracegen import CHUNK_TICKS, FIXED_EPOCH_NS, sample_times

WINDOW_NS = 15 * SECOND


def load(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """Per device: timestamp_ns (the stored microseconds in ns), xmit_bytes, rcv_bytes, read_ns,
    line rate, rebaseline."""
    table = pq.read_table(path)
    device = table.column("device").unify_dictionaries()
    names = device.chunks[0].dictionary.to_pylist()
    codes = np.concatenate([c.indices.to_numpy() for c in device.chunks]).astype(np.int8)
    # Pieces are in time order and sorted inside, so a stable sort by device keeps time order.
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    columns = {n: table.column(n).to_numpy()[order] for n in table.column_names if n != "device"}
    columns["timestamp_ns"] = columns.pop("timestamp_us").astype(np.int64) * 1_000
    # The simulated ports are read through counters/port_*_data: 4-octet words, stored so.
    unit = columns.pop("unit_bytes")
    assert (unit == 4).all()
    columns["xmit_bytes"] = columns.pop("xmit_units") * np.uint64(4)
    columns["rcv_bytes"] = columns.pop("rcv_units") * np.uint64(4)
    out: dict[str, dict[str, np.ndarray]] = {}
    for code, name in enumerate(names):
        mine = slice(bounds[code], bounds[code + 1])
        out[str(name)] = {column: values[mine] for column, values in columns.items()}
    return out


def simulate(tmp_path: Path, *args: str) -> Path:
    tmp_path.mkdir(exist_ok=True)
    output = tmp_path / "trace"
    assert main(["simulate", *args, "-o", str(output)]) == 0
    return output


def test_trace_is_deterministic_and_reads_back_as_the_model(tmp_path: Path) -> None:
    first = simulate(tmp_path / "a", "--duration", "12", "--seed", "3")
    second = simulate(tmp_path / "b", "--duration", "12", "--seed", "3")
    assert pq.read_table(first).equals(pq.read_table(second))
    ports = load(first)
    assert sorted(ports) == [f"mlx5_{i}" for i in range(9)]
    model = TrafficModel("moe", 3)
    # The exact read midpoints (model time), as the generator drew them for seed 3.
    ticks = 12_001
    chunks = [min(CHUNK_TICKS, ticks - first) for first in range(0, ticks, CHUNK_TICKS)]
    exact = np.concatenate(
        [sample_times(c, n, 1_000_000, 9, 3).midpoint_ns for c, n in enumerate(chunks)], axis=1
    )
    for index, spec in enumerate(model.ports):
        rows = ports[spec.device]
        assert len(rows["timestamp_ns"]) == 12_001
        assert rows["rebaseline"][0] and not rows["rebaseline"][1:].any()
        assert set(rows["line_rate_bytes_per_second"]) == {spec.line_rate_bytes_per_second}
        # Reads of 1 to 3 us, stored rounded up to a whole microsecond.
        assert set(np.unique(rows["read_ns"])) <= {1_000, 2_000, 3_000}
        # The trace keeps each read's midpoint to the nearest microsecond.
        model_time = exact[index]
        assert np.array_equal(
            rows["timestamp_ns"], (model_time + 500) // 1_000 * 1_000 + FIXED_EPOCH_NS
        )
        # Ticks every 1 ms, each a few microseconds late, never early.
        lateness = model_time - np.arange(len(model_time)) * 1_000_000
        assert (lateness > 0).all() and lateness.max() < 100_000
        xmit, rcv = model.counters_at(model_time)
        assert np.array_equal(rows["xmit_bytes"].astype(np.int64), xmit[index] // 4 * 4)
        assert np.array_equal(rows["rcv_bytes"].astype(np.int64), rcv[index] // 4 * 4)
    # The slow counters, polled at the first tick of every second: deterministic too, and
    # rising exactly with the saturated milliseconds of the samples.
    assert pq.read_table(first / "_slow").equals(pq.read_table(second / "_slow"))
    slow = {(s.device, s.name): s for s in read_slow(first)}
    wait = slow[("mlx5_0", "port_xmit_wait")]
    seconds = (wait.timestamp_ns - FIXED_EPOCH_NS) // SECOND
    assert seconds.tolist() == list(range(13)) and wait.rebaseline.tolist() == [True] + [False] * 12
    rows = ports["mlx5_0"]
    stamps = exact[0] + FIXED_EPOCH_NS  # the congestion counters rise with the true time
    utilization = np.diff(rows["xmit_bytes"].astype(np.int64)) / (
        model.ports[0].bytes_per_ns * np.diff(stamps)
    )
    for poll, value in zip(wait.timestamp_ns, wait.value, strict=True):
        saturated_ms = np.count_nonzero((utilization >= 0.9) & (stamps[1:] <= poll))
        assert int(value) == int(saturated_ms * XMIT_WAIT_PER_MS)
    assert slow[("mlx5_0", "state")].spec is None


def window_utilization(rows: dict[str, np.ndarray], line: int) -> np.ndarray:
    """Each port direction's mean over wall-clock-aligned 15 s windows, as a scrape sees it."""
    stamps = rows["timestamp_ns"].astype(np.int64)
    edges = np.arange(stamps[0] // WINDOW_NS * WINDOW_NS + WINDOW_NS, stamps[-1], WINDOW_NS)
    # The last sample at or before each edge stands for the counter at the edge.
    at = np.searchsorted(stamps, edges, side="right") - 1
    result = []
    for name in ("xmit_bytes", "rcv_bytes"):
        values = rows[name].astype(np.int64)[at]
        result.append(np.diff(values) / (np.diff(stamps[at]) / 1e9 * line))
    return np.concatenate(result)


def test_idle_heavy_looks_like_acme_at_15_s_and_saturates_at_1_ms(tmp_path: Path) -> None:
    trace = simulate(tmp_path, "--profile", "idle-heavy", "--duration", "900", "--seed", "0")
    ports = load(trace)
    windows = []
    peak = 0.0
    for index in range(8):
        rows = ports[f"mlx5_{index}"]
        line = int(rows["line_rate_bytes_per_second"][0])
        windows.append(window_utilization(rows, line))
        seconds = np.diff(rows["timestamp_ns"].astype(np.int64)) / 1e9
        for name in ("xmit_bytes", "rcv_bytes"):
            per_ms = np.diff(rows[name].astype(np.int64)) / seconds / line
            peak = max(peak, float(per_ms.max()))
    utilization = np.concatenate(windows)
    assert len(utilization) >= 8 * 2 * 58
    assert (utilization < 0.01).mean() > 0.60
    assert (utilization > 0.25).mean() < 0.10
    assert peak >= 0.95


def test_idle_heavy_stays_acme_like_over_hours() -> None:
    model = TrafficModel("idle-heavy", 1)
    edges = np.arange(0, 6 * 3600 * SECOND + 1, WINDOW_NS)
    xmit, rcv = model.counters_at(edges)
    utilization = np.concatenate([np.diff(xmit[:8]), np.diff(rcv[:8])]) / (50 * WINDOW_NS)
    assert (utilization < 0.01).mean() > 0.60
    assert (utilization > 0.25).mean() < 0.10


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(["simulate", *args])
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--profile", "sparse", "--duration", "1"), "unknown profile 'sparse'"),
        (("--duration", "-5"), "--duration -5 must be a positive"),
        (("--duration", "0"), "--duration 0 must be a positive"),
        (("--duration", "nan"), "--duration nan must be a positive"),
        (("--duration", "1", "--interval", "3 parsecs"), "not a duration"),
        (("--duration", "1", "--start", "yesterday"), "--start 'yesterday'"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    status, err = run_cli(capsys, *args, "-o", str(tmp_path / "out"))
    assert status == 2
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_unwritable_or_occupied_output_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "x").write_text("")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    # A missing parent is made (test_cli_core); one that is a file cannot be.
    cases = [
        (a_file / "trace", "cannot write output"),
        (occupied, "not empty"),
    ]
    if os.geteuid() != 0:  # root writes anywhere
        cases.append((locked / "trace", "cannot write output"))
    for path, message in cases:
        status, err = run_cli(capsys, "--duration", "1", "-o", str(path))
        assert status == 2 and err.count("\n") == 1 and message in err, err


def test_needs_exactly_one_output_and_a_duration_for_a_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = run_cli(capsys, "--duration", "1")
    assert status == 2 and "exactly one of" in err
    status, err = run_cli(capsys, "-o", str(tmp_path / "t"), "--sysfs", str(tmp_path / "s"))
    assert status == 2 and "exactly one of" in err
    status, err = run_cli(capsys, "-o", str(tmp_path / "t"))
    assert status == 2 and "needs --duration" in err
