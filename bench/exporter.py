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

Targets: ``scrape_p99_ms`` <= 20, ``lateness_p99_growth`` <= 0.20,
``missed_ticks_storm`` <= ``missed_ticks_quiet``. ``--json`` prints exactly one JSON line.

The emulated node (``EmulatedNode``, ``CounterWriter``, ``running_agent``) lives in
burstscope/testing/emulated_node.py, shared with the exposition and Prometheus tests.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from burstscope.testing.emulated_node import (
    DATA_FILES,
    CounterWriter,
    EmulatedNode,
    Load,
    running_agent,
    scrape,
)

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
        reader = pipeline.intake.reader  # the pipeline's own reader: no second consumer
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
