"""The Grafana JSON both dashboards are built from: panels, targets, variables, layout.

Classic dashboard JSON, schemaVersion 41 (Grafana 11.6), with every option Grafana would
otherwise fill in written out (``dashboards/check_sdk.py`` round-trips the result through
grafana-foundation-sdk). Every panel and target uses the ``${datasource}`` variable.
Selectors use the template variables as regular expressions, so "All" is ``.*``.
"""

from __future__ import annotations

from typing import Any

from dashboards.rules import RecordingRules

SCHEMA_VERSION = 41
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

Json = dict[str, Any]

# Selectors, as regular expressions over the template variables.
FLEET = 'instance=~"$instance", device=~"$device"'
NODES = 'instance=~"$instance"'
PORT = 'instance=~"$instance", device=~"$device", port=~"$port"'
PORT_DIRECTION = PORT + ', direction=~"$direction"'
# The agents' own series: job burstscope, as dashboards/prometheus/prometheus.example.yml names it.
AGENTS = 'job="burstscope", ' + NODES
# Job series (burstscope_job_*): the scheduler's job id is the job_id label, never "job",
# which Prometheus gives the scrape job.
JOBS = 'instance=~"$instance", job_id=~"$job_id"'
# The fleet overview's uid: the drill-down's job links and the job alerts' dashboard_url
# (prometheus/alerts.rules.yml) open it.
FLEET_UID = "burstscope-fleet-overview"

# The recorded series the panels read, by level and metric (dashboards/rules.py).
RULES = RecordingRules.read()
# The mean over one 15 s scrape interval, per port direction: both dashboards draw it.
AVERAGE_15S = RULES.series(
    "instance_device_port_direction", "burstscope_port_data_bytes_per_line_rate"
)
# CPU of the whole agent in cores: its main process (prometheus-client's process collector)
# plus its 1 ms sampler process.
AGENT_CPU_CORES = (
    f"(rate(process_cpu_seconds_total{{{AGENTS}}}[$__rate_interval])"
    f" + rate(burstscope_sampler_cpu_seconds_total{{{AGENTS}}}[$__rate_interval]))"
)

# Acme's "busy" (NSDI 2024: links rarely above 25% of line rate in 15 s samples) and the
# saturation threshold of the detectors, drawn on every utilization panel.
UTILIZATION_THRESHOLDS = {
    "mode": "absolute",
    "steps": [
        {"color": "green", "value": None},
        {"color": "yellow", "value": 0.25},
        {"color": "red", "value": 0.9},
    ],
}


def target(expr: str, legend: str = "", ref: str = "A", **extra: Any) -> Json:
    instant = bool(extra.pop("instant", False))
    return {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "instant": instant,
        "refId": ref,
        **extra,
    }


def value_mappings(names: dict[str, tuple[str, str]]) -> list[Json]:
    options = {
        value: {"text": text, "color": color, "index": index}
        for index, (value, (text, color)) in enumerate(names.items())
    }
    return [{"type": "value", "options": options}]


def panel(
    kind: str,
    title: str,
    description: str,
    targets: list[Json],
    unit: str,
    size: tuple[int, int] = (12, 8),
    **extra: Any,
) -> Json:
    """One panel with every option Grafana would otherwise fill in implicitly."""
    width, height = size
    defaults: Json = {"unit": unit}
    if kind in ("timeseries", "bargauge", "stat"):
        defaults["min"] = 0
    if unit == "percentunit" and kind != "heatmap":
        defaults["thresholds"] = UTILIZATION_THRESHOLDS
        if kind == "timeseries":
            defaults["custom"] = {"thresholdsStyle": {"mode": "line+area"}}
    if kind == "table":
        defaults["custom"] = {"align": "auto", "inspect": False}
    defaults.update(extra.pop("defaults", {}))
    defaults.setdefault("custom", {})
    options: Json = extra.pop("options", {})
    if kind == "timeseries":
        options = {
            "legend": {
                "showLegend": True,
                "displayMode": "list",
                "placement": "bottom",
                "calcs": [],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
            **options,
        }
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"w": width, "h": height, "x": 0, "y": 0},
        "fieldConfig": {"defaults": defaults, "overrides": extra.pop("overrides", [])},
        "options": options,
        "targets": targets,
        "transparent": False,
        "repeatDirection": "h",
        **extra,
    }


def table_options(sort_by: str, descending: bool = True) -> Json:
    """A table panel's options: header, no type icons, no footer, sorted by one column."""
    return {
        "showHeader": True,
        "showTypeIcons": False,
        "frameIndex": 0,
        "cellHeight": "sm",
        "footer": {"show": False, "reducer": ["sum"], "countRows": False, "fields": ""},
        "sortBy": [{"displayName": sort_by, "desc": descending}],
    }


