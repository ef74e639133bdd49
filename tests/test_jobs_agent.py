"""Job attribution in the running agent: the shipped Slurm prolog and epilog drive /metrics.

The agent is the real in-process ``Agent`` on the fixture tree with ``--slurm-jobs-dir``; jobs
start and end by running the shipped ``systemd/slurm/burstscope-prolog`` and ``-epilog`` with
the environment slurmd gives them (tests/test_slurm_integration.py runs them under a real
Slurm). The fixture node has no GPU, so every job holds the whole node.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burstscope.testing.emulated_node import running_agent, scrape
from burstscope.testing.processes import wait_until
from burstscope.testing.slurm_jobs import end_job, start_job
from tests.conftest import SYSFS
from tests.test_cli_core import assert_usage_error
from tests.test_exposition import scrape_when_complete

CHURNED_JOBS = 400
BURSTSCOPE = [sys.executable, "-m", "burstscope"]
AT_ONCE = 100


@pytest.fixture
def agent_with_jobs(tmp_path: Path) -> Iterator[tuple[Any, str, Path]]:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    with running_agent(SYSFS, "--slurm-jobs-dir", str(jobs)) as (agent, url):
        yield agent, url, jobs


def job_series(exposition: str) -> list[str]:
    return [line for line in exposition.splitlines() if line.startswith("burstscope_job_")]


def series_of(exposition: str) -> set[str]:
    return {line.rpartition(" ")[0] for line in exposition.splitlines() if line[:1] != "#"}


def running_jobs(url: str) -> set[str]:
    return set(
        re.findall(
            r'^burstscope_job_info\{compute_ports="[^"]*",job_id="([^"]+)"',
            scrape(url),
            re.MULTILINE,
        )
    )


def test_a_job_appears_with_its_ports_and_goes_with_its_epilog(
    agent_with_jobs: tuple[Any, str, Path],
) -> None:
    agent, url, jobs = agent_with_jobs
    ports = [(p.device, p.port) for p in agent.settings.source.ports]
    assert job_series(scrape(url)) == []
    start_job(jobs, 4242, user="alice")
    assert wait_until(lambda: running_jobs(url) == {"4242"})
    series = job_series(scrape(url))
    info = [line for line in series if line.startswith("burstscope_job_info")]
    every_port = ",".join(f"{device}/{port}" for device, port in sorted(ports))
    assert info == [
        f'burstscope_job_info{{compute_ports="{every_port}",job_id="4242",name="",namespace="",'
        'pod="",scheduler="slurm",user="alice"} 1.0'
    ]
    held = sorted(
        (m.group(1), int(m.group(2)))
        for m in re.finditer(
            r'burstscope_job_port\{device="([^"]+)",job_id="4242",port="(\d+)"', "\n".join(series)
        )
    )
    assert held == sorted(ports)
    assert all('rule="whole_node"' in line for line in series if "job_port" in line)
    end_job(jobs, 4242)
    assert wait_until(lambda: job_series(scrape(url)) == [])


def test_hundreds_of_jobs_through_a_node_leave_the_exposition_as_it_was(
    agent_with_jobs: tuple[Any, str, Path],
) -> None:
    """Bounded: series of ended jobs are removed, and nothing grows with the jobs seen."""
    agent, url, jobs = agent_with_jobs
    # Steady first: every counter read once and the sampler's reads judged, so the only
    # series that come and go from here on are the jobs'.
    assert wait_until(lambda: agent.pipeline.snapshot().health.finest_interval_ns > 0)
    baseline = series_of(scrape_when_complete(agent, url))
    ports = len(agent.settings.source.ports)
    for first in range(1, CHURNED_JOBS + 1, AT_ONCE):
        batch = range(first, first + AT_ONCE)
        for job_id in batch:
            start_job(jobs, job_id)
        expected = {str(job_id) for job_id in batch}
        assert wait_until(lambda: running_jobs(url) == expected), f"jobs {first}.."  # noqa: B023
        # Four series per job and one per port it holds, nothing more.
        assert len(job_series(scrape(url))) == AT_ONCE * (4 + ports)
        for job_id in batch:
            end_job(jobs, job_id)
        assert wait_until(lambda: running_jobs(url) == set()), f"jobs {first}.. ended"
    assert series_of(scrape(url)) == baseline
    assert agent.jobs is not None and agent.jobs.table().jobs == ()


def test_top_names_the_job_holding_each_port(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    start_job(jobs, 77, user="bob")
    out = subprocess.run(
        [
            *BURSTSCOPE,
            "top",
            "--source",
            "sim",
            "--duration",
            "3",
            "--every",
            "1",
            "--slurm-jobs-dir",
            str(jobs),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = [
        line for line in out.stdout.splitlines() if " transmit " in line or " receive " in line
    ]
    assert lines and all(line.endswith(" job=77") for line in lines), out.stdout[-2000:]


def test_a_job_setting_only_the_kubelet_source_can_judge_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    """An API server without a token: refused at start, before the sampler runs."""
    socket = tmp_path / "kubelet.sock"
    socket.touch()  # present: the source is built and judges its settings
    config = tmp_path / "agent.toml"
    config.write_text(
        f'[jobs]\nkubelet_socket = "{socket}"\nkubernetes_api = "https://10.0.0.1:6443"\n'
    )
    result = subprocess.run(
        [*BURSTSCOPE, "agent", "--source", "sim", "--config", str(config),
         "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert_usage_error(result, "[jobs]", "token")
