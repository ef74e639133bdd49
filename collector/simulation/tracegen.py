"""Faster than real time: the samples a 1 ms sampler would have taken of the model, as a trace."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from collector.discovery import DATA_COUNTER_OCTETS
from collector.simulation.model import TrafficModel
from collector.simulation.workload import Int64Array
from collector.trace import PortColumns, TraceWriter

# 2024-01-01T00:00:00Z, a multiple of 15 s, so the 15-s windows of a simulated trace line
# up with the model's time and two runs of the same seed are byte-identical.
FIXED_EPOCH_NS = 1_704_067_200_000_000_000
# What a real sampler looks like: it wakes a few microseconds late (exponential, capped),
# each port's two preads take 1-3 us, and the loop spends a little between ports.
_LATE_MEAN_NS = 2_000
_LATE_MAX_NS = 30_000
_READ_NS = (1_000, 3_000)
_BETWEEN_PORTS_NS = 200
_TIMING_STREAM = 0x71A1
# Ticks generated and written at a time; timing noise is drawn per chunk from the seed.
CHUNK_TICKS = 5_000


@dataclass(frozen=True, slots=True)
class SampleTimes:
    """When each port of each tick was read: model-time midpoints and read durations."""

    midpoint_ns: Int64Array  # (ports, ticks)
    read_ns: Int64Array  # (ports, ticks)


def sample_times(chunk: int, ticks: int, interval_ns: int, ports: int, seed: int) -> SampleTimes:
    """Read times of the ``chunk``-th run of CHUNK_TICKS ticks (the last one may be shorter)."""
    rng = np.random.default_rng((seed, _TIMING_STREAM, chunk))
    index = np.arange(chunk * CHUNK_TICKS, chunk * CHUNK_TICKS + ticks, dtype=np.int64)
    late = np.minimum(rng.exponential(_LATE_MEAN_NS, ticks), _LATE_MAX_NS).astype(np.int64)
    read = rng.integers(*_READ_NS, size=(ports, ticks), dtype=np.int64)
    # Ports are read one after another: port p starts after the reads of ports 0..p-1.
    before = np.cumsum(read + _BETWEEN_PORTS_NS, axis=0) - read - _BETWEEN_PORTS_NS
    midpoint = index * interval_ns + late + before + read // 2
    return SampleTimes(midpoint, read)


def simulate_trace(
    model: TrafficModel,
    writer: TraceWriter,
    duration_ns: int,
    interval_ns: int = 1_000_000,
    start_wall_ns: int = FIXED_EPOCH_NS,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write ``duration_ns`` of samples (ticks at 0, interval, ... duration) and return the rows.

    Counters are what the port reports: 4-octet words times four, like ``record`` of an
    InfiniBand source. The model forgets each chunk once written, so memory stays bounded.
    """
    ticks_total = duration_ns // interval_ns + 1
    ports = model.ports
    rows = 0
    for first in range(0, ticks_total, CHUNK_TICKS):
        count = min(CHUNK_TICKS, ticks_total - first)
        chunk = first // CHUNK_TICKS
        times = sample_times(chunk, count, interval_ns, len(ports), model.seed)
        xmit, rcv = model.counters_at(times.midpoint_ns)
        xmit_words = (xmit // DATA_COUNTER_OCTETS * DATA_COUNTER_OCTETS).astype(np.uint64)
        rcv_words = (rcv // DATA_COUNTER_OCTETS * DATA_COUNTER_OCTETS).astype(np.uint64)
        wall = times.midpoint_ns + start_wall_ns
        rebaseline = np.zeros(count, dtype=np.bool_)
        if first == 0:
            rebaseline[0] = True  # the first reading of a counter has no delta into it
        writer.append(
            [
                PortColumns(
                    device=port.device,
                    port=port.port,
                    line_rate_bytes_per_second=port.line_rate_bytes_per_second,
                    timestamp_ns=wall[index],
                    xmit_bytes=xmit_words[index],
                    rcv_bytes=rcv_words[index],
                    read_ns=times.read_ns[index],
                    rebaseline=rebaseline,
                )
                for index, port in enumerate(ports)
            ]
        )
        rows += count * len(ports)
        model.forget_before((first + count) * interval_ns)
        if progress is not None:
            progress((first + count) * interval_ns)
    writer.close()
    return rows
