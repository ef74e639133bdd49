"""A real Prometheus scraping the real agent: every dashboard query and BurstscopeBurstSaturation.

An emulated 3-port node (bench.exporter.EmulatedNode) is written by a thread of this test:
mlx5_0 transmits at line rate (saturating), mlx5_1 is quiet, mlx5_2 bursts at line rate
for 100 ms of every 500 ms (bursts for the burst panels); one Slurm job holds the node
(the shipped prolog's file, for the Jobs panels). The agent samples it every 1 ms;
Prometheus (Debian's ``prometheus``) scrapes it every 1 s and evaluates the rules every
1 s, from a copy of the rules with every ``for:`` shortened to 2 s and every group evaluated
every 1 s. Skips without the binary; fails under BURSTSCOPE_REQUIRE_INTEGRATION=1.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burstscope.straggler_watch import HELP as STRAGGLER_CONSUMER_HELP
from burstscope.testing import simulated_fleet
from burstscope.testing.emulated_node import CounterWriter, EmulatedNode, Load, running_agent
from burstscope.testing.processes import free_port, wait_for, wait_until
from burstscope.testing.slurm_jobs import start_job
from dashboards.rules import recorded_names
from tests.conftest import require_binary

pytestmark = pytest.mark.integration

DASHBOARDS = Path(__file__).resolve().parent.parent / "dashboards"
RATE_INTERVAL = "10s"  # what $__rate_interval would be at a 1 s scrape (>= 4 scrapes)
INTERVAL = "5s"  # $__interval: a few scrapes, so max_over_time always has a sample
# Families an emulated tree cannot produce: PFC counters come from ethtool on a real netdev.
STRAGGLER_CONSUMER = tuple(STRAGGLER_CONSUMER_HELP)  # the fleet consumer's series
NEEDS_REAL_NETDEV = ("burstscope_port_pfc_pause_frames_total", "burstscope_port_pfc_pause_")


class Prometheus(simulated_fleet.Prometheus):
    """The test kit's Prometheus client, with the two questions these tests ask."""

    def query(self, expr: str) -> Any:
        return self.get("/api/v1/query", query=expr)  # a parse error is a 400 with a JSON body

    def alerts(self, name: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get("/api/v1/alerts")["data"]["alerts"]
        return [a for a in found if a["labels"]["alertname"] == name]


def test_rule_copy(tmp: Path) -> list[str]:
    """The rules with every ``for:`` cut to 2 s and every group's ``interval:`` to 1 s (the
    day-long maxima of burstscope.link), so alerts fire and rules record within a test."""
    return simulated_fleet.rule_files(tmp, shorten_for=True, interval="1s")


test_rule_copy.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedNode]:
    emulated = EmulatedNode(tmp_path_factory.mktemp("node"), ["mlx5_0", "mlx5_1", "mlx5_2"])
    emulated.build()
    writer = CounterWriter(emulated)
    now = time.monotonic()
    writer.set_load("mlx5_0", "transmit", Load(1.0), now)
    writer.set_load("mlx5_0", "receive", Load(0.3), now)
    writer.set_load("mlx5_2", "transmit", Load(1.0, period_s=0.5, duty=0.2), now)
    writer.set_load("mlx5_2", "receive", Load(1.0, period_s=0.5, duty=0.2), now)
    with writer.running_in_thread():
        yield emulated


