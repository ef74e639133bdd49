"""The fleet overview dashboard: the hottest ports, the fleet's spread over time, the agents.

Built for a fleet (590 nodes x 9 ports): panels over time read the per-node series of the
recording rules and plot their spread across nodes (highest, 90th percentile, median),
never one line per port; peaks are ``max_over_time(...[$__interval])`` so zooming out
drops no peak. The tables link each row to the port drill-down. Every agent series a panel
reads is recorded (per node, per job on a node, or each server's 20 hottest ports), so a
global Prometheus that federates only those from sharded servers draws every panel; the
fleet consumer's burstscope_straggler_* series it scrapes itself.
"""

from __future__ import annotations

from dashboards.builder import (
    AGENTS,
    FLEET,
    FLEET_UID,
    JOBS,
    NODE_LABELS,
    NODES,
    RULES,
    Json,
    dashboard,
    panel,
    rate_of,
    row,
    spread,
    stat,
    table_options,
    target,
    value_mappings,
)
from dashboards.job_selectors import DEFAULT, Selectors
from dashboards.port_drilldown import (
    DRILLDOWN_LINK,
    JOB_LINK,
    NODE_DRILLDOWN_LINK,
    job_ports_table,
)
from dashboards.rules import PEAK_WINDOW

UID = FLEET_UID

NODE_PEAK = RULES.series("instance", "burstscope_port_peak_utilization_ratio")
NODE_AVERAGE_15S = RULES.series("instance", "burstscope_port_data_bytes_per_line_rate")
NODE_SATURATED = RULES.series("instance", "burstscope_port_saturated_samples_per_samples")
NODE_SYNCHRONY = RULES.series(
    "instance", "burstscope_port_peak_utilization_above_90_percent_per_ports"
)
NODE_BURSTS = RULES.series("instance", "burstscope_port_bursts")
JOB_SATURATED = RULES.series(
    "instance_job_id", "burstscope_job_saturated_seconds_per_compute_port_directions"
)
JOB_HIDDEN = RULES.series(
    "instance_job_id", "burstscope_job_hidden_saturated_seconds_per_compute_port_directions"
)
# What the fleet overview would otherwise read raw (recording group burstscope.fleet): with
# sharded servers, the global one federates these and no per-port series (dashboards/README.md,
# "Sharding").
HOTTEST_PEAK = RULES.series(
    "instance_device_port_direction", "burstscope_port_peak_utilization_ratio", "topk"
)
HOTTEST_AVERAGE_15S = RULES.series(
    "instance_device_port_direction", "burstscope_port_data_bytes_per_line_rate", "peak_topk"
)
HOTTEST_HIDDEN = RULES.series(
    "instance_device_port_direction", "burstscope_port_hidden_saturated_seconds"
)
JOB_BURST_BYTES = RULES.series("instance_job_id", "burstscope_job_burst_bytes")
JOB_COMPUTE_PORTS = RULES.series("instance_job_id", "burstscope_job_compute_ports")
AGENT_UP = RULES.series("instance", "burstscope_agent_up")
SAMPLER_UP = RULES.series("instance", "burstscope_sampler_up")
AGENT_CPU = RULES.series("instance", "burstscope_agent_cpu_seconds")
AGENT_MEMORY = RULES.series("instance", "burstscope_agent_resident_memory_bytes")
MISSED_TICKS = RULES.series("instance", "burstscope_sampler_missed_ticks")
SILENT_PORTS = RULES.series("instance", "burstscope_ports_silent_under_job")
PORTS_BELOW_PEERS = RULES.series("instance", "burstscope_ports_below_peers")
PFC_STORMS = RULES.series("instance", "burstscope_pfc_storms")
THROTTLED = RULES.series("instance_cause", "burstscope_throttled_seconds")
# Grafana's "Min interval" on the fleet panels over time: each reads one series per node
# (590 on Acme's fleet), so a 6 h view at Grafana's ~1,000 points (a 20 s step) costs
# 590 x 1,080 points per line; one point a minute is a third of that, and
# max_over_time(...[$__interval]) still keeps every peak inside the minute.
FLEET_MIN_INTERVAL = "1m"
# The throttling causes: four series per node, so one point every 2 minutes (the recorded
# rate's window, so the points still cover all of the time).
THROTTLE_MIN_INTERVAL = "2m"

