"""``burstscope export --chrome-trace``: Chrome trace events alone or merged into a PyTorch trace.

The golden (tests/fixtures/export/chrome-trace.golden.json, from a simulated trace: pytest
--update-golden) holds the whole output of a small window. The merge is read back three
ways: byte for byte against the original, by collector/collectives/pytorch_trace.py (the same
collectives at the same Unix times), and by a reader nobody here wrote, Meta's Holistic Trace
Analysis (PyPI holistictraceanalysis, in .venv-hta: `make test` creates it).
"""

from __future__ import annotations

import json
import os
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from burstscope.chrome_trace import microseconds
from burstscope.cli import main
from burstscope.collector.collectives.pytorch_trace import read_trace
from burstscope.detectors.config import DIRECTIONS, Thresholds
from burstscope.report_model import analyze_paths
from tests.conftest import FIXTURES, compare_golden, integration_unavailable

REPOSITORY = Path(__file__).resolve().parent.parent
PYTORCH_TRACE = FIXTURES / "collectives" / "pytorch-trace.json"
HTA_PYTHON = REPOSITORY / ".venv-hta" / "bin" / "python"
# The fixture's first event: baseTimeNanoseconds + ts 5933796001000.000 us.
FIXTURE_FIRST_NS = 1_781_012_346_001_000_000
HOST = "node-a"


