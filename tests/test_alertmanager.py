"""Alertmanager end to end: the shipped alertmanager.example.yml between a real Prometheus and
a webhook, for real agents on three simulated nodes.

One node saturates (``--source sim``, the MoE profile: its collectives reach line rate), one
is quiet (an emulated sysfs tree whose counters never move), and one saturates until its agent
is killed (SIGKILL, as a crash or an OOM kill would), then comes back on the same address.
Prometheus (Debian's ``prometheus``) scrapes them every second and evaluates a copy of the
shipped rules every second, every ``for:`` cut to seconds (BurstscopeAgentDown's shortest, as
in the shipped rules); Alertmanager (Debian's ``prometheus-alertmanager``, 0.25) runs the
example file with its receivers pointed at this test's webhook and its timers cut to 1 s.
Checked: the saturation page reaches the warning receiver for the saturating node only,
grouped per node, with its runbook_url, within ``for:`` plus ``group_wait``; the dead agent's
BurstscopeAgentDown holds back that node's other alerts (Alertmanager lists them as
inhibited by it) until the agent is back, when its resolved notification arrives and the
held-back alert is notified. Skips without the binaries; fails under
BURSTSCOPE_REQUIRE_INTEGRATION=1.

Formats: Alertmanager's configuration file and webhook payload (docs/configuration.md,
``<webhook_config>``, and the API v2 alert status in api/v2/openapi.yaml of
github.com/prometheus/alertmanager); Prometheus' alerts API (prometheus.io/docs/prometheus/
latest/querying/api/#alerts).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from burstscope.testing import simulated_fleet
from burstscope.testing.emulated_node import EmulatedNode
from burstscope.testing.processes import LoggedProcess, fetch, free_port, metric, wait_for
from tests.conftest import require_binary

pytestmark = pytest.mark.integration

PROMETHEUS_FILES = Path(__file__).resolve().parent.parent / "dashboards" / "prometheus"
EXAMPLE = PROMETHEUS_FILES / "alertmanager.example.yml"
AGENT_DOWN = "BurstscopeAgentDown"
SATURATION = "BurstscopeBurstSaturation"
INTERVAL_S = 1  # scrape and rule evaluation
FOR_S = 6  # every for: but BurstscopeAgentDown's (2 m and 5 m in the shipped rules)
DOWN_FOR_S = 1
GROUP_WAIT_S = 1
RECEIVERS = {"warning": "burstscope-warning", "info": "burstscope-info"}


def test_the_example_passes_amtool_check_config() -> None:
    amtool = require_binary("amtool")
    checked = subprocess.run(
        [amtool, "check-config", str(EXAMPLE)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_the_example_routes_every_severity_and_inhibits_by_a_real_alert() -> None:
    """Each severity the rules use has its route and receiver; the inhibition's source is an
    alert the rules define, matched by name, and it never mutes itself."""
    config = yaml.safe_load(EXAMPLE.read_text())
    rules = [
        rule
        for path in sorted(PROMETHEUS_FILES.glob("*.rules.yml"))
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]
    routed = {
        matcher: route["receiver"]
        for route in config["route"]["routes"]
        for matcher in route["matchers"]
    }
    severities = {rule["labels"]["severity"] for rule in rules}
    assert {f'severity="{s}"': RECEIVERS[s] for s in severities} == routed
    assert {r["name"] for r in config["receivers"]} == set(RECEIVERS.values())
    assert config["route"]["group_by"] == ["alertname", "cluster", "instance"]
    (inhibit,) = config["inhibit_rules"]
    assert inhibit["source_matchers"] == [f'alertname="{AGENT_DOWN}"']
    assert f'alertname!="{AGENT_DOWN}"' in inhibit["target_matchers"]
    assert AGENT_DOWN in {rule["alert"] for rule in rules}
    assert inhibit["equal"] == ["cluster", "instance"]


@dataclass(frozen=True)
class Notification:
    """One POST of Alertmanager's webhook: when it arrived, where, and its JSON."""

    received: float  # time.time()
    path: str
    body: dict[str, Any]

    def about(self, alertname: str, instance: str, status: str = "firing") -> bool:
        return any(
            a["labels"]["alertname"] == alertname
            and a["labels"].get("instance") == instance
            and a["status"] == status
            for a in self.body["alerts"]
        )


class _Webhook(ThreadingHTTPServer):
    notifications: list[Notification]