# A click on a table's node opens its drill-down: on the row's port, or on every port of
# the node where a row is not a port's.
_LINK_TO_DRILLDOWN = [
    {
        "matcher": {"id": "byName", "options": "instance"},
        "properties": [{"id": "links", "value": [DRILLDOWN_LINK]}],
    }
]
_LINK_TO_DRILLDOWN_NODE = [
    {
        "matcher": {"id": "byName", "options": "instance"},
        "properties": [{"id": "links", "value": [NODE_DRILLDOWN_LINK]}],
    }
]


def _port_table(
    title: str,
    description: str,
    targets: list[Json],
    width: int,
    sort_by: str,
    organize: Json,
    merge: bool = False,
) -> Json:
    """A table of port directions, highest ``sort_by`` first, each node linked to its drill-down.

    ``organize`` hides and renames columns; ``merge`` first joins the targets' rows.
    """
    transformations: list[Json] = [{"id": "merge", "options": {}}] if merge else []
    transformations.append({"id": "organize", "options": organize})
    return panel(
        "table",
        title,
        description,
        targets,
        "percentunit",
        (width, 10),
        options=table_options(sort_by),
        overrides=_LINK_TO_DRILLDOWN,
        transformations=transformations,
    )


def _hottest_ports() -> Json:
    hottest = f"topk(20, {HOTTEST_PEAK}{{{FLEET}}})"
    return _port_table(
        "Hottest ports: 1 ms peak beside the 15 s average",
        f"The 20 port directions with the highest 1 ms utilization in the last {PEAK_WINDOW}, "
        "beside their mean over the last scrape interval (15 s; recording rule "
        "..._ratio_irate1m). A high peak over a low average is a burst a 15 s exporter "
        "cannot see. Read from each server's recorded top 20 (recording rule ..._topk20_max), "
        "so a node or device filter narrows that top 20 rather than ranking its own ports. "
        "Click a node to open its Port drill-down (on sharded servers, on the datasource of "
        "the row's shard).",
        [
            target(hottest, ref="A", instant=True, format="table"),
            target(
                f"{HOTTEST_AVERAGE_15S}{{{FLEET}}}\n"
                f"  and on ({NODE_LABELS}, device, port, direction)\n" + hottest,
                ref="B",
                instant=True,
                format="table",
            ),
        ],
        14,
        "1 ms peak",
        {
            "excludeByName": {"Time": True, "window": True, "__name__": True, "job": True},
            "renameByName": {"Value #A": "1 ms peak", "Value #B": "15 s average"},
        },
        merge=True,
    )


def _hidden_saturation() -> Json:
    return _port_table(
        "Ports with hidden saturation",
        "Share of the last 5 m each port direction spent saturated (>= 90%) inside 15 s "
        "windows whose mean stayed below 25%: saturation a 15 s scrape reports as quiet. "
        "Read from each server's recorded top 20 (recording rule ..._topk20_rate5m). Click a "
        "node to open its Port drill-down (on sharded servers, on the datasource of the "
        "row's shard).",
        [
            target(
                f"topk(10, {HOTTEST_HIDDEN}{{{FLEET}}})",
                instant=True,
                format="table",
            )
        ],
        10,
        "hidden saturated share",
        {
            "excludeByName": {"Time": True, "job": True},
            "renameByName": {"Value": "hidden saturated share"},
        },
    )


def fleet_peaks_row() -> list[Json]:
    """Instant tables of the hottest ports, each row linked to its drill-down."""
    return [row("Peaks the 15 s averages hide"), _hottest_ports(), _hidden_saturation()]


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
            "over the last 5 m (recording rule: the mean of its port directions' shares, every "
            "port read at every tick); the highest in each step, the 90th percentile and the "
            "median node.",
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


