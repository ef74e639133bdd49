"""Smoke test for bench/mqtt.py: a small backlog drains through a real Mosquitto."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_binary

BENCH = Path(__file__).resolve().parent.parent / "bench" / "mqtt.py"
pytestmark = pytest.mark.integration


def test_benchmark_prints_one_json_line() -> None:
    require_binary("mosquitto")
    result = subprocess.run(
        [sys.executable, str(BENCH), "--json", "--messages", "300"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    figures = json.loads(lines[0])
    assert figures["messages"] == 300
    for name in ("reference", "memory_spool", "disk_spool"):
        assert figures[f"{name}_messages_per_second"] > 0
    assert figures["memory_ratio_vs_reference"] > 0
