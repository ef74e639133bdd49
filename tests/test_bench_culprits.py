"""bench/culprits.py kept from rotting: a small fleet's JSON line, and its bad flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "culprits.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH), "--json", *args], capture_output=True, text=True, timeout=120
    )


def test_a_small_fleet_prints_one_line_with_every_detectors_scores() -> None:
    # The quick ones here; rails and throttle are scored in their own tests
    # (tests/test_rails*.py, tests/test_throttle_sim.py) through the same functions.
    quick = {"silence_under_job", "below_peers", "pfc_storms"}
    completed = run("--nodes", "2", "--hours", "0.22", "--detectors", ",".join(sorted(quick)))
    lines = completed.stdout.splitlines()
    assert len(lines) == 1, completed.stderr
    result = json.loads(lines[0])
    assert set(result["detectors"]) == quick
    for figures in result["detectors"].values():
        assert figures["injected"] > 0
        assert {"precision", "recall", "false_alarms_clean_fleet", "targets_met"} <= set(figures)
    assert completed.returncode == (0 if result["targets_met"] else 1)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--nodes", "1"], "--nodes"),
        (["--hours", "0.1"], "--hours"),
        (["--detectors", "silence_under_job,nonsense"], "--detectors"),
        (["--nodes", "2", "--detectors", "stragglers"], "--nodes"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(args: list[str], named: str) -> None:
    completed = run(*args)
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    assert named in completed.stderr.strip().splitlines()[-1]
