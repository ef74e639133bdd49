"""``burstscope report`` end to end: goldens for Parquet and CSV, the table, the plot, bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from burstscope.cli import main
from burstscope.collector.trace import PortColumns, TraceInfo, TraceWriter, read_info, read_samples
from tests.conftest import compare_golden
from tests.test_top_view import run_in_tmux

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path("tests/fixtures/report")  # relative: the golden names sources as given
HEADER = "timestamp_ns,device,port,xmit_bytes,rcv_bytes"


@pytest.fixture(autouse=True)
def in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    # A wide console, so that the tests of what a line says read it whole; the tests of
    # width set their own (or run in tmux).
    monkeypatch.setenv("COLUMNS", "200")


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["report", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_parquet_trace_matches_golden(
    capsys: pytest.CaptureFixture[str], update_golden: bool
) -> None:
    status, out, err = report(capsys, str(FIXTURES / "trace"), "--json")
    assert status == 0, err
    compare_golden(REPO / FIXTURES / "trace.golden.json", out, update_golden)
    document = json.loads(out)
    by_port = {(p["device"], p["direction"]): p for p in document["ports"]}
    transmit = by_port[("mlx5_0", "transmit")]
    assert list(transmit["scales"]) == ["0.001", "0.01", "0.1", "1", "15"]
    assert transmit["scales"]["0.001"]["max"] == 1.0
    assert transmit["scales"]["15"]["max"] < 0.25
    assert transmit["hidden"]["saturated_seconds_in_quiet_windows"] > 1.0
    assert transmit["bursts"]["duration_seconds"]["p50"] == pytest.approx(0.04, rel=0.03)
    assert "saturated inside windows that look under 25%" in transmit["verdict"]
    # The reset at 7 s is a warning, and the numbers around it stay right.
    reset = by_port[("mlx5_1", "receive")]
    assert reset["resets"] == 1 and "1 counter reset" in reset["warnings"][0]
    assert reset["scales"]["0.001"]["max"] <= 1.0
    assert reset["mean_utilization"] == pytest.approx(0.98, abs=0.002)
    assert "saturated throughout" in reset["verdict"]
    assert by_port[("mlx5_0", "receive")]["verdict"].endswith("quiet, no 1-ms sample above 50%")
    assert by_port[("mlx5_0", "transmit")]["gaps"] == 1
    synchrony = {s["direction"]: s for s in document["synchrony"]}
    assert synchrony["transmit"]["node"] > 0.9
    # Congestion beside bursts, from the slow counters under trace/_slow (generate.py).
    assert transmit["congestion"] == {
        "port_xmit_wait": {  # all but the interval the gap emptied of bursts
            "increments": 31000,
            "during_saturation": 30000,
            "share": round(30 / 31, 6),
            "unknown_intervals": 1,
        },
        "rp_cnp_handled": {  # the reset at 20.5 s: that interval is unknown, not negative
            "increments": 150,
            "during_saturation": 145,
            "share": round(145 / 150, 6),
            "unknown_intervals": 2,
        },
        "rx_prio3_pause": {
            "increments": 0,
            "during_saturation": 0,
            "share": None,
            "unknown_intervals": 1,
        },
    }
    assert by_port[("mlx5_0", "receive")]["congestion"]["np_cnp_sent"]["share"] == 0.0
    assert (
        by_port[("mlx5_1", "receive")]["congestion"]["np_ecn_marked_roce_packets"]["share"] == 1.0
    )
    assert by_port[("mlx5_1", "transmit")]["congestion"] == {}  # no counters; state is a gauge


def test_csv_matches_golden(capsys: pytest.CaptureFixture[str], update_golden: bool) -> None:
    status, out, err = report(capsys, str(FIXTURES / "small.csv"), "--json", "--line-rate", "100")
    assert status == 0, err
    compare_golden(REPO / FIXTURES / "small.golden.json", out, update_golden)
    ports = json.loads(out)["ports"]
    assert {p["line_rate_bytes_per_second"] for p in ports} == {12_500_000_000}


def test_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = report(capsys, str(FIXTURES / "trace"))
    assert status == 0
    assert "15-s mean" in out and "1-ms p99" in out
    assert "mlx5_0/1 tx: 15-s average 5.9%, 1-ms peak 100%: 1.2 s saturated" in out
    assert "warning: 1 counter reset" in out and "rail synchrony (transmit" in out


def test_plot_matches_the_golden_figure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, update_golden: bool
) -> None:
    """The figure compared as a picture: RMS pixel difference within a tolerance, so a
    different freetype or matplotlib patch release does not fail it, a changed plot does."""
    from matplotlib.testing.compare import compare_images

    target = tmp_path / "report.png"
    status, _, err = report(capsys, str(FIXTURES / "trace"), "--json", "--plot", str(target))
    assert status == 0, err
    data = target.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    golden = FIXTURES / "plot.golden.png"
    if update_golden:
        shutil.copyfile(target, golden)
    assert compare_images(str(golden), str(target), tol=8) is None


def test_plot_is_150_dpi_png_or_vector_by_extension(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from PIL import Image

    png = tmp_path / "run.png"
    assert report(capsys, str(FIXTURES / "trace"), "--plot", str(png))[0] == 0
    assert round(Image.open(png).info["dpi"][0]) == 150
    svg, pdf = tmp_path / "run.svg", tmp_path / "run.pdf"
    assert report(capsys, str(FIXTURES / "trace"), "--plot", str(svg))[0] == 0
    assert report(capsys, str(FIXTURES / "trace"), "--plot", str(pdf))[0] == 0
    assert b"<svg" in svg.read_bytes()[:1000] and pdf.read_bytes().startswith(b"%PDF")
    status, out, err = report(capsys, str(FIXTURES / "trace"), "--plot", str(tmp_path / "x.jpg"))
    assert status == 2 and out == ""
    assert "the extension names the format: .png, .svg, .pdf" in err


def test_plot_without_matplotlib_fails_before_any_output(tmp_path: Path) -> None:
    """The extra is optional: say so at once instead of after the whole analysis."""
    hide = "import sys; sys.modules['matplotlib'] = None\nfrom burstscope.cli import main\n"
    result = subprocess.run(
        [sys.executable, "-c", hide + "sys.exit(main(sys.argv[1:]))", "report",
         str(FIXTURES / "trace"), "--plot", str(tmp_path / "run.png")],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "burstscope report: error: --plot needs matplotlib: pip install 'burstscope[plot]' "
        "(or matplotlib)\n"
    )


def test_busy_fraction_names_its_threshold(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = report(capsys, str(FIXTURES / "trace"), "--json", "--busy", "0.5")
    assert status == 0, err
    for port in json.loads(out)["ports"]:
        assert port["thresholds"]["busy"] == 0.5
        for figures in port["scales"].values():
            assert "fraction_busy" in figures and "fraction_above_25pct" not in figures


def test_single_parquet_piece_is_a_trace(capsys: pytest.CaptureFixture[str]) -> None:
    piece = FIXTURES / "trace" / "part-000000.parquet"
    status, out, err = report(capsys, str(piece), "--json")
    assert status == 0, err
    assert json.loads(out)["ports"][0]["duration_seconds"] < 12


def bad(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


ROW = "1700000000000000000,mlx5_0,1,100,200"
ROW2 = "1700000000001000000,mlx5_0,1,1100,1200"
UNIT_HEADER = "timestamp_ns,device,port,xmit_units,rcv_units,unit_bytes"
UNIT_ROW = "1700000000000000000,mlx5_0,1,25,50,4"


@pytest.mark.parametrize(
    ("name", "text", "extra", "problem"),
    [
        ("unknown.csv", f"{HEADER},colour\n{ROW},red\n", [], "unknown column 'colour'"),
        (
            "missing.csv",
            "timestamp_ns,device,port,xmit_bytes\n1,mlx5_0,1,5\n",
            [],
            "missing column 'rcv_bytes'",
        ),
        (
            "notime.csv",
            "device,port,xmit_bytes,rcv_bytes\nmlx5_0,1,5,5\n",
            [],
            "missing column 'timestamp_us' ('timestamp_ns' in older traces)",
        ),
        (
            "twotimes.csv",
            f"timestamp_us,{HEADER}\n1700000000000000,{ROW}\n",
            [],
            "both 'timestamp_us' and 'timestamp_ns': one time column only",
        ),
        (
            "backwards.csv",
            f"{HEADER}\n{ROW2}\n{ROW}\n",
            ["--line-rate", "100"],
            "timestamps go backwards for mlx5_0 port 1",
        ),
        (
            "norate.csv",
            f"{HEADER}\n{ROW}\n{ROW2}\n",
            [],
            "no line_rate_bytes_per_second column; pass --line-rate",
        ),
        (
            "zerorate.csv",
            f"{HEADER},line_rate_bytes_per_second\n{ROW},0\n{ROW2},0\n",
            [],
            "line rate unknown (0) for mlx5_0 port 1",
        ),
        ("empty.csv", "", [], "empty file"),
        ("header.csv", f"{HEADER}\n", ["--line-rate", "100"], "no samples"),
        (
            "truncated.csv",
            f"{HEADER}\n{ROW}\n{ROW2}\n1700000000002000000,mlx5_0,1,21",
            ["--line-rate", "100"],
            "Expected 5 columns, got 4",
        ),
        (
            "words.csv",
            f"{HEADER}\n{ROW}\nsoon,mlx5_0,1,5,5\n",
            ["--line-rate", "100"],
            "timestamp_ns",
        ),
        ("one.csv", f"{HEADER}\n{ROW}\n", ["--line-rate", "100"], "needs at least two samples"),
        (
            "nocounters.csv",
            "timestamp_ns,device,port\n1,mlx5_0,1\n",
            [],
            "missing column 'xmit_units' ('xmit_bytes' in CSV and older traces)",
        ),
        (
            "nounit.csv",
            f"{UNIT_HEADER[: -len(',unit_bytes')]}\n1,mlx5_0,1,25,50\n",
            [],
            "missing column 'unit_bytes'",
        ),
        (
            "twoforms.csv",
            f"{HEADER},xmit_units\n{ROW},25\n",
            [],
            "both 'xmit_units' and 'xmit_bytes': counters in units (xmit_units, rcv_units, "
            "unit_bytes) or in bytes (xmit_bytes, rcv_bytes), not both",
        ),
        (
            "unit3.csv",
            f"{UNIT_HEADER}\n{UNIT_ROW}\n1700000000001000000,mlx5_0,1,30,60,3\n",
            ["--line-rate", "100"],
            "'unit_bytes' is 3 (expected 4 or 1)",
        ),
        (
            "unit0.csv",
            f"{UNIT_HEADER}\n1700000000000000000,mlx5_0,1,25,50,0\n{UNIT_ROW}\n",
            ["--line-rate", "100"],
            "'unit_bytes' is 0 (expected 4 or 1)",
        ),
        (
            "overflow.csv",
            f"{UNIT_HEADER}\n{UNIT_ROW}\n1700000000001000000,mlx5_0,1,{1 << 62},60,4\n",
            ["--line-rate", "100"],
            "'xmit_units' too large for 64-bit bytes",
        ),
    ],
)
def test_bad_csv_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    name: str,
    text: str,
    extra: list[str],
    problem: str,
) -> None:
    path = bad(tmp_path, name, text)
    status, _out, err = report(capsys, str(path), *extra)
    assert status == 2
    assert err.count("\n") == 1, err
    assert err.startswith("burstscope report: error: ") and str(path) in err
    assert problem in err


def test_bad_paths(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = report(capsys, str(tmp_path / "nothing"))
    assert status == 2 and "no such file or directory" in err and err.count("\n") == 1
    status, _, err = report(capsys, str(tmp_path))
    assert status == 2 and "holds no part-*.parquet pieces" in err
    status, _, err = report(capsys, str(FIXTURES / "small.csv"), "--line-rate", "-3")
    assert status == 2 and "--line-rate must be positive" in err


def test_truncated_parquet_piece(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    shutil.copytree(REPO / FIXTURES / "trace", trace)
    piece = trace / "part-000001.parquet"
    piece.write_bytes(piece.read_bytes()[: piece.stat().st_size // 2])
    status, _, err = report(capsys, str(trace))
    assert status == 2 and err.count("\n") == 1
    assert "part-000001.parquet" in err and "not a readable Parquet file" in err


def test_table_shows_congestion_beside_bursts(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = report(capsys, str(FIXTURES / "trace"))
    assert status == 0, err
    lines = [line for line in out.splitlines() if "congestion" in line]
    assert lines == [
        "mlx5_0/1 tx: congestion in saturated seconds: port_xmit_wait 96.8% of 31,000, "
        "rp_cnp_handled 96.7% of 150",
        "mlx5_0/1 rx: congestion in saturated seconds: np_cnp_sent 0.0% of 310",
        "mlx5_1/1 rx: congestion in saturated seconds: np_ecn_marked_roce_packets 100.0% of 217",
    ]


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        ("truncate", "not a readable Parquet file"),
        ("drop-column", "missing column 'kind'"),
        ("unknown-kind", "unknown counter kind 'spinning'"),
        ("text-values", "column 'value': Failed to parse string: 'many'"),
        ("empty-value", "empty value in column 'value'"),
        ("zero-width", "a counter width outside 1..64 bits"),
    ],
)
def test_bad_slow_piece_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, damage: str, fragment: str
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    trace = tmp_path / "trace"
    shutil.copytree(REPO / FIXTURES / "trace", trace)
    piece = trace / "_slow" / "slow-000001.parquet"
    if damage == "truncate":
        piece.write_bytes(piece.read_bytes()[: piece.stat().st_size // 2])
    else:
        table = pq.read_table(piece)
        rows = table.num_rows

        def replace(name: str, values: pa.Array) -> pa.Table:
            return table.set_column(table.schema.get_field_index(name), name, values)

        if damage == "drop-column":
            table = table.drop_columns(["kind"])
        elif damage == "unknown-kind":
            table = replace("kind", pa.array(["spinning"] * rows).dictionary_encode())
        elif damage == "text-values":  # another writer's mistake: a column of the wrong type
            table = replace("value", pa.array(["many"] * rows))
        elif damage == "empty-value":
            table = replace("value", pa.array([None] + [1] * (rows - 1), type=pa.uint64()))
        else:
            table = replace("width_bits", pa.array([0] * rows, type=pa.int8()))
        pq.write_table(table, piece)
    status, out, err = report(capsys, str(trace))
    assert status == 2 and err.count("\n") == 1 and not out
    assert "slow-000001.parquet" in err and fragment in err


def test_subprocess_bad_input_has_no_traceback(tmp_path: Path) -> None:
    path = bad(tmp_path, "unknown.csv", f"{HEADER},colour\n{ROW},red\n")
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "report", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"burstscope report: error: {str(path)!r}: unknown column 'colour' (expected "
        "timestamp_us or timestamp_ns, device, port, (xmit_units, rcv_units, unit_bytes) or "
        "(xmit_bytes, rcv_bytes), "
        "line_rate_bytes_per_second, "
        "rebaseline, read_ns)\n"
    )


def test_thresholds_are_flags(capsys: pytest.CaptureFixture[str]) -> None:
    trace = str(FIXTURES / "trace")
    status, default_out, err = report(capsys, trace, "--json")
    assert status == 0, err
    status, strict_out, err = report(capsys, trace, "--json", "--saturated", "0.999")
    assert status == 0, err
    default = sum(p["bursts"]["saturated_seconds"] for p in json.loads(default_out)["ports"])
    strict = sum(p["bursts"]["saturated_seconds"] for p in json.loads(strict_out)["ports"])
    assert strict < default
    status, _, err = report(capsys, trace, "--burst", "2")
    assert status == 2
    assert err.strip() == "burstscope report: error: threshold burst must be in (0, 1], got 2.0"


def jittered_csv(path: Path, step_ns: int, jitter_ns: int, rows: int = 3000) -> Path:
    """One port at ~``step_ns`` whose every third step is ``jitter_ns`` longer."""
    steps = np.full(rows, step_ns, dtype=np.int64)
    steps[::3] += jitter_ns
    stamps = 1_700_000_000_000_000_000 + np.cumsum(steps)
    lines = [f"{HEADER},line_rate_bytes_per_second"]
    lines += [f"{t},mlx5_0,1,{i * 1000},{i * 500},50000000000" for i, t in enumerate(stamps)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_jittered_csv_names_its_finest_scale_by_the_round_interval(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Median step 999.4 us, as a 1 ms sampler on a busy machine records.
    csv = jittered_csv(tmp_path / "jittered.csv", 999_400, 1_000)
    status, out, err = report(capsys, str(csv), "--json")
    assert status == 0, err
    assert [next(iter(p["scales"])) for p in json.loads(out)["ports"]] == ["0.001", "0.001"]
    status, out, err = report(capsys, str(csv))
    assert status == 0, err
    assert "1-ms" in out and "999" not in out.split("\n", 3)[2]


def test_a_trace_that_states_its_interval_is_named_by_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # 250 us is no 1-2-5 interval: only the trace's own word names it right.
    csv = jittered_csv(tmp_path / "quarter.csv", 249_700, 900)
    trace = tmp_path / "trace"
    trace.mkdir()
    writer = TraceWriter(trace, info=TraceInfo(250_000, "sysfs", "node-a"))
    for samples in read_samples(csv):
        writer.append(
            [
                PortColumns(
                    samples.device,
                    samples.port,
                    50_000_000_000,
                    samples.timestamp_ns,
                    samples.xmit_bytes,
                    samples.rcv_bytes,
                    np.zeros(samples.timestamp_ns.size, dtype=np.int64),
                    np.zeros(samples.timestamp_ns.size, dtype=np.bool_),
                )
            ]
        )
    writer.close()
    assert read_info(trace) == TraceInfo(250_000, "sysfs", "node-a")
    assert read_info(csv) == TraceInfo()
    status, out, err = report(capsys, str(trace), "--json")
    assert status == 0, err
    assert next(iter(json.loads(out)["ports"][0]["scales"])) == "0.00025"
    status, out, err = report(capsys, str(csv), "--json")
    assert status == 0, err
    assert next(iter(json.loads(out)["ports"][0]["scales"])) == "0.0002"  # unstated: round


@pytest.mark.parametrize(
    "metadata",
    [{}, {b"burstscope.interval_ns": b"-5"}, {b"burstscope.interval_ns": b"1e6"}],
)
def test_missing_or_bad_stated_interval_counts_as_unstated(metadata: dict[bytes, bytes]) -> None:
    assert TraceInfo.from_metadata(metadata).interval_ns is None


def test_table_strips_escape_sequences_and_implausible_steps(tmp_path: Path) -> None:
    # A device name is input: ESC sequences and rich markup in it reach no terminal. A step
    # of 2**63 bytes or more in one interval is a bad reading, not "-0.0%" utilization.
    name = "\x1b]0;pwned\x07\x1b[31mmlx5_0[bold]"
    rows = [f"{1_700_000_000_000_000_000 + i * 1_000_000},{name},1,{i * 1000},0" for i in range(50)]
    rows.append(f"{1_700_000_000_050_000_000},{name},1,{2**63 + 49_000},0")
    rows += [
        f"{1_700_000_000_000_000_000 + i * 1_000_000},{name},1,{2**63 + i * 1000},0"
        for i in range(51, 80)
    ]
    trace = tmp_path / "evil.csv"
    trace.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "report", str(trace), "--line-rate", "100"],
        capture_output=True,
        text=True,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "mlx5_0[bold]/1" in result.stdout
    assert "-0.0%" not in result.stdout


# The table fits the terminal it is in (or 80 columns when piped); names are text.


@pytest.mark.parametrize("width", [80, 120, 200])
def test_report_in_tmux_fits_and_matches_golden(width: int, update_golden: bool) -> None:
    screen = run_in_tmux(
        f"{sys.executable} -m burstscope report {FIXTURES / 'trace'}", width, cwd=REPO
    )
    lines = screen.splitlines()
    assert max(len(line) for line in lines) <= width, screen
    assert "…" not in screen, screen  # every row named mlx5… at 80 columns
    rows = [line.split()[1] for line in lines if line.startswith("│")]
    assert rows == ["mlx5_0/1", "mlx5_0/1", "mlx5_1/1", "mlx5_1/1"], screen
    compare_golden(REPO / FIXTURES / f"tmux-{width}.golden.txt", screen, update_golden)


def test_a_narrow_report_names_the_columns_it_left_out(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    status, out, err = report(capsys, str(FIXTURES / "trace"))
    assert status == 0, err
    assert "not shown at 80 columns: bursts, burst p50, burst p99" in out, out
    header = next(line for line in out.splitlines() if "hidden sat." in line)
    assert "burst p50" not in header
    monkeypatch.setenv("COLUMNS", "200")
    assert "not shown" not in report(capsys, str(FIXTURES / "trace"))[1]


def test_piped_report_is_80_columns_and_never_cuts_a_port() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "report", str(FIXTURES / "trace")],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, result.stdout  # was forced to 132
    assert "…" not in result.stdout


def test_brackets_in_names_are_text_at_any_width(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "mlx5_[bold]long_device_name_0"
    rows = [f"{1_700_000_000_000_000_000 + i * 1_000_000},{name},1,{i * 1000},0" for i in range(50)]
    trace = tmp_path / "[x].csv"
    trace.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    monkeypatch.setenv("COLUMNS", "80")
    status, out, err = report(capsys, str(trace), "--line-rate", "100")
    assert status == 0, err
    table = [line for line in out.splitlines() if line.startswith("│")]
    assert table and all(f"{name}/1" in line for line in table), out
    assert f"{name}/1 tx: " in out, out


def test_a_trace_shorter_than_a_window_says_its_window_is_partial(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = report(capsys, str(FIXTURES / "small.csv"), "--line-rate", "100")
    assert status == 0, err
    assert "partial window: the trace covers 3.0 s, less than one 15-s window" in out, out
    assert "mlx5_0/1 tx: average 5.9% over 3.0 s (a partial 15-s window), 1-ms peak" in out
    # A trace of whole windows says nothing of the kind.
    assert "partial" not in report(capsys, str(FIXTURES / "trace"))[1]