def burstscope(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def simulate(
    capsys: pytest.CaptureFixture[str], path: Path, seconds: float, start: str = "fixed"
) -> Path:
    status, _, err = burstscope(
        capsys, "simulate", "-o", str(path), "--duration", str(seconds), "--host", HOST,
        "--start", start,
    )  # fmt: skip
    assert status == 0, err
    return path


def events_of(path: Path) -> list[dict[str, Any]]:
    document = json.loads(path.read_text(), parse_float=Decimal)
    events: list[dict[str, Any]] = document["traceEvents"]
    return events


def test_export_matches_golden(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, update_golden: bool
) -> None:
    """A 0.2 s window holding a 1 Hz congestion reading, two ports (one busy, one slower)."""
    trace = simulate(capsys, tmp_path / "trace", 1.2)
    out = tmp_path / "out.json"
    status, printed, err = burstscope(
        capsys, "export", str(trace), "--chrome-trace", str(out), "--start", "0.95",
        "--duration", "0.2", "--include", "^mlx5_[08]$",
    )  # fmt: skip
    assert (status, err) == (0, "")
    assert printed.startswith(f"wrote {out}: 2 ports, ")
    compare_golden(FIXTURES / "export" / "chrome-trace.golden.json", out.read_text(), update_golden)


def test_bursts_are_the_reports_and_counters_hold_their_bound(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The whole trace: one slice per burst the report counts, per port and direction, and
    at most one utilization event per direction and millisecond, about 100 bytes each (the
    bound docs/collectives.md states)."""
    trace = simulate(capsys, tmp_path / "trace", 0.5)
    out = tmp_path / "out.json"
    assert burstscope(capsys, "export", str(trace), "--chrome-trace", str(out))[0] == 0
    events = events_of(out)
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    slices: dict[str, int] = {}
    for event in events:
        if event["ph"] == "X":
            assert event["cat"] == "burstscope" and event["name"] == "burst"
            slices[threads[event["tid"]]] = slices.get(threads[event["tid"]], 0) + 1
    report = analyze_paths([trace], None, False, Thresholds())
    expected = {
        f"{port.label} {direction.direction}": direction.summary.bursts.count
        for port in report.ports
        for direction in port.directions
        if direction.summary.bursts.count
    }
    assert slices == expected and sum(expected.values()) > 10
    counters = [e for e in events if e["ph"] == "C" and "utilization" in e["args"]]
    assert len(counters) <= 9 * len(DIRECTIONS) * 500
    size = sum(len(json.dumps(e, separators=(",", ":"), default=str)) + 2 for e in counters)
    assert size / len(counters) < 100


def test_merge_keeps_every_byte_and_takes_the_traces_clock(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = simulate(capsys, tmp_path / "trace", 0.2, start=str(FIXTURE_FIRST_NS // 10**9))
    out = tmp_path / "merged.json"
    status, printed, err = burstscope(
        capsys, "export", str(trace), "--chrome-trace", str(out), "--merge", str(PYTORCH_TRACE),
        "--start", "0", "--duration", "0.1",
    )  # fmt: skip
    assert (status, err) == (0, "")
    assert "(pid 4243, its time base)" in printed
    original, merged = PYTORCH_TRACE.read_text(), out.read_text()
    close = original.rindex("]")
    # Every byte of the original, ours inserted before the list's closing bracket.
    assert merged.startswith(original[:close]) and merged.endswith(original[close:])
    assert read_trace(out) == read_trace(PYTORCH_TRACE)
    ours = [e for e in events_of(out) if e.get("pid") == 4243]
    base = json.loads(original)["baseTimeNanoseconds"]
    first_sample = int(
        next(e for e in ours if e["ph"] == "C")["ts"] * 1000 + base
    )  # the window's start: the first sample, on the trace's clock
    assert FIXTURE_FIRST_NS - 10**9 <= first_sample < FIXTURE_FIRST_NS
    assert {e["name"] for e in ours if e["ph"] == "M"} == {"process_name", "thread_name"}
    assert ours[0]["args"]["name"] == f"burstscope {HOST}"
    # "microseconds.nanoseconds", as Kineto writes ts.
    ts_texts = [line for line in merged[close:].splitlines() if '"pid":4243,"ts":' in line]
    assert ts_texts and all('.000,"args"' in line for line in ts_texts[:5])


def test_merge_defaults_to_the_traces_extent(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = simulate(capsys, tmp_path / "trace", 0.2, start=str(FIXTURE_FIRST_NS // 10**9))
    out = tmp_path / "merged.json"
    assert burstscope(
        capsys, "export", str(trace), "--chrome-trace", str(out), "--merge", str(PYTORCH_TRACE)
    )[0] == 0  # fmt: skip
    base = json.loads(PYTORCH_TRACE.read_text())["baseTimeNanoseconds"]
    times = [int(e["ts"] * 1000) + base for e in events_of(out) if e.get("ph") == "C"]
    # The fixture's events span 6.5 ms from its first; the counters cover the same.
    assert times and min(times) == FIXTURE_FIRST_NS
    assert max(times) < FIXTURE_FIRST_NS + 6_500_000


def test_merge_into_a_trace_of_absolute_times(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Kineto before April 2024 wrote Unix microseconds; a plain list of events is the
    format's other form."""
    trace = simulate(capsys, tmp_path / "trace", 0.1, start=str(FIXTURE_FIRST_NS // 10**9))
    older = tmp_path / "older.json"
    first_us = FIXTURE_FIRST_NS // 1000
    older.write_text(
        f'[{{"ph":"X","cat":"kernel","name":"k","pid":7,"tid":1,"ts":{first_us},"dur":20000}}]'
    )
    out = tmp_path / "merged.json"
    assert burstscope(capsys, "export", str(trace), "--chrome-trace", str(out), "--merge",
                      str(older))[0] == 0  # fmt: skip
    merged = json.loads(out.read_text(), parse_float=Decimal)
    assert merged[0] == json.loads(older.read_text())[0]
    counters = [e for e in merged if e["ph"] == "C"]
    assert {e["pid"] for e in merged[1:]} == {8}
    assert min(e["ts"] for e in counters) == Decimal(microseconds(FIXTURE_FIRST_NS, 0))


def test_a_window_past_the_end_writes_a_trace_and_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    trace = simulate(capsys, tmp_path / "trace", 0.05)
    out = tmp_path / "out.json"
    status, _, err = burstscope(
        capsys, "export", str(trace), "--chrome-trace", str(out), "--start", "100"
    )
    assert status == 0 and err == "burstscope export: note: no sample fell in the window\n"
    assert {e["ph"] for e in events_of(out)} == {"M"}


def _bad_merge(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "bad.json"
    texts = {
        "missing": None,
        "not json": "this is not a trace",
        "truncated": PYTORCH_TRACE.read_text()[:2000],
        "no event list": '{"schemaVersion": 1}',
        "no time base": '{"traceEvents": [{"ph": "X", "name": "k", "ts": 12.5, "dur": 1}]}',
    }
    text = texts[name]
    if text is not None:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("missing", "cannot be read"),
        ("not json", "not JSON"),
        ("truncated", "not JSON"),
        ("no event list", "no traceEvents list"),
        ("no time base", "no baseTimeNanoseconds"),
    ],
)
def test_bad_merge_trace_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, says: str
) -> None:
    trace = simulate(capsys, tmp_path / "trace", 0.05)
    out = tmp_path / "out.json"
    status, printed, err = burstscope(
        capsys, "export", str(trace), "--chrome-trace", str(out), "--merge",
        str(_bad_merge(tmp_path, name)),
    )  # fmt: skip
    assert status == 2 and printed == ""
    assert err.count("\n") == 1 and err.startswith("burstscope export: error: ") and says in err
    assert not out.exists() and list(tmp_path.glob(".out.json*")) == []


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--start", "-1"], "--start -1 must be a non-negative number of seconds"),
        (["--duration", "0"], "--duration 0 must be a positive number of seconds"),
        (["--include", "("], "--include '(' is not a valid regular expression"),
        (["--include", "^nothing$"], "no device matches --include"),
        (["--line-rate", "0"], "--line-rate must be positive"),
    ],
)
def test_bad_flags_are_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, arguments: list[str], says: str
) -> None:
    trace = simulate(capsys, tmp_path / "trace", 0.05)
    out = tmp_path / "out.json"
    status, printed, err = burstscope(
        capsys, "export", str(trace), "--chrome-trace", str(out), *arguments
    )
    assert status == 2 and printed == ""
    assert err.count("\n") == 1 and says in err, err
    assert not out.exists()


