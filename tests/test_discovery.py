"""Discovery on the checked-in sysfs tree: a golden compared whole, and the parsers table-driven."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from burstscope.cli import main
from burstscope.collector.discovery import (
    DiscoveryError,
    State,
    compile_filter,
    discover,
    parse_rate,
    parse_state,
    unreadable_reason,
)
from burstscope.testing.emulated_node import EmulatedNode
from tests.conftest import FIXTURES, SYSFS, compare_golden
from tests.test_top_view import run_in_tmux

GOLDEN = FIXTURES / "discovery.golden.json"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("400 Gb/sec (4X NDR)", 50_000_000_000),
        ("800 Gb/sec (8X NDR)", 100_000_000_000),
        ("200 Gb/sec (4X HDR)", 25_000_000_000),
        ("56 Gb/sec (4X FDR)", 7_000_000_000),
        ("2.5 Gb/sec (1X SDR)", 312_500_000),
        ("2.5 Gb/sec (1X)", 312_500_000),
        ("10 Gb/sec (4X)", 1_250_000_000),
        ("13.64 Gb/sec (1X FDR)", 1_705_000_000),
        ("14.0625 Gb/sec (1X)", 1_757_812_500),
        ("800 Gb/sec (4X XDR)", 100_000_000_000),
        ("  100 Gb/sec (4X EDR)\n", 12_500_000_000),
        ("Unknown", None),
        ("", None),
    ],
)
def test_parse_rate(text: str, expected: int | None) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4: ACTIVE", State(4, "ACTIVE")),
        ("1: DOWN", State(1, "DOWN")),
        ("5: LinkUp", State(5, "LinkUp")),
        ("4: PortConfigurationTraining", State(4, "PortConfigurationTraining")),
        ("7: Phy Test", State(7, "Phy Test")),
        ("ACTIVE", None),
    ],
)
def test_parse_state(text: str, expected: State | None) -> None:
    assert parse_state(text) == expected


def test_fixture_tree_matches_golden(update_golden: bool) -> None:
    found = discover(SYSFS)
    compare_golden(GOLDEN, json.dumps(found.to_json(), indent=2) + "\n", update_golden)


def test_every_kind_of_absence_is_a_skip_not_a_failure() -> None:
    found = discover(SYSFS)
    assert [(p.device, p.state.name if p.state else None) for p in found.ports] == [
        ("irdma0", "ACTIVE"),  # bytes from hw_counters/ip4{In,Out}Octets
        ("mlx5_0", "ACTIVE"),
        ("mlx5_1", "ACTIVE"),
        ("mlx5_2", "DOWN"),
    ]
    # A port without readable data counters is kept, with its state, rate and reason.
    assert [
        (p.device, p.state, p.rate_bytes_per_second, p.not_sampled) for p in found.unsampled
    ] == [
        (
            "mlx5_3",
            State(4, "ACTIVE"),
            25_000_000_000,
            "counters/port_xmit_data: reads 'N/A (no PMA)'",
        )
    ]
    reasons = {(s.device, s.reason) for s in found.skipped}
    assert ("mlx5_2", "counters/symbol_error: reads 'N/A (no PMA)'") in reasons


def test_roce_netdev_comes_from_gid_attrs_then_device_net(sysfs_copy: Path) -> None:
    port = sysfs_copy / "class/infiniband/mlx5_1/ports/1"
    assert discover(sysfs_copy).ports[2].netdev == "ens1f1np1"
    for entry in (port / "gid_attrs" / "ndevs").iterdir():
        entry.unlink()
    (sysfs_copy / "class/infiniband/mlx5_1/device/net/ens1f1np1").rename(
        sysfs_copy / "class/infiniband/mlx5_1/device/net/enp1s0f1"
    )
    assert discover(sysfs_copy).ports[2].netdev == "enp1s0f1"


def test_include_and_exclude_filters() -> None:
    include = compile_filter("^mlx5_[01]$", "--include")
    exclude = compile_filter("_1$", "--exclude")
    assert [p.device for p in discover(SYSFS, include=include).ports] == ["mlx5_0", "mlx5_1"]
    assert [p.device for p in discover(SYSFS, include, exclude).ports] == ["mlx5_0"]


def test_bad_filter_names_the_flag() -> None:
    with pytest.raises(ValueError, match=re.escape("--exclude '[' is not a valid regular")):
        compile_filter("[", "--exclude")


def test_missing_root_is_an_error_but_a_missing_class_is_no_ports(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="is not a directory"):
        discover(tmp_path / "absent")
    assert discover(tmp_path).ports == ()


def test_unreadable_reasons(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "text").write_text("garbage\n")
    (tmp_path / "good").write_text("42\n")
    assert unreadable_reason(tmp_path / "dir") == "EISDIR (Is a directory)"
    assert unreadable_reason(tmp_path / "absent") == "ENOENT (No such file or directory)"
    assert unreadable_reason(tmp_path / "text") == "reads 'garbage', not an integer"
    assert unreadable_reason(tmp_path / "good") is None


# The text view: the table fits the terminal it is in; names from the tree are text.

BURSTSCOPE = f"{sys.executable} -m burstscope"


@pytest.mark.parametrize("width", [80, 120, 200])
def test_discover_in_tmux_fits_and_matches_golden(width: int, update_golden: bool) -> None:
    # From the repository, so the title names the tree the same in every checkout.
    repo = SYSFS.parents[2]
    screen = run_in_tmux(f"{BURSTSCOPE} discover --sysfs-root tests/fixtures/sys", width, cwd=repo)
    lines = screen.splitlines()
    assert max(len(line) for line in lines) <= width, screen
    assert "…" not in screen
    table = [line for line in lines if line.startswith("│")]
    # One line per port: no row wraps onto a second line.
    assert [line.split()[1] for line in table] == ["irdma0", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    compare_golden(FIXTURES / "discover" / f"tmux-{width}.golden.txt", screen, update_golden)


def test_discover_of_eight_ports_at_80_columns_is_one_line_each(tmp_path: Path) -> None:
    devices = [f"mlx5_{n}" for n in range(8)]
    EmulatedNode(tmp_path, devices).build()
    screen = run_in_tmux(f"{BURSTSCOPE} discover --sysfs-root {tmp_path}", 80)
    lines = screen.splitlines()
    assert max(len(line) for line in lines) <= 80, screen
    assert [line.split()[1] for line in lines if line.startswith("│")] == devices, screen
    assert len(lines) <= len(devices) + 8, screen  # title, header, rules, footer


def test_piped_discover_is_80_columns(tmp_path: Path) -> None:
    EmulatedNode(tmp_path, [f"mlx5_{n}" for n in range(8)]).build()
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "discover", "--sysfs-root", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "not shown at 80 columns" in result.stdout


def test_brackets_in_names_and_hints_are_text_not_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "sys[x]"
    EmulatedNode(root, ["mlx5_[bold]0"]).build()
    (root / "class/infiniband/mlx5_[bold]0/ports/1/rate").write_text("fast\n")
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["discover", "--sysfs-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "mlx5_[bold]0" in out and "sys[x]" in out, out
    # rich read "[source.line_rates]" as a style tag and printed "set its data rate with
    # DEVICE = GBITS".
    assert "[source.line_rates] DEVICE = GBITS" in out, out
