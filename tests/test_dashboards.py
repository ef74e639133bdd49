"""Grafana dashboards and provisioning, checked as data (no Grafana in CI).

What grafana/dashboard-linter would check, in pytest: schema version, unique uids and
panel ids, the ${datasource} variable on every panel and target, the instance and device
variables, units on every panel, and expressions that name only metrics the exporter
exports (collector/exporter.py HELP) or the recording rules record. The JSON must also be
exactly what dashboards/generate.py writes, so the generator stays the source.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burstscope.collector.exporter import HELP
from burstscope.collector.web_config import parse_go_duration
from burstscope.straggler_watch import HELP as CONSUMER_HELP
from dashboards.generate import DASHBOARDS as DASHBOARD_MODULES
from dashboards.generate import render
from dashboards.rules import RecordingRules, recorded_names

DASHBOARDS = Path(__file__).resolve().parent.parent / "dashboards"
GRAFANA = DASHBOARDS / "grafana"
FILES = ("fleet-overview.json", "port-drilldown.json")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
METRIC = re.compile(r"\b(?:[a-z_]+:)?burstscope_[a-z0-9_]+(?::[a-z0-9_]+)?\b")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GRAFANA / name).read_text())
    return data


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def known_metrics() -> set[str]:
    known: set[str] = set()
    for name in HELP:
        known.update({name, f"{name}_bucket", f"{name}_count", f"{name}_sum"})
    known.update(recorded_names(DASHBOARDS / "prometheus" / "recording.rules.yml"))
    known.update(CONSUMER_HELP)  # the fleet consumer's (burstscope stragglers)
    return known


def exprs(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]
    found += [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return found


def test_json_is_what_the_generator_writes() -> None:
    assert set(DASHBOARD_MODULES) == set(FILES)
    for name in FILES:
        assert (GRAFANA / name).read_text() == render(name), (
            f"{name} is stale: run python dashboards/generate.py"
        )


@pytest.mark.parametrize("name", FILES)
def test_schema_variables_and_datasource(name: str) -> None:
    dashboard = load(name)
    assert dashboard["schemaVersion"] >= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for variable in ("instance", "device"):
        assert variables[variable]["type"] == "query"
        assert variables[variable]["datasource"] == DATASOURCE
        assert variables[variable]["definition"].startswith("label_values(")
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


@pytest.mark.parametrize("name", FILES)
def test_every_query_selects_the_cluster_and_job_variables(name: str) -> None:
    """The mixin convention's variables: cluster ("All" is .*, which matches series without
    the label; hidden by default) and the agents' scrape jobs (listed by the configured
    selector; "All" is the listed jobs, never every job, since up and process_* are served
    by other exporters too)."""
    dashboard = load(name)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    cluster, job = variables["cluster"], variables["job"]
    assert cluster["definition"] == 'label_values(burstscope_info{job=~".*burstscope.*"}, cluster)'
    assert cluster["allValue"] == ".*" and cluster["hide"] == 2 and cluster["includeAll"]
    assert job["definition"] == (
        'label_values(burstscope_info{job=~".*burstscope.*", cluster=~"$cluster"}, job)'
    )
    assert job["includeAll"] and job["multi"] and "allValue" not in job
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names.index("cluster") < names.index("job") < names.index("instance")
    for expr in exprs(dashboard):
        if expr.startswith("label_values(burstscope_info{job=~"):
            continue  # the cluster and job variables themselves
        for metric, selector in re.findall(r"\b([a-z_:]+)\{([^}]*)\}", expr):
            if metric.startswith("global:"):
                continue  # vector(0.05): no labels at all
            if metric in CONSUMER_HELP:
                # The fleet consumer's: its own scrape job, never one of the agents'.
                assert selector == 'cluster=~"$cluster"', (metric, expr)
                continue
            assert 'cluster=~"$cluster", job=~"$job"' in selector, (metric, expr)
        for metric in re.findall(r"\b([a-z_:]+)\b(?![{(])", expr):
            assert metric not in known_metrics() or metric.startswith("global:"), (metric, expr)


def test_uids_and_panel_ids_are_unique() -> None:
    dashboards = [load(name) for name in FILES]
    uids = [d["uid"] for d in dashboards]
    assert len(set(uids)) == len(uids)
    for dashboard in dashboards:
        ids = [p["id"] for p in panels(dashboard)]
        assert len(set(ids)) == len(ids), dashboard["uid"]
        for panel in panels(dashboard):
            refs = [t["refId"] for t in panel.get("targets", [])]
            assert len(set(refs)) == len(refs), panel["title"]


@pytest.mark.parametrize("name", FILES)
def test_every_panel_has_a_unit_title_and_description(name: str) -> None:
    for panel in panels(load(name)):
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel["description"]
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']}: no unit"


@pytest.mark.parametrize("name", FILES)
def test_panels_do_not_overlap(name: str) -> None:
    taken: set[tuple[int, int]] = set()
    for panel in panels(load(name)):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, panel["title"]
        taken |= cells


@pytest.mark.parametrize("name", FILES)
def test_exprs_name_only_exported_or_recorded_metrics(name: str) -> None:
    known = known_metrics()
    used = {metric for expr in exprs(load(name)) for metric in METRIC.findall(expr)}
    assert used, "no metric names found"
    assert used - known == set()


def test_dashboards_plot_peaks_saturation_congestion_and_agent_health() -> None:
    """The fleet overview and the drill-down query every series their panels are for."""
    fleet = " ".join(exprs(load("fleet-overview.json")))
    drill = " ".join(exprs(load("port-drilldown.json")))
    for needed in (
        # Every agent series recorded (per node, per job on a node, each server's hottest
        # ports): a global server federating them draws the panels (test_federation.py).
        "instance_device_port_direction:burstscope_port_peak_utilization_ratio:topk20_max"
        '{cluster=~"$cluster", job=~"$job", instance=~"$instance", device=~"$device"}',
        "instance_device_port_direction:burstscope_port_hidden_saturated_seconds:topk20_rate5m",
        "instance:burstscope_port_saturated_samples_per_samples:ratio_rate5m",
        "instance:burstscope_port_peak_utilization_above_90_percent_per_ports:ratio",
        "instance:burstscope_agent_cpu_seconds:rate1m",
        "instance:burstscope_agent_resident_memory_bytes:sum",
        'instance:burstscope_agent_up:min{cluster=~"$cluster", job=~"$job", instance=~"$instance"}',
        # The Jobs row: per job and node its shares, bursts and ports, filtered by job_id.
        "instance_job_id:burstscope_job_saturated_seconds_per_compute_port_directions"
        ':ratio_rate5m{cluster=~"$cluster", job=~"$job", instance=~"$instance", '
        'job_id=~"$job_id"}',
        "instance_job_id:burstscope_job_hidden_saturated_seconds_per_compute_port_directions",
        "instance_job_id:burstscope_job_burst_bytes:rate5m",
        "group_left (user, name)\nburstscope_job_info",
        'burstscope_job_port{cluster=~"$cluster", job=~"$job", instance=~"$instance", '
        'job_id=~"$job_id"}',
        'label_values(burstscope_job_info{cluster=~"$cluster", job=~"$job"}, job_id)',
    ):
        assert needed in fleet, needed
    for needed in (
        "histogram_quantile(0.99, rate(burstscope_port_utilization_ratio_bucket",
        "global:burstscope_burst_saturation_share:threshold",
        "burstscope_port_bursts_total",
        "burstscope_port_burst_duration_seconds_bucket",
        "burstscope_port_congestion_packets_total",
        "burstscope_port_transmit_wait_total",
        "burstscope_port_pfc_pause_frames_total",
        "burstscope_sampler_missed_ticks_total",
        "burstscope_sampler_lateness_seconds_bucket",
        "burstscope_source_read_duration_seconds_bucket",
        "burstscope_scrape_duration_seconds",
        "burstscope_sampler_up",
        'burstscope_job_port{cluster=~"$cluster", job=~"$job", instance=~"$instance", '
        'device=~"$device", port=~"$port"}',
    ):
        assert needed in drill, needed
    heatmaps = [p for p in panels(load("port-drilldown.json")) if p["type"] == "heatmap"]
    assert heatmaps and heatmaps[0]["targets"][0]["format"] == "heatmap"


def test_peaks_survive_zooming_out_and_averages_read_the_15s_rule() -> None:
    """A raw peak gauge over a long range keeps one sample per step and drops the rest."""
    for name in FILES:
        for expr in exprs(load(name)):
            if "peak_utilization_ratio" in expr and "topk(" not in expr:
                assert "max_over_time(" in expr and "[$__interval]" in expr, expr
            assert "bytes_total" not in expr or "data_bytes" not in expr, expr


RULE_FILES = ("recording.rules.yml", "alerts.rules.yml")


def test_every_peak_read_names_the_longest_exported_window() -> None:
    """Rules and panels read one peak window, the longest the agent exports: the only one a
    lean node has, and the highest of both on a full one (it holds the shorter window)."""
    from burstscope.collector.exporter import PEAK_WINDOWS
    from dashboards.rules import PEAK_WINDOW

    assert max(PEAK_WINDOWS, key=lambda window: window[1])[0] == PEAK_WINDOW
    texts = [expr for name in FILES for expr in exprs(load(name))]
    texts += [(DASHBOARDS / "prometheus" / f).read_text() for f in RULE_FILES]
    selectors = [
        found
        for text in texts
        for found in re.findall(r"burstscope_port_peak_utilization_ratio\{[^}]*\}", text)
    ]
    assert len(selectors) >= 5, selectors  # four rules and the drill-down's panels
    for selector in selectors:
        assert f'window="{PEAK_WINDOW}"' in selector, selector


def test_a_step_window_over_a_slow_rule_holds_one_of_its_samples() -> None:
    """max_over_time(recorded[$__interval]) over a series recorded every 30 s: a panel's
    minimum interval at least that, or a step's window may hold no sample (a gap)."""
    from dashboards.recording import GROUPS

    every = {
        rule.name: parse_go_duration(group.interval or "15s")
        for group in GROUPS
        for rule in group.rules
    }
    assert max(every.values()) > 15, "no group evaluated less often than the global 15 s"
    checked = 0
    for name in FILES:
        for panel in panels(load(name)):
            for target in panel.get("targets", []):
                for recorded in re.findall(
                    r"([a-z_]+:[a-z0-9_]+:[a-z0-9_]+)\{[^}]*\}\[\$__interval\]", target["expr"]
                ):
                    floor = parse_go_duration(panel.get("interval") or "15s")
                    assert floor >= every[recorded], (panel["title"], recorded)
                    checked += every[recorded] > 15
    assert checked, "no panel reads a 30 s rule over $__interval: the test checks nothing"


