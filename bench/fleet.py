"""Fleet benchmark: a real Prometheus scraping hundreds of simulated burstscope nodes.

One process serves every node, each on its own loopback address (127.0.X.Y, the agent's
port), so ``__address__``, ``instance`` and the example configuration's ``host``
relabelling look as they do on a fleet. Each node's exposition is a real one: two scrapes
of a real ``burstscope agent --source sim`` taken at the start of the run give every
series and, for counters, its rate; every node then serves those series with its
counters advancing at that rate from its own offset. A share of the nodes is quiet (all
1 ms samples under 1% of line rate, low peaks) so alerts can be checked for firing on the
saturated nodes only. The fleet itself is burstscope/testing/simulated_fleet.py. Prometheus
(Debian's ``prometheus``) scrapes every 15 s with both rule files and the host relabelling,
first live for 7 minutes from an empty TSDB (rule evaluation times), then restarted on the
same TSDB with 6 h of history backfilled (``promtool tsdb create-blocks-from
openmetrics``) of what the default views read, to time every panel.

Reports: series in the head and per port, scrape duration p99, each rule group's and
rule's evaluation times (highest, median, how many over 2 s), the latency of every panel
query of both dashboards over 1 h and 6 h through the HTTP API (each asked three times: the
median, and the highest beside it), and Prometheus' peak RSS (VmHWM). Targets:
default views <= 1 s over 6 h, all variables at "All" <= 2 s over 1 h, each rule group
<= 2 s, peak RSS <= 3 GB, <= 60 series per port; issue 29's: every rule group <= 1 s
(``rule_groups_1s``), on the lean profile <= 15 series with a ``port`` label per port.
``--json`` prints one JSON line.
The fleet overview's default view is its all-"All" view; the drill-down shows one node
(its instance variable has no "All"), with device, port and direction at "All".

Sharded mode (``--shards N``, N >= 2): N shard Prometheus servers, each from the shipped
shard example (every node listed, its ``hashmod`` share kept, both rule files), and one
global server from the shipped global example, federating the shards' recorded series
(simulated_fleet.shard_configs and global_config). Per server: series in the head, peak RSS,
CPU share during the live phase, rule group evaluation times and scrape p99. The global's
history is backfilled with what the fleet overview reads from it (the federated series, as
constants at the values the live shards computed), the drill-down node's shard with that
node's history; the fleet overview is timed on the global, the drill-down on the node's
shard. Since every server shares this VM's cores, where a fleet gives each a machine of its
own, the run also times each server alone: after the live phase each shard takes a turn of
``ALONE_S`` with the other shards at idle priority (SCHED_IDLE: they keep scraping on what
is left over), its rule groups timed, and the fleet overview is timed again on the global
with every shard at idle priority. ``--profile`` says which
exposition every node serves: full (the default, as before), lean (``--metrics-profile
lean``) or mixed (every other node lean).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from burstscope.collector.web_config import parse_go_duration
from burstscope.testing.processes import free_port
from burstscope.testing.simulated_fleet import (
    DASHBOARDS as SHIPPED,
)
from burstscope.testing.simulated_fleet import (
    Fleet,
    Node,
    Prometheus,
    capture_agent,
    dashboard_targets,
    global_config,
    make_fleet,
    place_rule_files,
    prometheus_config,
    running_prometheus,
    shard_configs,
    substitute,
)

PORTS_PER_NODE = 9
PROFILES = ("full", "lean", "mixed")
SCRAPE_S = 15
DASHBOARDS = ("fleet-overview", "port-drilldown")
TIMES_PER_PANEL = 3
# promtool's blocks of backfilled history: 24 h at most instead of its default 2 h, so the 6 h
# lie in one or two blocks, which Prometheus' compactor has no range to merge into. Three 2 h
# blocks are what its planner merges into a 6 h one, which could happen after the restart,
# while the panels are timed (not measured with 2 h blocks; the run reports the compactions
# it saw while timing).
BACKFILL_BLOCK = "24h"
# How often the live phase asks every server for its rules' last evaluation times: each stays
# until the next evaluation (15 s), so every one is seen. The rules API answers with every
# active alert (2,700 firing at 3,000 nodes), so asking every second would add that JSON's
# encoding to the cores the evaluations share, seven servers or more over.
RULES_POLL_S = 5
# Each shard's turn alone on the cores (rules_alone): every 15 s group evaluates four times,
# every 30 s group (dashboards/rules.py SLOW_WINDOWS_INTERVAL) twice.
ALONE_S = 60
# The servers' GOGC, as dashboards/README.md ("Sizing the server") advises: at 590 full
# nodes Go's default 100 collected a 0.7 to 1 GB heap about every 15 s; at 200 the server
# spent a quarter less CPU, and the rule evaluations that had met a collection (up to 10
# times their median) mostly stopped (docs/performance.md).
DEFAULT_GOGC = 200
# Left out at the start of each turn: what the turn before left waiting on the shard.
ALONE_SETTLE_S = 10
# Series the global server holds of its own (its federation scrapes' up, scrape_*) or that
# change state (ALERTS): left out of its backfilled history.
NOT_BACKFILLED = re.compile(r"ALERTS|ALERTS_FOR_STATE|up|scrape_.+")


def recorded_every_s() -> dict[str, float]:
    """Each recorded series' evaluation interval, seconds, from the shipped rules the servers
    load: its group's own, or the shipped configurations' evaluation_interval (SCRAPE_S)."""
    import yaml  # the [web] extra, as the sharding helpers

    rules = yaml.safe_load((SHIPPED / "prometheus" / "recording.rules.yml").read_text())
    return {
        rule["record"]: parse_go_duration(group.get("interval", f"{SCRAPE_S}s"))
        for group in rules["groups"]
        for rule in group["rules"]
    }


def history_names() -> set[str]:
    """Raw metric names the fleet overview plots over time (panels that are not instant)."""
    names = set()
    for t in dashboard_targets():
        if t.dashboard == "fleet-overview" and not t.instant:
            names.update(re.findall(r"\b([a-z_][a-z0-9_]*)\{", t.expr))
    return names


def overview_names() -> set[str]:
    """Every metric name any fleet overview target reads (recorded or raw)."""
    names = set()
    for t in dashboard_targets():
        if t.dashboard == "fleet-overview":
            names.update(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", t.expr))
    return names


def write_backfill(
    fleet: Fleet,
    path: Path,
    history: tuple[float, float, int],
    drilldown: Node | None,
    recorded: list[tuple[dict[str, str], float]],
    every_node: bool = True,
) -> int:
    """OpenMetrics history of what the default views read, from ``start`` to ``end``.

    ``history`` is (start, end, step in seconds). Every series of the drill-down node; for
    every node, the raw series the fleet overview plots over time (``history_names``); and
    the recorded series in ``recorded`` (labels with ``__name__``, value) as constants, one
    sample per evaluation of its rule (``recorded_every_s``): the fleet's counters advance at
    constant rates, so every rate the rules record is constant too, and the values are those
    the real rules computed on the live fleet. Without ``every_node``, only the drill-down
    node's series (if any) and ``recorded``.
    """
    start, end, step_s = history
    steps = [int(start + k * step_s) for k in range(int((end - start) // step_s))]
    names = history_names()
    samples = 0
    with path.open("w") as out:
        for node in fleet.nodes if every_node else [drilldown] if drilldown else []:
            instance = (
                f'instance="{node.address}:{fleet.port}",job="burstscope",host="{node.address}"'
            )
            for name, series, value, rate in node.lines:
                if node is not drilldown and name not in names:
                    continue
                own = series.partition("{")[2]
                labels = f"{{{instance}," + own if own else f"{{{instance}}}"
                out.writelines(
                    f"{name}{labels} {value + rate * fleet.elapsed(node, at)!r} {at}\n"
                    for at in steps
                )
                samples += len(steps)
        every = recorded_every_s()
        for rule_labels, value in recorded:
            name = rule_labels["__name__"]
            pairs = ",".join(
                f'{k}="{v}"' for k, v in sorted(rule_labels.items()) if k != "__name__"
            )
            # One sample per evaluation of its rule, as the live rule writes them.
            evaluated = steps[:: max(1, round(every.get(name, step_s) / step_s))]
            out.writelines(f"{name}{{{pairs}}} {value!r} {at}\n" for at in evaluated)
            samples += len(evaluated)
        out.write("# EOF\n")
    return samples


def time_panels(
    prom: Prometheus, node: str, hours: int, scrape_s: int, dashboards: tuple[str, ...] = DASHBOARDS
) -> list[dict[str, Any]]:
    end = time.time()
    grafana_step = max(scrape_s, round(hours * 3600 / 1000 / 5) * 5)  # Grafana: ~1000 points
    timings = []
    for t in dashboard_targets():
        if t.dashboard not in dashboards:
            continue
        step = max(grafana_step, t.min_step_s)
        query = substitute(t.expr, node if t.dashboard == "port-drilldown" else "", step, scrape_s)
        # Each query TIMES_PER_PANEL times over the same range, its median reported: on a VM
        # whose other servers evaluate rules meanwhile, one answer says more about the
        # moment than about the query (the highest is reported beside it).
        took = []
        for _ in range(TIMES_PER_PANEL):
            started = time.perf_counter()
            if t.instant:
                answer = prom.get("/api/v1/query", query=query, time=str(end))
            else:
                answer = prom.get(
                    "/api/v1/query_range",
                    query=query,
                    start=str(end - hours * 3600),
                    end=str(end),
                    step=str(step),
                )
            took.append(time.perf_counter() - started)
        result = (
            answer.get("data", {}).get("result", []) if answer.get("status") == "success" else None
        )
        timings.append(
            {
                "dashboard": t.dashboard,
                "panel": t.title,
                "step_s": step,
                "seconds": round(statistics.median(took), 3),
                "seconds_max": round(max(took), 3),
                "series": None if result is None else len(result),
                "error": answer.get("error"),
            }
        )
    return timings


def rule_seconds(prom: Prometheus) -> dict[str, tuple[str, float]]:
    """(last evaluation, seconds it took) of each rule group and each rule (group/rule)."""
    seconds = {}
    for group in prom.get("/api/v1/rules")["data"]["groups"]:
        seconds[group["name"]] = (group["lastEvaluation"], float(group["evaluationTime"]))
        for rule in group["rules"]:
            key = f"{group['name']}/{rule['name']}"
            seconds[key] = (rule["lastEvaluation"], float(rule["evaluationTime"]))
    return seconds


def compactions_total(prom: Prometheus) -> int:
    """TSDB compactions the server has run since it started (its own /metrics: the bench's
    servers do not scrape themselves)."""
    with urllib.request.urlopen(f"{prom.url}/metrics", timeout=30) as answer:
        for family in text_string_to_metric_families(answer.read().decode()):
            if family.name == "prometheus_tsdb_compactions":
                return int(sum(sample.value for sample in family.samples))
    return 0


def loadavg() -> str:
    """The machine's 1, 5 and 15 minute load averages: how shared the two cores were."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User + system CPU time of a process (or one of its threads) so far (/proc/PID/stat or
    /proc/PID/task/TID/stat, fields 14 and 15)."""
    stat = Path(f"/proc/{pid}/task/{thread}/stat" if thread else f"/proc/{pid}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


Evaluations = dict[str, dict[str, list[float]]]  # server -> group or group/rule -> seconds


def watch_rules(
    servers: dict[str, Prometheus], minutes: float, full_windows_s: float
) -> tuple[Evaluations, Evaluations, float | None]:
    """Every evaluation time of every rule group and rule of every server over ``minutes``:
    all of them, those once the 5 m windows are full (after ``full_windows_s``), and when
    BurstscopeBurstSaturation first fired on any of them."""
    overall: dict[str, dict[str, dict[str, float]]] = {name: {} for name in servers}
    steady: dict[str, dict[str, dict[str, float]]] = {name: {} for name in servers}
    started = time.monotonic()
    first_firing = None
    while (elapsed := time.monotonic() - started) < minutes * 60:
        for server, prom in servers.items():
            for name, (at, seconds) in rule_seconds(prom).items():
                if at.startswith("0001"):  # not evaluated yet
                    continue
                overall[server].setdefault(name, {})[at] = seconds
                if elapsed >= full_windows_s:
                    steady[server].setdefault(name, {})[at] = seconds
        if first_firing is None and firing_nodes(servers) > 0:
            first_firing = round(elapsed)
        time.sleep(RULES_POLL_S)
    return (
        {s: {k: list(v.values()) for k, v in found.items()} for s, found in overall.items()},
        {s: {k: list(v.values()) for k, v in found.items()} for s, found in steady.items()},
        first_firing,
    )


def rules_alone(shards: dict[str, Prometheus], seconds: float) -> Evaluations:
    """Each shard's rule evaluations with every other shard at idle priority
    (``idle_priority``), one shard after another for ``seconds`` each: a shard as on a
    machine of its own, the global server (which federates from it) and the fleet still
    running. Only evaluations that began ``ALONE_SETTLE_S`` into its turn, once what the
    turn before left waiting had run."""
    found: Evaluations = {}
    for name, prom in shards.items():
        others = [p.process.pid for n, p in shards.items() if n != name]
        seen: dict[str, dict[str, float]] = {}
        with idle_priority(others):
            time.sleep(ALONE_SETTLE_S)
            since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 1))
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                time.sleep(RULES_POLL_S)
                for key, (at, took) in rule_seconds(prom).items():
                    if at[:19] >= since:  # RFC 3339, UTC: compared as text to the second
                        seen.setdefault(key, {})[at] = took
        found[name] = {k: list(v.values()) for k, v in seen.items()}
    return found


def firing_nodes(servers: dict[str, Prometheus]) -> float:
    """Nodes BurstscopeBurstSaturation fires for, over the servers that evaluate it."""
    query = 'count(ALERTS{alertname="BurstscopeBurstSaturation", alertstate="firing"})'
    counts = [prom.value(query) for prom in servers.values()]
    return sum(c for c in counts if not math.isnan(c))


def summary(seconds: list[float]) -> dict[str, float]:
    """Highest and median evaluation time, evaluations seen and how many took > 2 s."""
    return {
        "max": round(max(seconds), 3),
        "median": round(statistics.median(seconds), 3),
        "evaluations": len(seconds),
        "over_2s": sum(s > 2.0 for s in seconds),
    }


def recorded_series(
    prom: Prometheus, drilldown: str, every_node: bool = True
) -> list[tuple[dict[str, str], float]]:
    """Current value of every per-node and global recorded series (without ``every_node``:
    the global ones only), and of every recorded series of the drill-down node: what the
    default views read from the rules."""
    found = {}
    for query in (
        '{__name__=~"instance:.+|global:.+"}' if every_node else '{__name__=~"global:.+"}',
        f'{{__name__=~".+:.+", instance="{drilldown}"}}',
    ):
        for item in prom.get("/api/v1/query", query=query)["data"]["result"]:
            found[tuple(sorted(item["metric"].items()))] = float(item["value"][1])
    return [(dict(labels), value) for labels, value in found.items() if math.isfinite(value)]


def global_series(prom: Prometheus) -> list[tuple[dict[str, str], float]]:
    """Current value of every series the global server holds that the fleet overview reads:
    the federated recorded series (with their shard label) and job families."""
    held = prom.get("/api/v1/label/__name__/values")["data"]
    found = []
    for name in sorted(overview_names() & set(held)):
        if NOT_BACKFILLED.fullmatch(name):
            continue
        for item in prom.get("/api/v1/query", query=f'{{__name__="{name}"}}')["data"]["result"]:
            value = float(item["value"][1])
            if math.isfinite(value):
                found.append((item["metric"], value))
    return found


@dataclasses.dataclass
class Server:
    """One Prometheus of the run: its configuration, TSDB, port, and what it holds."""

    name: str
    config: Path
    data: Path
    port: int
    evaluates_rules: bool = True
    history: list[tuple[dict[str, str], float]] = dataclasses.field(default_factory=list)
    history_node: Node | None = None
    history_every_node: bool = False
    placement: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def make_servers(tmp: Path, fleet: Fleet, shards: int, placement: str) -> list[Server]:
    """The single server, or the shards and the global server that federates from them.
    ``placement`` "spread": each server's rules files under the names `burstscope
    rule-placement --spread` gives for its folder (as each server on a machine of its own
    would name them); "hashed": under their shipped names."""
    interval = f"{SCRAPE_S}s"
    if shards < 2:
        config = prometheus_config(tmp, fleet, interval, shorten_for=False)
        servers = [Server("prometheus", config, tmp / "data", free_port())]
    else:
        servers = [
            Server(f"shard-{i}", config, config.parent / "data", free_port())
            for i, config in enumerate(shard_configs(tmp, fleet, shards, interval, False))
        ]
        config = global_config(tmp, [s.url for s in servers], interval)
        servers.append(Server("global", config, config.parent / "data", free_port(), False))
    for server in servers:
        if server.evaluates_rules:
            server.placement = place_rule_files(server.config, rename=placement == "spread")
    return servers


@contextlib.contextmanager
def running(binary: str, servers: list[Server], gogc: int) -> Iterator[dict[str, Prometheus]]:
    with contextlib.ExitStack() as stack:
        yield {
            s.name: stack.enter_context(running_prometheus(binary, s.config, s.data, s.port, gogc))
            for s in servers
        }


def _set_policy(pids: list[int], policy: int) -> None:
    """Every thread of every process in ``pids`` to ``policy`` (a thread started later
    inherits its creator's)."""
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):  # a thread that has just ended
                os.sched_setscheduler(int(tid), policy, os.sched_param(0))


@contextlib.contextmanager
def idle_priority(pids: list[int]) -> Iterator[None]:
    """Every process in ``pids`` at SCHED_IDLE for the block (sched(7): it runs only on
    cycles no other process wants), back to SCHED_OTHER after it. The rest of the machine
    runs as if those were not there, while they go on scraping with what is left: a stopped
    server (SIGSTOP) would miss those scrapes, and its 5 m windows would hold that much less
    when its own turn came, so its rates would read fewer samples than in a fleet."""
    try:
        _set_policy(pids, os.SCHED_IDLE)
        yield
    finally:
        _set_policy(pids, os.SCHED_OTHER)


def fleet_thread() -> int:
    """The simulated fleet's thread (its native id), for its own CPU time."""
    for thread in threading.enumerate():
        if thread.name == "fleet" and thread.native_id is not None:
            return thread.native_id
    raise RuntimeError("the simulated fleet's thread is not running")


def live_figures(prom: Prometheus, cpu_s: float, live_s: float) -> dict[str, Any]:
    """What one server holds and cost after the live phase."""
    return {
        "series_in_head": prom.get("/api/v1/status/tsdb")["data"]["headStats"]["numSeries"],
        "cpu_share_during_live": round(cpu_s / live_s, 2),
        "scrape_duration_p99_s": round(
            prom.value("quantile(0.99, max_over_time(scrape_duration_seconds[5m]))"), 4
        ),
        "peak_rss_bytes": prom.peak_rss_bytes(),
    }


def exposition_fleet(profile: str, nodes: int, quiet_every: int) -> Fleet:
    """The fleet, every node serving the profile's exposition (mixed: every other node lean)."""
    if profile == "lean":
        return make_fleet(capture_agent(profile="lean"), nodes, quiet_every, free_port())
    lean = capture_agent(profile="lean") if profile == "mixed" else None
    return make_fleet(capture_agent(), nodes, quiet_every, free_port(), lean=lean)


def backfill(
    promtool: str, server: Server, fleet: Fleet, history: tuple[float, float, int]
) -> dict[str, Any]:
    """Write the server's history as OpenMetrics and turn it into blocks in its TSDB."""
    started = time.monotonic()
    openmetrics = server.data.parent / "history.om"
    samples = write_backfill(
        fleet, openmetrics, history, server.history_node, server.history, server.history_every_node
    )
    size = openmetrics.stat().st_size
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            f"--max-block-duration={BACKFILL_BLOCK}",
            str(openmetrics),
            str(server.data),
        ],
        check=True,
        capture_output=True,
    )
    openmetrics.unlink()
    return {"samples": samples, "bytes": size, "seconds": round(time.monotonic() - started, 1)}


def wait_scraped(servers: dict[str, Prometheus], shards: int, nodes: int) -> None:
    """Until every node is up on the (re)started servers, and the global federates every shard."""
    started = time.monotonic()
    while True:
        up = [
            prom.value('count(up{job="burstscope"} == 1)')
            for name, prom in servers.items()
            if name != "global"
        ]
        federating = servers["global"].value("count(up == 1)") if "global" in servers else shards
        if sum(u for u in up if not math.isnan(u)) >= nodes and federating >= shards:
            return
        if time.monotonic() - started > 180:
            raise RuntimeError("the restarted Prometheus servers did not scrape every node")
        time.sleep(1)


def run_bench(
    nodes: int,
    history_hours: int,
    live_minutes: float,
    quiet_every: int,
    shards: int = 0,
    profile: str = "full",
    gogc: int = DEFAULT_GOGC,
    placement: str = "spread",
) -> dict[str, Any]:
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    load = {"start": loadavg()}
    fleet = exposition_fleet(profile, nodes, quiet_every)
    drilldown = fleet.nodes[-1]
    drilldown_instance = f"{drilldown.address}:{fleet.port}"
    sharded = shards >= 2
    with tempfile.TemporaryDirectory(prefix="burstscope-fleet-") as tmp_name, fleet.running():
        tmp = Path(tmp_name)
        servers = make_servers(tmp, fleet, shards, placement)
        # Phase 1: the live fleet from empty TSDBs, long enough for the 5 m windows to fill
        # and BurstscopeBurstSaturation (for: 5m) to fire; rule evaluation times throughout.
        live_started = time.time()
        thread = fleet_thread()
        bench_cpu, wall = time.process_time(), time.monotonic()
        with running(binary, servers, gogc) as proms:
            cpu = {name: cpu_seconds(p.process.pid) for name, p in proms.items()}
            fleet_cpu = cpu_seconds(os.getpid(), thread)
            rule_servers = {s.name: proms[s.name] for s in servers if s.evaluates_rules}
            overall, steady, first_firing = watch_rules(rule_servers, live_minutes, 330)
            cpu = {name: cpu_seconds(p.process.pid) - cpu[name] for name, p in proms.items()}
            fleet_cpu = cpu_seconds(os.getpid(), thread) - fleet_cpu
            live_s = time.monotonic() - wall
            bench_cpu = time.process_time() - bench_cpu
            load["after_live"] = loadavg()
            figures = {name: live_figures(p, cpu[name], live_s) for name, p in proms.items()}
            agent_series = port_series = 0.0
            for prom in rule_servers.values():
                agent_series += prom.value('count({__name__=~"burstscope_.+|process_.+"})')
                port_series += prom.value('count({__name__=~"burstscope_.+", port!=""})')
            firing = firing_nodes(rule_servers)
            holder = next(
                name
                for name, prom in rule_servers.items()
                if prom.value(f'count(up{{instance="{drilldown_instance}"}})') == 1
            )
            for server in servers:
                if not sharded:
                    server.history = recorded_series(proms[server.name], drilldown_instance)
                    server.history_node, server.history_every_node = drilldown, True
                elif server.name == "global":
                    server.history = global_series(proms[server.name])
                elif server.name == holder:
                    server.history = recorded_series(proms[holder], drilldown_instance, False)
                    server.history_node = drilldown
            alone_rules = rules_alone(rule_servers, ALONE_S) if sharded else {}
        # Phase 2: history before the live minutes, then the same TSDBs restarted (WAL
        # replayed) and every panel timed over 1 h and 6 h.
        filled: dict[str, dict[str, Any]] = {}
        end = live_started - 60
        if history_hours:
            for server in servers:
                if server.history or server.history_node:
                    span = (end - history_hours * 3600, end, SCRAPE_S)
                    filled[server.name] = backfill(promtool, server, fleet, span)
        with running(binary, servers, gogc) as proms:
            wait_scraped(proms, shards, nodes)
            time.sleep(2 * SCRAPE_S)
            load["before_panels"] = loadavg()
            fleet_server = proms["global" if sharded else holder]
            compactions = {name: compactions_total(p) for name, p in proms.items()}
            panels = {}
            for hours in (1, 6):
                timed = time_panels(fleet_server, "", hours, SCRAPE_S, ("fleet-overview",))
                timed += time_panels(
                    proms[holder], drilldown_instance, hours, SCRAPE_S, ("port-drilldown",)
                )
                panels[hours] = timed
            alone: list[dict[str, Any]] = []
            if sharded:
                # The fleet overview again with every shard at idle priority: the global
                # alone on the cores, as on a machine of its own in a fleet. Above, six or
                # more shards evaluating rules on the same two cores share every query's time.
                shard_pids = [p.process.pid for n, p in proms.items() if n != "global"]
                with idle_priority(shard_pids):
                    alone = time_panels(fleet_server, "", 6, SCRAPE_S, ("fleet-overview",))
            load["end"] = loadavg()
            for name, prom in proms.items():
                figures[name]["compactions_while_panels_timed"] = (
                    compactions_total(prom) - compactions[name]
                )
                figures[name]["peak_rss_bytes"] = max(
                    figures[name]["peak_rss_bytes"], prom.peak_rss_bytes()
                )
    result = report(
        nodes=nodes,
        shards=shards,
        profile=profile,
        gogc=gogc,
        fleet=fleet,
        load=load,
        live_s=live_s,
        cpu={"fleet_server": fleet_cpu, "fleet_server_and_bench": bench_cpu},
        filled=filled,
        history_hours=history_hours,
        figures=figures,
        series=(agent_series, port_series),
        evaluations=(overall, steady),
        alert=(first_firing, firing),
        panels=panels,
        alone=alone,
        alone_rules=alone_rules,
        holder=holder,
    )
    # Where each server's rule groups run in its cycle (burstscope rule-placement, each
    # evaluation taken as 1 s): under the shipped names and under the names it ran with.
    result["rule_placement"] = {
        "mode": placement,
        "servers": {s.name: s.placement for s in servers if s.placement},
    }
    return result


def report(
    *,
    nodes: int,
    shards: int,
    profile: str,
    gogc: int,
    fleet: Fleet,
    load: dict[str, str],
    live_s: float,
    cpu: dict[str, float],
    filled: dict[str, dict[str, Any]],
    history_hours: int,
    figures: dict[str, dict[str, Any]],
    series: tuple[float, float],
    evaluations: tuple[Evaluations, Evaluations],
    alert: tuple[float | None, float],
    panels: dict[int, list[dict[str, Any]]],
    alone: list[dict[str, Any]],
    alone_rules: Evaluations,
    holder: str,
) -> dict[str, Any]:
    """The JSON result: the single server's fields as before, then the sharded ones."""
    overall, steady = evaluations
    for server, found in overall.items():  # burstscope.link runs every 5 m: maybe only once
        for name, seconds in found.items():
            steady[server].setdefault(name, seconds)
    groups = {s: [k for k in found if "/" not in k] for s, found in overall.items()}
    # Across shards, each group's and rule's figures are the worst shard's.
    worst_steady = worst_shard(steady)
    worst_overall: dict[str, float] = {}
    for server in overall:
        for name, seconds in overall[server].items():
            worst_overall[name] = max(worst_overall.get(name, 0.0), max(seconds))
    group_names = sorted(
        {g for names in groups.values() for g in names}, key=list(worst_steady).index
    )
    slowest = {
        (hours, dashboard): max(
            (p["seconds"] for p in panels[hours] if p["dashboard"] == dashboard), default=0.0
        )
        for hours in (1, 6)
        for dashboard in DASHBOARDS
    }
    slowest_6h = max(slowest[6, d] for d in DASHBOARDS)
    slowest_1h = max(slowest[1, d] for d in DASHBOARDS)
    agent_series, port_series = series
    ports = nodes * PORTS_PER_NODE
    per_port, with_port_label = agent_series / ports, port_series / ports
    rule_servers = [s for s in figures if s in overall]
    peak_rss = max(f["peak_rss_bytes"] for f in figures.values())
    slowest_group = max((max(worst_steady[g]) for g in group_names), default=0.0)
    first_firing, firing = alert
    result: dict[str, Any] = {
        "benchmark": "fleet",
        "nodes": nodes,
        "shards": shards,
        "profile": profile,
        "prometheus_gogc": gogc,
        "quiet_nodes": sum(n.quiet for n in fleet.nodes),
        "loadavg": load,
        "live_minutes": round(live_s / 60, 1),
        "cpu_share_during_live": {
            "prometheus": round(sum(figures[s]["cpu_share_during_live"] for s in figures), 2),
            **{k: round(v / live_s, 2) for k, v in cpu.items()},
        },
        "fleet_server": {"processes": 1, "nodes_per_scrape_interval": nodes},
        "backfill": {"hours": history_hours, **merge_backfill(filled)},
        "series_in_head": sum(figures[s]["series_in_head"] for s in rule_servers),
        "series_per_port": round(per_port, 1),
        "series_with_port_label_per_port": round(with_port_label, 1),
        "scrape_duration_p99_s": max(figures[s]["scrape_duration_p99_s"] for s in rule_servers),
        "rule_group_seconds": {k: summary(worst_steady[k]) for k in group_names},
        "rule_group_seconds_max_incl_startup": {k: worst_overall[k] for k in group_names},
        "rule_seconds": {
            k: summary(v)
            for k, v in sorted(worst_steady.items(), key=lambda kv: -max(kv[1]))
            if "/" in k
        },
        "burst_saturation_first_firing_s": first_firing,
        "burst_saturation_firing_nodes": firing,
        "slowest_panel_6h_s": slowest_6h,
        "slowest_panel_1h_s": slowest_1h,
        "slowest_fleet_panel_6h_s": slowest[6, "fleet-overview"],
        "slowest_drilldown_panel_6h_s": slowest[6, "port-drilldown"],
        "panels_without_data_6h": sorted({p["panel"] for p in panels[6] if not p["series"]}),
        "prometheus_peak_rss_bytes": peak_rss,
        "peak_rss_bytes_all_servers": sum(f["peak_rss_bytes"] for f in figures.values()),
        "drilldown_server": holder,
        "servers": {
            name: {
                **f,
                "rule_group_seconds": {k: summary(steady[name][k]) for k in groups.get(name, [])},
                "backfill": filled.get(name),
            }
            for name, f in figures.items()
        },
        "panels_1h": panels[1],
        "panels_6h": panels[6],
        "fleet_panels_6h_global_alone": alone,
        "targets": {
            "default_views_6h_s": 1.0,
            "all_variables_1h_s": 2.0,
            "rule_group_s": 2.0,
            "rule_group_s_issue_29": 1.0,
            "peak_rss_bytes": 3e9,
            "series_per_port": 60,
            "series_with_port_label_per_port_lean": 15,
        },
        "verdicts": {
            "default_views_6h": slowest_6h <= 1.0,
            "all_variables_1h": slowest_1h <= 2.0,
            "rule_groups": slowest_group <= 2.0,
            "rule_groups_1s": slowest_group <= 1.0,
            "peak_rss": peak_rss <= 3e9,
            "series_per_port": per_port <= 60,
        },
    }
    if profile == "lean":
        result["verdicts"]["series_with_port_label_per_port"] = with_port_label <= 15
    if alone_rules:
        worst_alone = {k: v for k, v in worst_shard(alone_rules).items() if "/" not in k}
        result["rule_group_seconds_each_shard_alone"] = {
            name: summary(seconds) for name, seconds in sorted(worst_alone.items())
        }
        slowest_group_alone = max(max(seconds) for seconds in worst_alone.values())
        result["slowest_rule_group_each_shard_alone_s"] = slowest_group_alone
        result["slowest_rule_group_alone_by_shard_s"] = {
            shard: max(max(s) for k, s in found.items() if "/" not in k)
            for shard, found in alone_rules.items()
            if found
        }
        result["verdicts"]["rule_groups_1s_each_shard_alone"] = slowest_group_alone <= 1.0
    if alone:
        slowest_alone = max(p["seconds"] for p in alone)
        result["slowest_fleet_panel_6h_global_alone_s"] = slowest_alone
        result["verdicts"]["default_views_6h_global_alone"] = slowest_alone <= 1.0
    return result


def worst_shard(evaluations: Evaluations) -> dict[str, list[float]]:
    """Each group's (and rule's) evaluation times on the server where its highest was."""
    worst: dict[str, list[float]] = {}
    for found in evaluations.values():
        for name, seconds in found.items():
            if max(seconds) > max(worst.get(name, [-1.0])):
                worst[name] = seconds
    return worst


def merge_backfill(filled: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Samples, bytes and seconds of every server's backfill together."""
    return {
        "samples": sum(f["samples"] for f in filled.values()),
        "bytes": sum(f["bytes"] for f in filled.values()),
        "seconds": round(sum(f["seconds"] for f in filled.values()), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=590)
    parser.add_argument("--history-hours", type=int, default=6, help="0: no backfill")
    parser.add_argument(
        "--live-minutes", type=float, default=7.0, help="live phase; >= 6 fills the 5 m windows"
    )
    parser.add_argument("--quiet-every", type=int, default=10, help="every Nth node is quiet")
    parser.add_argument(
        "--shards", type=int, default=0, help="0 or 1: one server; N >= 2: N shards and a global"
    )
    parser.add_argument(
        "--profile", choices=PROFILES, default="full", help="the exposition every node serves"
    )
    parser.add_argument(
        "--gogc",
        type=int,
        default=DEFAULT_GOGC,
        help=f"the servers' GOGC (default {DEFAULT_GOGC}, as dashboards/README.md advises; "
        "100 is Go's own)",
    )
    parser.add_argument(
        "--placement",
        choices=("spread", "hashed"),
        default="spread",
        help="spread (the default, as dashboards/README.md advises): each server's rules "
        "files under the names `burstscope rule-placement --spread` chooses; hashed: under "
        "the shipped names, where Prometheus' hash of name and path places the groups",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= 250 * 254:
        parser.error("--nodes must be between 1 and 63500 (one loopback address each)")
    if not 0 <= args.shards <= args.nodes:
        parser.error("--shards must be 0 or 1 (one server) or 2 up to --nodes")
    if args.history_hours < 0 or args.live_minutes <= 0:
        parser.error("--history-hours must be >= 0 and --live-minutes > 0")
    if args.gogc < 1:
        parser.error("--gogc must be a positive percentage")
    result = run_bench(
        args.nodes,
        args.history_hours,
        args.live_minutes,
        args.quiet_every,
        args.shards,
        args.profile,
        args.gogc,
        args.placement,
    )
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
