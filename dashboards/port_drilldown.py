"""The port drill-down dashboard: one node's ports, average, peak and p99 together, bursts,
congestion, link and agent health.

On an agent with the lean profile ([metrics] profile = "lean", docs/metrics.md "Profiles")
the default view still draws: peaks, averages, saturated time, link and job panels read
series both profiles export, and the p99, the heatmap and the burst rate fall back to the
node's own histogram and bursts. The targets in FULL_PROFILE_ONLY read per-port detail only
the full profile exports; their descriptions say so.
"""

from __future__ import annotations

from dashboards.builder import (
    AGENT_CPU_CORES,
    AGENTS,
    AVERAGE_15S,
    FLEET_UID,
    NODE_DIRECTION,
    NODE_LABELS,
    NODES,
    PORT,
    PORT_DIRECTION,
    RULES,
    Json,
    dashboard,
    panel,
    rate_of,
    row,
    stat,
    table_options,
    target,
    value_mappings,
)
from dashboards.job_selectors import DEFAULT, Selectors
from dashboards.rules import PEAK_WINDOW, SLOW_WINDOWS_INTERVAL

UID = "burstscope-port-drilldown"

PORT_ABOVE_95 = RULES.series(
    "instance_device_port_direction", "burstscope_port_samples_above_95_percent_per_samples"
)
SATURATION_SHARE = RULES.series("global", "burstscope_burst_saturation_share")
LEGEND = "{{device}}/{{port}} {{direction}}"
PORT_LEGEND = "{{device}}/{{port}}"
PORT_STATES = {"1": ("DOWN", "red"), "2": ("INIT", "orange"), "3": ("ARMED", "yellow")}
PORT_STATES |= {"4": ("ACTIVE", "green"), "5": ("ACTIVE_DEFER", "orange")}

# The cluster and scrape job a link keeps: the ones selected where it is clicked (Grafana's
# queryparam format, https://grafana.com/docs/grafana/latest/dashboards/variables/
# variable-syntax/#queryparam).
SCOPE_PARAMS = "${cluster:queryparam}&${job:queryparam}"
# Where a fleet row leads: the drill-down on that node and port, same range and source.
DRILLDOWN_LINK = {
    "title": "Port drill-down for ${__data.fields.instance} ${__data.fields.device}",
    "url": f"/d/{UID}/burstscope-port-drill-down?"
    f"var-datasource=${{datasource}}&{SCOPE_PARAMS}&var-instance=${{__data.fields.instance}}"
    "&var-device=${__data.fields.device}&var-port=${__data.fields.port}"
    "&var-direction=All&${__url_time_range}",
    "targetBlank": False,
}
# Where a fleet row about a node, not a port (a job on a node), leads: every port of it.
NODE_DRILLDOWN_LINK = {
    "title": "Port drill-down for ${__data.fields.instance}",
    "url": f"/d/{UID}/burstscope-port-drill-down?"
    f"var-datasource=${{datasource}}&{SCOPE_PARAMS}&var-instance=${{__data.fields.instance}}"
    "&var-device=All&var-port=All&var-direction=All&${__url_time_range}",
    "targetBlank": False,
}
# Where a job leads: the fleet overview on that job, every node it runs on.
JOB_LINK = {
    "title": "Fleet overview for job ${__data.fields.job_id}",
    "url": f"/d/{FLEET_UID}/burstscope-fleet-overview?"
    f"var-datasource=${{datasource}}&{SCOPE_PARAMS}&var-instance=All&var-device=All"
    "&var-job_id=${__data.fields.job_id}&${__url_time_range}",
    "targetBlank": False,
}
# Panel targets ("title [refId]") that read what only the full profile exports: empty on a
# lean agent (tests/test_profiles.py holds it). A site scrapes some nodes with the full
# profile for them (docs/metrics.md, "Profiles").
FULL_PROFILE_ONLY = frozenset(
    {
        "Burst duration [A]",
        "Burst duration [B]",
        "Burst duration [C]",
        "Bytes carried in bursts [A]",
        "Link errors and link downs [A]",
        "Sampler lateness p99 [A]",
        "Read duration p99 by source [A]",
        "Source errors and failed reads [B]",
        "Source errors and failed reads [C]",
    }
)
FULL_ONLY_NOTE = ' Full profile only ([metrics] profile = "full"): a lean agent does not export it.'