def test_bad_trace_and_output_are_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    trace = simulate(capsys, tmp_path / "trace", 0.05)
    for arguments, says in [
        ([str(tmp_path / "absent"), "--chrome-trace", str(tmp_path / "o.json")], "no such file"),
        ([str(empty), "--chrome-trace", str(tmp_path / "o.json")], "holds no part-*.parquet"),
        ([str(trace), "--chrome-trace", str(tmp_path / "no" / "o.json")], "cannot write"),
    ]:
        status, printed, err = burstscope(capsys, "export", *arguments)
        assert status == 2 and printed == ""
        assert err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "o.json").exists()


def _kineto_trace(first_ns: int) -> dict[str, Any]:
    """A rank's trace as torch.profiler writes it (pytorch/kineto output_json.cpp): two
    profiler steps, and every 20 ms an all-to-all: its record_param_comms op, the launch
    and the NCCL kernel, linked by correlation and External id."""
    base = first_ns - 5 * 10**9

    def ts(unix_ns: int) -> float:
        return float(microseconds(unix_ns, base))

    cpu, gpu = {"pid": 4242, "tid": 4242}, {"pid": 0, "tid": 7}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "ts": ts(first_ns), **cpu, "args": {"name": "python"}},
        {"name": "process_name", "ph": "M", "ts": ts(first_ns), **gpu, "args": {"name": "python"}},
    ]
    for step in range(2):
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{step}", **cpu,
             "ts": ts(first_ns + step * 100_000_000), "dur": 100_000.0,
             "args": {"External id": 1 + step}}
        )  # fmt: skip
    for index in range(10):
        start = first_ns + index * 20_000_000 + 1_000
        ids = {"External id": 100 + index, "correlation": 900 + index}
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", **cpu, "ts": ts(start),
             "dur": 40.0, "args": {"External id": 100 + index, "Collective name": "all_to_all",
                                   "Process Group Name": "1", "Group size": 8}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", **cpu,
             "ts": ts(start + 10_000), "dur": 6.0, "args": ids},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevKernelArgs)",
             **gpu, "ts": ts(start + 30_000), "dur": 5_000.0,
             "args": {**ids, "device": 0, "stream": 7}},
        ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
        "baseTimeNanoseconds": base,
        "traceEvents": events,
        "displayTimeUnit": "ms",
    }


