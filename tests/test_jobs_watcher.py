"""The job watcher, the per-job totals and the job families of /metrics.

The sources here are scripted lists of claims (the Slurm and Kubernetes sources have tests of
their own, against a real Slurm and a served pod-resources API); the mapping to ports is a
whole-node rule written out, since the topology has its own tests.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from burstscope.collector.exporter import BurstscopeCollector
from burstscope.collector.jobs.accounting import JobAccounts
from burstscope.collector.jobs.model import (
    COMPUTE,
    RULE_WHOLE_NODE,
    SLURM,
    STORAGE,
    Claim,
    Holding,
    Job,
    JobFigures,
    JobTable,
)
from burstscope.collector.jobs.watcher import JobWatcher
from burstscope.collector.snapshot import TIMING_BUCKETS_SECONDS
from tests.test_top_view import snapshot

PORTS = (("mlx5_0", 1), ("mlx5_1", 1), ("mlx5_4", 1))


def whole_node(claims: Sequence[Claim]) -> tuple[list[Job], list[Holding]]:
    """Every claim holds every port; mlx5_4 is the storage NIC."""
    holdings = [
        Holding(
            claim.job.job_id,
            device,
            port,
            STORAGE if device == "mlx5_4" else COMPUTE,
            RULE_WHOLE_NODE,
        )
        for claim in claims
        for device, port in PORTS
    ]
    return [claim.job for claim in claims], holdings


class Scripted:
    """A source that answers from a list it is handed: claims, None (unreadable) or an error."""

    name = "scripted"

    def __init__(self) -> None:
        self.answer: list[Claim] | Exception | None = []
        self.closed = False

    def poll(self) -> list[Claim] | None:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def close(self) -> None:
        self.closed = True


def job(job_id: str, user: str = "alice") -> Job:
    return Job(job_id, SLURM, user=user, name=f"train-{job_id}")


def test_a_claim_becomes_a_table_and_listeners_hear_of_each_change() -> None:
    source = Scripted()
    watcher = JobWatcher([source], whole_node, clock=lambda: 42)
    heard: list[tuple[int, JobTable, JobTable]] = []
    watcher.listeners.append(lambda now, before, after: heard.append((now, before, after)))
    assert not watcher.poll_once()  # nothing runs: no change, nobody told
    source.answer = [Claim(job("7"))]
    assert watcher.poll_once()
    table = watcher.table()
    assert [j.job_id for j in table.jobs] == ["7"]
    assert table.jobs_of("mlx5_1", 1) == (job("7"),)
    assert table.jobs_of("mlx5_9", 1) == ()
    assert not watcher.poll_once()  # the same claims: the same table, no listener call
    source.answer = []
    assert watcher.poll_once()
    assert watcher.table().jobs == ()
    assert [(now, len(b.jobs), len(a.jobs)) for now, b, a in heard] == [(42, 0, 1), (42, 1, 0)]


def test_an_unreadable_source_keeps_its_jobs_and_a_failing_one_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = Scripted()
    source.answer = [Claim(job("7"))]
    watcher = JobWatcher([source], whole_node)
    watcher.poll_once()
    source.answer = None  # the kubelet restarting: not every job ending
    assert not watcher.poll_once()
    assert [j.job_id for j in watcher.table().jobs] == ["7"]
    source.answer = OSError("permission denied")
    with caplog.at_level(logging.WARNING, "burstscope.collector.jobs.watcher"):
        for _ in range(5):
            watcher.poll_once()
    assert [j.job_id for j in watcher.table().jobs] == ["7"]
    assert watcher.failures == {"scripted": 6}
    warned = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert warned == ["jobs: scripted cannot be read (permission denied); keeping its last jobs"]
    source.answer = []
    assert watcher.poll_once()
    watcher.stop()
    assert source.closed


def test_a_failing_listener_does_not_stop_the_others() -> None:
    source = Scripted()
    watcher = JobWatcher([source], whole_node)
    heard: list[int] = []

    def broken(now: int, before: JobTable, after: JobTable) -> None:
        raise OSError("disk full")

    watcher.listeners += [broken, lambda now, before, after: heard.append(len(after.jobs))]
    source.answer = [Claim(job("7"))]
    assert watcher.poll_once()
    assert heard == [1]


def table_of(*job_ids: str) -> JobTable:
    jobs, holdings = whole_node([Claim(job(job_id)) for job_id in job_ids])
    return JobTable.build(jobs, holdings)


def test_each_drain_adds_its_increments_to_the_jobs_holding_the_port_then() -> None:
    accounts = JobAccounts()
    second = 1_000_000_000
    accounts.add(table_of(), [("mlx5_0", 1, 5 * second, 0, 100)])  # before any job: no one's
    accounts.add(table_of("7"), [("mlx5_0", 1, 6 * second, 0, 150)])
    # Storage ports are held but not counted in the job's figures.
    accounts.add(
        table_of("7"), [("mlx5_0", 1, 6 * second, 0, 150), ("mlx5_4", 1, 9 * second, 0, 9)]
    )
    accounts.add(table_of("7", "8"), [("mlx5_0", 1, 8 * second, second, 250)])
    assert accounts.figures() == {
        "7": JobFigures(3.0, 1.0, 150),
        "8": JobFigures(2.0, 1.0, 100),
    }
    # A total that went down (the analyzer replaced on a reload) is new in full.
    accounts.add(table_of("8"), [("mlx5_0", 1, 1 * second, 0, 10)])
    assert accounts.figures() == {"8": JobFigures(3.0, 1.0, 110)}  # job 7 ended: gone


def job_lines(exposition: str) -> list[str]:
    return [line for line in exposition.splitlines() if line.startswith("burstscope_job_")]


def scrape_of(jobs: JobTable, figures: dict[str, JobFigures]) -> str:
    view = snapshot(1)
    empty = np.zeros(len(TIMING_BUCKETS_SECONDS) + 1, dtype=np.int64)
    health = replace(view.health, lateness_buckets=empty, read_buckets=empty)
    view = replace(view, health=health, jobs=jobs, job_figures=figures)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BurstscopeCollector(lambda: view, "test"))
    return generate_latest(registry).decode()


def test_the_job_families_are_four_series_per_job_and_one_per_held_port() -> None:
    kubernetes = Job("ml/trainer-0", "kubernetes", namespace="ml", pod="trainer-0")
    jobs = [job("7"), kubernetes]
    holdings = [
        Holding("7", "mlx5_0", 1, COMPUTE, "pcie_switch"),
        Holding("7", "mlx5_4", 1, STORAGE, "numa_node"),
        Holding("ml/trainer-0", "mlx5_1", 1, COMPUTE, "device"),
    ]
    exposition = scrape_of(JobTable.build(jobs, holdings), {"7": JobFigures(1.5, 0.25, 4096)})
    assert job_lines(exposition) == [
        'burstscope_job_info{compute_ports="mlx5_0/1",job_id="7",name="train-7",namespace="",pod="",scheduler="slurm",user="alice"} 1.0',  # noqa: E501
        'burstscope_job_info{compute_ports="mlx5_1/1",job_id="ml/trainer-0",name="",namespace="ml",pod="trainer-0",scheduler="kubernetes",user=""} 1.0',  # noqa: E501
        'burstscope_job_saturated_seconds_total{job_id="7"} 1.5',
        'burstscope_job_saturated_seconds_total{job_id="ml/trainer-0"} 0.0',
        'burstscope_job_hidden_saturated_seconds_total{job_id="7"} 0.25',
        'burstscope_job_hidden_saturated_seconds_total{job_id="ml/trainer-0"} 0.0',
        'burstscope_job_burst_bytes_total{job_id="7"} 4096.0',
        'burstscope_job_burst_bytes_total{job_id="ml/trainer-0"} 0.0',
        'burstscope_job_port{device="mlx5_0",job_id="7",port="1",role="compute",rule="pcie_switch"} 1.0',  # noqa: E501
        'burstscope_job_port{device="mlx5_4",job_id="7",port="1",role="storage",rule="numa_node"} 1.0',  # noqa: E501
        'burstscope_job_port{device="mlx5_1",job_id="ml/trainer-0",port="1",role="compute",rule="device"} 1.0',  # noqa: E501
    ]
    assert job_lines(scrape_of(JobTable(), {})) == []
