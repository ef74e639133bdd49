"""The shipped rules and dashboards on the labels prometheus-operator gives a target.

There is no Kubernetes here, so a real Prometheus (Debian's ``prometheus``) reproduces the
operator's scrape configuration with relabelling, as the operator generates it for a
PodMonitor (https://prometheus-operator.dev/docs/api-reference/api/#monitoring.coreos.com/v1.PodMonitorSpec):
the job is ``<namespace>/<PodMonitor name>`` (``monitoring/burstscope-agent``, where the
static configuration says ``burstscope``), and ``namespace``, ``pod``, ``container`` and
``endpoint`` come from the pod's discovery labels (here static ``__meta_kubernetes_*``
labels that the same relabel rules copy); a ``cluster`` label is added as a multi-cluster
site adds it. Two targets: an agent sampling an emulated node whose mlx5_0 transmits at line
rate, with a Slurm job holding the node, and a pod whose agent is down (nothing listens on
its port). The rules are the generated defaults with every ``for:`` cut to 2 s (as
tests/test_prometheus_integration.py does); neither they nor the dashboards are edited.

Shown: every template variable lists values and every panel query returns data, with the
variables set as Grafana sets them (the cluster chosen, "All" jobs as the alternation of the
listed ones); every recording rule records, keeping the operator's labels; and
BurstscopeAgentDown fires for the dead pod and BurstscopeBurstSaturation for the saturating
node, each labelled with its pod, and every rule evaluates without error.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from burstscope.testing import simulated_fleet
from burstscope.testing.emulated_node import CounterWriter, EmulatedNode, Load, running_agent
from burstscope.testing.processes import free_port, wait_for
from burstscope.testing.slurm_jobs import start_job
from dashboards.rules import recorded_names
from tests.conftest import require_binary
from tests.test_fleet import STRAGGLER_CONSUMER
from tests.test_prometheus_integration import (
    INTERVAL,
    NEEDS_REAL_NETDEV,
    RATE_INTERVAL,
    Prometheus,
    dashboard_targets,
    test_rule_copy,
)

pytestmark = pytest.mark.integration

DASHBOARDS = Path(__file__).resolve().parent.parent / "dashboards"
ALERTS_FILE = DASHBOARDS / "prometheus" / "alerts.rules.yml"
NAMESPACE = "monitoring"
JOB = f"{NAMESPACE}/burstscope-agent"  # what the operator calls a PodMonitor's job
CLUSTER = "east"
LIVE_POD = "burstscope-agent-x7k2p"
DEAD_POD = "burstscope-agent-q4m9z"
OPERATOR_LABELS = ("namespace", "pod", "container", "endpoint", "cluster")

# The relabelling prometheus-operator writes for a PodMonitor endpoint (its generated
# scrape configuration): discovery labels to target labels, and the job.
RELABEL = [
    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
    {"target_label": "endpoint", "replacement": "metrics"},
    {"target_label": "job", "replacement": JOB},
    # A multi-cluster site's cluster label (here a target label, so local queries see it).
    {"target_label": "cluster", "replacement": CLUSTER},
]


def pod(address: str, name: str) -> dict[str, Any]:
    """A static target with the discovery labels the operator's Kubernetes SD would give."""
    return {
        "targets": [address],
        "labels": {
            "__meta_kubernetes_namespace": NAMESPACE,
            "__meta_kubernetes_pod_name": name,
            "__meta_kubernetes_pod_container_name": "agent",
        },
    }


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("operator")
    node = EmulatedNode(tmp / "sys", ["mlx5_0", "mlx5_1", "mlx5_2"]).build()
    writer = CounterWriter(node)
    now = time.monotonic()
    writer.set_load("mlx5_0", "transmit", Load(1.0), now)
    writer.set_load("mlx5_0", "receive", Load(0.3), now)
    writer.set_load("mlx5_2", "transmit", Load(1.0, period_s=0.5, duty=0.2), now)
    writer.set_load("mlx5_2", "receive", Load(1.0, period_s=0.5, duty=0.2), now)
    jobs = tmp / "jobs"
    jobs.mkdir()
    start_job(jobs, 4242)
    rules = test_rule_copy(tmp)
    with (
        writer.running_in_thread(),
        running_agent(node.root, "--slurm-jobs-dir", str(jobs)) as (_, url),
    ):
        live = url.removeprefix("http://").removesuffix("/metrics")
        dead = f"127.0.0.1:{free_port()}"  # a pod whose agent is not running
        scrape = {
            "job_name": f"podMonitor/{JOB}/0",  # the operator's job_name, relabelled below
            "static_configs": [pod(live, LIVE_POD), pod(dead, DEAD_POD)],
            "relabel_configs": RELABEL,
        }
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": rules,
            "scrape_configs": [scrape],
        }
        # JSON is YAML: Prometheus reads the configuration as it is written here.
        (tmp / "prometheus.yml").write_text(json.dumps(config, indent=2))
        with simulated_fleet.running_prometheus(
            binary, tmp / "prometheus.yml", tmp / "data", free_port()
        ) as server:
            yield Prometheus(server.url, server.process)


