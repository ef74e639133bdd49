"""The Grafana JSON both dashboards are built from: panels, targets, variables, layout.

Classic dashboard JSON, schemaVersion 41 (Grafana 11.6), with every option Grafana would
otherwise fill in written out (``dashboards/check_sdk.py`` round-trips the result through
grafana-foundation-sdk). Every panel and target uses the ``${datasource}`` variable.
Selectors use the template variables as regular expressions, so "All" is ``.*``.

Every query selects the ``cluster`` and ``job`` variables, written with the mixin
placeholders ``%(clusterLabel)s`` and ``%(burstscopeSelector)s`` that ``dashboard()`` fills
from the site's Selectors (dashboards/job_selectors.py). The job variable lists the jobs the
selector matches and has no custom "All" value, so Grafana's "All" is those jobs, never
every job of the Prometheus: ``up`` and ``process_*``, which other exporters serve too,
need no selector of their own. The cluster variable's "All" is ``.*``, which matches a
series without the label, so the panels work where no cluster label exists; it is hidden
unless the site sets showMultiCluster.
"""

from __future__ import annotations

from typing import Any

from dashboards.job_selectors import DEFAULT, Selectors
from dashboards.recording import GROUPS
from dashboards.rules import record_names

SCHEMA_VERSION = 41
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

Json = dict[str, Any]

# Selectors, as regular expressions over the template variables. SCOPE, the cluster and the
# scrape job, is in every one.
SCOPE = '%(clusterLabel)s=~"$cluster", job=~"$job"'
NODES = SCOPE + ', instance=~"$instance"'
FLEET = NODES + ', device=~"$device"'
PORT = FLEET + ', port=~"$port"'
PORT_DIRECTION = PORT + ', direction=~"$direction"'
# A node's own families by direction (the lean profile's burstscope_node_*: docs/metrics.md).
NODE_DIRECTION = NODES + ', direction=~"$direction"'
# The agents' own series, up and process_* among them: the job variable lists only the jobs
# the configured selector matches.
AGENTS = NODES
# Job series (burstscope_job_*): the scheduler's job id is the job_id label, never "job",
# which Prometheus gives the scrape job.
JOBS = NODES + ', job_id=~"$job_id"'
# What tells one node's series from another's in a join: the cluster, the scrape job and
# the instance (two clusters may have nodes of the same name).
NODE_LABELS = "%(clusterLabel)s, job, instance"
# The fleet overview's uid: the drill-down's job links and the job alerts' dashboard_url
# (prometheus/alerts.rules.yml) open it.
FLEET_UID = "burstscope-fleet-overview"

# The recorded series the panels read, by level and metric (dashboards/rules.py).
RULES = record_names(GROUPS)
# The mean over one 15 s scrape interval, per port direction: both dashboards draw it.
AVERAGE_15S = RULES.series(
    "instance_device_port_direction", "burstscope_port_data_bytes_per_line_rate", "ratio"
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


def query_variable(
    name: str,
    label: str,
    query: str,
    every: bool = True,
    all_value: str | None = ".*",
    hide: int = 0,
) -> Json:
    """A label_values variable: multi-value with "All" (``all_value``; None: every value
    listed), or one value, the first. ``hide`` 2 keeps it off the page."""
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
        "hide": hide,
        **VARIABLE_DEFAULTS,
    }
    if every and all_value is not None:
        variable["allValue"] = all_value
    return variable


def variables(drilldown: bool, selectors: Selectors) -> list[Json]:
    found: list[Json] = [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Data source",
            # With sharded servers (dashboards/README.md, "Sharding") only the shard that
            # scrapes a node holds its per-port series.
            "description": (
                "The Prometheus to read. With sharded servers: the global one for the fleet "
                "overview; for a node's Port drill-down, the shard that scrapes the node (the "
                "shard label of its rows on the fleet overview), which alone holds its "
                "per-port series."
            ),
            "query": "prometheus",
            "current": {"text": "", "value": ""},
            "hide": 0,
            "refresh": 1,
            "regex": "",
            "multi": False,
            "includeAll": False,
            **VARIABLE_DEFAULTS,
        },
        # The clusters the agents report from; "All" (.*) also matches series without the
        # label, so a Prometheus with no cluster label draws every panel with it hidden.
        query_variable(
            "cluster",
            "Cluster",
            "label_values(burstscope_info{%(burstscopeSelector)s}, %(clusterLabel)s)",
            hide=0 if selectors.show_multi_cluster else 2,
        ),
        # The scrape jobs of the agents (burstscope in prometheus.example.yml, the Service or
        # namespace/PodMonitor under prometheus-operator); "All" is every job listed.
        query_variable(
            "job",
            "Scrape job",
            'label_values(burstscope_info{%(burstscopeSelector)s, %(clusterLabel)s=~"$cluster"}'
            ", job)",
            all_value=None,
        ),
        # The drill-down shows one node (the first, or the one a fleet row links to): with
        # every node at once its panels would carry thousands of series.
        query_variable(
            "instance",
            "Node",
            f"label_values(burstscope_info{{{SCOPE}}}, instance)",
            every=not drilldown,
        ),
        query_variable(
            "device",
            "Device",
            f"label_values(burstscope_port_line_rate_bytes_per_second{{{NODES}}}, device)",
        ),
    ]
    if not drilldown:
        # Every running job's id (burstscope_job_info, one series per job and node); the job
        # alerts' dashboard_url sets it with the node (var-job_id, var-instance).
        found.append(
            query_variable("job_id", "Job", f"label_values(burstscope_job_info{{{SCOPE}}}, job_id)")
        )
    if drilldown:
        found.append(
            query_variable(
                "port",
                "Port",
                f"label_values(burstscope_port_line_rate_bytes_per_second{{{FLEET}}}, port)",
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


def filled(item: Any, selectors: Selectors) -> Any:
    """``item`` with the placeholders of every query (a target's expr, a variable's query
    and definition) filled from ``selectors``."""
    if isinstance(item, list):
        return [filled(value, selectors) for value in item]
    if not isinstance(item, dict):
        return item
    found = {key: filled(value, selectors) for key, value in item.items()}
    for key in ("expr", "definition", "query"):
        if isinstance(found.get(key), str):
            found[key] = selectors.fill(found[key])
    return found


def dashboard(
    uid: str,
    title: str,
    description: str,
    panels: list[Json],
    drilldown: bool,
    selectors: Selectors = DEFAULT,
) -> Json:
    built = {
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
        "templating": {"list": variables(drilldown, selectors)},
        "panels": layout(panels),
    }
    return dict(filled(built, selectors))


def rate_of(name: str, selector: str) -> str:
    return f"rate({name}{{{selector}}}[$__rate_interval])"
