"""The Jobs row, the job variable and the job alerts against a real Prometheus.

Two nodes, each served by the agent's own exporter and HTTP server (collector/exporter.py,
collector/http.py) over snapshots whose job figures grow with time, as a running agent's
do: node A (127.0.0.1) is shared by Slurm jobs 4242 (alice, saturated in 10% of its compute
port directions' time) and 4243 (bob, 0.5%); node B (127.0.0.2) runs the Kubernetes job
team-a/llama (no user, 10%). Prometheus (Debian's ``prometheus``) scrapes them every second
with both rule files, scaled down (every ``for:`` cut to 2 s, every 5 m window to 10 s: a
counter younger than its window reads low, as rate() spreads the increase it saw over the
whole window), and the example configuration's host relabelling. Checks: every panel
query that reads job series returns data, for every job and for one; the job variable
lists the jobs; the job alerts fire for the saturating jobs only, naming the job, its user
and ports, with a link that opens the fleet overview on the job and node; a job that ends
leaves the panels and its alert resolves. tests/test_prometheus_integration.py and
tests/test_fleet.py run the same panels on real agents with one whole-node job (the shipped
prolog's). Skips without the binary; fails under BURSTSCOPE_REQUIRE_INTEGRATION=1.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from burstscope.collector.exporter import BurstscopeCollector
from burstscope.collector.http import MetricsServer
from burstscope.collector.jobs.model import (
    COMPUTE,
    KUBERNETES,
    RULE_DEVICE,
    RULE_NUMA_NODE,
    RULE_PCIE_SWITCH,
    SLURM,
    STORAGE,
    Holding,
    Job,
    JobFigures,
    JobTable,
)
from burstscope.collector.snapshot import TIMING_BUCKETS_SECONDS, Health, Snapshot
from burstscope.detectors.config import Thresholds
from burstscope.testing.processes import free_port, wait_for
from burstscope.testing.simulated_fleet import running_prometheus
from dashboards.rules import recorded_names
from tests.conftest import require_binary
from tests.test_dashboards import link_problems
from tests.test_prometheus_integration import Prometheus, test_rule_copy

pytestmark = pytest.mark.integration

DASHBOARDS = Path(__file__).resolve().parent.parent / "dashboards"
RATE_INTERVAL = "10s"  # $__rate_interval at a 1 s scrape (>= 4 scrapes)
INTERVAL = "5s"  # $__interval: a few scrapes, so max_over_time always has a sample
JOB_RULES = [name for name in recorded_names() if name.startswith("instance_job_id:")]


@dataclass(frozen=True)
class RunningJob:
    """A job on a served node: who it is, what it holds, and how fast its figures grow."""

    job: Job
    holdings: tuple[Holding, ...]
    saturated_per_second: float  # seconds, both directions of every compute port summed
    hidden_per_second: float
    burst_bytes_per_second: int


class ServedNode:
    """One node's /metrics: the exporter over a snapshot of the jobs running now."""

    def __init__(self, address: str, jobs: list[RunningJob]) -> None:
        self._lock = threading.Lock()
        self._jobs = {running.job.job_id: (running, time.monotonic()) for running in jobs}
        timing = np.zeros(len(TIMING_BUCKETS_SECONDS) + 1, dtype=np.int64)
        self._health = Health(0, 0, 0, False, 0, 1_000_000, True, timing, 0.0, timing, 0.0, 0)
        registry = CollectorRegistry()
        registry.register(BurstscopeCollector(self.snapshot, version="test"))
        self.server = MetricsServer(registry, f"{address}:0")
        self.instance = f"{address}:{self.server.port}"

    def snapshot(self) -> Snapshot:
        now = time.monotonic()
        with self._lock:
            running = list(self._jobs.values())
        figures = {
            job.job.job_id: JobFigures(
                job.saturated_per_second * (now - started),
                job.hidden_per_second * (now - started),
                int(job.burst_bytes_per_second * (now - started)),
            )
            for job, started in running
        }
        table = JobTable.build(
            [job.job for job, _ in running], [h for job, _ in running for h in job.holdings]
        )
        return Snapshot(
            "sim",
            time.time_ns(),
            (),
            self._health,
            None,
            Thresholds(),
            jobs=table,
            job_figures=figures,
        )

    def end(self, job_id: str) -> None:
        """The job's epilog ran: its series leave the next scrape."""
        with self._lock:
            del self._jobs[job_id]


def slurm_job(
    job_id: str, user: str, name: str, ports: dict[str, str], rule: str, saturated: float
) -> RunningJob:
    """A Slurm job holding ``ports`` (device -> role) by ``rule``; ``saturated``: its share
    of its compute port directions' time, hidden saturated a tenth of that."""
    holdings = tuple(Holding(job_id, device, 1, role, rule) for device, role in ports.items())
    directions = 2 * sum(role == COMPUTE for role in ports.values())
    return RunningJob(
        Job(job_id, SLURM, user, name, nodes="gpu-[001-002]"),
        holdings,
        saturated * directions,
        saturated * directions / 10,
        int(saturated * 50e9),
    )