def test_utilization_panels_draw_busy_and_saturated_lines() -> None:
    for name in FILES:
        for panel in panels(load(name)):
            defaults = panel.get("fieldConfig", {}).get("defaults", {})
            if panel["type"] == "row" or defaults.get("unit") != "percentunit":
                continue
            if panel["type"] == "heatmap":
                continue
            steps = [step["value"] for step in defaults["thresholds"]["steps"]]
            assert steps == [None, 0.25, 0.9], panel["title"]
            if panel["type"] == "timeseries":
                assert defaults["custom"]["thresholdsStyle"]["mode"] != "off", panel["title"]


def test_every_stat_has_thresholds_and_value_mappings() -> None:
    stats = [p for name in FILES for p in panels(load(name)) if p["type"] == "stat"]
    assert len(stats) >= 5
    for panel in stats:
        defaults = panel["fieldConfig"]["defaults"]
        assert len(defaults["thresholds"]["steps"]) >= 2, panel["title"]
        assert defaults["mappings"], panel["title"]
    state = next(p for p in stats if p["title"] == "Port state")
    texts = {
        k: v["text"] for k, v in state["fieldConfig"]["defaults"]["mappings"][0]["options"].items()
    }
    assert texts["4"] == "ACTIVE" and texts["1"] == "DOWN"


