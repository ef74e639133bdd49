"""Fleet benchmark: a real Prometheus scraping hundreds of simulated burstscope nodes.

One process serves every node, each on its own loopback address (127.0.X.Y, the agent's
port), so ``__address__``, ``instance`` and the example configuration's ``host``
relabelling look as they do on a fleet. Each node's exposition is a real one: two scrapes
of a real ``burstscope agent --source sim`` taken at the start of the run give every
series and, for counters, its rate; every node then serves those series with its
counters advancing at that rate from its own offset. A share of the nodes is quiet (all
1 ms samples under 1% of line rate, low peaks) so alerts can be checked for firing on the
saturated nodes only. An hour of history is backfilled the same way
(``promtool tsdb create-blocks-from openmetrics``) for range queries. Prometheus (Debian's
``prometheus``) scrapes every 15 s with both rule files and the host relabelling.

Reports: series in the head and per port, scrape duration p99, each rule group's
evaluation time (highest seen), the latency of every panel query of both dashboards over
1 h and 6 h through the HTTP API, and Prometheus' peak RSS (VmHWM). Targets (issue 16):
default views <= 1 s over 6 h, all variables at "All" <= 2 s over 1 h, each rule group
<= 2 s, peak RSS <= 3 GB, <= 60 series per port. ``--json`` prints one JSON line.
The fleet overview's default view is its all-"All" view; the drill-down shows one node
(its instance variable has no "All"), with device, port and direction at "All".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == _ROOT / "bench":
    sys.path[0] = str(_ROOT)

DASHBOARDS = _ROOT / "dashboards"
SAMPLE = re.compile(
    r"^(?P<series>(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?) (?P<value>\S+)$"
)
COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
PORTS_PER_NODE = 9


@dataclass
class Exposition:
    """Every series of a real agent scrape: name, text before the value, value, rate."""

    names: list[str]
    prefixes: list[str]
    values: list[float]
    rates: list[float]
    help_lines: str


def capture_agent(seconds: float = 5.0) -> Exposition:
    """Two scrapes of a real in-process ``agent --source sim``, ``seconds`` apart."""
    from bench.exporter import agent_settings, free_port, scrape
    from burstscope.commands.agent import Agent
    from collector.pipeline import wait_for_first_sample

    port = free_port()
    agent = Agent(agent_settings(["--source", "sim", "--listen", f"127.0.0.1:{port}"]))
    agent.start()
    try:
        if not wait_for_first_sample(agent.pipeline):
            raise RuntimeError("the sim agent did not sample within 10 s")
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 60
        # Wait for the slow poller's first readings (port state) to be in the exposition.
        while "burstscope_port_state{" not in scrape(url):
            if time.monotonic() > deadline:
                raise RuntimeError("the sim agent exported no slow counters within 60 s")
            time.sleep(0.2)
        first, t1 = scrape(url), time.monotonic()
        time.sleep(seconds)
        second, t2 = scrape(url), time.monotonic()
    finally:
        agent.stop()
    before = {m["series"]: float(m["value"]) for m in map(SAMPLE.match, first.splitlines()) if m}
    names, prefixes, values, rates, helps = [], [], [], [], []
    for line in second.splitlines():
        if line.startswith("#"):
            helps.append(line)
            continue
        match = SAMPLE.match(line)
        if match is None:
            continue
        name, series, value = match["name"], match["series"], float(match["value"])
        rate = 0.0
        if name.endswith(COUNTER_SUFFIXES) and series in before:
            rate = max(0.0, (value - before[series]) / (t2 - t1))
        names.append(name)
        prefixes.append(series)
        values.append(value)
        rates.append(rate)
    return Exposition(names, prefixes, values, rates, "\n".join(helps))


@dataclass
class Node:
    address: str
    offset_s: float
    quiet: bool
    stopped: bool = False


@dataclass
class Fleet:
    """Serves every node's exposition; counters advance from the capture's rates."""

    exposition: Exposition
    nodes: list[Node]
    port: int
    started: float = field(default_factory=time.time)

    def body(self, node: Node, at: float) -> str:
        ex = self.exposition
        elapsed = at - self.started + node.offset_s
        count_rate: dict[str, float] = {}
        lines = []
        for name, prefix, value, rate in zip(
            ex.names, ex.prefixes, ex.values, ex.rates, strict=True
        ):
            if node.quiet:
                if name == "burstscope_port_utilization_ratio_count":
                    count_rate[prefix.split("{", 1)[1]] = rate
                elif name == "burstscope_port_peak_utilization_ratio":
                    value = 0.005
                elif name.startswith(
                    ("burstscope_port_burst", "burstscope_port_saturated", "burstscope_port_hidden")
                ):
                    rate = 0.0
            lines.append((name, prefix, value, rate))
        out = []
        for name, prefix, value, rate in lines:
            if node.quiet and name == "burstscope_port_utilization_ratio_bucket":
                labels = re.sub(r',?le="[^"]*"', "", prefix.split("{", 1)[1]).lstrip(",")
                rate = count_rate.get(labels, rate)
            out.append(f"{prefix} {value + rate * elapsed!r}")
        return ex.help_lines + "\n" + "\n".join(out) + "\n"

    async def _serve(
        self, node: Node, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            if node.stopped:
                writer.write(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                    b"Connection: close\r\n\r\n"
                )
            else:
                data = self.body(node, time.time()).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                    + f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                    + data
                )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _main(self, ready: threading.Event, stop: threading.Event) -> None:
        servers = []
        for node in self.nodes:

            def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: Node = node) -> Any:
                return self._serve(n, r, w)

            servers.append(await asyncio.start_server(handler, node.address, self.port))
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.2)
        for server in servers:
            server.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[Fleet]:
        ready, stop = threading.Event(), threading.Event()
        thread = threading.Thread(
            target=asyncio.run, args=(self._main(ready, stop),), name="fleet", daemon=True
        )
        thread.start()
        if not ready.wait(60):
            raise RuntimeError("the fleet's listeners did not start")
        try:
            yield self
        finally:
            stop.set()
            thread.join(10)


def make_fleet(exposition: Exposition, count: int, quiet_every: int, port: int) -> Fleet:
    nodes = [
        Node(
            f"127.0.{1 + i // 250}.{1 + i % 250}",
            offset_s=3600.0 + 7.0 * i,
            quiet=quiet_every > 0 and i % quiet_every == 0,
        )
        for i in range(count)
    ]
    return Fleet(exposition, nodes, port)


def write_backfill(fleet: Fleet, path: Path, minutes: int, step_s: int, end: float) -> int:
    """OpenMetrics history for every node, ``minutes`` long, ending ``end``."""
    ex = fleet.exposition
    samples = 0
    with path.open("w") as out:
        families: dict[str, str] = {}
        for line in ex.help_lines.splitlines():
            parts = line.split(" ", 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                families[parts[2]] = parts[3]
        steps = [end - minutes * 60 + k * step_s for k in range(minutes * 60 // step_s)]
        for node in fleet.nodes:
            instance = (
                f'instance="{node.address}:{fleet.port}",job="burstscope",host="{node.address}"'
            )
            node_body_at = [fleet.body(node, at) for at in steps]
            parsed = [
                [(m["series"], m["value"]) for m in map(SAMPLE.match, body.splitlines()) if m]
                for body in node_body_at
            ]
            for index in range(len(parsed[0])):
                series = parsed[0][index][0]
                name, _, labels = series.partition("{")
                labels = f"{{{instance}," + labels if labels else f"{{{instance}}}"
                for at, rows in zip(steps, parsed, strict=True):
                    out.write(f"{name}{labels} {rows[index][1]} {int(at)}\n")
                    samples += 1
        out.write("# EOF\n")
    return samples


def prometheus_config(tmp: Path, fleet: Fleet, interval: str, shorten_for: bool) -> Path:
    names = []
    for name in ("recording.rules.yml", "alerts.rules.yml"):
        text = (DASHBOARDS / "prometheus" / name).read_text()
        if shorten_for:
            text = re.sub(r"^(\s+for:) \S+$", r"\1 2s", text, flags=re.MULTILINE)
        (tmp / name).write_text(text)
        names.append(name)
    targets = [f"{n.address}:{fleet.port}" for n in fleet.nodes]
    config = tmp / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n"
        f"  scrape_timeout: {interval}\n"
        f"rule_files: {json.dumps(names)}\n"
        "scrape_configs:\n  - job_name: burstscope\n"
        f"    static_configs:\n      - targets: {json.dumps(targets)}\n"
        "    relabel_configs:\n      - source_labels: [__address__]\n"
        "        regex: '(.+):\\d+'\n        target_label: host\n        replacement: '$1'\n"
    )
    return config


@dataclass
class Prometheus:
    url: str
    process: subprocess.Popen[bytes]

    def get(self, path: str, timeout: float = 120, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read())

    def value(self, expr: str) -> float:
        result = self.get("/api/v1/query", query=expr)["data"]["result"]
        return float(result[0]["value"][1]) if result else math.nan

    def peak_rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0


@contextlib.contextmanager
def running_prometheus(binary: str, config: Path, data: Path, port: int) -> Iterator[Prometheus]:
    log = (config.parent / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            "--storage.tsdb.retention.time=30d",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Prometheus(f"http://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                raise RuntimeError((config.parent / "prometheus.log").read_text()[-2000:])
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response,
            ):
                if response.status == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus was not ready within 300 s")
            time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def dashboard_targets() -> list[tuple[str, str, str, bool]]:
    """(dashboard, panel [refId], expr, instant) for every target of both dashboards."""
    found = []
    for path in sorted((DASHBOARDS / "grafana").glob("*.json")):
        stack = list(json.loads(path.read_text())["panels"])
        while stack:
            panel = stack.pop(0)
            stack.extend(panel.get("panels", []))
            for t in panel.get("targets", []):
                found.append(
                    (
                        path.stem,
                        f"{panel['title']} [{t['refId']}]",
                        t["expr"],
                        bool(t.get("instant")),
                    )
                )
    return found


def substitute(expr: str, node: str, step_s: int, scrape_s: int) -> str:
    """Grafana's variables: drill-down instance = one node, everything else "All"."""
    rate_interval = max(4 * scrape_s, step_s + scrape_s)
    expr = expr.replace("$__rate_interval", f"{rate_interval}s").replace(
        "$__interval", f"{step_s}s"
    )
    expr = expr.replace('instance=~"$instance"', f'instance=~"{node or ".*"}"')
    return re.sub(r"\$(instance|device|port|direction)\b", ".*", expr)