# The columns of a job's port (burstscope_job_port with the job's user and name), in order.
JOB_PORT_COLUMNS = ("instance", "job_id", "user", "name", "device", "port", "role", "rule")


def job_ports_table(
    title: str, description: str, selectors: tuple[str, str], size: tuple[int, int]
) -> Json:
    """The ports running jobs hold (burstscope_job_port joined with burstscope_job_info),
    one row each: the node opens its drill-down on the port, the job its fleet overview.

    ``selectors``: of the ports (burstscope_job_port) and of the jobs (burstscope_job_info,
    which has no device or port)."""
    ports, jobs = selectors
    return panel(
        "table",
        title,
        description,
        [
            target(
                f"burstscope_job_port{{{ports}}}\n"
                f"  * on ({NODE_LABELS}, job_id) group_left (user, name)\n"
                f"burstscope_job_info{{{jobs}}}",
                instant=True,
                format="table",
            )
        ],
        "none",
        size,
        options=table_options("job_id", descending=False),
        overrides=[
            {
                "matcher": {"id": "byName", "options": "instance"},
                "properties": [{"id": "links", "value": [DRILLDOWN_LINK]}],
            },
            {
                "matcher": {"id": "byName", "options": "job_id"},
                "properties": [{"id": "links", "value": [JOB_LINK]}],
            },
        ],
        transformations=[
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True},
                    "indexByName": {name: i for i, name in enumerate(JOB_PORT_COLUMNS)},
                },
            }
        ],
    )


