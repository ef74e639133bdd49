"""bench/stragglers.py kept from rotting: a small fleet's JSON line, and its bad flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "stragglers.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), "--json", *args], capture_output=True, text=True, timeout=120
    )


def test_a_small_fleet_prints_one_line_and_keeps_up() -> None:
    completed = run("--nodes", "24", "--seconds", "20")
    lines = completed.stdout.splitlines()
    assert len(lines) == 1, completed.stderr
    result = json.loads(lines[0])
    assert completed.returncode == 0 and result["target_met"]
    assert result["reference"].startswith("real time")
    assert 0 < result["ratio_vs_real_time"] <= 1
    assert result["moe_iteration_period_seconds"] > 1  # measured from the model's blocks
    assert result["summaries_per_second"] > 0 and result["judged_steps"] > 0
    # Every other step has its injected stragglers; no on-time node is ever called one.
    assert result["judged_steps_with_an_injected_straggler_called"] >= result["judged_steps"] // 2
    assert result["on_time_nodes_called_stragglers"] == 0
    assert (
        result["exposition_renders"] >= 1 and result["cpu_affinity"] == result["cpu_affinity"][:1]
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--nodes", "2"], "--nodes"),
        (["--seconds", "0"], "--seconds"),
        (["--stragglers", "12", "--nodes", "20"], "--stragglers"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(args: list[str], named: str) -> None:
    completed = run(*args)
    assert completed.returncode == 2
    assert named in completed.stderr.splitlines()[-1]