@pytest.fixture(scope="module")
def nodes() -> Iterator[tuple[ServedNode, ServedNode]]:
    shared = ServedNode(
        "127.0.0.1",
        [
            slurm_job(
                "4242",
                "alice",
                "llama-pretrain",
                {"mlx5_0": COMPUTE, "mlx5_1": COMPUTE, "mlx5_4": STORAGE},
                RULE_PCIE_SWITCH,
                0.1,
            ),
            slurm_job(
                "4243",
                "bob",
                "bert-finetune",
                {"mlx5_2": COMPUTE, "mlx5_3": COMPUTE},
                RULE_NUMA_NODE,
                0.005,
            ),
        ],
    )
    pod = Job("team-a/llama", KUBERNETES, name="llama", namespace="team-a", pod="llama-worker-0")
    single = ServedNode(
        "127.0.0.2",
        [RunningJob(pod, (Holding(pod.job_id, "mlx5_0", 1, COMPUTE, RULE_DEVICE),), 0.2, 0, 0)],
    )
    try:
        yield shared, single
    finally:
        shared.server.close()
        single.server.close()


@pytest.fixture(scope="module")
def prometheus(
    nodes: tuple[ServedNode, ServedNode], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    binary = require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    rules = test_rule_copy(tmp)
    for name in rules:
        (tmp / name).write_text((tmp / name).read_text().replace("[5m]", f"[{RATE_INTERVAL}]"))
    targets = [node.instance for node in nodes]
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: {json.dumps(rules)}\n"
        "scrape_configs:\n  - job_name: burstscope\n"
        f"    static_configs:\n      - targets: {json.dumps(targets)}\n"
        # The host label of prometheus.example.yml: the rules aggregate without() so it stays.
        "    relabel_configs:\n      - source_labels: [__address__]\n"
        "        regex: '(.+):\\d+'\n        target_label: host\n        replacement: '$1'\n"
    )
    with running_prometheus(binary, tmp / "prometheus.yml", tmp / "data", free_port()) as server:
        prom = Prometheus(server.url, server.process)
        # A window full of samples (a 1 s scrape: 10 in 10 s), so the shares are whole.
        full = f"count_over_time(burstscope_job_info[{RATE_INTERVAL}]) >= 10"
        wait_for(lambda: len(prom.query(full)["data"]["result"]) == 3, 60, "10 s of every job")
        wait_for(
            lambda: len(prom.query(JOB_RULES[0])["data"]["result"]) == 3,
            60,
            "every job's saturated share recorded",
        )
        yield prom