def _utilization_heatmap() -> Json:
    return panel(
        "heatmap",
        "Utilization heatmap (1 ms samples)",
        "How many 1 ms samples per second fell in each utilization bucket (on a lean agent, "
        "every port of the node together: its per-node histogram).",
        [
            target(
                "sum by (le) ("
                + rate_of("burstscope_port_utilization_ratio_bucket", PORT_DIRECTION)
                + ")\nor\nsum by (le) ("
                + rate_of("burstscope_node_utilization_ratio_bucket", NODE_DIRECTION)
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
    )


def drill_utilization_row() -> list[Json]:
    return [
        row("Utilization"),
        panel(
            "timeseries",
            "1 ms peak, 15 s average and p99",
            "The highest 1 ms sample in each step (max_over_time of the trailing 75 s peak, "
            "so no scrape interval up to 60 s and no zoom drops a peak); the mean over one "
            "15 s scrape interval (recording rule ..._ratio_irate1m), highest in each step; "
            "and the 99th percentile of 1 ms samples over the rate interval (from the utilization "
            "histogram: per port, or on a lean agent the node's, all its ports together). "
            "Lines at 25% (busy) and 90% (saturated).",
            [
                target(
                    "max_over_time(burstscope_port_peak_utilization_ratio"
                    f'{{{PORT_DIRECTION}, window="{PEAK_WINDOW}"}}[$__interval])',
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
                    + ")\nor\nhistogram_quantile(0.99, "
                    + rate_of("burstscope_node_utilization_ratio_bucket", NODE_DIRECTION)
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
            "Share of milliseconds at >= 95% (BurstscopeBurstSaturation)",
            "Share of 1 ms samples at or above 95% of line rate over 5 m (recording rule), "
            "highest in each step, beside the share above which BurstscopeBurstSaturation pages "
            f"({SATURATION_SHARE}).",
            [
                target(
                    f"max_over_time({PORT_ABOVE_95}{{{PORT_DIRECTION}}}[$__interval])",
                    LEGEND,
                    "A",
                ),
                target(SATURATION_SHARE, "alert share", "B"),
            ],
            "percentunit",
            (12, 9),
            # Recorded every 30 s: a shorter step's window would hold no sample.
            interval=SLOW_WINDOWS_INTERVAL,
        ),
        _utilization_heatmap(),
        job_ports_table(
            "Jobs holding these ports",
            "Which running job holds each port of this node (Slurm or Kubernetes, through "
            "the agent's job attribution), its user and name, the port's role (compute ports "
            "count in the job's figures, storage ports do not) and the rule that gave it the "
            "port (whole_node, pcie_switch, numa_node, device, resource). Empty when no job "
            "runs or attribution is off. Click a job to see it on every node it runs on.",
            (PORT, NODES),
            (24, 6),
        ),
    ]


def drill_bursts_row() -> list[Json]:
    duration = "burstscope_port_burst_duration_seconds"
    return [
        row("Bursts"),
        panel(
            "timeseries",
            "Burst rate",
            "Bursts (maximal runs above 50% of line rate) that ended, per second: per port, or "
            "on a lean agent all the node's ports together.",
            [
                target(
                    rate_of("burstscope_port_bursts_total", PORT_DIRECTION)
                    + "\nor\n"
                    + rate_of("burstscope_node_bursts_total", NODE_DIRECTION),
                    LEGEND,
                )
            ],
            "ops",
            (8, 8),
        ),
        panel(
            "timeseries",
            "Burst duration",
            "Mean, median and p99 duration of the bursts that ended in the rate interval "
            "(both directions of a port: the histogram is per port; buckets one per decade "
            "from 1 ms to 10 s)." + FULL_ONLY_NOTE,
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
            "counters to the right." + FULL_ONLY_NOTE,
            [target(rate_of("burstscope_port_burst_bytes_total", PORT_DIRECTION), LEGEND)],
            "Bps",
            (12, 8),
        ),
        panel(
            "timeseries",
            "CNP / ECN packets",
            "RoCE congestion control packets per second by kernel counter name "
            "(np_cnp_sent, rp_cnp_handled, rp_cnp_ignored, np_ecn_marked_roce_packets); a lean "
            "agent exports their sum per port, without the name.",
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
            "PFC pause frames per second by priority and direction (ethtool); a lean agent "
            "exports their sum per port, without priority or direction.",
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
            "Link error PortCounters and link_downed increments over the rate interval. The "
            "error PortCounters are full profile only; link_downed is in both.",
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


def _health_stats() -> list[Json]:
    """Whether Prometheus reaches the agent, its sampler runs, and runs under SCHED_FIFO."""
    up_down = value_mappings({"0": ("down", "red"), "1": ("up", "green")})
    up_steps: list[Json] = [{"color": "red", "value": None}, {"color": "green", "value": 1}]
    return [
        stat(
            "Agent scrape",
            "up: whether Prometheus' last scrape of this agent succeeded (alert "
            "BurstscopeAgentDown).",
            [target(f"up{{{AGENTS}}}", "scrape", instant=True)],
            (4, 7),
            up_steps,
            up_down,
        ),
        stat(
            "Sampler",
            "1 while the 1 ms sampler process is alive (alert BurstscopeAgentLagging when it "
            "is not).",
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
    ]


def _sampler_timing() -> list[Json]:
    """Ticks the sampler missed, samples the agent lost, and how late the sampler woke."""
    return [
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
            "for scale." + FULL_ONLY_NOTE,
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
    ]


def _reads_and_cost() -> list[Json]:
    """How long reads and scrapes take, what the agent costs, and what failed."""
    return [
        panel(
            "timeseries",
            "Read duration p99 by source",
            "99th percentile of one read: one port's data counters per tick for the fast "
            "source, one poll for slow sources. On a real HCA it decides what resolution is "
            "honest." + FULL_ONLY_NOTE,
            [
                target(
                    f"histogram_quantile(0.99, sum by ({NODE_LABELS}, source, le) ("
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
                target(AGENT_CPU_CORES, "{{instance}} agent CPU (cores)", "B"),
            ],
            "short",
            (8, 7),
        ),
        panel(
            "timeseries",
            "Source errors and failed reads",
            "Failed opens, polls or files of slow sources, and failed 1 ms data reads and counter "
            "resets, per second (the per-port reads and resets: full profile only).",
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


def drill_health_row() -> list[Json]:
    return [row("Agent health"), *_health_stats(), *_sampler_timing(), *_reads_and_cost()]


def port_drilldown(selectors: Selectors = DEFAULT) -> Json:
    return dashboard(
        UID,
        "burstscope / Port drill-down",
        "One node's ports: average, peak and p99 together, bursts, congestion, agent health. "
        "With sharded Prometheus servers, open it on the datasource of the shard that scrapes "
        "the node: the global server holds no per-port series.",
        [
            *drill_utilization_row(),
            *drill_bursts_row(),
            *drill_congestion_row(),
            *drill_link_row(),
            *drill_health_row(),
        ],
        drilldown=True,
        selectors=selectors,
    )
