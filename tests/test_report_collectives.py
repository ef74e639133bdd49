"""`report` with collective records: the tables, the command line's bad inputs, and the join
scored against ground truth: the simulated MoE node's own schedule of collectives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from burstscope.cli import main
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import SECOND
from burstscope.collector.trace import TraceInfo, TraceWriter, prepare_output
from burstscope.collector.tracegen import FIXED_EPOCH_NS, NodeTiming, simulate_trace
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