# As in tests/test_prometheus_integration.py: the emulated node's congestion counters do not
# rise, so no port is congested while saturated and that count records nothing; no port is
# silent under its job or below its peers; the PFC watchdog is off (no storm counter).
SILENT = {
    "instance:burstscope_ports_congested_while_saturated:count",
    "instance:burstscope_ports_silent_under_job:count",
    "instance:burstscope_ports_below_peers:count",
    "instance:burstscope_pfc_storms:sum",
}


@pytest.fixture(scope="module")
def recorded(prometheus: Prometheus) -> list[str]:
    """Every recording rule's name, once each has recorded (the panels read them)."""
    names = recorded_names(DASHBOARDS / "prometheus" / "recording.rules.yml")

    def missing() -> list[str]:
        return [n for n in names if n not in SILENT and not prometheus.query(n)["data"]["result"]]

    wait_for(lambda: not missing(), 45, "every recording rule to produce a series")
    return names


def regex_value(values: list[str]) -> str:
    """A multi-value variable's values in a regex matcher, as Grafana's Prometheus data
    source writes them: each escaped, several as an alternation."""
    escaped = [re.sub(r"[$^*{}\[\]'+?.()|\\]", lambda m: "\\\\" + m[0], v) for v in values]
    return escaped[0] if len(escaped) == 1 else f"({'|'.join(escaped)})"


def variable_values(prometheus: Prometheus, dashboard: dict[str, Any]) -> dict[str, str]:
    """Each variable's value as Grafana resolves them in order: label_values() on what is
    chosen so far; the cluster chosen (the one listed), a single-value variable its first
    value, "All" its allValue or else every listed value."""
    chosen: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        name = variable["name"]
        if variable["type"] == "custom":
            chosen[name] = variable["allValue"]
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
        assert match is not None, variable["definition"]
        selector = fill(match[1], chosen)
        answer = prometheus.get(f"/api/v1/label/{match[2]}/values", 120, **{"match[]": selector})
        values: list[str] = answer["data"]
        assert values, f"{dashboard['uid']}: variable {name} lists nothing for {selector}"
        if name == "cluster":
            assert values == [CLUSTER]
            chosen[name] = regex_value(values)
        elif not variable["includeAll"]:
            chosen[name] = values[0]
        else:
            chosen[name] = variable.get("allValue") or regex_value(values)
    return chosen