def test_fleet_rows_link_to_the_drilldown_with_node_port_and_time() -> None:
    tables = [p for p in panels(load(FILES[0])) if p["type"] == "table"]
    assert tables
    for panel in tables:
        links = [
            link
            for override in panel["fieldConfig"]["overrides"]
            for prop in override["properties"]
            if prop["id"] == "links"
            for link in prop["value"]
        ]
        assert links, panel["title"]
        url = links[0]["url"]
        assert url.startswith(f"/d/{load(FILES[1])['uid']}/")
        for needed in ("var-instance=", "var-device=", "var-port=", "${__url_time_range}"):
            assert needed in url, (panel["title"], needed)


# Links into the dashboards: the panels' data links and the job alerts' dashboard_url. No
# Grafana here to click them, so each is held to the dashboard it opens: its uid exists and
# every var-X it sets is a variable X of that dashboard (Grafana ignores an unknown one,
# and the page opens unfiltered).
ALERTS = DASHBOARDS / "prometheus" / "alerts.rules.yml"
ALERT_TESTS = DASHBOARDS / "prometheus" / "tests" / "alerts.test.yml"
# The one base of every dashboard_url; dashboards/README.md ("Runbook links") shows how to
# replace it once for a site.
GRAFANA_BASE = "https://grafana.example.com/"
LISTED_LABEL = re.compile(r"^label_values\((?:.+, )?(\w+)\)$")


