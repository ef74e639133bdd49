"""bench/fleet.py's flags: a bad --shards, --profile or --nodes is one line on stderr and
exit 2, before any fleet or Prometheus starts (the runs themselves take minutes: make bench)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "fleet.py"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--shards", "-1"], "--shards"),
        (["--nodes", "3", "--shards", "4"], "--shards"),
        (["--profile", "tiny"], "--profile"),
        (["--nodes", "0"], "--nodes"),
        (["--live-minutes", "0"], "--live-minutes"),
        (["--gogc", "0"], "--gogc"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(args: list[str], named: str) -> None:
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--json", *args], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 2
    assert completed.stdout == ""
    assert "Traceback" not in completed.stderr
    assert named in completed.stderr.strip().splitlines()[-1]
