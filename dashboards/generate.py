"""Writes the Grafana dashboards (classic JSON, schemaVersion 41) from the row functions below.

Run ``python dashboards/generate.py`` after editing; tests/test_dashboards.py fails when
the checked-in JSON differs from what this prints, and ``dashboards/check_sdk.py`` (make
lint) round-trips both through grafana-foundation-sdk. Every panel and target uses the
``${datasource}`` variable. Selectors use the template variables as regular expressions,
so "All" is ``.*``: ``FLEET`` (instance, device) on the fleet overview, ``PORT`` and
``PORT_DIRECTION`` (instance, device, port, direction) on the drill-down, whose instance
is a single node. Each dashboard row is one function returning its panels.

Built for a fleet (590 nodes x 9 ports): fleet panels over time read the per-node series
of the recording rules (dashboards/prometheus/recording.rules.yml) and plot their spread
across nodes (highest, 90th percentile, median), never one line per port; peaks are
``max_over_time(...[$__interval])`` so zooming out drops no peak.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

GRAFANA = Path(__file__).resolve().parent / "grafana"
SCHEMA_VERSION = 41
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
DRILLDOWN_UID = "burstscope-port-drilldown"

Json = dict[str, Any]

# Selectors, as regular expressions over the template variables.
FLEET = 'instance=~"$instance", device=~"$device"'
NODES = 'instance=~"$instance"'
PORT = 'instance=~"$instance", device=~"$device", port=~"$port"'
PORT_DIRECTION = PORT + ', direction=~"$direction"'

# Recording rules the panels read (dashboards/prometheus/recording.rules.yml).
AVERAGE_15S = (
    "instance_device_port_direction:burstscope_port_data_bytes_per_line_rate:ratio_irate1m"
)
NODE_PEAK = "instance:burstscope_port_peak_utilization_ratio:max"
NODE_AVERAGE_15S = "instance:burstscope_port_data_bytes_per_line_rate:max_ratio_irate1m"
NODE_SATURATED = "instance:burstscope_port_saturated_samples_per_samples:ratio_rate5m"
NODE_SYNCHRONY = "instance:burstscope_port_peak_utilization_above_90_percent_per_ports:ratio"
NODE_BURSTS = "instance:burstscope_port_bursts:rate1m"
# Grafana's "Min interval" on the fleet panels over time: each reads one series per node
# (590 on Acme's fleet), so a 6 h view at Grafana's ~1,000 points (a 20 s step) costs
# 590 x 1,080 points per line; one point a minute is a third of that, and
# max_over_time(...[$__interval]) still keeps every peak inside the minute.
FLEET_MIN_INTERVAL = "1m"
PORT_ABOVE_95 = (
    "instance_device_port_direction:burstscope_port_samples_above_95_percent_per_samples"
    ":ratio_rate5m"
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
PORT_STATES = {"1": ("DOWN", "red"), "2": ("INIT", "orange"), "3": ("ARMED", "yellow")}
PORT_STATES |= {"4": ("ACTIVE", "green"), "5": ("ACTIVE_DEFER", "orange")}

# Where a fleet row leads: the drill-down on that node and port, same range and source.
DRILLDOWN_LINK = {
    "title": "Port drill-down for ${__data.fields.instance} ${__data.fields.device}",
    "url": f"/d/{DRILLDOWN_UID}/burstscope-port-drill-down?"
    "var-datasource=${datasource}&var-instance=${__data.fields.instance}"
    "&var-device=${__data.fields.device}&var-port=${__data.fields.port}"
    "&var-direction=All&${__url_time_range}",
    "targetBlank": False,
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


def fleet_peaks_row() -> list[Json]:
    """Instant tables of the hottest ports, each row linked to its drill-down."""
    peak = f'burstscope_port_peak_utilization_ratio{{{FLEET}, window="15s"}}'
    hottest = f"topk(20, {peak})"
    links = {"matcher": {"id": "byName", "options": "instance"}}
    link_override = [{**links, "properties": [{"id": "links", "value": [DRILLDOWN_LINK]}]}]
    return [
        row("Peaks the 15 s averages hide"),
        panel(
            "table",
            "Hottest ports: 1 ms peak beside the 15 s average",
            "The 20 port directions with the highest 1 ms utilization in the last 15 s, beside "
            "their mean over the last scrape interval (15 s; recording rule "
            "..._ratio_irate1m). A high peak over a low average is a burst a 15 s exporter "
            "cannot see. Click a node to open its Port drill-down.",
            [
                target(hottest, ref="A", instant=True, format="table"),
                target(
                    f"{AVERAGE_15S}{{{FLEET}}}\n"
                    "  and on (instance, device, port, direction)\n" + hottest,
                    ref="B",
                    instant=True,
                    format="table",
                ),
            ],
            "percentunit",
            (14, 10),
            options={
                "showHeader": True,
                "showTypeIcons": False,
                "frameIndex": 0,
                "cellHeight": "sm",
                "footer": {"show": False, "reducer": ["sum"], "countRows": False, "fields": ""},
                "sortBy": [{"displayName": "1 ms peak", "desc": True}],
            },
            overrides=link_override,
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {
                            "Time": True,
                            "window": True,
                            "__name__": True,
                            "job": True,
                        },
                        "renameByName": {"Value #A": "1 ms peak", "Value #B": "15 s average"},
                    },
                },
            ],
        ),
        panel(
            "table",
            "Ports with hidden saturation",
            "Share of the last 5 m each port direction spent saturated (>= 90%) inside 15 s "
            "windows whose mean stayed below 25%: saturation a 15 s scrape reports as quiet. "
            "Click a node to open its Port drill-down.",
            [
                target(
                    "topk(10, rate(burstscope_port_hidden_saturated_seconds_total"
                    f"{{{FLEET}}}[5m]))",
                    instant=True,
                    format="table",
                )
            ],
            "percentunit",
            (10, 10),
            options={
                "showHeader": True,
                "showTypeIcons": False,
                "frameIndex": 0,
                "cellHeight": "sm",
                "footer": {"show": False, "reducer": ["sum"], "countRows": False, "fields": ""},
                "sortBy": [{"displayName": "hidden saturated share", "desc": True}],
            },
            overrides=link_override,
            transformations=[
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "job": True},
                        "renameByName": {"Value": "hidden saturated share"},
                    },
                }
            ],
        ),
    ]


def fleet_trends_row() -> list[Json]:
    """Per-node recorded series, as their spread across the fleet (3 lines, not 590)."""

    def peak_of(name: str) -> str:
        return f"max_over_time({name}{{{NODES}}}[$__interval])"

    return [
        row("Fleet trends (spread across nodes)"),
        panel(
            "timeseries",
            "1 ms peak and 15 s average, across nodes",
            "Per node, the highest 1 ms sample of any port in each step (max_over_time of the "
            "15 s peak, so zooming out drops no peak), and the highest mean over one 15 s "
            "scrape interval of any port in each step; then the highest node, the 90th "
            "percentile and the median node.",
            [
                target(f"max({peak_of(NODE_PEAK)})", "highest 1 ms peak", "A"),
                target(f"quantile(0.5, {peak_of(NODE_PEAK)})", "median node's 1 ms peak", "B"),
                target(f"max({peak_of(NODE_AVERAGE_15S)})", "highest 15 s average", "C"),
                target(
                    f"quantile(0.5, {peak_of(NODE_AVERAGE_15S)})",
                    "median node's 15 s average",
                    "D",
                ),
            ],
            "percentunit",
            interval=FLEET_MIN_INTERVAL,
        ),
        panel(
            "timeseries",
            "Share of saturated milliseconds, across nodes",
            "Per node, the share of all its ports' 1 ms samples at or above 90% of line rate "
            "over the last 5 m (recording rule, buckets summed over ports before dividing); "
            "the highest in each step, the 90th percentile and the median node.",
            spread(peak_of(NODE_SATURATED), "node"),
            "percentunit",
            interval=FLEET_MIN_INTERVAL,
        ),
        panel(
            "timeseries",
            "Rail synchrony, across nodes",
            "Per node: the share of its port directions whose 1 ms peak over the last 15 s "
            "reached 90% (highest in each step). 1 means every rail saturated within the same "
            "15 s (a synchronized collective); a lone port near 0 is one hot rail. A proxy: it "
            "cannot tell whether the bursts overlapped within the same millisecond.",
            spread(peak_of(NODE_SYNCHRONY), "node"),
            "percentunit",
            interval=FLEET_MIN_INTERVAL,
        ),
        panel(
            "timeseries",
            "Bursts per second, across nodes",
            "Bursts (runs above 50% of line rate) that ended per second over the last 1 m, "
            "all ports of a node (recording rule); highest, 90th percentile and median node.",
            spread(f"{NODE_BURSTS}{{{NODES}}}", "node"),
            "ops",
            interval=FLEET_MIN_INTERVAL,
        ),
    ]


def fleet_agents_row() -> list[Json]:
    """Whether every agent runs, samples on time, and what it costs its node."""
    job = 'job="burstscope", ' + NODES
    down_steps: list[Json] = [{"color": "green", "value": None}, {"color": "red", "value": 1}]
    none_down = value_mappings({"0": ("none", "green")})
    return [
        row("Agents"),
        stat(
            "Agents down",
            "Targets of job burstscope whose last scrape failed (up == 0): alert AgentDown.",
            [target(f"count(up{{{job}}} == 0) or vector(0)", "down", instant=True)],
            (4, 6),
            down_steps,
            none_down,
        ),
        stat(
            "Samplers down",
            "Agents that answer but whose 1 ms sampler process is not running "
            "(burstscope_sampler_up == 0): alert AgentLagging.",
            [
                target(
                    f"count(burstscope_sampler_up{{{NODES}}} == 0) or vector(0)",
                    "down",
                    instant=True,
                )
            ],
            (4, 6),
            down_steps,
            none_down,
        ),
        panel(
            "timeseries",
            "Agent CPU per node",
            "CPU of the whole agent, in cores: its main process (process_cpu_seconds_total "
            "from prometheus-client's process collector) plus its 1 ms sampler process "
            "(burstscope_sampler_cpu_seconds_total); highest, 90th percentile and median node.",
            spread(
                f"(rate(process_cpu_seconds_total{{{job}}}[$__rate_interval])"
                f" + rate(burstscope_sampler_cpu_seconds_total{{{job}}}[$__rate_interval]))",
                "node",
            ),
            "short",
            (8, 6),
            interval=FLEET_MIN_INTERVAL,
        ),
        panel(
            "timeseries",
            "Agent memory per node",
            "Resident memory of the whole agent: main process (process_resident_memory_bytes) "
            "plus sampler process (burstscope_sampler_resident_memory_bytes). Shared pages "
            "count twice, so this is an upper bound of what the node gives it.",
            spread(
                f"(process_resident_memory_bytes{{{job}}}"
                f" + burstscope_sampler_resident_memory_bytes{{{job}}})",
                "node",
            ),
            "bytes",
            (8, 6),
            interval=FLEET_MIN_INTERVAL,
        ),
        panel(
            "timeseries",
            "Missed sampler ticks",
            "Deadlines the 1 ms sampler skipped, per second: the node missing the most, and "
            "the fleet total. Anything above 0 for long means peaks from that node are "
            "incomplete (alert AgentLagging).",
            [
                target(
                    "max(rate(burstscope_sampler_missed_ticks_total"
                    f"{{{NODES}}}[$__rate_interval]))",
                    "worst node",
                    "A",
                ),
                target(
                    "sum(rate(burstscope_sampler_missed_ticks_total"
                    f"{{{NODES}}}[$__rate_interval]))",
                    "fleet",
                    "B",
                ),
            ],
            "ops",
            (24, 6),
            interval=FLEET_MIN_INTERVAL,
        ),
    ]


def fleet_overview() -> Json:
    return dashboard(
        "burstscope-fleet-overview",
        "burstscope / Fleet overview",
        "Millisecond peaks of every RDMA port beside the 15 s averages other exporters show.",
        [*fleet_peaks_row(), *fleet_trends_row(), *fleet_agents_row()],
        drilldown=False,
    )


LEGEND = "{{device}}/{{port}} {{direction}}"
PORT_LEGEND = "{{device}}/{{port}}"


def rate_of(name: str, selector: str) -> str:
    return f"rate({name}{{{selector}}}[$__rate_interval])"


def drill_utilization_row() -> list[Json]:
    return [
        row("Utilization"),
        panel(
            "timeseries",
            "1 ms peak, 15 s average and p99",
            "The highest 1 ms sample in each step (max_over_time of the trailing 15 s peak, "
            "so zooming out drops no peak); the mean over one 15 s scrape interval "
            "(recording rule ..._ratio_irate1m), highest in each step; and the 99th "
            "percentile of 1 ms samples over the rate interval (from the utilization "
            "histogram). Lines at 25% (busy) and 90% (saturated).",
            [
                target(
                    "max_over_time(burstscope_port_peak_utilization_ratio"
                    f'{{{PORT_DIRECTION}, window="15s"}}[$__interval])',
                    LEGEND + " 1 ms peak",
                    "A",
                ),
                target(
                    f"max_over_time({AVERAGE_15S}{{{PORT_DIRECTION}}}[$__interval])",
                    LEGEND + " 15 s average",
                    "B",
                ),
                target(
                    "histogram_quantile(0.99, "
                    + rate_of("burstscope_port_utilization_ratio_bucket", PORT_DIRECTION)
                    + ")",
                    LEGEND + " p99 of 1 ms samples",
                    "C",
                ),
            ],
            "percentunit",
            (24, 9),
        ),
        panel(
            "timeseries",
            "Share of milliseconds at >= 95% (BurstSaturation)",
            "Share of 1 ms samples at or above 95% of line rate over 5 m (recording rule), "
            "highest in each step, beside the share above which BurstSaturation pages "
            "(global:burstscope_burst_saturation_share:threshold).",
            [
                target(
                    f"max_over_time({PORT_ABOVE_95}{{{PORT_DIRECTION}}}[$__interval])",
                    LEGEND,
                    "A",
                ),
                target("global:burstscope_burst_saturation_share:threshold", "alert share", "B"),
            ],
            "percentunit",
            (12, 9),
        ),
        panel(
            "heatmap",
            "Utilization heatmap (1 ms samples)",
            "How many 1 ms samples per second fell in each utilization bucket.",
            [
                target(
                    "sum by (le) ("
                    + rate_of("burstscope_port_utilization_ratio_bucket", PORT_DIRECTION)
                    + ")",
                    "{{le}}",
                    format="heatmap",
                )
            ],
            "percentunit",
            (12, 9),
            options={
                "calculate": False,
                "yAxis": {"unit": "percentunit", "axisPlacement": "left"},
                "cellValues": {"unit": "ops"},
                "color": {
                    "mode": "scheme",
                    "scheme": "Oranges",
                    "steps": 64,
                    "fill": "dark-orange",
                    "scale": "exponential",
                    "exponent": 0.5,
                    "reverse": False,
                },
                "legend": {"show": True},
                "tooltip": {"mode": "single", "yHistogram": False, "showColorScale": False},
                "cellGap": 1,
                "rowsFrame": {"layout": "auto"},
                "filterValues": {"le": 1e-9},
                "exemplars": {"color": "rgba(255,0,255,0.7)"},
                "showValue": "auto",
                "selectionMode": "x",
            },
        ),
    ]


def drill_bursts_row() -> list[Json]:
    duration = "burstscope_port_burst_duration_seconds"
    return [
        row("Bursts"),
        panel(
            "timeseries",
            "Burst rate",
            "Bursts (maximal runs above 50% of line rate) that ended, per second.",
            [target(rate_of("burstscope_port_bursts_total", PORT_DIRECTION), LEGEND)],
            "ops",
            (8, 8),
        ),
        panel(
            "timeseries",
            "Burst duration",
            "Mean, median and p99 duration of the bursts that ended in the rate interval "
            "(both directions of a port: the histogram is per port; buckets one per decade "
            "from 1 ms to 10 s).",
            [
                target(
                    rate_of(f"{duration}_sum", PORT)
                    + "\n  /\n"
                    + rate_of(f"{duration}_count", PORT),
                    PORT_LEGEND + " mean",
                    "A",
                ),
                target(
                    f"histogram_quantile(0.5, {rate_of(f'{duration}_bucket', PORT)})",
                    PORT_LEGEND + " p50",
                    "B",
                ),
                target(
                    f"histogram_quantile(0.99, {rate_of(f'{duration}_bucket', PORT)})",
                    PORT_LEGEND + " p99",
                    "C",
                ),
            ],
            "s",
            (8, 8),
        ),
        panel(
            "timeseries",
            "Saturated time",
            "Share of time at or above 90% of line rate over the rate interval, and the part "
            "of it inside 15 s windows that looked quiet (hidden).",
            [
                target(
                    rate_of("burstscope_port_saturated_seconds_total", PORT_DIRECTION),
                    LEGEND + " saturated",
                    "A",
                ),
                target(
                    rate_of("burstscope_port_hidden_saturated_seconds_total", PORT_DIRECTION),
                    LEGEND + " hidden",
                    "B",
                ),
            ],
            "percentunit",
            (8, 8),
        ),
    ]


def drill_congestion_row() -> list[Json]:
    return [
        row("Congestion beside bursts"),
        panel(
            "timeseries",
            "Bytes carried in bursts",
            "Bytes per second carried inside bursts: line these up with the congestion "
            "counters to the right.",
            [target(rate_of("burstscope_port_burst_bytes_total", PORT_DIRECTION), LEGEND)],
            "Bps",
            (12, 8),
        ),
        panel(
            "timeseries",
            "CNP / ECN packets",
            "RoCE congestion control packets per second by kernel counter name "
            "(np_cnp_sent, rp_cnp_handled, rp_cnp_ignored, np_ecn_marked_roce_packets).",
            [
                target(
                    rate_of("burstscope_port_congestion_packets_total", PORT),
                    PORT_LEGEND + " {{counter}}",
                )
            ],
            "pps",
            (12, 8),
        ),
        panel(
            "timeseries",
            "Transmit wait",
            "port_xmit_wait ticks per second: data queued with nothing sent. Tick length "
            "differs by HCA generation: compare ports of one model only.",
            [target(rate_of("burstscope_port_transmit_wait_total", PORT), PORT_LEGEND)],
            "ops",
            (12, 8),
        ),
        panel(
            "timeseries",
            "PFC pause frames",
            "PFC pause frames per second by priority and direction (ethtool).",
            [
                target(
                    rate_of("burstscope_port_pfc_pause_frames_total", PORT_DIRECTION),
                    PORT_LEGEND + " {{direction}} prio {{priority}}",
                )
            ],
            "ops",
            (12, 8),
        ),
    ]


def drill_link_row() -> list[Json]:
    state_steps: list[Json] = [{"color": "red", "value": None}, {"color": "green", "value": 4}]
    return [
        row("Link"),
        stat(
            "Port state",
            "Logical port state by name (counters state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, "
            "5 ACTIVE_DEFER). Anything but ACTIVE on a training rail stalls its collectives.",
            [target(f"burstscope_port_state{{{PORT}}}", PORT_LEGEND, instant=True)],
            (6, 6),
            state_steps,
            value_mappings(PORT_STATES),
        ),
        panel(
            "timeseries",
            "Line rate",
            "Line rate of each port: a drop below its usual value is a degraded link.",
            [target(f"burstscope_port_line_rate_bytes_per_second{{{PORT}}}", PORT_LEGEND)],
            "Bps",
            (6, 6),
        ),
        panel(
            "timeseries",
            "Link errors and link downs",
            "Link error PortCounters and link_downed increments over the rate interval.",
            [
                target(
                    f"increase(burstscope_port_errors_total{{{PORT}}}[$__rate_interval])",
                    PORT_LEGEND + " {{counter}}",
                    "A",
                ),
                target(
                    f"increase(burstscope_port_link_downed_total{{{PORT}}}[$__rate_interval])",
                    PORT_LEGEND + " link_downed",
                    "B",
                ),
            ],
            "short",
            (12, 6),
        ),
    ]


def drill_health_row() -> list[Json]:
    up_down = value_mappings({"0": ("down", "red"), "1": ("up", "green")})
    up_steps: list[Json] = [{"color": "red", "value": None}, {"color": "green", "value": 1}]
    return [
        row("Agent health"),
        stat(
            "Agent scrape",
            "up: whether Prometheus' last scrape of this agent succeeded (alert AgentDown).",
            [target(f'up{{job="burstscope", {NODES}}}', "scrape", instant=True)],
            (4, 7),
            up_steps,
            up_down,
        ),
        stat(
            "Sampler",
            "1 while the 1 ms sampler process is alive (alert AgentLagging when it is not).",
            [target(f"burstscope_sampler_up{{{NODES}}}", "sampler", instant=True)],
            (4, 7),
            up_steps,
            up_down,
        ),
        stat(
            "Realtime scheduling",
            "Whether the sampler runs under SCHED_FIFO; without it, expect more lateness.",
            [target(f"burstscope_sampler_realtime{{{NODES}}}", "SCHED_FIFO", instant=True)],
            (4, 7),
            [{"color": "orange", "value": None}, {"color": "green", "value": 1}],
            value_mappings({"0": ("no", "orange"), "1": ("yes", "green")}),
        ),
        panel(
            "timeseries",
            "Missed ticks and lost samples",
            "Deadlines skipped by the sampler and ring rows overwritten before the agent read "
            "them, per second.",
            [
                target(
                    rate_of("burstscope_sampler_missed_ticks_total", NODES),
                    "{{instance}} missed ticks",
                    "A",
                ),
                target(
                    rate_of("burstscope_ring_lost_samples_total", NODES),
                    "{{instance}} lost samples",
                    "B",
                ),
            ],
            "ops",
            (12, 7),
        ),
        panel(
            "timeseries",
            "Sampler lateness p99",
            "99th percentile of wake-up minus deadline per tick, and the sampling interval "
            "for scale.",
            [
                target(
                    "histogram_quantile(0.99, "
                    + rate_of("burstscope_sampler_lateness_seconds_bucket", NODES)
                    + ")",
                    "{{instance}} p99 lateness",
                    "A",
                ),
                target(
                    f"burstscope_sampler_interval_seconds{{{NODES}}}",
                    "{{instance}} interval",
                    "B",
                ),
            ],
            "s",
            (8, 7),
        ),
        panel(
            "timeseries",
            "Read duration p99 by source",
            "99th percentile of one read: one port's data counters per tick for the fast "
            "source, one poll for slow sources. On a real HCA it decides what resolution is "
            "honest.",
            [
                target(
                    "histogram_quantile(0.99, sum by (instance, source, le) ("
                    + rate_of("burstscope_source_read_duration_seconds_bucket", NODES)
                    + "))",
                    "{{instance}} {{source}}",
                )
            ],
            "s",
            (8, 7),
        ),
        panel(
            "timeseries",
            "Scrape duration and agent cost",
            "How long the previous /metrics scrape took to build, and the CPU of the whole "
            "agent in cores (main process plus sampler process).",
            [
                target(
                    f"burstscope_scrape_duration_seconds{{{NODES}}}",
                    "{{instance}} scrape (s)",
                    "A",
                ),
                target(
                    f'(rate(process_cpu_seconds_total{{job="burstscope", {NODES}}}'
                    "[$__rate_interval])"
                    f' + rate(burstscope_sampler_cpu_seconds_total{{job="burstscope", {NODES}}}'
                    "[$__rate_interval]))",
                    "{{instance}} agent CPU (cores)",
                    "B",
                ),
            ],
            "short",
            (8, 7),
        ),
        panel(
            "timeseries",
            "Source errors and failed reads",
            "Failed opens, polls or files of slow sources, and failed 1 ms data reads, per second.",
            [
                target(
                    rate_of("burstscope_source_errors_total", NODES),
                    "{{instance}} {{source}}",
                    "A",
                ),
                target(
                    rate_of("burstscope_port_failed_reads_total", PORT),
                    PORT_LEGEND + " failed reads",
                    "B",
                ),
                target(
                    rate_of("burstscope_port_data_resets_total", PORT),
                    PORT_LEGEND + " counter resets",
                    "C",
                ),
            ],
            "ops",
            (24, 7),
        ),
    ]


def port_drilldown() -> Json:
    return dashboard(
        DRILLDOWN_UID,
        "burstscope / Port drill-down",
        "One node's ports: average, peak and p99 together, bursts, congestion, agent health.",
        [
            *drill_utilization_row(),
            *drill_bursts_row(),
            *drill_congestion_row(),
            *drill_link_row(),
            *drill_health_row(),
        ],
        drilldown=True,
    )


DASHBOARDS = {
    "fleet-overview.json": fleet_overview,
    "port-drilldown.json": port_drilldown,
}


def render(name: str) -> str:
    return json.dumps(DASHBOARDS[name](), indent=2) + "\n"


def main() -> int:
    for name in DASHBOARDS:
        (GRAFANA / name).write_text(render(name))
        print(f"wrote {GRAFANA / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
