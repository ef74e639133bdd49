"""Exporter benchmark: scrape latency on a 9-port node, and what a scrape storm costs the sampler.

One run, one emulated node: a sysfs-shaped tree of 9 RoCE ports (``mlx5_0`` .. ``mlx5_8``,
400 Gb/s each, the 8 GPU rails plus a storage port of a typical training node) whose data
counters a writer *process* advances in place every millisecond with line-rate bursts
(40 ms every 400 ms on every port, the synchronized all-reduce pattern). The agent is the
real ``burstscope.agent.Agent`` (sampler process, pipeline thread, HTTP server)
reading the tree through its real sysfs path. Scrapes come from a separate process, as
Prometheus' would, so the client's own Python does not share the agent's GIL.

Phases, in this order, in the same run:

1. ``quiet``: 10 s with no scrapes.
2. ``storm``: 10 s with 20 scrapes per second (every 50 ms, absolute schedule).

Figures:

- ``scrape_p50_ms`` / ``scrape_p99_ms`` / ``scrape_max_ms``: client-side latency of each
  storm scrape (request sent to body read), over every scrape of the storm.
- ``lateness_p99_us_quiet`` / ``lateness_p99_us_storm``: p99 of the sampler's per-tick
  lateness (wake-up minus deadline) over each phase, from the exact per-tick values the
  pipeline drains from the ring (not the exported histogram, whose buckets are too coarse
  for a 20% comparison). ``lateness_p99_growth`` = storm / quiet - 1.
- ``missed_ticks_quiet`` / ``missed_ticks_storm``: deadlines skipped in each phase.
- ``series`` and ``scrape_bytes``: size of one exposition.

Targets (issue 4): ``scrape_p99_ms`` <= 20, ``lateness_p99_growth`` <= 0.20,
``missed_ticks_storm`` <= ``missed_ticks_quiet``. ``--json`` prints exactly one JSON line.

``EmulatedNode`` and ``CounterWriter`` are also the tests' emulated node
(tests/test_exposition.py, tests/test_prometheus_integration.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

# Run as a script, sys.path[0] is bench/, whose detectors.py would shadow the package.
_ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0] or ".").resolve() == _ROOT / "bench":
    sys.path[0] = str(_ROOT)

DATA_FILES = {"transmit": "port_xmit_data", "receive": "port_rcv_data"}
# IB PortCounters port_{xmit,rcv}_data count 4-octet words (DESIGN.md).
WORD_BYTES = 4
SLOW_COUNTERS = (
    "link_downed",
    "port_xmit_wait",
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_rcv_packets",
)
HW_COUNTERS = ("np_cnp_sent", "np_ecn_marked_roce_packets", "rp_cnp_handled", "rp_cnp_ignored")


class StopFlag(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Load:
    """Traffic on one port direction: ``fraction`` of line rate while on.

    On for ``duty`` of every ``period_s`` (duty 1: continuous). Cumulative bytes are a pure
    function of elapsed time, so a writer that wakes late still writes the right counter.
    """

    fraction: float
    period_s: float = 1.0
    duty: float = 1.0

    def on_seconds(self, elapsed: float) -> float:
        if self.duty >= 1.0:
            return elapsed
        whole, part = divmod(elapsed, self.period_s)
        return whole * self.period_s * self.duty + min(part, self.period_s * self.duty)


@dataclass
class EmulatedNode:
    """A sysfs-shaped tree of RoCE ports under ``root`` (class/infiniband/<dev>/ports/1).

    Ethernet link layer with hw_counters/ (so the agent polls CNP/ECN counters) and no
    netdev (so it runs no ethtool against the real kernel). Counter files are rewritten in
    place (pwrite at 0 + ftruncate), never renamed: the agent keeps its descriptors open.
    """

    root: Path
    devices: Sequence[str]
    rate_gbits: int = 400
    paths: dict[tuple[str, str], Path] = field(default_factory=dict)

    @property
    def line_rate_bytes_per_second(self) -> int:
        return self.rate_gbits * 1_000_000_000 // 8

    def build(self) -> EmulatedNode:
        for device in self.devices:
            port = self.root / "class" / "infiniband" / device / "ports" / "1"
            counters = port / "counters"
            hw = port / "hw_counters"
            counters.mkdir(parents=True, exist_ok=True)
            hw.mkdir(exist_ok=True)
            (port / "rate").write_text(f"{self.rate_gbits} Gb/sec (4X NDR)\n")
            (port / "state").write_text("4: ACTIVE\n")
            (port / "phys_state").write_text("5: LinkUp\n")
            (port / "link_layer").write_text("Ethernet\n")
            (hw / "lifespan").write_text("10\n")
            for name in (*DATA_FILES.values(), *SLOW_COUNTERS):
                (counters / name).write_text("0\n")
                self.paths[(device, name)] = counters / name
            for name in HW_COUNTERS:
                (hw / name).write_text("0\n")
                self.paths[(device, name)] = hw / name
            self.paths[(device, "state")] = port / "state"
        return self

    def write(self, device: str, name: str, text: str) -> None:
        """Rewrite one attribute in place, as sysfs would show a new value."""
        fd = os.open(self.paths[(device, name)], os.O_WRONLY)
        try:
            data = text.encode()
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)


class CounterWriter:
    """Advances data counters by their loads every ``period_s``; run() in a thread or process."""

    def __init__(self, node: EmulatedNode, period_s: float = 0.0005) -> None:
        self.node = node
        self.period_s = period_s
        self.loads: dict[tuple[str, str], Load] = {}
        self._lock = threading.Lock()
        # (device, direction) -> (bytes carried before the current load, its start time)
        self._base: dict[tuple[str, str], tuple[float, float]] = {}

    def set_load(self, device: str, direction: str, load: Load | None, now: float = -1.0) -> None:
        now = time.monotonic() if now < 0 else now
        with self._lock:
            key = (device, direction)
            carried = self._carried(key, now)
            if load is None:
                self.loads.pop(key, None)
            else:
                self.loads[key] = load
            self._base[key] = (carried, now)

    def _carried(self, key: tuple[str, str], now: float) -> float:
        base, started = self._base.get(key, (0.0, now))
        load = self.loads.get(key)
        if load is None:
            return base
        rate = self.node.line_rate_bytes_per_second * load.fraction
        return base + rate * load.on_seconds(now - started)

    def run(self, stop: StopFlag) -> None:
        fds = {
            (device, direction): os.open(self.node.paths[(device, name)], os.O_WRONLY)
            for device in self.node.devices
            for direction, name in DATA_FILES.items()
        }
        last: dict[tuple[str, str], int] = {}
        try:
            while not stop.is_set():
                now = time.monotonic()
                with self._lock:
                    words = {
                        key: int(self._carried(key, now)) // WORD_BYTES for key in list(self._base)
                    }
                for key, value in words.items():
                    if last.get(key) == value:
                        continue
                    data = f"{value}\n".encode()
                    os.pwrite(fds[key], data, 0)
                    os.ftruncate(fds[key], len(data))
                    last[key] = value
                time.sleep(self.period_s)
        finally:
            for fd in fds.values():
                os.close(fd)

    @contextlib.contextmanager
    def running_in_thread(self) -> Iterator[CounterWriter]:
        stop = threading.Event()
        thread = threading.Thread(target=self.run, args=(stop,), name="counter-writer")
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(5)


def free_port() -> int:
    """A loopback port nobody holds right now (the agent rebinds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def agent_settings(arguments: Sequence[str]) -> Any:
    """AgentSettings from command-line arguments, through the agent's own parser."""
    from burstscope.agent import settings_from_args
    from burstscope.arguments import add_source_arguments
    from burstscope.commands.agent import add_agent_arguments

    parser = argparse.ArgumentParser(prog="burstscope agent")
    add_source_arguments(parser, defaults=False)
    add_agent_arguments(parser)
    return settings_from_args(parser.parse_args(list(arguments)))


@contextlib.contextmanager
def running_agent(sysfs_root: Path, *extra: str) -> Iterator[tuple[Any, str]]:
    """A started in-process Agent on a free loopback port; yields (agent, metrics URL)."""
    from burstscope.agent import Agent
    from burstscope.errors import UsageError
    from collector.pipeline import wait_for_first_sample

    for attempt in range(5):
        port = free_port()
        args = ["--source", "sysfs", "--sysfs-root", str(sysfs_root), *extra]
        agent = Agent(agent_settings([*args, "--listen", f"127.0.0.1:{port}"]))
        try:
            agent.start()
        except UsageError:
            agent.pipeline.close()
            if attempt == 4:
                raise
            continue
        break
    try:
        if not wait_for_first_sample(agent.pipeline):
            raise RuntimeError("the sampler did not tick within 10 s")
        yield agent, f"http://127.0.0.1:{port}/metrics"
    finally:
        agent.stop()


def scrape(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
        return body.decode()


# --- the benchmark ------------------------------------------------------------------------


def _storm(url: str, rate: float, duration: float) -> None:
    """Child process: scrape ``url`` ``rate`` times a second; print latencies (s) as JSON."""
    latencies: list[float] = []
    period = 1.0 / rate
    start = time.monotonic()
    deadline = start
    while deadline < start + duration:
        delay = deadline - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        began = time.perf_counter()
        scrape(url)
        latencies.append(time.perf_counter() - began)
        deadline += period
    print(json.dumps(latencies))


def _percentile(values: npt.NDArray[np.float64] | list[float], q: float) -> float:
    array = np.asarray(values, dtype=np.float64)
    return float(np.percentile(array, q)) if array.size else float("nan")


class LatenessTap:
    """Collects the per-tick lateness the pipeline drains, by wrapping its ring reader."""

    def __init__(self, pipeline: Any) -> None:
        self.chunks: list[npt.NDArray[np.int64]] = []
        self._lock = threading.Lock()
        reader = pipeline._reader  # the pipeline's own reader: no second consumer of the ring
        original: Callable[[], tuple[Any, npt.NDArray[np.int64], Any]] = reader.poll_with_timing

        def tapped() -> tuple[Any, npt.NDArray[np.int64], Any]:
            columns, lateness, read_ns = original()
            with self._lock:
                self.chunks.append(np.array(lateness, dtype=np.int64))
            return columns, lateness, read_ns

        reader.poll_with_timing = tapped

    def take(self) -> npt.NDArray[np.int64]:
        with self._lock:
            chunks, self.chunks = self.chunks, []
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def _phase(agent: Any, tap: LatenessTap, seconds: float) -> tuple[npt.NDArray[np.int64], int]:
    missed_before = agent.pipeline.snapshot().health.missed_ticks
    agent.pipeline.drain()
    tap.take()
    time.sleep(seconds)
    agent.pipeline.drain()
    missed = agent.pipeline.snapshot().health.missed_ticks - missed_before
    return tap.take(), int(missed)


def run_bench(ports: int, phase_seconds: float, storm_rate: float) -> dict[str, Any]:
    devices = [f"mlx5_{index}" for index in range(ports)]
    with tempfile.TemporaryDirectory(prefix="burstscope-bench-") as tmp:
        node = EmulatedNode(Path(tmp), devices).build()
        writer = CounterWriter(node, period_s=0.001)
        now = time.monotonic()
        for device in devices:
            for direction in DATA_FILES:
                writer.set_load(device, direction, Load(1.0, period_s=0.4, duty=0.1), now)
        context = multiprocessing.get_context("fork")
        stop = context.Event()
        writer_process = context.Process(target=writer.run, args=(stop,), daemon=True)
        writer_process.start()
        try:
            with running_agent(node.root) as (agent, url):
                tap = LatenessTap(agent.pipeline)
                time.sleep(2.0)  # warm-up: first peaks, first slow poll
                body = scrape(url)
                quiet, missed_quiet = _phase(agent, tap, phase_seconds)
                storm = subprocess.Popen(
                    [sys.executable, __file__, "--storm", url, str(storm_rate), str(phase_seconds)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                try:
                    stormy, missed_storm = _phase(agent, tap, phase_seconds)
                    out, _ = storm.communicate(timeout=phase_seconds + 30)
                finally:
                    if storm.poll() is None:
                        storm.kill()
                        storm.wait()
                latencies = json.loads(out)
                realtime = agent.pipeline.snapshot().health.realtime
        finally:
            stop.set()
            writer_process.join(5)
            if writer_process.is_alive():
                writer_process.kill()
    series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
    p99_quiet = _percentile(quiet / 1e3, 99)
    p99_storm = _percentile(stormy / 1e3, 99)
    return {
        "ports": ports,
        "series": series,
        "scrape_bytes": len(body.encode()),
        "scrapes": len(latencies),
        "scrape_p50_ms": round(_percentile(latencies, 50) * 1e3, 3),
        "scrape_p99_ms": round(_percentile(latencies, 99) * 1e3, 3),
        "scrape_max_ms": round(max(latencies) * 1e3, 3),
        "storm_scrapes_per_second": storm_rate,
        "phase_seconds": phase_seconds,
        "ticks_quiet": int(quiet.size),
        "ticks_storm": int(stormy.size),
        "lateness_p50_us_quiet": round(_percentile(quiet / 1e3, 50), 1),
        "lateness_p50_us_storm": round(_percentile(stormy / 1e3, 50), 1),
        "lateness_p99_us_quiet": round(p99_quiet, 1),
        "lateness_p99_us_storm": round(p99_storm, 1),
        "lateness_p99_growth": round(p99_storm / p99_quiet - 1.0, 3),
        "missed_ticks_quiet": missed_quiet,
        "missed_ticks_storm": missed_storm,
        "realtime": realtime,
        "cpus": os.cpu_count(),
        "targets_met": {
            "scrape_p99_le_20ms": _percentile(latencies, 99) * 1e3 <= 20.0,
            "lateness_p99_growth_le_20pct": p99_storm <= 1.2 * p99_quiet,
            "no_extra_missed_ticks": missed_storm <= missed_quiet,
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument("--ports", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--rate", type=float, default=20.0, help="storm scrapes per second")
    parser.add_argument(
        "--storm", nargs=3, metavar=("URL", "RATE", "SECONDS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.storm is not None:
        _storm(args.storm[0], float(args.storm[1]), float(args.storm[2]))
        return 0
    result = run_bench(args.ports, args.seconds, args.rate)
    if args.json:
        print(json.dumps(result, sort_keys=False))
    else:
        for key, value in result.items():
            print(f"{key:28} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
