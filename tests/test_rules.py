"""Prometheus rules: promtool check and unit tests, and the conventions promtool cannot see.

``promtool test rules`` runs dashboards/prometheus/tests/alerts.test.yml, in which every
alert both fires and stays silent. The checks below make sure that stays true as alerts are
added: every alert in alerts.rules.yml has a firing case and a silent case in the unit
tests, carries summary, description and an absolute runbook_url under the one base the
README tells operators to replace, and every recording rule is named
level:metric:operations. (No YAML parser is a dependency: the rule files are ours
and regular, so a few regular expressions read them.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from burstscope.collector.exporter import HELP
from dashboards.rules import recorded_names
from tests.conftest import require_binary

PROMETHEUS = Path(__file__).resolve().parent.parent / "dashboards" / "prometheus"
RECORDING = PROMETHEUS / "recording.rules.yml"
ALERTS = PROMETHEUS / "alerts.rules.yml"
UNIT_TESTS = PROMETHEUS / "tests" / "alerts.test.yml"
# Every promtool unit test file: alerts.test.yml and one per feature's alerts.
UNIT_TEST_FILES = sorted((PROMETHEUS / "tests").glob("*.test.yml"))
EXAMPLE = PROMETHEUS / "prometheus.example.yml"
REPOSITORY = PROMETHEUS.parent.parent
# Alert names carry the project's prefix, as monitoring mixins' do (node-mixin's NodeFilesystem...,
# kubernetes-mixin's Kube...; https://monitoring.mixins.dev): unambiguous in an Alertmanager
# shared with dozens of rule sets.
ALERT_PREFIX = "Burstscope"
ALERT_NAME = re.compile(rf"^{ALERT_PREFIX}[A-Z][A-Za-z0-9]*$")

# level:metric:operations (prometheus.io/docs/practices/rules).
# The one runbook base of every alert; dashboards/README.md ("Runbook links") shows how to
# replace it once for a site.
RUNBOOK_BASE = "https://runbooks.example.com/burstscope#"
RULE_NAME = re.compile(r"^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*:[a-z][a-z0-9_]*$")


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    binary = require_binary("promtool")
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )


def alert_blocks(path: Path = ALERTS) -> dict[str, str]:
    """alert name -> the text of its rule, up to the next rule."""
    text = path.read_text()
    parts = re.split(r"^\s*- alert: ", text, flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0].strip(): part for part in parts}


def metric_names(text: str) -> set[str]:
    """burstscope metric names and recorded series named in rule expressions."""
    exprs = "\n".join(re.findall(r"expr: \|?\n?((?:.*\n)*?)(?=\s*(?:for|labels|- record|$))", text))
    return set(re.findall(r"\b(?:[a-z_]+:)?burstscope_[a-z0-9_]+(?::[a-z0-9_]+)?\b", exprs))


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RECORDING), str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 32 rules found" in result.stdout
    assert "SUCCESS: 15 rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    names = [path.name for path in UNIT_TEST_FILES]
    assert UNIT_TESTS.name in names
    result = promtool("test", "rules", *names, cwd=UNIT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(names)


def test_example_prometheus_config_is_valid() -> None:
    result = promtool("check", "config", str(EXAMPLE))
    assert result.returncode == 0, result.stdout + result.stderr
    text = EXAMPLE.read_text()
    assert ":9847" in text  # the agent's documented default port
    # The documented host label: the node's name without the port, for joins with
    # node_exporter or DCGM series of the same node.
    assert "target_label: host" in text


def test_every_alert_is_unit_tested_firing_and_silent() -> None:
    text = "\n".join(path.read_text() for path in UNIT_TEST_FILES)
    cases = re.split(r"^\s*- alertname: ", text, flags=re.MULTILINE)[1:]
    firing: set[str] = set()
    silent: set[str] = set()
    for case in cases:
        name = case.split("\n", 1)[0].strip()
        body = case.split("\n", 1)[1] if "\n" in case else ""
        if re.search(r"exp_alerts:\s*\[\]", body):
            silent.add(name)
        elif "exp_labels" in body:
            firing.add(name)
    alerts = set(alert_blocks())
    assert alerts == {
        "BurstscopeAgentDown",
        "BurstscopeBurstSaturation",
        "BurstscopeHiddenBursts",
        "BurstscopeJobBurstSaturation",
        "BurstscopeJobHiddenBursts",
        "BurstscopeCongestionDuringBursts",
        "BurstscopePfcStorm",
        "BurstscopeLinkFlap",
        "BurstscopeLinkDegraded",
        "BurstscopePortBelowPeers",
        "BurstscopePortSilentUnderJob",
        "BurstscopeRailImbalance",
        "BurstscopeStragglerNode",
        "BurstscopePortDisappeared",
        "BurstscopeAgentLagging",
    }
    assert alerts - firing == set(), "alerts without a firing unit test"
    assert alerts - silent == set(), "alerts without a not-firing unit test"


@pytest.mark.parametrize("alert", sorted(alert_blocks()))
def test_alert_has_summary_description_runbook_and_severity(alert: str) -> None:
    block = alert_blocks()[alert]
    for key in ("summary", "description", "runbook_url"):
        assert re.search(rf"^\s+{key}: ", block, flags=re.MULTILINE), f"{alert}: no {key}"
    url = re.search(r'runbook_url: "([^"]+)"', block)
    assert url is not None and url.group(1) == RUNBOOK_BASE + alert.lower()
    readme = (PROMETHEUS.parent / "README.md").read_text()
    assert f'<a id="{alert.lower()}"></a>' in readme, f"README has no runbook for {alert}"
    severity = re.search(r"severity: (\w+)", block)
    assert severity is not None
    informational = ("BurstscopeHiddenBursts", "BurstscopeJobHiddenBursts")
    assert severity.group(1) == ("info" if alert in informational else "warning")


def rules_files() -> list[Path]:
    return sorted(PROMETHEUS.glob("*.rules.yml"))


def test_every_alert_in_every_rules_file_carries_the_prefix() -> None:
    names = [name for path in rules_files() for name in alert_blocks(path)]
    assert names, "no alerts found"
    assert [n for n in names if not ALERT_NAME.match(n)] == []
    # An alert rule written some other way (a quoted name) would escape alert_blocks().
    for path in rules_files():
        written = re.findall(r"^\s*-?\s*alert:", path.read_text(), flags=re.MULTILINE)
        assert len(written) == len(alert_blocks(path)), path.name


def test_no_alert_is_mentioned_without_its_prefix() -> None:
    """README, docs, dashboards (and the Grafana JSON built from them), tests, bench: every
    mention of an alert follows its name, so an operator searching for it finds it."""
    bare = {name.removeprefix(ALERT_PREFIX) for name in alert_blocks()}
    word = re.compile(rf"(?<![A-Za-z])({'|'.join(sorted(bare))})(?![A-Za-z])")
    listed = subprocess.run(
        ["git", "ls-files"], cwd=REPOSITORY, capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: git ls-files lists no files")
    found = []
    for name in listed.stdout.splitlines():
        path = REPOSITORY / name
        if path.suffix not in (".md", ".py", ".yml", ".yaml", ".json", ".toml", ".txt"):
            continue
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            found += [f"{name}:{number}: {m}" for m in word.findall(line)]
    assert found == []


def test_every_rule_group_reads_at_most_five_minutes_of_raw_samples() -> None:
    """Fleet cost: longer ranges read recorded series only (BurstscopeLinkDegraded's day:
    5 m maxima)."""
    raw = set(HELP) | {f"{n}_{s}" for n in HELP for s in ("bucket", "count", "sum")}
    for path in (RECORDING, ALERTS):
        for name, window in re.findall(r"\b([a-z_:]+)(?:\{[^}]*\})?\[(\w+)\]", path.read_text()):
            if name in raw:
                assert window in ("1m", "2m", "5m", "10m"), f"{path.name}: {name}[{window}]"


def test_recording_rules_are_named_level_metric_operations() -> None:
    names = recorded_names(RECORDING)
    assert names, "no recording rules found"
    assert len(names) == len(set(names))
    for name in names:
        assert RULE_NAME.match(name), f"{name} is not level:metric:operations"
        assert "_total" not in name.split(":")[1], f"{name}: strip _total after rate()"


def test_rules_use_only_exported_or_recorded_metrics() -> None:
    from burstscope.straggler_watch import HELP as STRAGGLER_HELP

    known = set(recorded_names(RECORDING))
    # The agents' families and the fleet consumer's (burstscope stragglers).
    for name in (*HELP, *STRAGGLER_HELP):
        known.add(name)
        known.update({f"{name}_bucket", f"{name}_count", f"{name}_sum"})
    used = metric_names(RECORDING.read_text()) | metric_names(ALERTS.read_text())
    assert used, "no metric names found in the rule expressions"
    assert used - known == set()


@pytest.mark.integration
def test_port_disappeared_fires_on_a_real_agent_whose_port_goes(tmp_path: Path) -> None:
    """A real Prometheus scraping a real agent (rules with every for: cut to 2 s): one port's
    state file starts reading empty, as a port gone from sysfs does; the alert fires for
    that port only, while the agent keeps answering."""
    import json
    import urllib.parse

    from burstscope.testing.emulated_node import EmulatedNode, running_agent
    from burstscope.testing.processes import free_port, wait_for
    from burstscope.testing.simulated_fleet import running_prometheus
    from tests.test_prometheus_integration import Prometheus, test_rule_copy

    binary = require_binary("prometheus")
    node = EmulatedNode(tmp_path / "sys", ["mlx5_0", "mlx5_1"]).build()
    rules = test_rule_copy(tmp_path)
    with running_agent(node.root) as (_, url):
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files: {json.dumps(rules)}\n"
            "scrape_configs:\n  - job_name: burstscope\n"
            "    static_configs:\n"
            f"      - targets: [{json.dumps(urllib.parse.urlparse(url).netloc)}]\n"
        )
        with running_prometheus(binary, config, tmp_path / "data", free_port()) as server:
            prometheus = Prometheus(server.url, server.process)

            def recorded() -> int:
                name = "instance_device_port:burstscope_port_state:max_over_time5m"
                return len(prometheus.query(name)["data"]["result"])

            wait_for(lambda: recorded() == 2, 60, "both ports' state recorded")
            node.write("mlx5_1", "state", "")

            def firing() -> list[dict[str, object]]:
                alerts = prometheus.alerts("BurstscopePortDisappeared")
                return [a for a in alerts if a["state"] == "firing"]

            alerts = wait_for(firing, 60, "BurstscopePortDisappeared firing")
            assert [a["labels"]["device"] for a in alerts] == ["mlx5_1"]  # type: ignore[index]
            up = prometheus.query('up{job="burstscope"}')["data"]["result"]
            assert [r["value"][1] for r in up] == ["1"]


# The rule files are generated (dashboards/recording.py, dashboards/alerting.py) with the job
# selector and cluster label of dashboards/job_selectors.py: the checked-in files are the
# defaults', and a site's file reaches every rule and query.
def test_rule_files_are_what_the_generator_writes() -> None:
    from dashboards.generate import RULES, render_rules

    assert set(RULES) == {RECORDING.name, ALERTS.name}
    for name in RULES:
        assert (PROMETHEUS / name).read_text() == render_rules(name), (
            f"{name} is stale: run python dashboards/generate.py"
        )


def test_default_selectors_match_the_static_and_the_operator_job_names() -> None:
    from dashboards.job_selectors import DEFAULT

    regex = re.fullmatch(r'job=~"(.*)"', DEFAULT.burstscope_selector)
    assert regex is not None and DEFAULT.cluster_label == "cluster"
    matches = {
        job: re.fullmatch(regex[1], job) is not None
        for job in (
            "burstscope",  # prometheus.example.yml
            "burstscope-agent",  # a ServiceMonitor's Service
            "monitoring/burstscope-agent",  # a PodMonitor: namespace/name
            "prod-burstscope-agent",  # a kustomize namePrefix
            "node-exporter",
            "dcgm-exporter",
        )
    }
    assert [job for job, matched in matches.items() if matched] == list(matches)[:4]
    assert f"{{{DEFAULT.burstscope_selector}}}" in ALERTS.read_text()


SITE = """\
# A site whose agents' job is gpu-telemetry and whose clusters are told apart by k8s_cluster.
burstscopeSelector = 'job="gpu-telemetry"'
clusterLabel = "k8s_cluster"
showMultiCluster = true
"""


def test_a_sites_selectors_reach_every_rule_and_dashboard_query(tmp_path: Path) -> None:
    import json

    from dashboards.generate import main

    config = tmp_path / "selectors.toml"
    config.write_text(SITE)
    out = tmp_path / "out"
    assert main(["--config", str(config), "--out", str(out)]) == 0
    recording = (out / "prometheus" / RECORDING.name).read_text()
    alerts = (out / "prometheus" / ALERTS.name).read_text()
    for text in (recording, alerts):
        assert ".*burstscope.*" not in text and "%(" not in text
        assert '{job="gpu-telemetry"' in text
    assert "on (k8s_cluster, job, instance, job_id)" in alerts
    assert "on (k8s_cluster, job, instance, device, port)" in alerts
    assert "$labels.cluster" not in alerts
    # The same rules as the defaults', selector and label apart.
    assert recorded_names(out / "prometheus" / RECORDING.name) == recorded_names(RECORDING)
    result = promtool(
        "check",
        "rules",
        str(out / "prometheus" / RECORDING.name),
        str(out / "prometheus" / ALERTS.name),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("fleet-overview.json", "port-drilldown.json"):
        dashboard = json.loads((out / "grafana" / name).read_text())
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["cluster"]["hide"] == 0  # showMultiCluster
        assert variables["cluster"]["definition"] == (
            'label_values(burstscope_info{job="gpu-telemetry"}, k8s_cluster)'
        )
        text = json.dumps(dashboard)
        assert "%(" not in text and not re.search(r"(?<!\w)cluster=~", text)
        assert text.count('k8s_cluster=~\\"$cluster\\"') > 20


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("burstscopeSelector = '{job=\"x\"}'", "burstscopeSelector must be PromQL label matchers"),
        ("burstscopeSelector = 'job=burstscope'", "burstscopeSelector must be PromQL label"),
        ("burstscopeSelector = ''", "burstscopeSelector must be PromQL label matchers"),
        ("burstscopeSelector = 7", "burstscopeSelector must be PromQL label matchers"),
        ('clusterLabel = "k8s-cluster"', "clusterLabel must be a label name"),
        ('clusterLabel = "instance"', "clusterLabel 'instance' is a label burstscope uses"),
        ('showMultiCluster = "yes"', "showMultiCluster must be true or false"),
        ("jobSelector = 'job=\"x\"'", "unknown key 'jobSelector'"),
        ("burstscopeSelector = [", "not TOML"),
        (None, "cannot read"),
    ],
)
def test_a_selectors_file_that_cannot_be_used_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, complaint: str
) -> None:
    from dashboards.generate import main

    config = tmp_path / "selectors.toml"
    if content is not None:
        config.write_text(content + "\n")
    out = tmp_path / "out"
    assert main(["--config", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"generate: {config}: "), err
    assert complaint in err
    assert not out.exists()  # nothing half-written


def test_generate_cli_rejects_a_bad_selectors_file_without_a_traceback(tmp_path: Path) -> None:
    import sys

    config = tmp_path / "selectors.toml"
    config.write_text('clusterLabel = "k8s-cluster"\n')
    result = subprocess.run(
        [sys.executable, str(PROMETHEUS.parent / "generate.py"), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "clusterLabel must be a label name" in result.stderr