# Run in .venv-hta. HTA's DataFrame (hta.common.trace_parser._compress_df) keeps only events
# with a duration and a category, so counter events are read with HTA's raw reader
# (hta.common.trace_file.read_trace) and put on the Unix clock by HTA's own conversion.
_HTA_SCRIPT = """
import json, sys
from hta.common.trace import trace_event_timestamp_to_unixtime_ns as unix_ns
from hta.common.trace_file import read_trace
from hta.trace_analysis import TraceAnalysis

folder, pid = sys.argv[1], int(sys.argv[2])
trace = TraceAnalysis(trace_dir=folder, include_last_profiler_step=True).t
(rank, frame), = trace.traces.items()
meta, names = trace.meta_data[rank], trace.symbol_table.get_sym_table()
def rows(selected):
    return [
        {"name": names[row.name], "cat": names[row.cat], "pid": int(row.pid),
         "tid": int(row.tid), "unix_ns": unix_ns(row.ts + trace.min_ts, meta), "dur": row.dur}
        for row in selected.itertuples()
    ]
raw = read_trace(trace.trace_files[rank])["traceEvents"]
print(json.dumps({
    "rank": rank,
    "ours": rows(frame[frame.pid == pid]),
    "kernels": rows(frame[frame.stream >= 0]),
    "counters": [
        [event["name"], sorted(event["args"]), unix_ns(event["ts"], meta)]
        for event in raw if event.get("ph") == "C" and event.get("pid") == pid
    ],
}))
"""


def test_holistic_trace_analysis_reads_the_merged_trace(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if not HTA_PYTHON.exists():
        integration_unavailable(
            f"{HTA_PYTHON} missing: `make test` creates it (PyPI holistictraceanalysis)"
        )
    first_ns = 1_704_067_200_000_000_000
    trace = simulate(capsys, tmp_path / "trace", 0.2, start=str(first_ns // 10**9))
    rank = tmp_path / "rank.json"
    rank.write_text(json.dumps(_kineto_trace(first_ns)))
    folder = tmp_path / "hta"
    folder.mkdir()
    out = folder / "rank0.pt.trace.json"
    status, _, err = burstscope(
        capsys, "export", str(trace), "--chrome-trace", str(out), "--merge", str(rank)
    )
    assert (status, err) == (0, "")
    pid = 4243
    ours = events_of(out)
    bursts = [e for e in ours if e.get("pid") == pid and e["ph"] == "X"]
    base = _kineto_trace(first_ns)["baseTimeNanoseconds"]
    counter_names = {e["name"] for e in ours if e.get("pid") == pid and e["ph"] == "C"}
    assert len(bursts) > 5 and len(counter_names) == 9 * 2
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [str(HTA_PYTHON), "-c", _HTA_SCRIPT, str(folder), str(pid)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=environment,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["rank"] == 0
    # Our burst slices, where the detectors put them on the Unix clock (HTA rounds a
    # float ts up to the microsecond and computes in float: within 1 us).
    got = sorted((row["unix_ns"], row["tid"]) for row in seen["ours"])
    want = sorted((int(e["ts"] * 1000) + base, e["tid"]) for e in bursts)
    assert [row["name"] for row in seen["ours"]] == ["burst"] * len(bursts)
    assert {row["cat"] for row in seen["ours"]} == {"burstscope"}
    assert [tid for _, tid in got] == [tid for _, tid in want]
    assert all(abs(a - b) <= 1000 for (a, _), (b, _) in zip(got, want, strict=True))
    # The kernels where the rank's trace had them.
    kernels = sorted(row["unix_ns"] for row in seen["kernels"])
    assert kernels == [first_ns + index * 20_000_000 + 31_000 for index in range(10)]
    # The counter tracks, by name and series, on the same clock as the samples.
    tracks = {(name, tuple(args)) for name, args, _ in seen["counters"]}
    assert {name for name, _ in tracks} == counter_names
    assert {args for _, args in tracks} == {("utilization",)}
    assert min(time for _, _, time in seen["counters"]) == first_ns