def link_problems(url: str) -> list[str]:
    """What is wrong with a link to a dashboard: no dashboard with its uid, or a var-X for
    a variable X that dashboard does not have."""
    path, _, query = url.partition("?")
    match = re.search(r"/d/([^/]+)/", path)
    if match is None:
        return [f"{url}: not a link to a dashboard"]
    target = {d["uid"]: d for d in map(load, FILES)}.get(match[1])
    if target is None:
        return [f"{url}: no dashboard has uid {match[1]}"]
    names = {v["name"] for v in target["templating"]["list"]}
    return [
        f"{url}: {target['uid']} has no variable {key[4:]}"
        for key, _ in urllib.parse.parse_qsl(query, keep_blank_values=True)
        if key.startswith("var-") and key[4:] not in names
    ]


def urls_in(item: Any) -> Iterator[str]:
    if isinstance(item, dict):
        if isinstance(item.get("url"), str):
            yield item["url"]
        for value in item.values():
            yield from urls_in(value)
    elif isinstance(item, list):
        for value in item:
            yield from urls_in(value)


def listed_labels(uid: str) -> dict[str, str]:
    """variable -> the label its label_values() lists, in the dashboard with ``uid``."""
    dashboard = next(d for d in map(load, FILES) if d["uid"] == uid)
    found = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = LISTED_LABEL.match(variable["definition"])
            assert match is not None, variable["definition"]
            found[variable["name"]] = match[1]
    return found


def test_every_link_in_the_dashboards_sets_only_variables_they_have() -> None:
    urls = [url for name in FILES for url in urls_in(load(name)["panels"])]
    assert len(urls) >= 5
    assert [problem for url in urls for problem in link_problems(url)] == []


def test_job_alerts_link_the_fleet_overview_on_their_job_and_node() -> None:
    """Each dashboard_url template sets var-X from the alert label that X lists, so the
    dashboard opens on the alert's job and node."""
    blocks = re.split(r"^\s*- alert: ", ALERTS.read_text(), flags=re.MULTILINE)[1:]
    linked = {}
    for block in blocks:
        found = re.search(r'^\s+dashboard_url: "([^"]+)"', block, flags=re.MULTILINE)
        if "burstscope_job_info" in block:
            assert found is not None, f"{block.split()[0]}: a job alert without dashboard_url"
        if found is not None:
            linked[block.split()[0]] = found[1]
    assert set(linked) == {"BurstscopeJobBurstSaturation", "BurstscopeJobHiddenBursts"}
    fleet = load("fleet-overview.json")["uid"]
    for alert, url in linked.items():
        assert url.startswith(f"{GRAFANA_BASE}d/{fleet}/"), alert
        assert link_problems(url) == [], alert
        labels = listed_labels(fleet)
        set_from = dict(re.findall(r"var-(\w+)=\{\{ \$labels\.(\w+) \| urlquery \}\}", url))
        assert set_from == {"job_id": "job_id", "instance": "instance"}, alert
        assert {variable: labels[variable] for variable in set_from} == set_from, alert


def test_rendered_dashboard_urls_name_the_alerts_job_and_node() -> None:
    """The links promtool rendered in the unit tests (alerts.test.yml): each opens the fleet
    overview with job_id and instance set to the firing alert's labels, decoded as Grafana
    reads a query string (a Kubernetes job id's slash, a node's port colon)."""
    text = ALERT_TESTS.read_text()
    cases = re.findall(
        r"exp_labels: \{([^}]*)\}\n\s+exp_annotations:\n(?:\s+\w+: .*\n)*?"
        r'\s+dashboard_url: "([^"]+)"',
        text,
    )
    assert len(cases) >= 3
    for labels_text, url in cases:
        labels = {k: v.strip('"') for k, v in re.findall(r"(\w+): (\"[^\"]*\"|[^,]+)", labels_text)}
        assert link_problems(url) == []
        query = dict(urllib.parse.parse_qsl(url.partition("?")[2]))
        assert query == {"var-job_id": labels["job_id"], "var-instance": labels["instance"]}