def _agents_down() -> list[Json]:
    """How many agents, and how many of their samplers, are down: 0 is green."""
    down_steps: list[Json] = [{"color": "green", "value": None}, {"color": "red", "value": 1}]
    none_down = value_mappings({"0": ("none", "green")})
    return [
        stat(
            "Agents down",
            "Targets of the agents' scrape jobs whose last scrape failed (up == 0): alert "
            "BurstscopeAgentDown.",
            [target(f"count({AGENT_UP}{{{AGENTS}}} == 0) or vector(0)", "down", instant=True)],
            (4, 6),
            down_steps,
            none_down,
        ),
        stat(
            "Samplers down",
            "Agents that answer but whose 1 ms sampler process is not running "
            "(burstscope_sampler_up == 0): alert BurstscopeAgentLagging.",
            [
                target(
                    f"count({SAMPLER_UP}{{{NODES}}} == 0) or vector(0)",
                    "down",
                    instant=True,
                )
            ],
            (4, 6),
            down_steps,
            none_down,
        ),
    ]


def _jobs_per_node() -> Json:
    """One row per job and node: its shares and burst bytes; the node opens its drill-down,
    the job the overview filtered to it."""
    with_job = f"* on ({NODE_LABELS}, job_id) group_left (user, name) burstscope_job_info{{{JOBS}}}"
    columns = ("instance", "job_id", "user", "name")
    values = {
        "Value #A": "saturated share",
        "Value #B": "hidden saturated share",
        "Value #C": "burst bytes per second",
        "Value #D": "compute ports",
    }
    return panel(
        "table",
        "Jobs on each node",
        "Per running job and node (the job_id, user and name its scheduler gives): the share "
        "of its compute port directions' time saturated (>= 90%) over the last 5 m, what "
        "BurstscopeJobBurstSaturation pages on; the share saturated inside 15 s windows "
        "averaging under 25% (hidden saturation, BurstscopeJobHiddenBursts); bytes per second "
        "inside its bursts over 5 m; and how many compute ports it holds there. Click a node "
        "to open its Port drill-down, a job to filter this dashboard to it.",
        [
            target(f"{JOB_SATURATED}{{{JOBS}}}\n{with_job}", ref="A", instant=True, format="table"),
            target(f"{JOB_HIDDEN}{{{JOBS}}}", ref="B", instant=True, format="table"),
            target(f"{JOB_BURST_BYTES}{{{JOBS}}}", ref="C", instant=True, format="table"),
            target(f"{JOB_COMPUTE_PORTS}{{{JOBS}}}", ref="D", instant=True, format="table"),
        ],
        "percentunit",
        (24, 8),
        options=table_options("saturated share"),
        overrides=[
            *_LINK_TO_DRILLDOWN_NODE,
            {
                "matcher": {"id": "byName", "options": "job_id"},
                "properties": [{"id": "links", "value": [JOB_LINK]}],
            },
            {
                "matcher": {"id": "byName", "options": "burst bytes per second"},
                "properties": [{"id": "unit", "value": "Bps"}],
            },
            {
                "matcher": {"id": "byName", "options": "compute ports"},
                "properties": [{"id": "unit", "value": "none"}],
            },
        ],
        transformations=[
            {"id": "merge", "options": {}},
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True, "__name__": True, "job": True},
                    "indexByName": {name: i for i, name in enumerate((*columns, *values))},
                    "renameByName": values,
                },
            },
        ],
    )


