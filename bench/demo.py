"""The demo's sampler process CPU: 9 simulated ports at 1 ms, beside 9 netdev ports, same run.

The simulated node's source computes counters from the traffic model instead of reading
files, so its cost differs from a real sampler's. This runs the real ``Sampler`` for
``--duration`` seconds over ``sim:moe`` (the demo's source) and, as the reference in the
same run, over 9 netdev ports of this machine (18 real counter files), and prints ONE JSON
line: ``sim_cpu_share`` (sampler-process CPU seconds per wall second; target <= 0.15),
``netdev_cpu_share``, their ratio, and the missed-tick fractions. CPU comes from
/proc/PID/schedstat, measured between "running" and stop, start-up excluded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sampler import CpuClock, machine_interfaces
from burstscope.collector.ring import Field, RingReader
from burstscope.collector.sampler import Sampler, SamplerConfig
from burstscope.collector.sources.base import CounterSource
from burstscope.collector.sources.netdev import NetdevSource
from burstscope.collector.sources.sim import SimSource


def measure(source: CounterSource, seconds: float, clock: CpuClock) -> tuple[float, float]:
    """(CPU share of one core, missed tick fraction) of the sampler process."""
    sampler = Sampler(source, SamplerConfig())
    try:
        ring = sampler.start()
        reader = RingReader(ring, source.ports)
        pid = ring.get(Field.PID)
        cpu_before, wall_before = clock.seconds(pid), time.monotonic()
        ticks_before, missed_before = ring.get(Field.TICKS), ring.get(Field.MISSED_TICKS)
        deadline = wall_before + seconds
        while time.monotonic() < deadline:
            time.sleep(0.1)
            reader.poll()  # drain as the agent does, so the ring is read while sampling
        cpu = clock.seconds(pid) - cpu_before
        wall = time.monotonic() - wall_before
        ticks = ring.get(Field.TICKS) - ticks_before
        missed = ring.get(Field.MISSED_TICKS) - missed_before
    finally:
        sampler.close()
    return cpu / wall, missed / max(ticks + missed, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per source")
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args(argv)
    clock = CpuClock()
    sim_share, sim_missed = measure(SimSource("moe"), args.duration, clock)
    netdev_share, netdev_missed = measure(NetdevSource(machine_interfaces(9)), args.duration, clock)
    result = {
        "benchmark": "demo_sampler_cpu",
        "ports": 9,
        "interval_ms": 1.0,
        "seconds": args.duration,
        "sim_cpu_share": round(sim_share, 4),
        "sim_missed_tick_fraction": round(sim_missed, 5),
        "netdev_cpu_share": round(netdev_share, 4),
        "netdev_missed_tick_fraction": round(netdev_missed, 5),
        "sim_vs_netdev_cpu_ratio": round(sim_share / netdev_share, 3) if netdev_share else None,
        "target_sim_cpu_share": 0.15,
        "cpu_clock": clock.name,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"sim:moe sampler {sim_share:.1%} of a core (target <= 15%), netdev x9 "
            f"{netdev_share:.1%}; missed ticks {sim_missed:.2%} / {netdev_missed:.2%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
