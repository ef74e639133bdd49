"""Writes the Grafana dashboards (classic JSON, schemaVersion 41) from the panel lists below.

Run ``python dashboards/generate.py`` after editing; tests/test_dashboards.py fails when
the checked-in JSON differs from what this prints. Every panel and target uses the
``${datasource}`` variable; selectors use the ``instance``/``device`` (and on the drill-down
``port``/``direction``) variables as regular expressions, so "All" is ``.*``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

GRAFANA = Path(__file__).resolve().parent / "grafana"
SCHEMA_VERSION = 41
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

Json = dict[str, Any]

# Selectors. PORT_SEL for per-port families without direction, SEL for those with it.
FLEET_PORT = 'instance=~"$instance", device=~"$device"'
DRILL_PORT = 'instance=~"$instance", device=~"$device", port=~"$port"'
DRILL = DRILL_PORT + ', direction=~"$direction"'
NODE = 'instance=~"$instance"'


def utilization_average(selector: str, port_selector: str, window: str) -> str:
    """Mean utilization over ``window``: bytes per second over line rate, per direction."""
    return (
        f"rate(burstscope_port_data_bytes_total{{{selector}}}[{window}])\n"
        "  / ignoring (direction) group_left\n"
        f"burstscope_port_line_rate_bytes_per_second{{{port_selector}}}"
    )


def target(expr: str, legend: str = "", ref: str = "A", **extra: Any) -> Json:
    return {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": not extra.get("instant", False),
        "refId": ref,
        **extra,
    }


def panel(
    kind: str,
    title: str,
    description: str,
    targets: list[Json],
    unit: str,
    size: tuple[int, int] = (12, 8),
    **extra: Any,
) -> Json:
    width, height = size
    defaults: Json = {"unit": unit}
    if kind in ("timeseries", "bargauge", "stat"):
        defaults["min"] = 0
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"w": width, "h": height, "x": 0, "y": 0},
        "fieldConfig": {"defaults": defaults, "overrides": extra.pop("overrides", [])},
        "options": extra.pop("options", {"legend": {"displayMode": "table", "placement": "right"}}),
        "targets": targets,
        **extra,
    }


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


def query_variable(name: str, label: str, query: str, multi: bool = True) -> Json:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-variable"},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "multi": multi,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def variables(drilldown: bool) -> list[Json]:
    found: list[Json] = [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Data source",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
            "regex": "",
        },
        query_variable("instance", "Node", "label_values(burstscope_info, instance)", True),
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
            }
        ],
        "templating": {"list": variables(drilldown)},
        "panels": layout(panels),
    }


def fleet_overview() -> Json:
    peak = f'burstscope_port_peak_utilization_ratio{{{FLEET_PORT}, window="15s"}}'
    hottest = f"topk(20, {peak})"
    hottest_join = "  and on (instance, device, port, direction)\n" + hottest
    table_options = {"showHeader": True, "sortBy": [{"displayName": "1 ms peak", "desc": True}]}
    panels = [
        row("Peaks the 15 s averages hide"),
        panel(
            "table",
            "Hottest ports: 1 ms peak beside the 15 s average",
            "The 20 port directions with the highest 1 ms utilization in the last 15 s, beside "
            "their mean over the last 15 s (rate over one 15 s scrape interval). A high peak "
            "over a low average is a burst a 15 s exporter cannot see.",
            [
                target(hottest, ref="A", instant=True, format="table"),
                target(
                    utilization_average(
                        f'{FLEET_PORT}, direction=~".*"', FLEET_PORT, "$__rate_interval"
                    )
                    + "\n"
                    + hottest_join,
                    ref="B",
                    instant=True,
                    format="table",
                ),
            ],
            "percentunit",
            (14, 10),
            options=table_options,
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "window": True, "__name__": True},
                        "renameByName": {"Value #A": "1 ms peak", "Value #B": "15 s average"},
                    },
                },
            ],
        ),
        panel(
            "bargauge",
            "Ports with hidden saturation",
            "Share of time each port direction spent saturated (>= 90%) inside 15 s windows "
            "whose mean stayed below 25%: saturation a 15 s scrape reports as quiet.",
            [
                target(
                    "topk(10, rate(burstscope_port_hidden_saturated_seconds_total"
                    f"{{{FLEET_PORT}}}[$__rate_interval]))",
                    "{{instance}} {{device}}/{{port}} {{direction}}",
                    instant=True,
                )
            ],
            "percentunit",
            (10, 10),
            options={"orientation": "horizontal", "displayMode": "gradient"},
        ),
        panel(
            "timeseries",
            "Share of saturated milliseconds per node",
            "Per node, the share of all its ports' 1 ms samples at or above 90% of line rate: "
            '1 - bucket{le="0.9"} / count of the utilization histogram, summed over ports '
            "before dividing.",
            [
                target(
                    "1 - (\n"
                    "  sum by (instance) (rate(burstscope_port_utilization_ratio_bucket"
                    f'{{{FLEET_PORT}, le="0.9"}}[$__rate_interval]))\n'
                    "    /\n"
                    "  sum by (instance) (rate(burstscope_port_utilization_ratio_count"
                    f"{{{FLEET_PORT}}}[$__rate_interval]))\n"
                    ")",
                    "{{instance}}",
                )
            ],
            "percentunit",
        ),
        panel(
            "timeseries",
            "Rail synchrony: share of a node's ports bursting together",
            "Per node: the share of its port directions whose 1 ms peak over the last 15 s "
            "reached 90%. 1 means every rail saturated within the same 15 s (a synchronized "
            "collective); a lone port near 0 is one hot rail. A proxy: it cannot tell whether "
            "the bursts overlapped within the same millisecond.",
            [
                target(
                    f"count by (instance) ({peak} >= 0.9)\n"
                    f"  / count by (instance) ({peak})\n"
                    f"or on (instance) 0 * count by (instance) ({peak})",
                    "{{instance}}",
                )
            ],
            "percentunit",
        ),
        row("Fleet trends"),
        panel(
            "timeseries",
            "Highest 1 ms peak and highest 15 s average in the fleet",
            "The same contrast over time: the hottest 1 ms in any port's trailing 15 s, and "
            "the highest 15 s mean of any port.",
            [
                target(f"max({peak})", "highest 1 ms peak", "A"),
                target(
                    "max(\n"
                    + utilization_average(FLEET_PORT, FLEET_PORT, "$__rate_interval")
                    + "\n)",
                    "highest 15 s average",
                    "B",
                ),
            ],
            "percentunit",
        ),
        panel(
            "timeseries",
            "Bursts per second per node",
            "Bursts (runs above 50% of line rate) that ended, per second, all ports of a node.",
            [
                target(
                    "sum by (instance) (rate(burstscope_port_bursts_total"
                    f"{{{FLEET_PORT}}}[$__rate_interval]))",
                    "{{instance}}",
                )
            ],
            "ops",
        ),
        panel(
            "stat",
            "Samplers up",
            "Nodes whose 1 ms sampler process is running.",
            [target(f"sum(burstscope_sampler_up{{{NODE}}})", "up", instant=True)],
            "none",
            (6, 5),
            options={"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"},
        ),
        panel(
            "timeseries",
            "Missed sampler ticks per node",
            "Deadlines the 1 ms sampler skipped, per second. Anything above 0 for long means "
            "peaks from that node are incomplete (alert AgentLagging).",
            [
                target(
                    "sum by (instance) (rate(burstscope_sampler_missed_ticks_total"
                    f"{{{NODE}}}[$__rate_interval]))",
                    "{{instance}}",
                )
            ],
            "ops",
            (18, 5),
        ),
    ]
    return dashboard(
        "burstscope-fleet-overview",
        "burstscope / Fleet overview",
        "Millisecond peaks of every RDMA port beside the 15 s averages other exporters show.",
        panels,
        drilldown=False,
    )


def port_drilldown() -> Json:
    legend = "{{device}}/{{port}} {{direction}}"
    rate_of = "rate({name}{{{sel}}}[$__rate_interval])"
    panels = [
        row("Utilization"),
        panel(
            "timeseries",
            "15 s average, 1 ms peak and p99",
            "Mean utilization over the rate interval, the highest 1 ms sample of the trailing "
            "15 s, and the 99th percentile of 1 ms samples over the rate interval (from the "
            "utilization histogram).",
            [
                target(
                    utilization_average(DRILL, DRILL_PORT, "$__rate_interval"),
                    legend + " average",
                    "A",
                ),
                target(
                    f'burstscope_port_peak_utilization_ratio{{{DRILL}, window="15s"}}',
                    legend + " 1 ms peak (15 s)",
                    "B",
                ),
                target(
                    "histogram_quantile(0.99, "
                    + rate_of.format(name="burstscope_port_utilization_ratio_bucket", sel=DRILL)
                    + ")",
                    legend + " p99",
                    "C",
                ),
            ],
            "percentunit",
            (24, 9),
        ),
        panel(
            "heatmap",
            "Utilization heatmap (1 ms samples)",
            "How many 1 ms samples per second fell in each utilization bucket.",
            [
                target(
                    "sum by (le) ("
                    + rate_of.format(name="burstscope_port_utilization_ratio_bucket", sel=DRILL)
                    + ")",
                    "{{le}}",
                    format="heatmap",
                )
            ],
            "percentunit",
            (24, 9),
            options={
                "calculate": False,
                "yAxis": {"unit": "percentunit"},
                "cellValues": {"unit": "ops"},
                "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
            },
        ),
        row("Bursts"),
        panel(
            "timeseries",
            "Burst rate",
            "Bursts (maximal runs above 50% of line rate) that ended, per second.",
            [
                target(
                    rate_of.format(name="burstscope_port_bursts_total", sel=DRILL),
                    legend,
                )
            ],
            "ops",
            (8, 8),
        ),
        panel(
            "timeseries",
            "Burst duration",
            "Mean and p99 duration of the bursts that ended in the rate interval "
            "(both directions of a port: the histogram is per port).",
            [
                target(
                    rate_of.format(
                        name="burstscope_port_burst_duration_seconds_sum", sel=DRILL_PORT
                    )
                    + "\n  /\n"
                    + rate_of.format(
                        name="burstscope_port_burst_duration_seconds_count", sel=DRILL_PORT
                    ),
                    "{{device}}/{{port}} mean",
                    "A",
                ),
                target(
                    "histogram_quantile(0.99, "
                    + rate_of.format(
                        name="burstscope_port_burst_duration_seconds_bucket", sel=DRILL_PORT
                    )
                    + ")",
                    "{{device}}/{{port}} p99",
                    "B",
                ),
            ],
            "s",
            (8, 8),
        ),
        panel(
            "timeseries",
            "Saturated time",
            "Share of time at or above 90% of line rate, and the part of it inside 15 s "
            "windows that looked quiet (hidden).",
            [
                target(
                    rate_of.format(name="burstscope_port_saturated_seconds_total", sel=DRILL),
                    legend + " saturated",
                    "A",
                ),
                target(
                    rate_of.format(
                        name="burstscope_port_hidden_saturated_seconds_total", sel=DRILL
                    ),
                    legend + " hidden",
                    "B",
                ),
            ],
            "percentunit",
            (8, 8),
        ),
        row("Congestion beside bursts"),
        panel(
            "timeseries",
            "Bytes carried in bursts",
            "Bytes per second carried inside bursts: line these up with the congestion "
            "counters to the right.",
            [
                target(
                    rate_of.format(name="burstscope_port_burst_bytes_total", sel=DRILL),
                    legend,
                )
            ],
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
                    rate_of.format(name="burstscope_port_congestion_packets_total", sel=DRILL_PORT),
                    "{{device}}/{{port}} {{counter}}",
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
            [
                target(
                    rate_of.format(name="burstscope_port_transmit_wait_total", sel=DRILL_PORT),
                    "{{device}}/{{port}}",
                )
            ],
            "ops",
            (8, 8),
        ),
        panel(
            "timeseries",
            "PFC pause frames",
            "PFC pause frames per second by priority and direction (ethtool).",
            [
                target(
                    rate_of.format(name="burstscope_port_pfc_pause_frames_total", sel=DRILL),
                    "{{device}}/{{port}} {{direction}} prio {{priority}}",
                )
            ],
            "ops",
            (8, 8),
        ),
        row("Link"),
        panel(
            "stat",
            "Port state",
            "Logical port state (4 = ACTIVE; 1 = DOWN, 2 = INIT, 3 = ARMED).",
            [
                target(
                    f"burstscope_port_state{{{DRILL_PORT}}}",
                    "{{device}}/{{port}}",
                    instant=True,
                )
            ],
            "none",
            (6, 6),
            options={"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "background"},
            overrides=[],
        ),
        panel(
            "timeseries",
            "Line rate",
            "Line rate of each port: a drop below its usual value is a degraded link.",
            [
                target(
                    f"burstscope_port_line_rate_bytes_per_second{{{DRILL_PORT}}}",
                    "{{device}}/{{port}}",
                )
            ],
            "Bps",
            (6, 6),
        ),
        panel(
            "timeseries",
            "Link errors and link downs",
            "Link error PortCounters and link_downed increments over the rate interval.",
            [
                target(
                    f"increase(burstscope_port_errors_total{{{DRILL_PORT}}}[$__rate_interval])",
                    "{{device}}/{{port}} {{counter}}",
                    "A",
                ),
                target(
                    "increase(burstscope_port_link_downed_total"
                    f"{{{DRILL_PORT}}}[$__rate_interval])",
                    "{{device}}/{{port}} link_downed",
                    "B",
                ),
            ],
            "short",
            (12, 6),
        ),
        row("Agent health"),
        panel(
            "stat",
            "Sampler up",
            "1 while the 1 ms sampler process is alive; realtime is 1 under SCHED_FIFO.",
            [
                target(f"burstscope_sampler_up{{{NODE}}}", "{{instance}} up", "A", instant=True),
                target(
                    f"burstscope_sampler_realtime{{{NODE}}}",
                    "{{instance}} realtime",
                    "B",
                    instant=True,
                ),
            ],
            "none",
            (6, 7),
            options={"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"},
        ),
        panel(
            "timeseries",
            "Missed ticks and lost samples",
            "Deadlines skipped by the sampler and ring rows overwritten before the agent read "
            "them, per second.",
            [
                target(
                    f"rate(burstscope_sampler_missed_ticks_total{{{NODE}}}[$__rate_interval])",
                    "{{instance}} missed ticks",
                    "A",
                ),
                target(
                    f"rate(burstscope_ring_lost_samples_total{{{NODE}}}[$__rate_interval])",
                    "{{instance}} lost samples",
                    "B",
                ),
            ],
            "ops",
            (9, 7),
        ),
        panel(
            "timeseries",
            "Sampler lateness p99",
            "99th percentile of wake-up minus deadline per tick, and the sampling interval "
            "for scale.",
            [
                target(
                    "histogram_quantile(0.99, rate(burstscope_sampler_lateness_seconds_bucket"
                    f"{{{NODE}}}[$__rate_interval]))",
                    "{{instance}} p99 lateness",
                    "A",
                ),
                target(
                    f"burstscope_sampler_interval_seconds{{{NODE}}}",
                    "{{instance}} interval",
                    "B",
                ),
            ],
            "s",
            (9, 7),
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
                    f"rate(burstscope_source_read_duration_seconds_bucket{{{NODE}}}"
                    "[$__rate_interval])))",
                    "{{instance}} {{source}}",
                )
            ],
            "s",
            (8, 7),
        ),
        panel(
            "timeseries",
            "Scrape duration",
            "How long the previous /metrics scrape took to build.",
            [
                target(
                    f"burstscope_scrape_duration_seconds{{{NODE}}}",
                    "{{instance}}",
                )
            ],
            "s",
            (8, 7),
        ),
        panel(
            "timeseries",
            "Source errors and failed reads",
            "Failed opens, polls or files of slow sources, and failed 1 ms data reads, per second.",
            [
                target(
                    f"rate(burstscope_source_errors_total{{{NODE}}}[$__rate_interval])",
                    "{{instance}} {{source}}",
                    "A",
                ),
                target(
                    f"rate(burstscope_port_failed_reads_total{{{DRILL_PORT}}}[$__rate_interval])",
                    "{{device}}/{{port}} failed reads",
                    "B",
                ),
                target(
                    f"rate(burstscope_port_data_resets_total{{{DRILL_PORT}}}[$__rate_interval])",
                    "{{device}}/{{port}} counter resets",
                    "C",
                ),
            ],
            "ops",
            (8, 7),
        ),
    ]
    return dashboard(
        "burstscope-port-drilldown",
        "burstscope / Port drill-down",
        "One node's ports: average, peak and p99 together, bursts, congestion, agent health.",
        panels,
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