def test_drilldown_opens_on_one_node_with_compact_legends() -> None:
    drill = load(FILES[1])
    instance = next(v for v in drill["templating"]["list"] if v["name"] == "instance")
    assert instance["multi"] is False and instance["includeAll"] is False
    for name in FILES:
        for panel in panels(load(name)):
            if panel["type"] == "timeseries":
                legend = panel["options"]["legend"]
                assert legend["displayMode"] == "list" and legend["placement"] == "bottom"


def test_provisioning_files() -> None:
    datasource = (DASHBOARDS / "provisioning" / "datasources" / "burstscope.yaml").read_text()
    assert re.search(r"^apiVersion: 1$", datasource, flags=re.MULTILINE)
    assert re.search(r"^\s+type: prometheus$", datasource, flags=re.MULTILINE)
    assert re.search(r"^\s+access: proxy$", datasource, flags=re.MULTILINE)
    # isDefault makes a Grafana that already has a default datasource refuse to start.
    assert not re.search(r"^\s+isDefault:", datasource, flags=re.MULTILINE)
    providers = (DASHBOARDS / "provisioning" / "dashboards" / "burstscope.yaml").read_text()
    assert re.search(r"^apiVersion: 1$", providers, flags=re.MULTILINE)
    assert re.search(r"^\s+type: file$", providers, flags=re.MULTILINE)
    assert re.search(r"^\s+path: \S+", providers, flags=re.MULTILINE)


def test_metric_table_in_docs_matches_exporter_help() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            str(DASHBOARDS / "metrics_table.py"),
            "--check",
            str(DASHBOARDS.parent / "docs" / "metrics.md"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


RULES_TEXT = """groups:
  - name: example
    rules:
      # - record: instance:burstscope_commented_out:max (a comment is no rule)
      - record: instance:burstscope_port_bursts:rate1m
        expr: sum without (device, port, direction) (rate(burstscope_port_bursts_total[1m]))
      - record: instance:burstscope_port_bursts_ended:rate1m
        expr: vector(1)
      - record: instance_device_port:burstscope_port_state:max_over_time5m
        expr: max_over_time(burstscope_port_state[5m])
      - record: instance_device_port:burstscope_port_state:max_over_time1d
        expr: max_over_time(instance_device_port:burstscope_port_state:max_over_time5m[1d])
"""


@pytest.mark.parametrize(
    ("level", "metric", "expected"),
    [
        # The operations come from the file; a longer metric name is another metric.
        ("instance", "burstscope_port_bursts", "instance:burstscope_port_bursts:rate1m"),
        (
            "instance",
            "burstscope_port_bursts_ended",
            "instance:burstscope_port_bursts_ended:rate1m",
        ),
        ("instance", "burstscope_commented_out", LookupError),
        ("instance_device", "burstscope_port_state", LookupError),  # a level is matched whole
        ("instance_device_port", "burstscope_port_state", LookupError),  # two: which one?
    ],
)
def test_recorded_series_by_level_and_metric(
    tmp_path: Path, level: str, metric: str, expected: str | type[Exception]
) -> None:
    path = tmp_path / "recording.rules.yml"
    path.write_text(RULES_TEXT)
    rules = RecordingRules.read(path)
    assert len(rules.names) == 4
    if isinstance(expected, str):
        assert rules.series(level, metric) == expected
    else:
        with pytest.raises(expected, match=str(path)):
            rules.series(level, metric)


def test_dashboards_read_every_recorded_series_from_the_rules_file() -> None:
    """No recorded series is spelled in the dashboard modules: each comes from the file."""
    for module in ("builder", "fleet_overview", "port_drilldown"):
        source = (DASHBOARDS / f"{module}.py").read_text()
        for name in recorded_names(DASHBOARDS / "prometheus" / "recording.rules.yml"):
            assert name not in source, (module, name)


# The series budget: dashboards/README.md's ledger, checked against a real exposition.
LEDGER_BEGIN = "<!-- series-ledger:begin -->"
LEDGER_END = "<!-- series-ledger:end -->"
SERIES_BUDGET_PER_PORT = 60
LEDGER_ROW = re.compile(
    r"^\| `(?P<family>[a-z_]+)` \| (?P<port>\d+) \| (?P<device>\d+) \| (?P<node>\d+) \|"
)
TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$")
SAMPLE_NAME = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)")
SUFFIXES = ("", "_total", "_bucket", "_count", "_sum", "_created")