def fill(expr: str, chosen: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__interval", INTERVAL)
    return re.sub(r"\$(\w+)\b", lambda m: chosen.get(m[1], m[0]), expr)


def test_every_panel_query_returns_data_on_operator_labels(
    prometheus: Prometheus, recorded: list[str]
) -> None:
    wait_for(
        lambda: prometheus.query(f"rate(burstscope_port_bursts_total[{RATE_INTERVAL}]) > 0")[
            "data"
        ]["result"],
        45,
        "a burst rate in Prometheus",
    )
    chosen = {
        path.stem: variable_values(prometheus, json.loads(path.read_text()))
        for path in sorted((DASHBOARDS / "grafana").glob("*.json"))
    }
    assert {values["job"] for values in chosen.values()} == {JOB}
    problems, exempt = [], []
    for dashboard, title, expr in dashboard_targets():
        query = fill(expr, chosen[dashboard])
        answer = prometheus.query(query)
        if answer.get("status") != "success":
            problems.append(f"{dashboard}: {title}: {answer.get('error')}")
        elif not answer["data"]["result"]:
            if any(name in expr for name in (*NEEDS_REAL_NETDEV, *STRAGGLER_CONSUMER)):
                exempt.append(title)
            else:
                problems.append(f"{dashboard}: {title}: no data for {query}")
    assert problems == [], "\n".join(problems)
    # The fleet consumer's panels: tests/test_stragglers_live.py shows them with data.
    assert sorted(exempt) == [
        "PFC pause frames [A]",
        "Slow rails across nodes [A]",
        "Straggler score, highest nodes [A]",
    ]


def test_every_recording_rule_records_with_the_operator_labels(
    prometheus: Prometheus, recorded: list[str]
) -> None:
    unlabelled = {"global:burstscope_burst_saturation_share:threshold"}  # vector(0.05)
    for name in set(recorded) - unlabelled:  # those in SILENT too, when they record
        for series in prometheus.query(name)["data"]["result"]:
            labels = series["metric"]
            # The agents' up is recorded for the pod whose agent is not running too (0).
            pods = (
                {LIVE_POD, DEAD_POD} if name == "instance:burstscope_agent_up:min" else {LIVE_POD}
            )
            assert labels["job"] == JOB and labels["pod"] in pods, (name, labels)
            assert all(label in labels for label in OPERATOR_LABELS), (name, labels)


def test_alerts_fire_on_the_operator_labels(prometheus: Prometheus) -> None:
    def firing(alert: str) -> list[dict[str, Any]]:
        return [a for a in prometheus.alerts(alert) if a["state"] == "firing"]

    down = wait_for(lambda: firing("BurstscopeAgentDown"), 45, "BurstscopeAgentDown firing")
    assert [a["labels"]["pod"] for a in down] == [DEAD_POD]
    assert down[0]["labels"]["job"] == JOB and down[0]["labels"]["cluster"] == CLUSTER
    found = wait_for(
        lambda: firing("BurstscopeBurstSaturation"), 45, "BurstscopeBurstSaturation firing"
    )
    assert [a["labels"]["pod"] for a in found] == [LIVE_POD]
    assert all(found[0]["labels"][label] for label in OPERATOR_LABELS)
    # Every rule evaluates without error on these labels: no join of the alerts (the job
    # alerts' on (cluster, job, instance, job_id), BurstscopePortDisappeared's) finds two
    # series where it expects one. (The job alerts' share, a rate over 5 m, takes over a
    # minute of history to pass its threshold; the Jobs panels above run the same join.)
    groups = prometheus.get("/api/v1/rules")["data"]["groups"]
    unhealthy = [
        f"{rule['name']}: {rule.get('lastError')}"
        for group in groups
        for rule in group["rules"]
        if rule["health"] != "ok"
    ]
    assert unhealthy == []
    # Every rule of both files was loaded and evaluated.
    in_files = sum(
        len(group["rules"])
        for path in (DASHBOARDS / "prometheus" / "recording.rules.yml", ALERTS_FILE)
        for group in yaml.safe_load(path.read_text())["groups"]
    )
    assert len([rule for group in groups for rule in group["rules"]]) == in_files
