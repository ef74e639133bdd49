"""A simulated fleet for a real Prometheus: hundreds of burstscope nodes from one process.

One process serves every node, each on its own loopback address (127.0.X.Y, the agent's
port), so ``__address__``, ``instance`` and the example configuration's ``host``
relabelling look as they do on a fleet. Each node's exposition is a real one: two scrapes
of a real ``burstscope agent --source sim`` give every series and, for counters, its
rate; every node then serves those series with its counters advancing at that rate from
its own offset. A share of the nodes is quiet (all 1 ms samples under 1% of line rate,
low peaks) so alerts can be checked for firing on the saturated nodes only. Also here:
Debian's ``prometheus`` started on a configuration with both rule files and the host
relabelling, and every panel target of both dashboards. Shared by tests/test_fleet.py and
bench/fleet.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import subprocess
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

from burstscope.testing.emulated_node import agent_settings, scrape
from burstscope.testing.processes import free_port
from burstscope.testing.slurm_jobs import start_job

# The dashboards and rules as the package carries them (a link to dashboards/ in a checkout).
DASHBOARDS = Path(__file__).resolve().parent.parent / "data-files" / "dashboards"
SAMPLE = re.compile(
    r"^(?P<series>(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?) (?P<value>\S+)$"
)
COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
PORTS_PER_NODE = 9
# The job every simulated node runs (one job over the whole fleet).
FLEET_JOB_ID = 5150


@dataclass
class Exposition:
    """Every series of a real agent scrape: name, text before the value, value, rate."""

    names: list[str]
    prefixes: list[str]
    values: list[float]
    rates: list[float]
    help_lines: str


def capture_agent(seconds: float = 5.0, profile: str = "full") -> Exposition:
    """Two scrapes of a real in-process ``agent --source sim --metrics-profile PROFILE``,
    ``seconds`` apart, with one Slurm job holding the node (as a job spread over the whole
    fleet would): every node then serves the job's series beside its ports'."""
    with tempfile.TemporaryDirectory(prefix="burstscope-fleet-jobs-") as jobs:
        start_job(Path(jobs), FLEET_JOB_ID, user="fleet")
        return _capture(seconds, ["--slurm-jobs-dir", jobs, "--metrics-profile", profile])


def _capture(seconds: float, extra: list[str]) -> Exposition:
    from burstscope.agent import Agent
    from burstscope.collector.pipeline import wait_for_first_sample

    port = free_port()
    agent = Agent(agent_settings(["--source", "sim", "--listen", f"127.0.0.1:{port}", *extra]))
    agent.start()
    try:
        if not wait_for_first_sample(agent.pipeline):
            raise RuntimeError("the sim agent did not sample within 10 s")
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 60
        # The agent publishes its counters once per drain (1 s): two scrapes a second apart
        # can fall between the same two drains and see no counter move. So each of the two
        # is the first scrape to see a new drain, and the rates divide by the time between
        # those two sightings (to within a poll, 20 ms).
        first, t1 = _next_drain(url, None, deadline)
        time.sleep(max(0.0, seconds - 0.1))
        second, t2 = _next_drain(url, first, deadline)
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


def _drained(text: str) -> tuple[str, ...]:
    """The byte counters of a scrape: they change with every drain (the sim always sends)."""
    return tuple(line for line in text.splitlines() if line.startswith("burstscope_port_data_"))


def _next_drain(url: str, after: str | None, deadline: float) -> tuple[str, float]:
    """The first complete scrape of a drain after ``after``'s (None: after the one the agent
    shows now) and when it was taken; a capture never waits past ``deadline``."""
    seen = _drained(after) if after is not None else None
    while True:
        text, at = scrape(url), time.monotonic()
        if _complete(text):
            if seen is None:
                seen = _drained(text)
            elif _drained(text) != seen:
                return text, at
        if at > deadline:
            # Until a port's rate is read its utilization families are absent, and a capture
            # taken then would serve a node without peaks (seen on a loaded machine).
            raise RuntimeError("the sim agent exported no complete drain of every port within 60 s")
        time.sleep(0.02)


def _complete(text: str) -> bool:
    """Port state, the job, and a line rate, a 1 ms peak and bytes of every port with a
    state (the drain after the first reading: before it, peaks and bytes are absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, set[tuple[str, str]]] = {
        "burstscope_port_state": set(),
        "burstscope_port_line_rate_bytes_per_second": set(),
        "burstscope_port_peak_utilization_ratio": set(),
        "burstscope_port_data_bytes": set(),
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if family.name in found:
                found[family.name].add((sample.labels["device"], sample.labels["port"]))
    ports = found["burstscope_port_state"]
    # and the first judged second of the node's throttling (a few seconds in): a capture
    # without it would serve a node that never had its throttled seconds.
    return (
        bool(ports)
        and all(ports == seen for seen in found.values())
        and "job_port{" in text
        and "burstscope_throttled_seconds_total{" in text
    )


@dataclass
class Node:
    address: str
    offset_s: float
    quiet: bool
    stopped: bool = False
    lines: list[tuple[str, str, float, float]] = field(default_factory=list)
    # The node's own exposition (another metrics profile), else the fleet's.
    exposition: Exposition | None = None


# A quiet node's utilization histograms (per port, or the lean profile's per node) count
# every sample in the lowest bucket, and its bursts and saturated times stand still.
_UTILIZATION_COUNTS = ("_port_utilization_ratio_count", "_node_utilization_ratio_count")
_UTILIZATION_BUCKETS = ("_port_utilization_ratio_bucket", "_node_utilization_ratio_bucket")
_QUIET_WHEN_QUIET = (
    "burstscope_port_burst",
    "burstscope_port_saturated",
    "burstscope_port_hidden",
    "burstscope_node_bursts",
)


@dataclass
class Fleet:
    """Serves every node's exposition; counters advance from the capture's rates."""

    exposition: Exposition
    nodes: list[Node]
    port: int
    started: float = field(default_factory=time.time)
    # Each sample carries the millisecond its value was computed for (the text format's
    # optional timestamp, which Prometheus honours by default): a value served late, behind a
    # busy test thread holding the GIL, is then stored at its own time rather than at the
    # scrape's start. The agent sends none; tests that compare engines on the stored samples
    # ask for them, so their rates are the counters' slopes, not the server's latency.
    timestamps: bool = False

    def series(self, node: Node) -> list[tuple[str, str, float, float]]:
        """(name, series, value at the capture, rate) of every series the node serves."""
        ex = node.exposition or self.exposition
        count_rate: dict[str, float] = {}
        lines = []
        for name, prefix, value, rate in zip(
            ex.names, ex.prefixes, ex.values, ex.rates, strict=True
        ):
            if node.quiet:
                if name.endswith(_UTILIZATION_COUNTS):
                    count_rate[prefix.split("{", 1)[1]] = rate
                elif name == "burstscope_port_peak_utilization_ratio":
                    value = 0.005
                elif name.startswith(_QUIET_WHEN_QUIET):
                    rate = 0.0
            lines.append((name, prefix, value, rate))
        if node.quiet:
            # Every sample of a quiet port falls in the lowest bucket: buckets grow as count.
            for index, (name, prefix, value, rate) in enumerate(lines):
                if name.endswith(_UTILIZATION_BUCKETS):
                    labels = re.sub(r',?le="[^"]*"', "", prefix.split("{", 1)[1]).lstrip(",")
                    lines[index] = (name, prefix, value, count_rate.get(labels, rate))
        return lines

    def elapsed(self, node: Node, at: float) -> float:
        return at - self.started + node.offset_s

    def body(self, node: Node, at: float) -> str:
        if self.timestamps:
            milliseconds = math.floor(at * 1000)
            at, stamp = milliseconds / 1000, f" {milliseconds}"
        else:
            stamp = ""
        elapsed = self.elapsed(node, at)
        out = [
            f"{prefix} {value + rate * elapsed!r}{stamp}" for _, prefix, value, rate in node.lines
        ]
        return (node.exposition or self.exposition).help_lines + "\n" + "\n".join(out) + "\n"

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


def make_fleet(
    exposition: Exposition,
    count: int,
    quiet_every: int,
    port: int,
    lean: Exposition | None = None,
    first: int = 0,
    timestamps: bool = False,
) -> Fleet:
    """``count`` nodes from address number ``first`` on; with ``lean``, every odd node serves
    that exposition (an agent with the lean metrics profile) instead of ``exposition``;
    ``timestamps``: see Fleet."""
    nodes = [
        Node(
            f"127.0.{1 + i // 250}.{1 + i % 250}",
            offset_s=3600.0 + 7.0 * i,
            quiet=quiet_every > 0 and i % quiet_every == 0,
            exposition=lean if lean is not None and i % 2 else None,
        )
        for i in range(first, first + count)
    ]
    fleet = Fleet(exposition, nodes, port, timestamps=timestamps)
    for node in nodes:
        node.lines = fleet.series(node)
    return fleet


def prometheus_config(tmp: Path, fleet: Fleet, interval: str, shorten_for: bool) -> Path:
    names = rule_files(tmp, shorten_for, interval)
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


def rule_files(directory: Path, shorten_for: bool, interval: str) -> list[str]:
    """Both rules files copied into ``directory``; with ``shorten_for`` (a test's copy) every
    ``for:`` 2 s and every group's own ``interval:`` the test's ``interval``."""
    names = []
    for name in ("recording.rules.yml", "alerts.rules.yml"):
        text = (DASHBOARDS / "prometheus" / name).read_text()
        if shorten_for:
            text = re.sub(r"^(\s+for:) \S+$", r"\1 2s", text, flags=re.MULTILINE)
            text = re.sub(r"^(\s+interval:) \S+$", rf"\1 {interval}", text, flags=re.MULTILINE)
        (directory / name).write_text(text)
        names.append(name)
    return names


def place_rule_files(config: Path, rename: bool) -> dict[str, Any]:
    """Where Prometheus will run the rule groups of the written configuration ``config``
    (rules files beside it), each evaluation taken as 1 s: under their names ("hashed") and
    under the names ``burstscope rule-placement --spread`` chooses. With ``rename``, the
    files take those names, and its rule_files too, as dashboards/README.md ("Where
    Prometheus places the groups") advises for a fleet."""
    import yaml

    from burstscope.rule_placement import crowding, groups_from_config, our_files, spread

    groups, named_by = groups_from_config(str(config), 1.0)
    before = crowding(groups)
    renames: dict[str, str] = {}
    after = before
    if rename:
        renames, moved = spread(groups, our_files(groups), taken=os.path.exists)
        after = crowding(moved)
        for old, new in renames.items():
            os.rename(old, new)
        loaded = yaml.safe_load(config.read_text())
        loaded["rule_files"] = [
            Path(renames.get(str(config.parent / entry), entry)).name
            for entry in loaded["rule_files"]
        ]
        config.write_text(yaml.safe_dump(loaded, sort_keys=False))
    return {
        "files": [Path(renames.get(f, f)).name for f in named_by],
        "at_once_hashed": before.peak,
        "beside_s_hashed": round(before.beside_s, 1),
        "at_once": after.peak,
        "beside_s": round(after.beside_s, 1),
        "evaluation_s": after.evaluation_s,
        "cycle_s": after.cycle_s,
    }


def _example(name: str) -> dict[str, Any]:
    import yaml  # the [web] extra; only the sharding helpers read YAML

    loaded: dict[str, Any] = yaml.safe_load((DASHBOARDS / "prometheus" / name).read_text())
    return loaded


def _write_config(directory: Path, config: dict[str, Any]) -> Path:
    import yaml

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _intervals(config: dict[str, Any], interval: str, evaluate: bool) -> None:
    config["global"]["scrape_interval"] = interval
    config["global"]["scrape_timeout"] = interval
    if evaluate:
        config["global"]["evaluation_interval"] = interval


def shard_configs(
    tmp: Path, fleet: Fleet, shards: int, interval: str, shorten_for: bool
) -> list[Path]:
    """One configuration per shard (``tmp/shard-<i>/prometheus.yml``, beside its rules files),
    each the shipped prometheus/shard.example.yml with the fleet's targets, ``shards`` as the
    hashmod modulus and its own index in the keep rule and the ``shard`` external label: every
    shard lists every node and scrapes its hash share. No Alertmanager and no fleet consumer
    (the simulated fleet has none)."""
    targets = [f"{n.address}:{fleet.port}" for n in fleet.nodes]
    configs = []
    for index in range(shards):
        directory = tmp / f"shard-{index}"
        directory.mkdir(parents=True, exist_ok=True)
        config = _example("shard.example.yml")
        _intervals(config, interval, evaluate=True)
        config["global"]["external_labels"]["shard"] = str(index)
        config["rule_files"] = rule_files(directory, shorten_for, interval)
        del config["alerting"]
        config["scrape_configs"] = [
            job for job in config["scrape_configs"] if job["job_name"] == "burstscope"
        ]
        (job,) = config["scrape_configs"]
        job["static_configs"] = [{"targets": targets}]
        relabel = job["relabel_configs"]
        hashmod = next(i for i, rule in enumerate(relabel) if rule["action"] == "hashmod")
        relabel[hashmod]["modulus"] = shards
        relabel[hashmod + 1]["regex"] = str(index)
        configs.append(_write_config(directory, config))
    return configs


def global_config(
    tmp: Path,
    shard_urls: list[str],
    interval: str,
    extra_targets: list[str] = [],  # noqa: B006 (read, never changed)
) -> Path:
    """``tmp/global/prometheus.yml``: the shipped prometheus/global.example.yml federating
    from every shard (its match[] list as shipped), and scraping ``extra_targets`` (the fleet
    consumer, host:port) directly; without them, no consumer job."""
    config = _example("global.example.yml")
    _intervals(config, interval, evaluate=False)
    jobs = []
    for job in config["scrape_configs"]:
        if job.get("metrics_path") == "/federate":
            hosts = [urllib.parse.urlsplit(url).netloc for url in shard_urls]
            job["static_configs"] = [{"targets": hosts}]
        elif extra_targets:
            job["static_configs"] = [{"targets": list(extra_targets)}]
        else:
            continue
        jobs.append(job)
    config["scrape_configs"] = jobs
    return _write_config(tmp / "global", config)


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
def running_prometheus(
    binary: str, config: Path, data: Path, port: int, gogc: int | None = None
) -> Iterator[Prometheus]:
    """A Prometheus on ``port`` until the block ends; ``gogc``: its Go garbage collector's
    GOGC (None: the environment's, Go's 100 when unset)."""
    log = (config.parent / "prometheus.log").open("wb")
    env = None if gogc is None else {**os.environ, "GOGC": str(gogc)}
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
        env=env,
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


@dataclass
class PanelTarget:
    dashboard: str
    title: str  # panel title [refId]
    expr: str
    instant: bool
    min_step_s: int  # the panel's "Min interval" (interval), 0 when it sets none


def dashboard_targets() -> list[PanelTarget]:
    """Every target of both dashboards, with what Grafana needs to turn it into a query."""
    found = []
    for path in sorted((DASHBOARDS / "grafana").glob("*.json")):
        stack = list(json.loads(path.read_text())["panels"])
        while stack:
            panel = stack.pop(0)
            stack.extend(panel.get("panels", []))
            interval = panel.get("interval", "0s")
            min_step = int(interval[:-1]) * {"s": 1, "m": 60, "h": 3600}[interval[-1]]
            for t in panel.get("targets", []):
                found.append(
                    PanelTarget(
                        path.stem,
                        f"{panel['title']} [{t['refId']}]",
                        t["expr"],
                        bool(t.get("instant")),
                        min_step,
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
    return re.sub(r"\$(cluster|job|instance|device|port|direction|job_id)\b", ".*", expr)
