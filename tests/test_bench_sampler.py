"""Smoke test for bench/sampler.py: a one-second run prints two parseable JSON lines."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import integration_unavailable

BENCH = Path(__file__).resolve().parent.parent / "bench" / "sampler.py"
FIELDS = {
    "configuration",
    "cpu_ratio_vs_c",
    "missed_tick_fraction",
    "lateness_p50_us",
    "lateness_p99_us",
    "read_window_p99_us",
    "samples",
    "cpu_seconds",
    "c_cpu_seconds",
    "c_lateness_p50_us",
    "c_lateness_p99_us",
    "c_read_window_p99_us",
    "interval_us",
    "files",
    "duration_s",
    "realtime",
    "cpu",
}


def test_benchmark_prints_one_json_line_per_configuration() -> None:
    if shutil.which("cc") is None:
        integration_unavailable("no C compiler (`cc`): the benchmark compiles its C reference")
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--duration", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    results = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [result["configuration"] for result in results] == ["1ms", "100us"]
    for result in results:
        assert not FIELDS - result.keys(), f"missing {FIELDS - result.keys()}"
        assert result["samples"] > 0
        assert result["cpu_ratio_vs_c"] > 0
    assert (results[0]["interval_us"], results[0]["files"]) == (1000.0, 18)
    assert (results[1]["interval_us"], results[1]["files"]) == (100.0, 2)