def fleet_jobs_row() -> list[Json]:
    """The jobs running on the fleet (job_id variable): per job and node, its shares and
    ports, then each job over time (its busiest node, its bytes in bursts on all nodes)."""

    def busiest_node(name: str) -> str:
        return f"max by (job_id) (max_over_time({name}{{{JOBS}}}[$__interval]))"

    return [
        row("Jobs"),
        _jobs_per_node(),
        job_ports_table(
            "Ports each job holds",
            "Every port a running job holds on each node, with the job's user and name, the "
            "port's role (compute ports count in the job's figures; storage ports are held "
            "but reported apart) and the rule that decided (whole_node, pcie_switch, "
            "numa_node, device, resource). Click a node to open its Port drill-down on the "
            "port, a job to filter this dashboard to it.",
            (JOBS, JOBS),
            (24, 8),
        ),
        panel(
            "timeseries",
            "Saturated share per job, its busiest node",
            "Per job, the highest over its nodes of the share of its compute port directions' "
            "time saturated (>= 90%) over 5 m (recording rule), highest in each step: what "
            "BurstscopeJobBurstSaturation compares with the configured share.",
            [target(busiest_node(JOB_SATURATED), "{{job_id}}")],
            "percentunit",
            (8, 8),
            interval=FLEET_MIN_INTERVAL,
        ),
        panel(
            "timeseries",
            "Hidden saturated share per job, its busiest node",
            "Per job, the highest over its nodes of the share of its compute port directions' "
            "time saturated inside 15 s windows whose mean stayed below 25% (recording rule), "
            "highest in each step: saturation a 15 s scrape reports as quiet "
            "(BurstscopeJobHiddenBursts).",
            [target(busiest_node(JOB_HIDDEN), "{{job_id}}")],
            "percentunit",
            (8, 8),
            interval=FLEET_MIN_INTERVAL,
        ),
        panel(
            "timeseries",
            "Bytes in bursts per job, all its nodes",
            "Per job, bytes per second carried inside bursts that ended on its compute ports, "
            "both directions, summed over every node it runs on: each node's 5 m rate "
            "(recording rule), so a burst shows for 5 m and a step never averages less.",
            [target(f"sum by (job_id) ({JOB_BURST_BYTES}{{{JOBS}}})", "{{job_id}}")],
            "Bps",
            (8, 8),
            interval=FLEET_MIN_INTERVAL,
        ),
    ]


def _culprit_count(title: str, description: str, expr: str) -> Json:
    """A count of ports or events that name a culprit: 0 is green."""
    return stat(
        title,
        description,
        [target(f"{expr} or vector(0)", "ports", instant=True)],
        (6, 5),
        [{"color": "green", "value": None}, {"color": "red", "value": 1}],
        value_mappings({"0": ("none", "green")}),
    )


# The fleet consumer's series (burstscope stragglers: one per fleet, its own scrape job,
# burstscope/straggler_watch.py): the cluster only, never the agents' job variable.
CONSUMER = '%(clusterLabel)s=~"$cluster"'


def fleet_culprits_row() -> list[Json]:
    """What holds a job back, from the agents' own judgements: silent ports under a job,
    links slower than their peers, PFC storms, why saturated seconds were throttled, and
    the nodes that hold their job's steps back (the fleet consumer's)."""
    return [
        row("Culprits"),
        _culprit_count(
            "Ports silent under a job",
            "Ports that carried their running job's traffic and have moved nothing for the "
            "agent's [jobs] silence (10 min): a hung job or a dead path (alert "
            "BurstscopePortSilentUnderJob; docs/jobs.md).",
            f"sum({SILENT_PORTS}{{{NODES}}})",
        ),
        _culprit_count(
            "Ports below their peers",
            "Ports whose line rate is below the fastest port of their NIC model on the node: a "
            "link trained at a lower speed or width (alert BurstscopePortBelowPeers).",
            f"sum({PORTS_BELOW_PEERS}{{{NODES}}})",
        ),
        _culprit_count(
            "PFC storms, last hour",
            "Storms the agents' PFC watchdogs declared in the last hour (a port "
            "priority paused for most of 400 ms; [pfc_watchdog] enabled; alert "
            "BurstscopePfcStorm). Which port: the pfc_storm events on MQTT.",
            f"round(sum(increase({PFC_STORMS}{{{NODES}}}[1h])))",
        ),
        panel(
            "timeseries",
            "Why saturated seconds were throttled",
            "Seconds of the fleet's port directions that held a saturated sample or a burst of "
            "100 ms or more, per second, by the cause their congestion counters give: pfc "
            "(paused), ecn (ECN marks or CNPs), credit (port_xmit_wait), clean (none: the link "
            "was simply full). burstscope_throttled_seconds_total, each node's 2 m rate "
            "(recording rule), one point every 2 minutes at least; docs/report.md.",
            [target(f"sum by (cause) ({THROTTLED}{{{NODES}}})", "{{cause}}")],
            "short",
            (6, 5),
            interval=THROTTLE_MIN_INTERVAL,
        ),
        _culprit_count(
            "Straggling nodes",
            "Nodes that were stragglers in more than 20% of their last judged steps (at "
            "least 20): their first bytes of a step came later than their job's median node's "
            "by more than the clocks and one sample resolve (alert BurstscopeStragglerNode; "
            "docs/culprits.md). From the fleet consumer, burstscope stragglers: 0 here also "
            "when it is not scraped.",
            f"count(burstscope_straggler_score{{{CONSUMER}}} > 0.2"
            f" and burstscope_straggler_window_steps{{{CONSUMER}}} >= 20)",
        ),
        panel(
            "timeseries",
            "Straggler score, highest nodes",
            "The five nodes with the highest share of their last judged steps (at most 300) "
            "in which they were stragglers, per job (group); burstscope_step_lag_seconds "
            "says by how much. From the fleet consumer, burstscope stragglers.",
            [
                target(
                    f"topk(5, burstscope_straggler_score{{{CONSUMER}}})",
                    "{{node}} ({{group}})",
                )
            ],
            "percentunit",
            (6, 5),
            interval=FLEET_MIN_INTERVAL,
        ),
        panel(
            "timeseries",
            "Slow rails across nodes",
            "Steps per second whose slow rail was this one: the rail ending 5 ms or more "
            "after its node's other rails on more than half the job's nodes (a slow link "
            "paces every rank of its ring). From the fleet consumer.",
            [
                target(
                    "sum by (group, rail) ("
                    + rate_of("burstscope_slow_rail_steps_total", CONSUMER)
                    + ")",
                    "{{rail}} ({{group}})",
                )
            ],
            "short",
            (6, 5),
            interval=FLEET_MIN_INTERVAL,
        ),
    ]