def ledger(text: str) -> dict[str, tuple[int, int, int]]:
    """family -> (series per port, per device, per node) as the ledger states them."""
    section = text[text.index(LEDGER_BEGIN) : text.index(LEDGER_END)]
    rows = {}
    for line in section.splitlines():
        if (match := LEDGER_ROW.match(line)) is not None:
            counts = (int(match["port"]), int(match["device"]), int(match["node"]))
            rows[match["family"]] = counts
    return rows


def series_budget(exposition: str) -> dict[str, tuple[int, int, int]]:
    """family -> (series per port, per device, per node) in one exposition.

    A series with device and port labels is a port's, with device only a device's, else
    the node's. Every port (device) must have the same count, or the ledger could not say
    one number for it."""
    families: dict[str, str] = {}
    for line in exposition.splitlines():
        if (match := TYPE_LINE.match(line)) is not None:
            name, kind = match.groups()
            # The text format names a counter with _total on its TYPE line, as HELP does.
            families[name] = (
                name if kind != "counter" or name.endswith("_total") else f"{name}_total"
            )
    by_length = sorted(families, key=len, reverse=True)
    ports: dict[str, Counter[str]] = {}
    devices: dict[str, Counter[str]] = {}
    nodes: Counter[str] = Counter()
    for line in exposition.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        match = SAMPLE_NAME.match(line)
        assert match is not None, line
        sample = match.group(1)
        stem = next(f for f in by_length if any(sample == f + s for s in SUFFIXES))
        family = families[stem]
        device = re.search(r'\bdevice="([^"]*)"', line)
        port = re.search(r'\bport="([^"]*)"', line)
        if device and port:
            ports.setdefault(family, Counter())[f"{device[1]}/{port[1]}"] += 1
        elif device:
            devices.setdefault(family, Counter())[device[1]] += 1
        else:
            nodes[family] += 1
    found = {}
    for family in families.values():
        per_port = set(ports.get(family, Counter({"": 0})).values())
        per_device = set(devices.get(family, Counter({"": 0})).values())
        assert len(per_port) == 1 and len(per_device) == 1, f"{family}: uneven {ports, devices}"
        found[family] = (per_port.pop(), per_device.pop(), nodes[family])
    return found


