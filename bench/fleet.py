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
query of both dashboards over 1 h and 6 h through the HTTP API, and Prometheus' peak RSS
(VmHWM). Targets:
default views <= 1 s over 6 h, all variables at "All" <= 2 s over 1 h, each rule group
<= 2 s, peak RSS <= 3 GB, <= 60 series per port. ``--json`` prints one JSON line.
The fleet overview's default view is its all-"All" view; the drill-down shows one node
(its instance variable has no "All"), with device, port and direction at "All".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from burstscope.testing.processes import free_port
from burstscope.testing.simulated_fleet import (
    Fleet,
    Node,
    Prometheus,
    capture_agent,
    dashboard_targets,
    make_fleet,
    prometheus_config,
    running_prometheus,
    substitute,
)

PORTS_PER_NODE = 9


def history_names() -> set[str]:
    """Raw metric names the fleet overview plots over time (panels that are not instant)."""
    names = set()
    for t in dashboard_targets():
        if t.dashboard == "fleet-overview" and not t.instant:
            names.update(re.findall(r"\b([a-z_][a-z0-9_]*)\{", t.expr))
    return names


def write_backfill(
    fleet: Fleet,
    path: Path,
    history: tuple[float, float, int],
    drilldown: Node,
    recorded: list[tuple[dict[str, str], float]],
) -> int:
    """OpenMetrics history of what the default views read, from ``start`` to ``end``.

    ``history`` is (start, end, step in seconds). Every series of the drill-down node; for
    every node, the raw series the fleet overview plots over time (``history_names``); and
    the recorded series in ``recorded`` (labels with ``__name__``, value) as constants: the
    fleet's counters advance at constant rates, so every rate the rules record is constant
    too, and the values are those the real rules computed on the live fleet.
    """
    start, end, step_s = history
    steps = [int(start + k * step_s) for k in range(int((end - start) // step_s))]
    names = history_names()
    samples = 0
    with path.open("w") as out:
        for node in fleet.nodes:
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
        for rule_labels, value in recorded:
            name = rule_labels["__name__"]
            pairs = ",".join(
                f'{k}="{v}"' for k, v in sorted(rule_labels.items()) if k != "__name__"
            )
            out.writelines(f"{name}{{{pairs}}} {value!r} {at}\n" for at in steps)
            samples += len(steps)
        out.write("# EOF\n")
    return samples


def time_panels(prom: Prometheus, node: str, hours: int, scrape_s: int) -> list[dict[str, Any]]:
    end = time.time()
    grafana_step = max(scrape_s, round(hours * 3600 / 1000 / 5) * 5)  # Grafana: ~1000 points
    timings = []
    for t in dashboard_targets():
        step = max(grafana_step, t.min_step_s)
        query = substitute(t.expr, node if t.dashboard == "port-drilldown" else "", step, scrape_s)
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
        seconds = time.perf_counter() - started
        result = (
            answer.get("data", {}).get("result", []) if answer.get("status") == "success" else None
        )
        timings.append(
            {
                "dashboard": t.dashboard,
                "panel": t.title,
                "step_s": step,
                "seconds": round(seconds, 3),
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


def loadavg() -> str:
    """The machine's 1, 5 and 15 minute load averages: how shared the two cores were."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def watch_rules(
    prom: Prometheus, minutes: float, full_windows_s: float
) -> tuple[dict[str, list[float]], dict[str, list[float]], float | None]:
    """Every evaluation time of every rule group and rule over ``minutes``: all of them,
    those once the 5 m windows are full (after ``full_windows_s``), and when
    BurstscopeBurstSaturation first fired."""
    overall: dict[str, dict[str, float]] = {}
    steady: dict[str, dict[str, float]] = {}
    started = time.monotonic()
    first_firing = None
    while (elapsed := time.monotonic() - started) < minutes * 60:
        for name, (at, seconds) in rule_seconds(prom).items():
            if at.startswith("0001"):  # not evaluated yet
                continue
            overall.setdefault(name, {})[at] = seconds
            if elapsed >= full_windows_s:
                steady.setdefault(name, {})[at] = seconds
        if first_firing is None and (
            prom.value('count(ALERTS{alertname="BurstscopeBurstSaturation", alertstate="firing"})')
            > 0
        ):
            first_firing = round(elapsed)
        time.sleep(1)
    return (
        {k: list(v.values()) for k, v in overall.items()},
        {k: list(v.values()) for k, v in steady.items()},
        first_firing,
    )


def summary(seconds: list[float]) -> dict[str, float]:
    """Highest and median evaluation time, evaluations seen and how many took > 2 s."""
    return {
        "max": round(max(seconds), 3),
        "median": round(statistics.median(seconds), 3),
        "evaluations": len(seconds),
        "over_2s": sum(s > 2.0 for s in seconds),
    }


def recorded_series(prom: Prometheus, drilldown: str) -> list[tuple[dict[str, str], float]]:
    """Current value of every per-node and global recorded series, and of every recorded
    series of the drill-down node: what the default views read from the rules."""
    found = {}
    for query in (
        '{__name__=~"instance:.+|global:.+"}',
        f'{{__name__=~".+:.+", instance="{drilldown}"}}',
    ):
        for item in prom.get("/api/v1/query", query=query)["data"]["result"]:
            found[tuple(sorted(item["metric"].items()))] = float(item["value"][1])
    return [(dict(labels), value) for labels, value in found.items() if math.isfinite(value)]


def run_bench(
    nodes: int, history_hours: int, live_minutes: float, quiet_every: int
) -> dict[str, Any]:
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    scrape_s = 15
    load = {"start": loadavg()}
    exposition = capture_agent()
    fleet = make_fleet(exposition, nodes, quiet_every, free_port())
    drilldown = fleet.nodes[-1]
    drilldown_instance = f"{drilldown.address}:{fleet.port}"
    with tempfile.TemporaryDirectory(prefix="burstscope-fleet-") as tmp_name, fleet.running():
        tmp = Path(tmp_name)
        data = tmp / "data"
        config = prometheus_config(tmp, fleet, f"{scrape_s}s", shorten_for=False)
        # Phase 1: the live fleet from an empty TSDB, long enough for the 5 m windows to
        # fill and BurstscopeBurstSaturation (for: 5m) to fire; rule evaluation times throughout.
        live_started = time.time()
        bench_cpu, wall = time.process_time(), time.monotonic()
        with running_prometheus(binary, config, data, free_port()) as prom:
            prom_cpu = cpu_seconds(prom.process.pid)
            overall, steady, first_firing = watch_rules(prom, live_minutes, 330)
            prom_cpu = cpu_seconds(prom.process.pid) - prom_cpu
            live_s = time.monotonic() - wall
            bench_cpu = time.process_time() - bench_cpu
            load["after_live"] = loadavg()
            head = prom.get("/api/v1/status/tsdb")["data"]["headStats"]["numSeries"]
            agent_series = prom.value('count({__name__=~"burstscope_.+|process_.+"})')
            scrape_p99 = prom.value("quantile(0.99, max_over_time(scrape_duration_seconds[5m]))")
            firing = prom.value(
                'count(ALERTS{alertname="BurstscopeBurstSaturation", alertstate="firing"})'
            )
            recorded = recorded_series(prom, drilldown_instance)
            rss_live = prom.peak_rss_bytes()
        # Phase 2: history before the live minutes, then the same TSDB restarted (WAL
        # replayed) and every panel timed over 1 h and 6 h.
        backfill: dict[str, Any] = {"hours": history_hours, "samples": 0, "seconds": 0.0}
        if history_hours:
            started = time.monotonic()
            openmetrics = tmp / "history.om"
            end = live_started - 60
            backfill["samples"] = write_backfill(
                fleet,
                openmetrics,
                (end - history_hours * 3600, end, scrape_s),
                drilldown,
                recorded,
            )
            backfill["bytes"] = openmetrics.stat().st_size
            subprocess.run(
                [
                    promtool,
                    "tsdb",
                    "create-blocks-from",
                    "openmetrics",
                    str(openmetrics),
                    str(data),
                ],
                check=True,
                capture_output=True,
            )
            openmetrics.unlink()
            backfill["seconds"] = round(time.monotonic() - started, 1)
        with running_prometheus(binary, config, data, free_port()) as prom:
            scraped = time.monotonic()
            while prom.value('count(up{job="burstscope"} == 1)') < nodes:
                if time.monotonic() - scraped > 120:
                    raise RuntimeError("the restarted Prometheus did not scrape every node")
                time.sleep(1)
            time.sleep(2 * scrape_s)
            load["before_panels"] = loadavg()
            panels_1h = time_panels(prom, drilldown_instance, 1, scrape_s)
            panels_6h = time_panels(prom, drilldown_instance, 6, scrape_s)
            load["end"] = loadavg()
            rss = prom.peak_rss_bytes()
    slowest_6h = max(p["seconds"] for p in panels_6h)
    slowest_1h = max(p["seconds"] for p in panels_1h)
    empty = sorted({p["panel"] for p in panels_6h if not p["series"]})
    per_port = agent_series / (nodes * PORTS_PER_NODE)
    group_names = [name for name in overall if "/" not in name]
    for name, seconds in overall.items():  # burstscope.link runs every 5 m: maybe only once
        steady.setdefault(name, seconds)
    return {
        "benchmark": "fleet",
        "nodes": nodes,
        "quiet_nodes": sum(n.quiet for n in fleet.nodes),
        "loadavg": load,
        "live_minutes": round(live_s / 60, 1),
        "cpu_share_during_live": {
            "prometheus": round(prom_cpu / live_s, 2),
            "fleet_server_and_bench": round(bench_cpu / live_s, 2),
        },
        "backfill": backfill,
        "series_in_head": head,
        "series_per_port": round(per_port, 1),
        "scrape_duration_p99_s": round(scrape_p99, 4),
        "rule_group_seconds": {k: summary(steady[k]) for k in group_names},
        "rule_group_seconds_max_incl_startup": {k: max(overall[k]) for k in group_names},
        "rule_seconds": {
            k: summary(v) for k, v in sorted(steady.items(), key=lambda kv: -max(kv[1])) if "/" in k
        },
        "burst_saturation_first_firing_s": first_firing,
        "burst_saturation_firing_nodes": firing,
        "slowest_panel_6h_s": slowest_6h,
        "slowest_panel_1h_s": slowest_1h,
        "panels_without_data_6h": empty,
        "prometheus_peak_rss_bytes": max(rss, rss_live),
        "panels_1h": panels_1h,
        "panels_6h": panels_6h,
        "targets": {
            "default_views_6h_s": 1.0,
            "all_variables_1h_s": 2.0,
            "rule_group_s": 2.0,
            "peak_rss_bytes": 3e9,
            "series_per_port": 60,
        },
        "verdicts": {
            "default_views_6h": slowest_6h <= 1.0,
            "all_variables_1h": slowest_1h <= 2.0,
            "rule_groups": all(max(steady[k]) <= 2.0 for k in group_names),
            "peak_rss": max(rss, rss_live) <= 3e9,
            "series_per_port": per_port <= 60,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=590)
    parser.add_argument("--history-hours", type=int, default=6, help="0: no backfill")
    parser.add_argument(
        "--live-minutes", type=float, default=7.0, help="live phase; >= 6 fills the 5 m windows"
    )
    parser.add_argument("--quiet-every", type=int, default=10, help="every Nth node is quiet")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run_bench(args.nodes, args.history_hours, args.live_minutes, args.quiet_every)
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