def fleet_agents_row() -> list[Json]:
    """Whether every agent runs, samples on time, and what it costs its node."""
    return [
        row("Agents"),
        *_agents_down(),
        panel(
            "timeseries",
            "Agent CPU per node",
            "CPU of the whole agent, in cores: its main process (process_cpu_seconds_total "
            "from prometheus-client's process collector) plus its 1 ms sampler process "
            "(burstscope_sampler_cpu_seconds_total), each over the last minute (recording "
            "rule); highest, 90th percentile and median node.",
            spread(f"{AGENT_CPU}{{{AGENTS}}}", "node"),
            "short",
            (8, 6),
            interval=FLEET_MIN_INTERVAL,
        ),
        panel(
            "timeseries",
            "Agent memory per node",
            "Resident memory of the whole agent: main process (process_resident_memory_bytes) "
            "plus sampler process (burstscope_sampler_resident_memory_bytes). Shared pages "
            "count twice, so this is an upper bound of what the node gives it (recording rule).",
            spread(f"{AGENT_MEMORY}{{{AGENTS}}}", "node"),
            "bytes",
            (8, 6),
            interval=FLEET_MIN_INTERVAL,
        ),
        panel(
            "timeseries",
            "Missed sampler ticks",
            "Deadlines the 1 ms sampler skipped, per second over the last minute (recording "
            "rule): the node missing the most, and the fleet total. Anything above 0 for long "
            "means peaks from that node are incomplete (alert BurstscopeAgentLagging).",
            [
                target(f"max({MISSED_TICKS}{{{NODES}}})", "worst node", "A"),
                target(f"sum({MISSED_TICKS}{{{NODES}}})", "fleet", "B"),
            ],
            "ops",
            (24, 6),
            interval=FLEET_MIN_INTERVAL,
        ),
    ]


def fleet_overview(selectors: Selectors = DEFAULT) -> Json:
    return dashboard(
        UID,
        "burstscope / Fleet overview",
        "Millisecond peaks of every RDMA port beside the 15 s averages other exporters show.",
        [
            *fleet_peaks_row(),
            *fleet_jobs_row(),
            *fleet_culprits_row(),
            *fleet_trends_row(),
            *fleet_agents_row(),
        ],
        drilldown=False,
        selectors=selectors,
    )