@pytest.fixture(scope="module")
def agent_url(node: EmulatedNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The agent, with one Slurm job holding the whole node (the shipped prolog's file), so
    the Jobs panels, the job variable and the job rules have a job to show."""
    jobs = tmp_path_factory.mktemp("jobs")
    start_job(jobs, 4242)
    with running_agent(node.root, "--slurm-jobs-dir", str(jobs)) as (_, url):
        yield url


@pytest.fixture(scope="module")
def prometheus(agent_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    rules = test_rule_copy(tmp)
    target = urllib.parse.urlparse(agent_url).netloc
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: {json.dumps(rules)}\n"
        "scrape_configs:\n  - job_name: burstscope\n"
        f"    static_configs:\n      - targets: [{json.dumps(target)}]\n"
    )
    try:
        config, data = tmp / "prometheus.yml", tmp / "data"
        with simulated_fleet.running_prometheus(binary, config, data, free_port()) as server:
            yield Prometheus(server.url, server.process)
    finally:
        shutil.rmtree(tmp / "data", ignore_errors=True)


def substitute(expr: str) -> str:
    """Grafana's template variables as "All" (regex .*) and a 1 s scrape's rate interval."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__interval", INTERVAL)
    return re.sub(r"\$(cluster|job|instance|device|port|direction|job_id)\b", ".*", expr)


def dashboard_targets() -> list[tuple[str, str, str]]:
    found = []
    for path in sorted((DASHBOARDS / "grafana").glob("*.json")):
        dashboard = json.loads(path.read_text())
        stack = list(dashboard["panels"])
        while stack:
            panel = stack.pop(0)
            stack.extend(panel.get("panels", []))
            for target in panel.get("targets", []):
                found.append((path.stem, f"{panel['title']} [{target['refId']}]", target["expr"]))
    return found


def test_burst_saturation_fires_for_line_rate_and_not_for_quiet(prometheus: Prometheus) -> None:
    above = (
        "instance_device_port_direction:burstscope_port_samples_above_95_percent_per_samples"
        ":ratio_rate5m"
    )

    def saturated() -> set[tuple[str, str]]:
        result = prometheus.query(f"{above} > 0.05")["data"]["result"]
        return {(r["metric"]["device"], r["metric"]["direction"]) for r in result}

    def firing() -> list[dict[str, Any]]:
        return [a for a in prometheus.alerts("BurstscopeBurstSaturation") if a["state"] == "firing"]

    # One alert for the node, counting its port directions above the share: mlx5_0
    # transmit (line rate) and mlx5_2 (line rate 20% of the time), never quiet mlx5_1.
    alert = wait_for(firing, 45, "BurstscopeBurstSaturation firing for the node")[0]
    assert ("mlx5_0", "transmit") in saturated()
    assert not any(device == "mlx5_1" for device, _ in saturated())
    assert "device" not in alert["labels"]
    assert 1 <= float(alert["value"]) <= 3
    share = prometheus.query(f'{above}{{device="mlx5_1"}}')["data"]["result"]
    assert share and all(float(r["value"][1]) == 0.0 for r in share)


def test_every_dashboard_query_parses_and_returns_data(prometheus: Prometheus) -> None:
    # Enough history for rate() over the rate interval and one slow poll.
    wait_for(
        lambda: prometheus.query(f"rate(burstscope_port_bursts_total[{RATE_INTERVAL}]) > 0")[
            "data"
        ]["result"],
        45,
        "a burst rate in Prometheus",
    )
    problems = []
    exempt = []
    targets = dashboard_targets()
    assert len(targets) > 20
    for dashboard, title, expr in targets:
        answer = prometheus.query(substitute(expr))
        if answer.get("status") != "success":
            problems.append(f"{dashboard}: {title}: {answer.get('error')}")
        elif not answer["data"]["result"]:
            if any(name in expr for name in (*NEEDS_REAL_NETDEV, *STRAGGLER_CONSUMER)):
                exempt.append(title)
            else:
                problems.append(f"{dashboard}: {title}: no data for {substitute(expr)}")
    assert problems == []
    # The fleet consumer's panels: tests/test_stragglers_live.py shows them with data.
    assert sorted(exempt) == [
        "PFC pause frames [A]",
        "Slow rails across nodes [A]",
        "Straggler score, highest nodes [A]",
    ]


def test_template_variable_queries_return_values(prometheus: Prometheus) -> None:
    for path in sorted((DASHBOARDS / "grafana").glob("*.json")):
        for variable in json.loads(path.read_text())["templating"]["list"]:
            if variable["type"] != "query":
                continue
            match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
            assert match is not None, variable["definition"]
            selector, label = substitute(match.group(1)), match.group(2)
            values = prometheus.get(f"/api/v1/label/{label}/values", **{"match[]": selector})
            assert values["status"] == "success", variable["name"]
            # No cluster label here: the cluster variable lists nothing, and its "All" (.*)
            # matches series without the label (tests/test_operator_labels.py has one).
            assert values["data"] or variable["name"] == "cluster", variable["name"]


def test_recording_rules_produce_series(prometheus: Prometheus) -> None:
    names = recorded_names(DASHBOARDS / "prometheus" / "recording.rules.yml")
    # Per-node counts record nothing while nothing is counted: the emulated node writes
    # no congestion counters, so no port is congested while saturated; no port is silent
    # under its job or below its peers. The PFC watchdog is off: no storm counter to record.
    silent = {
        "instance:burstscope_ports_congested_while_saturated:count",
        "instance:burstscope_ports_silent_under_job:count",
        "instance:burstscope_ports_below_peers:count",
        "instance:burstscope_pfc_storms:sum",
    }
    assert silent <= set(names)

    def missing() -> list[str]:
        return [n for n in names if n not in silent and not prometheus.query(n)["data"]["result"]]

    wait_until(lambda: not missing(), 30)
    assert missing() == []