class _WebhookHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        server = self.server
        assert isinstance(server, _Webhook)
        server.notifications.append(Notification(time.time(), self.path, body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test reads the notifications, not an access log


@contextlib.contextmanager
def running_webhook() -> Iterator[_Webhook]:
    server = _Webhook(("127.0.0.1", 0), _WebhookHandler)
    server.notifications = []
    thread = threading.Thread(target=server.serve_forever, name="webhook", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def seconds(text: str) -> float:
    """An RFC 3339 time as Go writes it (nanoseconds), as a Unix time."""
    match = re.fullmatch(r"([^.]+?)(\.\d+)?(Z|[+-]\d\d:\d\d)", text)
    assert match is not None, text
    zone = "+00:00" if match[3] == "Z" else match[3]
    return datetime.fromisoformat(match[1] + zone).timestamp() + float(match[2] or 0)


def rule_copies(into: Path) -> list[str]:
    """Every shipped rules file with each ``for:`` cut to seconds and each group evaluated
    every second; the expressions and selectors as shipped, whatever job they select."""
    names = []
    for path in sorted(PROMETHEUS_FILES.glob("*.rules.yml")):
        document = yaml.safe_load(path.read_text())
        for group in document["groups"]:
            if "interval" in group:
                group["interval"] = f"{INTERVAL_S}s"
            for rule in group["rules"]:
                if "for" in rule:
                    cut = DOWN_FOR_S if rule.get("alert") == AGENT_DOWN else FOR_S
                    rule["for"] = f"{cut}s"
        (into / path.name).write_text(yaml.safe_dump(document, sort_keys=False))
        names.append(path.name)
    return names


def alertmanager_copy(into: Path, webhook: str) -> Path:
    """The example with every receiver posting to ``webhook``/<receiver> and its timers cut:
    group_wait and group_interval 1 s, repeat_interval long (no repeats in a test)."""
    config = yaml.safe_load(EXAMPLE.read_text())
    routes = [config["route"], *config["route"].get("routes", [])]
    for route in routes:
        for key, value in (("group_wait", GROUP_WAIT_S), ("group_interval", 1)):
            if key in route:
                route[key] = f"{value}s"
        if "repeat_interval" in route:
            route["repeat_interval"] = "1h"
    for receiver in config["receivers"]:
        for hook in receiver["webhook_configs"]:
            hook["url"] = f"{webhook}/{receiver['name']}"
    path = into / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def prometheus_config(into: Path, alertmanager: str, targets: list[str]) -> Path:
    """Scrape and evaluate every second, send alerts to ``alertmanager``; the scrape job named
    as the example Prometheus configuration names it, so the rules' selectors work unchanged."""
    example = yaml.safe_load((PROMETHEUS_FILES / "prometheus.example.yml").read_text())
    config = {
        "global": {"scrape_interval": f"{INTERVAL_S}s", "evaluation_interval": f"{INTERVAL_S}s"},
        "rule_files": rule_copies(into),
        "alerting": {
            "alertmanagers": [{"static_configs": [{"targets": [alertmanager.split("//")[1]]}]}]
        },
        "scrape_configs": [
            {
                "job_name": example["scrape_configs"][0]["job_name"],
                "static_configs": [{"targets": targets}],
            }
        ],
    }
    path = into / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass
class Node:
    """One simulated node: its agent's command line and the address it keeps across restarts."""

    source: list[str]
    port: int = field(default_factory=free_port)
    process: LoggedProcess | None = None

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [sys.executable, "-m", "burstscope", "agent", "--listen", self.instance]
        self.process = LoggedProcess([*argv, "--no-jobs", *self.source], stdout=subprocess.DEVNULL)

    def ticking(self) -> bool:
        assert self.process is not None and self.process.process.poll() is None, (
            f"agent {self.instance} exited: {self.process and self.process.stderr}"
        )
        try:
            body = fetch(f"http://{self.instance}/metrics")
        except OSError:
            return False
        return metric(body, "burstscope_sampler_ticks_total ") > 0

    def stop(self) -> None:
        if self.process is not None and self.process.process.poll() is None:
            self.process.stop()


@contextlib.contextmanager
def running_alertmanager(binary: str, config: Path, data: Path) -> Iterator[str]:
    """Alertmanager on a free loopback port, without its cluster listener (HA gossip binds
    0.0.0.0:9094 unless --cluster.listen-address is empty)."""
    url = f"http://127.0.0.1:{free_port()}"
    server = LoggedProcess(
        [
            binary,
            f"--config.file={config}",
            f"--storage.path={data}",
            f"--web.listen-address={url.removeprefix('http://')}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
    )

    def ready() -> bool:
        assert server.process.poll() is None, f"alertmanager exited: {server.stderr}"
        try:
            return fetch(f"{url}/-/ready") is not None
        except OSError:
            return False

    try:
        wait_for(ready, 60, "alertmanager ready", poll=0.1)
        yield url
    finally:
        server.stop()


@dataclass
class Run:
    """What one run saw: the webhook's notifications and the moments the checks compare."""

    saturating: Node
    quiet: Node
    doomed: Node
    notifications: list[Notification]
    saturation_active_at: float  # Prometheus' activeAt of the saturating node's alert
    killed_at: float
    restarted_at: float
    inhibited: dict[str, Any]  # the doomed node's saturation alert in Alertmanager's API
    agent_down_fingerprint: str
    prometheus_alerts: list[dict[str, Any]]  # at the end

    def first(self, alertname: str, node: Node, status: str = "firing") -> Notification:
        return next(n for n in self.notifications if n.about(alertname, node.instance, status))


def prometheus_alerts(prometheus: simulated_fleet.Prometheus) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = prometheus.get("/api/v1/alerts", timeout=10)["data"]["alerts"]
    return alerts


def alert_of(alerts: list[dict[str, Any]], alertname: str, node: Node) -> dict[str, Any] | None:
    for alert in alerts:
        labels = alert["labels"]
        if labels["alertname"] == alertname and labels.get("instance") == node.instance:
            return alert
    return None


def notified(webhook: _Webhook, alertname: str, node: Node, status: str = "firing") -> bool:
    return any(n.about(alertname, node.instance, status) for n in list(webhook.notifications))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    prometheus_binary = require_binary("prometheus")
    alertmanager_binary = require_binary("prometheus-alertmanager")
    amtool = require_binary("amtool")
    tmp = tmp_path_factory.mktemp("alertmanager")
    quiet_tree = EmulatedNode(tmp / "quiet-sys", ["mlx5_0", "mlx5_1"]).build()
    nodes = [
        Node(["--source", "sim:moe:1"]),
        Node(["--source", "sysfs", "--sysfs-root", str(quiet_tree.root)]),
        Node(["--source", "sim:moe:2"]),
    ]
    saturating, quiet, doomed = nodes
    with contextlib.ExitStack() as stack:
        webhook = stack.enter_context(running_webhook())
        for node in nodes:
            node.start()
            stack.callback(node.stop)
        config = alertmanager_copy(tmp, f"http://127.0.0.1:{webhook.server_address[1]}")
        checked = subprocess.run(
            [amtool, "check-config", str(config)], capture_output=True, text=True, timeout=60
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        alertmanager = stack.enter_context(
            running_alertmanager(alertmanager_binary, config, tmp / "alertmanager-data")
        )
        # Prometheus after the agents answer: a target still starting would page as down.
        wait_for(lambda: all(n.ticking() for n in nodes), 60, "three agents ticking", 0.2)
        prometheus = stack.enter_context(
            simulated_fleet.running_prometheus(
                prometheus_binary,
                prometheus_config(tmp, alertmanager, [n.instance for n in nodes]),
                tmp / "prometheus-data",
                free_port(),
            )
        )

        # The doomed node's agent dies while its saturation alert is pending: its 5 m rates
        # keep the alert going on the samples it left, as they would on a fleet.
        def doomed_pending() -> bool:
            alert = alert_of(prometheus_alerts(prometheus), SATURATION, doomed)
            assert alert is None or alert["state"] == "pending", (
                f"{SATURATION} fired for {doomed.instance} before its agent could be killed"
            )
            return alert is not None

        wait_for(doomed_pending, 60, f"{SATURATION} pending for the doomed node", poll=0.1)
        assert doomed.process is not None
        doomed.process.kill()
        killed_at = time.time()

        wait_for(lambda: notified(webhook, AGENT_DOWN, doomed), 30, f"{AGENT_DOWN} notified", 0.1)
        wait_for(
            lambda: notified(webhook, SATURATION, saturating), 30, f"{SATURATION} notified", 0.1
        )
        saturation = alert_of(prometheus_alerts(prometheus), SATURATION, saturating)
        assert saturation is not None

        # Alertmanager has the doomed node's saturation alert and mutes it (API v2 status).
        def inhibited() -> dict[str, Any] | None:
            with urllib.request.urlopen(f"{alertmanager}/api/v2/alerts", timeout=10) as answer:
                listed: list[dict[str, Any]] = json.loads(answer.read())
            found = [
                a
                for a in listed
                if a["labels"].get("instance") == doomed.instance
                and a["labels"]["alertname"] in (SATURATION, AGENT_DOWN)
            ]
            by_name = {a["labels"]["alertname"]: a for a in found}
            if SATURATION in by_name and by_name[SATURATION]["status"]["inhibitedBy"]:
                return {"alert": by_name[SATURATION], "source": by_name.get(AGENT_DOWN)}
            return None

        muted = wait_for(inhibited, 30, f"{SATURATION} of the dead agent's node inhibited", 0.2)
        # Back on the same address: its BurstscopeAgentDown resolves, the muted alert is sent.
        doomed.start()
        restarted_at = time.time()
        wait_for(
            lambda: notified(webhook, AGENT_DOWN, doomed, "resolved"),
            60,
            f"{AGENT_DOWN} resolved notified",
            0.1,
        )
        wait_for(
            lambda: notified(webhook, SATURATION, doomed),
            30,
            f"{SATURATION} notified for the doomed node once its agent is back",
            0.1,
        )
        yield Run(
            saturating,
            quiet,
            doomed,
            list(webhook.notifications),
            seconds(saturation["activeAt"]),
            killed_at,
            restarted_at,
            muted["alert"],
            muted["source"]["fingerprint"] if muted["source"] else "",
            prometheus_alerts(prometheus),
        )


def test_saturation_pages_the_saturating_node_only_within_for_and_group_wait(run: Run) -> None:
    runbook = next(
        rule["annotations"]["runbook_url"]
        for path in sorted(PROMETHEUS_FILES.glob("*.rules.yml"))
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if rule.get("alert") == SATURATION
    )
    paged = run.first(SATURATION, run.saturating)
    (alert,) = paged.body["alerts"]
    assert paged.body["receiver"] == RECEIVERS["warning"]
    assert paged.path == f"/{RECEIVERS['warning']}"
    assert paged.body["groupLabels"] == {
        "alertname": SATURATION,
        "instance": alert["labels"]["instance"],
    }
    assert alert["annotations"]["runbook_url"] == runbook
    # The quiet node has no such alert, not even pending, and nobody was paged for it.
    assert alert_of(run.prometheus_alerts, SATURATION, run.quiet) is None
    assert not [n for n in run.notifications if n.about(SATURATION, run.quiet.instance)]
    # From the condition holding (activeAt) to the webhook: for:, the evaluation that sees
    # for: passed, group_wait; one more evaluation interval for delivery on a loaded host.
    latency = paged.received - run.saturation_active_at
    fired_to_webhook = paged.received - seconds(alert["startsAt"])
    print(
        f"\n{SATURATION}: condition -> webhook {latency:.2f} s "
        f"(for {FOR_S} s + group_wait {GROUP_WAIT_S} s), fired -> webhook "
        f"{fired_to_webhook:.2f} s"
    )
    assert latency <= FOR_S + GROUP_WAIT_S + 2 * INTERVAL_S
    assert fired_to_webhook <= GROUP_WAIT_S + INTERVAL_S


def test_a_dead_agent_pages_once_and_holds_back_its_nodes_other_alerts(run: Run) -> None:
    down = run.first(AGENT_DOWN, run.doomed)
    back = run.first(AGENT_DOWN, run.doomed, "resolved")
    assert down.body["receiver"] == RECEIVERS["warning"]
    assert down.body["groupLabels"] == {"alertname": AGENT_DOWN, "instance": run.doomed.instance}
    print(f"\n{AGENT_DOWN}: killed -> webhook {down.received - run.killed_at:.2f} s")
    # Alertmanager had the node's saturation alert, muted by that node's BurstscopeAgentDown.
    assert run.inhibited["status"]["state"] == "suppressed"
    assert run.inhibited["status"]["inhibitedBy"] == [run.agent_down_fingerprint]
    # While the agent was down nothing but BurstscopeAgentDown was said about its node (and
    # nothing about the other nodes' agents); its saturation came after the agent was back
    # (the resolved BurstscopeAgentDown lifts the inhibition: either group may flush first).
    while_down = [
        a["labels"]["alertname"]
        for n in run.notifications
        if down.received < n.received < run.restarted_at
        for a in n.body["alerts"]
        if a["labels"].get("instance") == run.doomed.instance
    ]
    assert set(while_down) <= {AGENT_DOWN}
    assert run.first(SATURATION, run.doomed).received > run.restarted_at
    assert back.received > run.restarted_at
    others = [n for n in run.notifications if n.about(AGENT_DOWN, run.saturating.instance)]
    assert others + [n for n in run.notifications if n.about(AGENT_DOWN, run.quiet.instance)] == []


def test_resolved_notifications_arrive_and_every_page_is_routed_by_severity(run: Run) -> None:
    back = run.first(AGENT_DOWN, run.doomed, "resolved")
    (alert,) = back.body["alerts"]
    assert back.body["status"] == "resolved"
    assert seconds(alert["endsAt"]) >= run.restarted_at - INTERVAL_S
    print(f"\n{AGENT_DOWN} resolved: restarted -> webhook {back.received - run.restarted_at:.2f} s")
    for notification in run.notifications:
        severities = {a["labels"]["severity"] for a in notification.body["alerts"]}
        instances = {a["labels"].get("instance") for a in notification.body["alerts"]}
        assert len(severities) == 1 and len(instances) == 1, notification.body
        assert notification.body["receiver"] == RECEIVERS[severities.pop()]
        assert notification.path == f"/{notification.body['receiver']}"
