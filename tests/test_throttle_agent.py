"""[throttle] xmit_wait_tick_ns reaches the agent's live throttle causes; a bad one is one line."""

from __future__ import annotations

from pathlib import Path

from burstscope.agent import Agent
from burstscope.testing.emulated_node import agent_settings
from tests.conftest import SYSFS
from tests.test_cli_core import assert_usage_error
from tests.test_config import _check


def test_the_tick_given_in_the_file_judges_credit_wait_as_stalled_time(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[throttle]\nxmit_wait_tick_ns = 4000\n")
    args = ["--source", "sysfs", "--sysfs-root", str(SYSFS), "--config", str(config)]
    agent = Agent(agent_settings(args))
    try:
        assert agent.pipeline.throttle.limits.xmit_wait_tick_ns == 4000
    finally:
        agent.pipeline.close()
    default = Agent(agent_settings(args[:4]))
    try:
        assert default.pipeline.throttle.limits.xmit_wait_tick_ns is None  # presence only
    finally:
        default.pipeline.close()


def test_a_tick_out_of_range_is_one_line_and_status_2(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[throttle]\nxmit_wait_tick_ns = 0\n")
    assert_usage_error(_check(str(config), "--offline"), "xmit_wait_tick_ns")