def stat(
    title: str,
    description: str,
    targets: list[Json],
    size: tuple[int, int],
    steps: list[Json],
    mappings: list[Json],
) -> Json:
    return panel(
        "stat",
        title,
        description,
        targets,
        "none",
        size,
        defaults={"thresholds": {"mode": "absolute", "steps": steps}, "mappings": mappings},
        options={
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background",
            "graphMode": "none",
            "textMode": "value_and_name",
            "justifyMode": "auto",
            "orientation": "auto",
            "wideLayout": True,
            "showPercentChange": False,
            "percentChangeColorMode": "standard",
        },
    )


def spread(expr: str, what: str) -> list[Json]:
    """Highest, 90th percentile and median across nodes of a per-node series."""
    return [
        target(f"max({expr})", f"highest {what}", "A"),
        target(f"quantile(0.9, {expr})", f"90th percentile {what}", "B"),
        target(f"quantile(0.5, {expr})", f"median {what}", "C"),
    ]


def row(title: str) -> Json:
    return {
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"w": 24, "h": 1, "x": 0, "y": 0},
        "panels": [],
    }


def layout(panels: list[Json]) -> list[Json]:
    """Left-to-right, top-to-bottom placement and unique ids, in list order."""
    x = y = line_height = 0
    for number, item in enumerate(panels, start=1):
        item["id"] = number
        grid = item["gridPos"]
        if x + grid["w"] > 24 or item["type"] == "row":
            x, y = 0, y + line_height
            line_height = 0
        grid["x"], grid["y"] = x, y
        x += grid["w"]
        line_height = max(line_height, grid["h"])
        if item["type"] == "row":
            x, y, line_height = 0, y + grid["h"], 0
    return panels


# What Grafana assumes for every variable, written out (dashboards/check_sdk.py).
VARIABLE_DEFAULTS: Json = {
    "skipUrlSync": False,
    "auto": False,
    "auto_count": 30,
    "auto_min": "10s",
    "allowCustomValue": True,
}


def query_variable(name: str, label: str, query: str, every: bool = True) -> Json:
    """A label_values variable: multi-value with "All" (.*), or one value, the first."""
    current: Json = (
        {"selected": True, "text": ["All"], "value": ["$__all"]}
        if every
        else {"text": "", "value": ""}
    )
    variable: Json = {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-variable"},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": every,
        "includeAll": every,
        "current": current,
        **VARIABLE_DEFAULTS,
    }
    if every:
        variable["allValue"] = ".*"
    return variable


def variables(drilldown: bool) -> list[Json]:
    found: list[Json] = [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Data source",
            "query": "prometheus",
            "current": {"text": "", "value": ""},
            "hide": 0,
            "refresh": 1,
            "regex": "",
            "multi": False,
            "includeAll": False,
            **VARIABLE_DEFAULTS,
        },
        # The drill-down shows one node (the first, or the one a fleet row links to): with
        # every node at once its panels would carry thousands of series.
        query_variable(
            "instance", "Node", "label_values(burstscope_info, instance)", every=not drilldown
        ),
        query_variable(
            "device",
            "Device",
            'label_values(burstscope_port_line_rate_bytes_per_second{instance=~"$instance"}, '
            "device)",
        ),
    ]
    if not drilldown:
        # Every running job's id (burstscope_job_info, one series per job and node); the job
        # alerts' dashboard_url sets it with the node (var-job_id, var-instance).
        found.append(query_variable("job_id", "Job", "label_values(burstscope_job_info, job_id)"))
    if drilldown:
        found.append(
            query_variable(
                "port",
                "Port",
                "label_values(burstscope_port_line_rate_bytes_per_second"
                '{instance=~"$instance", device=~"$device"}, port)',
            )
        )
        found.append(
            {
                "type": "custom",
                "name": "direction",
                "label": "Direction",
                "query": "transmit,receive",
                "multi": True,
                "includeAll": True,
                "allValue": ".*",
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "options": [],
                **VARIABLE_DEFAULTS,
            }
        )
    return found


def dashboard(uid: str, title: str, description: str, panels: list[Json], drilldown: bool) -> Json:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["burstscope", "rdma", "infiniband"],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "fiscalYearStartMonth": 0,
        "refresh": "15s",
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "links": [
            {
                "title": "burstscope dashboards",
                "type": "dashboards",
                "tags": ["burstscope"],
                "asDropdown": False,
                "includeVars": True,
                "keepTime": True,
                "targetBlank": False,
                "tooltip": "",
                "icon": "external link",
            }
        ],
        "templating": {"list": variables(drilldown)},
        "panels": layout(panels),
    }


def rate_of(name: str, selector: str) -> str:
    return f"rate({name}{{{selector}}}[$__rate_interval])"