@pytest.fixture(scope="module")
def nine_port_exposition(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The emulated 9-port RoCE node's /metrics with every output it can run on: hw_counters
    (CNP/ECN), MQTT (a broker that refuses: the publisher still reports on itself) and job
    attribution, running one whole-node Slurm job, as a training node does (written by the
    shipped prolog into the directory the agent watches)."""
    from burstscope.testing.emulated_node import EmulatedNode, running_agent, scrape
    from burstscope.testing.processes import free_port
    from burstscope.testing.slurm_jobs import start_job
    from tests.test_exposition import scrape_when_complete

    root = tmp_path_factory.mktemp("ledger")
    node = EmulatedNode(root / "sys", [f"mlx5_{index}" for index in range(9)]).build()
    broker = f"mqtt://127.0.0.1:{free_port()}"
    jobs = root / "jobs"
    jobs.mkdir()
    with running_agent(node.root, "--mqtt", broker, "--slurm-jobs-dir", str(jobs)) as (
        agent,
        url,
    ):
        start_job(jobs, 4242)
        body = scrape_when_complete(agent, url)
        deadline = time.monotonic() + 10
        # The publisher reports on itself once it has tried the broker; the finest-interval
        # gauge appears once the sampler's first 2 s of reads are judged; the job once the
        # watcher has read the prolog's file.
        while time.monotonic() < deadline and not all(
            name in body
            for name in (
                "burstscope_mqtt_connected",
                "burstscope_sampler_finest_interval_seconds",
                "burstscope_job_port",
            )
        ):
            time.sleep(0.05)
            body = scrape(url)
    return body


def test_series_ledger_matches_the_exposition_of_the_fixture_node(
    nine_port_exposition: str,
) -> None:
    """Each family's row in dashboards/README.md's ledger states what the node exports."""
    found = series_budget(nine_port_exposition)
    rows = ledger((DASHBOARDS / "README.md").read_text())
    # Every family the exporter knows (HELP) and every one the node serves has a row;
    # a family absent on this node (conditional) must say 0 0 0.
    expected = {name: found.get(name, (0, 0, 0)) for name in (*HELP, *found)}
    wrong = [
        f"| `{name}` | {counts[0]} | {counts[1]} | {counts[2]} |"
        for name, counts in expected.items()
        if rows.get(name) != counts
    ]
    assert wrong == [], "dashboards/README.md series ledger: replace (or add) these rows"
    assert set(rows) - set(expected) == set(), "ledger rows for families that do not exist"


def test_series_per_port_of_the_fixture_node_within_budget(nine_port_exposition: str) -> None:
    found = series_budget(nine_port_exposition)
    per_port = sum(counts[0] for counts in found.values())
    assert 0 < per_port <= SERIES_BUDGET_PER_PORT, f"{per_port} series per port"
    # With its job, and with a second job holding every port too (one more job_port each),
    # as the README says.
    assert found["burstscope_job_port"] == (1, 0, 0)
    shared = per_port + found["burstscope_job_port"][0]
    assert shared <= SERIES_BUDGET_PER_PORT
    readme = (DASHBOARDS / "README.md").read_text()
    stated = re.search(
        r"(\d+) per port on this node with its job,\s+(\d+) where\s+two jobs", readme
    )
    assert stated is not None and (int(stated[1]), int(stated[2])) == (per_port, shared)


# docs/metrics.md's table: the labels and the presence of every family, held to real scrapes.
TABLE_ROW = re.compile(
    r"^\| `(?P<name>[a-z_]+)` \| \w+ \| (?P<labels>[^|]+) \| (?P<present>[^|]+) \|"
)
SAMPLE_LABELS = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? ")


def documented_families() -> dict[str, tuple[list[str], str]]:
    """family -> (labels, when present) as docs/metrics.md's table says."""
    text = (DASHBOARDS.parent / "docs" / "metrics.md").read_text()
    rows = {}
    for line in text.splitlines():
        if (match := TABLE_ROW.match(line)) is not None:
            labels = re.findall(r"`([a-z_]+)`", match["labels"])
            rows[match["name"]] = (labels, match["present"].strip())
    return rows


def exposed_labels(exposition: str) -> dict[str, list[str]]:
    """family (as HELP names it) -> its label names, without le."""
    families = set(series_budget(exposition))
    by_length = sorted(families, key=len, reverse=True)
    found: dict[str, list[str]] = {}
    for line in exposition.splitlines():
        if line.startswith("#") or (match := SAMPLE_LABELS.match(line)) is None:
            continue
        sample = match["name"]
        family = next(f for f in by_length if any(sample == f + s for s in SUFFIXES))
        names = re.findall(r'(?:^|,)([a-zA-Z_][a-zA-Z0-9_]*)="', match["labels"] or "")
        labels = found.setdefault(family, [])
        labels += [name for name in names if name not in labels and name != "le"]
    return found


@pytest.fixture(scope="module")
def fixture_exposition() -> str:
    """The checked-in fixture tree's /metrics (IB and RoCE ports, a port kept unsampled)."""
    from burstscope.testing.emulated_node import running_agent
    from tests.conftest import SYSFS
    from tests.test_exposition import scrape_when_complete

    with running_agent(SYSFS) as (agent, url):
        return scrape_when_complete(agent, url)


def test_metric_table_states_the_labels_real_agents_serve(
    fixture_exposition: str, nine_port_exposition: str
) -> None:
    table = documented_families()
    assert set(table) == set(HELP)
    for exposition in (fixture_exposition, nine_port_exposition):
        served = exposed_labels(exposition)
        # The agent's exposition orders a series' labels by name; the table keeps the
        # order the exporter declares them in.
        wrong = {
            name: (table[name][0], labels)
            for name, labels in served.items()
            if name in HELP and sorted(table[name][0]) != sorted(labels)
        }
        assert wrong == {}, "docs/metrics.md labels (table, served)"


def test_metric_table_says_when_each_conditional_family_is_present(
    fixture_exposition: str, nine_port_exposition: str
) -> None:
    """A family missing from either real node is conditional: the table must say when it is
    there; one the table calls "Always." is on both."""
    table = documented_families()
    on_both = set(exposed_labels(fixture_exposition)) & set(exposed_labels(nine_port_exposition))
    always = {name for name, (_, present) in table.items() if present == "Always."}
    assert always - on_both == set(), "called Always. but missing from a real node"
    for name, (_, present) in table.items():
        assert "only when configured" not in present, name
        assert present, name
