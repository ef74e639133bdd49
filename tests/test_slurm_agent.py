"""The whole agent beside a real Slurm: /metrics, MQTT and the trace name a job within a second.

Slurm (tests/slurm_cluster.py) runs the shipped prolog and epilog; ``burstscope agent
--source sim --slurm-jobs-dir`` runs as a process of its own with MQTT to a real mosquitto
and recording on. Each output's first and last sight of the job is compared with the prolog
file's mtime and the time the epilog returned. The simulated node has no GPU, so the job
holds the whole node. Skips without root or the binaries; fails under
BURSTSCOPE_REQUIRE_INTEGRATION=1.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from burstscope.collector.jobs.spans import JobSpan, read_job_spans
from burstscope.testing.processes import AgentProcess, wait_for
from tests.slurm_cluster import SlurmCluster
from tests.test_mqtt_broker import Broker, Subscriber

pytestmark = pytest.mark.integration

PROMISE_SECONDS = 1.0  # the issue: named within one second of the prolog's write, and dropped
SCRAPE_EVERY_SECONDS = 0.05


@dataclass
class MetricsWatch:
    """Scrapes /metrics every 50 ms in a thread: when each job was first and last listed."""

    agent: AgentProcess
    first: dict[str, float] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        listed: set[str] = set()
        while not self.stop.wait(SCRAPE_EVERY_SECONDS):
            try:
                body = self.agent.scrape()
            except OSError:
                continue
            now = time.time()
            jobs = set(
                re.findall(
                    r'^burstscope_job_info\{compute_ports="[^"]*",job_id="([^"]+)"',
                    body,
                    re.MULTILINE,
                )
            )
            for job_id in jobs - listed:
                self.first.setdefault(job_id, now)
            for job_id in listed - jobs:
                self.gone.setdefault(job_id, now)
            listed = jobs


@dataclass
class Beside:
    slurm: SlurmCluster
    agent: AgentProcess
    metrics: MetricsWatch
    events: Subscriber
    recording: Path

    def trace(self) -> Path:
        (run,) = [path for path in self.recording.iterdir() if path.is_dir()]
        return run


@pytest.fixture
def beside(slurm: SlurmCluster, tmp_path: Path) -> Iterator[Beside]:
    (tmp_path / "broker").mkdir()
    broker = Broker(tmp_path / "broker")
    broker.start()
    url = f"mqtt://127.0.0.1:{broker.port}"
    events = Subscriber(url)
    recording = tmp_path / "recording"
    agent = AgentProcess(
        "--source",
        "sim",
        "--slurm-jobs-dir",
        str(slurm.jobs_dir),
        "--mqtt",
        url,
        "--record",
        str(recording),
        env=slurm.env,  # SLURM_CONF: the agent asks this cluster's squeue for names
    )
    watch = MetricsWatch(agent)
    thread = threading.Thread(target=watch.run, daemon=True)
    try:
        agent.wait_ready()
        thread.start()
        yield Beside(slurm, agent, watch, events, recording)
        assert agent.stop() == 0
    finally:
        watch.stop.set()
        thread.join()
        agent.kill()
        events.stop()
        broker.kill()


def node_events(beside: Beside, kind: str, job_id: str) -> list[dict[str, Any]]:
    return [
        e for e in beside.events.events() if e.get("kind") == kind and e.get("job_id") == job_id
    ]


def test_metrics_events_and_trace_name_the_job_within_a_second(beside: Beside) -> None:
    slurm = beside.slurm
    job_id = slurm.sbatch("--job-name=pretrain", "--wrap=sleep 4")
    path = slurm.jobs_dir / f"slurm-{job_id}.job"
    wait_for(lambda: job_id in beside.metrics.first, 30, f"job {job_id} in /metrics")
    written = path.stat().st_mtime
    assert 0 <= beside.metrics.first[job_id] - written < PROMISE_SECONDS
    # Its ports, and its name once squeue has told (22.05 gives the prolog none).
    body = beside.agent.scrape_when(f'job_id="{job_id}",name="pretrain"')
    held = re.findall(rf'^burstscope_job_port\{{device="([^"]+)",job_id="{job_id}"', body, re.M)
    assert len(held) == 9  # the simulated node's nine ports, the whole node
    # MQTT: the job started on the node topic, and bursts carry it.
    wait_for(lambda: node_events(beside, "job_started", job_id), 30, "job_started")
    (started,) = node_events(beside, "job_started", job_id)
    assert 0 <= int(started["time_ns"]) / 1e9 - written < PROMISE_SECONDS

    def tagged_burst() -> bool:
        return any(
            e.get("kind") == "burst" and any(j["job_id"] == job_id for j in e["jobs"])
            for e in beside.events.events()
        )

    wait_for(tagged_burst, 30, "a burst event naming the job")
    # The job ends by itself; every output drops it within a second of the epilog.
    wait_for(lambda: job_id in beside.metrics.gone, 60, f"job {job_id} gone from /metrics")
    epilog = slurm.hook_returned("epilog", job_id)
    assert epilog is not None
    assert beside.metrics.gone[job_id] - epilog[0] < PROMISE_SECONDS
    wait_for(lambda: node_events(beside, "job_ended", job_id), 30, "job_ended")
    (ended,) = node_events(beside, "job_ended", job_id)
    assert int(ended["time_ns"]) / 1e9 - epilog[0] < PROMISE_SECONDS
    # The trace: which job held which port when, to within the same second.
    # A job's fields changing (its name from squeue) starts a new span of the same ports.
    spans = [s for s in read_job_spans(beside.trace()) if s.job.job_id == job_id]
    ports = {(s.device, s.port) for s in spans}
    assert len(ports) == 9 and {s.rule for s in spans} == {"whole_node"}
    for device, port in ports:
        held = sorted((s for s in spans if (s.device, s.port) == (device, port)), key=start)
        assert 0 <= held[0].start_ns / 1e9 - written < PROMISE_SECONDS
        assert all(a.end_ns == b.start_ns for a, b in itertools.pairwise(held))
        last = held[-1].end_ns
        assert last is not None and last / 1e9 - epilog[0] < PROMISE_SECONDS
        assert held[-1].job.name == "pretrain"


def start(span: JobSpan) -> int:
    return span.start_ns


def test_a_cancelled_job_leaves_every_output(beside: Beside) -> None:
    slurm = beside.slurm
    job_id = slurm.sbatch("--wrap=sleep 60")
    wait_for(lambda: job_id in beside.metrics.first, 30, f"job {job_id} in /metrics")
    slurm.run("scancel", job_id, check=True)
    wait_for(lambda: job_id in beside.metrics.gone, 30, f"job {job_id} gone from /metrics")
    epilog = slurm.hook_returned("epilog", job_id)
    assert epilog is not None
    assert beside.metrics.gone[job_id] - epilog[0] < PROMISE_SECONDS
    wait_for(lambda: node_events(beside, "job_ended", job_id), 30, "job_ended")
    slurm.wait_idle()