def substitute(expr: str, instance: str = ".*", job_id: str = ".*") -> str:
    """Grafana's variables: the given node and job, everything else "All"."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__interval", INTERVAL)
    expr = expr.replace('"$instance"', f'"{instance}"').replace('"$job_id"', f'"{job_id}"')
    return re.sub(r"\$(cluster|job|device|port|direction)\b", ".*", expr)


def job_targets() -> list[tuple[str, str, str]]:
    """(dashboard, panel [ref], expr) of every target that reads job series."""
    found = []
    for path in sorted((DASHBOARDS / "grafana").glob("*.json")):
        stack = list(json.loads(path.read_text())["panels"])
        while stack:
            panel = stack.pop(0)
            stack.extend(panel.get("panels", []))
            for target in panel.get("targets", []):
                if "burstscope_job_" in target["expr"] or "instance_job_id:" in target["expr"]:
                    title = f"{panel['title']} [{target['refId']}]"
                    found.append((path.stem, title, target["expr"]))
    return found


def test_every_job_panel_query_returns_the_jobs_asked_for(
    prometheus: Prometheus, nodes: tuple[ServedNode, ServedNode]
) -> None:
    shared, _ = nodes
    targets = job_targets()
    assert {dashboard for dashboard, _, _ in targets} == {"fleet-overview", "port-drilldown"}
    assert len(targets) >= 8
    wait_for(
        lambda: prometheus.query("rate(burstscope_job_burst_bytes_total[10s]) > 0")["data"][
            "result"
        ],
        30,
        "burst bytes rates",
    )
    everywhere = {"4242", "4243", "team-a/llama"}
    # The fleet overview: every node and job, then one job; the drill-down: one node (it
    # has no job variable), every job holding its ports.
    asked = {
        "fleet-overview": [(".*", ".*", everywhere), (".*", "4243", {"4243"})],
        "port-drilldown": [(shared.instance, ".*", {"4242", "4243"})],
    }
    problems = []
    for dashboard, title, expr in targets:
        for instance, job_id, wanted in asked[dashboard]:
            answer = prometheus.query(substitute(expr, instance, job_id))
            if answer.get("status") != "success":
                problems.append(f"{dashboard}: {title}: {answer.get('error')}")
                continue
            jobs = {r["metric"].get("job_id") for r in answer["data"]["result"]}
            if jobs != wanted:
                problems.append(f"{dashboard}: {title}: job_id {job_id}: {jobs or 'no data'}")
    assert problems == []


def test_jobs_table_shows_each_jobs_share_user_and_name(prometheus: Prometheus) -> None:
    """The Jobs row's first query: 10% for the saturating jobs, 0.5% for the quiet one, with
    the user and name its scheduler gave."""
    table = next(expr for _, title, expr in job_targets() if title == "Jobs on each node [A]")
    found = {
        r["metric"]["job_id"]: (
            r["metric"].get("user", ""),
            r["metric"]["name"],
            float(r["value"][1]),
        )
        for r in prometheus.query(substitute(table))["data"]["result"]
    }
    assert {job: (user, name) for job, (user, name, _) in found.items()} == {
        "4242": ("alice", "llama-pretrain"),
        "4243": ("bob", "bert-finetune"),
        "team-a/llama": ("", "llama"),
    }
    shares = {job: share for job, (_, _, share) in found.items()}
    assert shares["4242"] == pytest.approx(0.1, rel=0.2)
    assert shares["4243"] == pytest.approx(0.005, rel=0.2)
    assert shares["team-a/llama"] == pytest.approx(0.1, rel=0.2)


def test_job_variable_lists_every_running_job(prometheus: Prometheus) -> None:
    fleet = json.loads((DASHBOARDS / "grafana" / "fleet-overview.json").read_text())
    variable = next(v for v in fleet["templating"]["list"] if v["name"] == "job_id")
    match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
    assert match is not None
    selector = substitute(match[1])
    values = prometheus.get("/api/v1/label/job_id/values", 120, **{"match[]": selector})
    assert set(values["data"]) == {"4242", "4243", "team-a/llama"}


def firing(prometheus: Prometheus, alert: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (a["labels"]["job_id"], a["labels"]["instance"]): a
        for a in prometheus.alerts(alert)
        if a["state"] == "firing"
    }


def test_job_alerts_fire_for_the_saturating_jobs_only_and_lead_to_them(
    prometheus: Prometheus, nodes: tuple[ServedNode, ServedNode]
) -> None:
    shared, single = nodes
    saturating = {("4242", shared.instance), ("team-a/llama", single.instance)}
    alerts = wait_for(
        lambda: (
            (found := firing(prometheus, "BurstscopeJobBurstSaturation")).keys() >= saturating
            and found
        ),
        60,
        "BurstscopeJobBurstSaturation for jobs 4242 and team-a/llama",
    )
    assert set(alerts) == saturating  # never the quiet job 4243 on the same node
    alice = alerts[("4242", shared.instance)]
    assert (alice["labels"]["user"], alice["labels"]["name"]) == ("alice", "llama-pretrain")
    assert alice["labels"]["host"] == "127.0.0.1"
    assert "Its compute ports there: mlx5_0/1, mlx5_1/1." in alice["annotations"]["description"]
    assert "job 4242 (llama-pretrain) of user alice" in alice["annotations"]["description"]
    for (job_id, instance), alert in alerts.items():
        url = alert["annotations"]["dashboard_url"]
        assert link_problems(url) == []
        query = dict(urllib.parse.parse_qsl(url.partition("?")[2]))
        assert query == {"var-job_id": job_id, "var-instance": instance}
    # Hidden saturation pages on any: both Slurm jobs hide a tenth of theirs (the quiet one
    # 0.05% of its time); the pod hides none and stays silent.
    hiding = {("4242", shared.instance), ("4243", shared.instance)}
    hidden = wait_for(
        lambda: (found := set(firing(prometheus, "BurstscopeJobHiddenBursts"))) >= hiding and found,
        60,
        "BurstscopeJobHiddenBursts for jobs 4242 and 4243",
    )
    assert hidden == hiding


def test_a_job_that_ends_leaves_the_panels_and_its_alert_resolves(
    prometheus: Prometheus, nodes: tuple[ServedNode, ServedNode]
) -> None:
    shared, _ = nodes
    wait_for(
        lambda: ("4242", shared.instance) in firing(prometheus, "BurstscopeJobBurstSaturation"),
        60,
        "BurstscopeJobBurstSaturation for job 4242",
    )
    shared.end("4242")
    table = next(expr for _, title, expr in job_targets() if title == "Jobs on each node [A]")

    def gone() -> bool:
        rows = prometheus.query(substitute(table, job_id="4242"))["data"]["result"]
        return not rows and not any(
            job_id == "4242" for job_id, _ in firing(prometheus, "BurstscopeJobBurstSaturation")
        )

    wait_for(gone, 30, "job 4242's rows and alert gone after it ended")
    assert prometheus.query('burstscope_job_port{job_id="4242"}')["data"]["result"] == []
    still = {r["metric"]["job_id"] for r in prometheus.query(substitute(table))["data"]["result"]}
    assert still == {"4243", "team-a/llama"}
