"""include/exclude never drop ports without a word; the example configuration drops none."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from burstscope.arguments import build_source_from
from burstscope.collector.config import load_config
from burstscope.errors import UsageError
from burstscope.testing.processes import LoggedProcess
from tests.conftest import SYSFS

EXAMPLE = Path(__file__).resolve().parent.parent / "systemd" / "agent.toml.example"


def test_the_example_configuration_filters_no_device() -> None:
    """An active include of ^mlx5_ dropped every bnxt_re, EFA, irdma and mlx4 port."""
    config = load_config(str(EXAMPLE))
    assert config.get("source", "include") is None
    assert config.get("source", "exclude") is None


def test_include_says_what_it_left_out() -> None:
    source = build_source_from("sysfs", str(SYSFS), "^mlx5_", None, None)
    assert {port.device for port in source.ports} == {"mlx5_0", "mlx5_1", "mlx5_2"}
    assert source.notes == (
        "port filter: include '^mlx5_' left out 1 port(s) of 1 device(s) (irdma0)",
    )


def test_exclude_says_what_it_left_out_and_include_that_it_left_none() -> None:
    source = build_source_from("sysfs", str(SYSFS), "^(mlx5|irdma)", "^mlx5_[12]$", None)
    assert source.notes == (
        "port filter: include '^(mlx5|irdma)' left out 0 port(s); "
        "exclude '^mlx5_[12]$' left out 2 port(s) of 2 device(s) (mlx5_1, mlx5_2)",
    )


def test_no_filter_no_note() -> None:
    assert build_source_from("sysfs", str(SYSFS), None, None, None).notes == ()


def test_a_filter_that_leaves_nothing_says_what_it_left_out() -> None:
    with pytest.raises(UsageError, match=r"include '\^none\$' left out 5 port\(s\)"):
        build_source_from("sysfs", str(SYSFS), "^none$", None, None)


def test_the_agent_logs_what_the_filter_left_out() -> None:
    agent = LoggedProcess(
        [
            *(sys.executable, "-m", "burstscope", "agent", "--listen", "127.0.0.1:0"),
            *("--sysfs-root", str(SYSFS), "--include", "^mlx5_"),
        ]
    )
    try:
        line = agent.wait_log("port filter: ")
        assert "include '^mlx5_' left out 1 port(s) of 1 device(s) (irdma0)" in line, agent.stderr
    finally:
        agent.kill()