def time_panels(prom: Prometheus, node: str, hours: int, scrape_s: int) -> list[dict[str, Any]]:
    end = time.time()
    step = max(scrape_s, round(hours * 3600 / 1000 / 5) * 5)  # Grafana: ~1000 points
    timings = []
    for dashboard, title, expr, instant in dashboard_targets():
        query = substitute(expr, node if dashboard == "port-drilldown" else "", step, scrape_s)
        started = time.perf_counter()
        if instant:
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
                "dashboard": dashboard,
                "panel": title,
                "seconds": round(seconds, 3),
                "series": None if result is None else len(result),
                "error": answer.get("error"),
            }
        )
    return timings


def rule_group_seconds(prom: Prometheus) -> dict[str, float]:
    groups = prom.get("/api/v1/rules")["data"]["groups"]
    return {g["name"]: float(g["evaluationTime"]) for g in groups}


def run_bench(
    nodes: int, backfill_minutes: int, evaluations: int, quiet_every: int
) -> dict[str, Any]:
    from bench.exporter import free_port

    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    scrape_s = 15
    exposition = capture_agent()
    fleet = make_fleet(exposition, nodes, quiet_every, free_port())
    with tempfile.TemporaryDirectory(prefix="burstscope-fleet-") as tmp_name:
        tmp = Path(tmp_name)
        data = tmp / "data"
        data.mkdir()
        backfill = {"minutes": backfill_minutes, "samples": 0, "seconds": 0.0}
        if backfill_minutes:
            started = time.monotonic()
            openmetrics = tmp / "history.om"
            backfill["samples"] = write_backfill(
                fleet, openmetrics, backfill_minutes, scrape_s, time.time() - 60
            )
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
        config = prometheus_config(tmp, fleet, f"{scrape_s}s", shorten_for=False)
        with fleet.running(), running_prometheus(binary, config, data, free_port()) as prom:
            groups: dict[str, float] = {}
            deadline = time.monotonic() + scrape_s * (evaluations + 2)
            while time.monotonic() < deadline:
                for name, seconds in rule_group_seconds(prom).items():
                    groups[name] = max(groups.get(name, 0.0), seconds)
                time.sleep(1)
            node = f"{fleet.nodes[-1].address}:{fleet.port}"
            panels_1h = time_panels(prom, node, 1, scrape_s)
            panels_6h = time_panels(prom, node, 6, scrape_s)
            for name, seconds in rule_group_seconds(prom).items():
                groups[name] = max(groups.get(name, 0.0), seconds)
            head = prom.get("/api/v1/status/tsdb")["data"]["headStats"]["numSeries"]
            agent_series = prom.value('count({__name__=~"burstscope_.+|process_.+"})')
            scrape_p99 = prom.value("quantile(0.99, max_over_time(scrape_duration_seconds[5m]))")
            rss = prom.peak_rss_bytes()
            firing = prom.value('count(ALERTS{alertname="BurstSaturation", alertstate="firing"})')
    slowest_default_6h = max(p["seconds"] for p in panels_6h)
    slowest_all_1h = max(p["seconds"] for p in panels_1h)
    per_port = agent_series / (nodes * PORTS_PER_NODE)
    return {
        "benchmark": "fleet",
        "nodes": nodes,
        "quiet_nodes": sum(n.quiet for n in fleet.nodes),
        "backfill": backfill,
        "series_in_head": head,
        "series_per_port": round(per_port, 1),
        "scrape_duration_p99_s": round(scrape_p99, 4),
        "rule_group_seconds_max": {k: round(v, 3) for k, v in groups.items()},
        "slowest_panel_6h_s": slowest_default_6h,
        "slowest_panel_1h_s": slowest_all_1h,
        "prometheus_peak_rss_bytes": rss,
        "burst_saturation_firing": firing,
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
            "default_views_6h": slowest_default_6h <= 1.0,
            "all_variables_1h": slowest_all_1h <= 2.0,
            "rule_groups": all(v <= 2.0 for v in groups.values()),
            "peak_rss": rss <= 3e9,
            "series_per_port": per_port <= 60,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=590)
    parser.add_argument("--backfill-minutes", type=int, default=60)
    parser.add_argument("--evaluations", type=int, default=3)
    parser.add_argument("--quiet-every", type=int, default=10, help="every Nth node is quiet")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run_bench(args.nodes, args.backfill_minutes, args.evaluations, args.quiet_every)
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
