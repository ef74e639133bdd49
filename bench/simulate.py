"""Simulation speed: ``burstscope simulate`` against writing the same rows from precomputed arrays.

Both sides write the same trace (9 ports, 1 ms ticks, ``--seconds`` of traffic, profile
``--profile``) with the real ``TraceWriter`` into a temporary directory, in the same run:

- ``simulate``: ``burstscope.collector.tracegen.simulate_trace`` from a fresh model, as the
  command does it: block generation, sample timing, counter evaluation, Parquet.
- ``reference``: the same rows, computed beforehand (outside the timed window), only
  handed to ``TraceWriter`` chunk by chunk. Its time is the floor set by the trace format.

``times_real_time`` = simulated seconds / wall seconds of ``simulate`` (target >= 100 for
9 ports at 1 ms); ``model_overhead_ratio`` = simulate seconds / reference seconds, the
model's own cost on top of writing (1.0 would be free). Absolute times on a shared machine
are noise; the ratio is the figure to compare across machines. ``--json`` prints one line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from burstscope.collector.discovery import DATA_COUNTER_OCTETS
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.trace import PortColumns, TraceWriter, prepare_output
from burstscope.collector.tracegen import (
    CHUNK_TICKS,
    FIXED_EPOCH_NS,
    sample_times,
    simulate_trace,
)

INTERVAL_NS = 1_000_000


def precompute(profile: str, seconds: float, seed: int) -> list[list[PortColumns]]:
    """Every chunk the simulation would append, fully built before any timing starts."""
    model = TrafficModel(profile, seed)
    ticks = round(seconds * 1e9) // INTERVAL_NS + 1
    chunks = []
    for first in range(0, ticks, CHUNK_TICKS):
        count = min(CHUNK_TICKS, ticks - first)
        times = sample_times(first // CHUNK_TICKS, count, INTERVAL_NS, len(model.ports), seed)
        xmit, rcv = model.counters_at(times.midpoint_ns)
        rebaseline = np.zeros(count, dtype=np.bool_)
        rebaseline[0] = first == 0
        chunks.append(
            [
                PortColumns(
                    port.device,
                    port.port,
                    port.line_rate_bytes_per_second,
                    times.midpoint_ns[i] + FIXED_EPOCH_NS,
                    (xmit[i] // DATA_COUNTER_OCTETS * DATA_COUNTER_OCTETS).astype(np.uint64),
                    (rcv[i] // DATA_COUNTER_OCTETS * DATA_COUNTER_OCTETS).astype(np.uint64),
                    times.read_ns[i],
                    rebaseline,
                )
                for i, port in enumerate(model.ports)
            ]
        )
        model.forget_before((first + count) * INTERVAL_NS)
    return chunks


def measure(profile: str, seconds: float, seed: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-simulate-") as scratch:
        chunks = precompute(profile, seconds, seed)
        reference_path = Path(scratch) / "reference"
        prepare_output(reference_path)
        began = time.perf_counter()
        writer = TraceWriter(reference_path)
        for chunk in chunks:
            writer.append(chunk)
        writer.close()
        reference_s = time.perf_counter() - began
        rows = writer.rows_written
        del chunks

        simulate_path = Path(scratch) / "simulate"
        prepare_output(simulate_path)
        began = time.perf_counter()
        simulated_rows = simulate_trace(
            TrafficModel(profile, seed), TraceWriter(simulate_path), round(seconds * 1e9)
        )
        simulate_s = time.perf_counter() - began
    assert simulated_rows == rows, (simulated_rows, rows)
    return {
        "benchmark": "simulate",
        "profile": profile,
        "ports": 9,
        "interval_ms": INTERVAL_NS / 1e6,
        "simulated_seconds": seconds,
        "rows": rows,
        "simulate_seconds": round(simulate_s, 3),
        "reference_write_seconds": round(reference_s, 3),
        "times_real_time": round(seconds / simulate_s, 1),
        "reference_times_real_time": round(seconds / reference_s, 1),
        "model_overhead_ratio": round(simulate_s / reference_s, 3),
        "cpus": os.cpu_count(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="moe")
    parser.add_argument("--seconds", type=float, default=600.0, help="simulated seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()
    result = measure(args.profile, args.seconds, args.seed)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['simulated_seconds']} s of {args.profile}, 9 ports at 1 ms: "
            f"{result['simulate_seconds']} s ({result['times_real_time']}x real time); "
            f"writing the same rows from precomputed arrays: "
            f"{result['reference_write_seconds']} s; model overhead "
            f"x{result['model_overhead_ratio']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
