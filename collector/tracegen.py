"""A simulated node as a trace, faster than real time: what recorder.py records, from the model.

With the collectives' logs (CollectiveLogs) it also writes the trace's job table
(``_jobs.jsonl``, collector.trace.jobs) as the agent's job watcher would have: the model's
jobs as a scheduler states them, each holding the node's eight rails for compute and its
storage NIC, from the job's first iteration to its last (SimulatedScheduler).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from burstscope.collector.discovery import DATA_COUNTER_OCTETS
from burstscope.collector.jobs.model import (
    COMPUTE,
    EMPTY_TABLE,
    RULE_WHOLE_NODE,
    SLURM,
    STORAGE,
    Holding,
    Job,
    JobTable,
)
from burstscope.collector.jobs.spans import JobLog
from burstscope.collector.simulation.collective_logs import CollectiveLogs
from burstscope.collector.simulation.congestion import (
    SATURATED,
    ThrottleEpisode,
    episode_counters,
)
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import PORTS, SECOND, STORAGE_PORT_INDEX
from burstscope.collector.sources.base import SlowReading
from burstscope.collector.sources.hw_counters import hw_counter_spec
from burstscope.collector.sources.port_counters import PORT_COUNTER_SPECS
from burstscope.collector.sources.sim import sim_slow_readings
from burstscope.collector.trace import PortColumns, SlowRow, TraceWriter
from burstscope.detectors.arrays import I64

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
# The simulated slow poll's midpoint, after the reads of the tick it follows.
_POLL_AFTER_NS = 50_000


@dataclass(frozen=True, slots=True)
class NodeTiming:
    """What sets one simulated node of a fleet apart when all of them run the same job."""

    timing_seed: int  # the node's own sampler wake-up and read-time noise
    skew_ns: int = 0  # the job's collectives reach this node this much later
    clock_offset_ns: int = 0  # its clock's error against the fleet's reference (PTP)

    @classmethod
    def for_host(cls, host: str, job_seed: int) -> NodeTiming:
        """A node named ``host`` in the job of ``job_seed``: its noise, a skew below 100 us
        and a clock offset within +-20 us (a PTP-disciplined clock), all from its name."""
        digest = zlib.crc32(host.encode())
        return cls(
            timing_seed=(job_seed << 32) ^ digest,
            skew_ns=digest % 100_000,
            clock_offset_ns=(digest >> 17) % 40_001 - 20_000,
        )


@dataclass(frozen=True, slots=True)
class SampleTimes:
    """When each port of each tick was read: model-time midpoints and read durations."""

    midpoint_ns: I64  # (ports, ticks)
    read_ns: I64  # (ports, ticks)


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


class _SlowPolls:
    """The slow counters a 1 Hz poller would have recorded beside the simulated samples.

    Saturated milliseconds are counted from the samples themselves (utilization between
    consecutive samples >= SATURATED) and turned into congestion counters by the same rule
    as the live simulated node (sources.sim.sim_slow_readings); a poll falls at the first
    tick of every second, just after that tick's reads.
    """

    def __init__(
        self,
        model: TrafficModel,
        interval_ns: int,
        start_wall_ns: int,
        throttle: tuple[ThrottleEpisode, ...] = (),
    ) -> None:
        self.ports = model.ports
        self.throttle = throttle
        self.interval_ns = interval_ns
        self.start_wall_ns = start_wall_ns
        self.rates = np.array([p.bytes_per_ns for p in self.ports], dtype=np.float64)[:, None]
        self.saturated_ms = np.zeros((2, len(self.ports)), dtype=np.float64)
        self.previous: tuple[I64, ...] | None = None  # last (time, xmit, rcv) column

    def rows(self, first: int, midpoint_ns: I64, counters: tuple[I64, I64]) -> list[SlowRow]:
        stamps = midpoint_ns
        # The chunk's first tick measures from the last tick of the one before; the very
        # first tick of the trace has no interval into it (zero duration: not saturated).
        before = self.previous or (stamps[:, :1], counters[0][:, :1], counters[1][:, :1])
        self.previous = (stamps[:, -1:], counters[0][:, -1:], counters[1][:, -1:])
        duration = np.diff(np.concatenate([before[0], stamps], axis=1), axis=1)
        cumulative = []
        for direction, values in enumerate(counters):
            sent = np.diff(np.concatenate([before[1 + direction], values], axis=1), axis=1)
            utilization = np.divide(
                sent, self.rates * duration, out=np.zeros(duration.shape), where=duration > 0
            )
            saturated = np.cumsum(utilization >= SATURATED, axis=1) * (self.interval_ns / 1e6)
            cumulative.append(self.saturated_ms[direction][:, None] + saturated)
            self.saturated_ms[direction] = cumulative[-1][:, -1]
        index = np.arange(first, first + stamps.shape[1], dtype=np.int64)
        second = index * self.interval_ns // SECOND
        previous_second = -1 if first == 0 else (first - 1) * self.interval_ns // SECOND
        found = []
        for tick in np.flatnonzero(np.diff(second, prepend=previous_second)).tolist():
            when = int(stamps[-1, tick]) + _POLL_AFTER_NS + self.start_wall_ns
            for number, port in enumerate(self.ports):
                readings = sim_slow_readings(
                    port, float(cumulative[0][number, tick]), float(cumulative[1][number, tick])
                )
                if self.throttle:
                    added = episode_counters(self.throttle, number, when - self.start_wall_ns)
                    readings = _with_episodes(readings, added)
                found += [r.as_trace_row(when, rebaseline=first + tick == 0) for r in readings]
        return found


def _with_episodes(readings: list[SlowReading], added: dict[str, int]) -> list[SlowReading]:
    """The background readings with the injected episodes' counts added, by counter name
    (the pause counters are the episodes' alone: 64-bit ethtool statistics)."""
    out = [
        dataclasses.replace(r, value=r.value + added.pop(r.name)) if r.name in added else r
        for r in readings
    ]
    device, port = readings[0].device, readings[0].port
    for name, value in added.items():
        spec = PORT_COUNTER_SPECS.get(name) or hw_counter_spec(name)
        out.append(SlowReading(device, port, name, value, spec))
    return out


# Who submits the simulated jobs: plausible cluster accounts, one per job from the seed.
_USERS = ("achen", "bkumar", "mlperf", "rossi", "svc-train", "ywang")


def simulated_job(seed: int, number: int, name: str, start_ns: int) -> Job:
    """The scheduler's record of job ``number`` of the job mix of ``seed``, started at
    ``start_ns`` (wall): a Slurm id and user derived from both, the same on every node."""
    digest = zlib.crc32(f"{seed}:{number}".encode())
    first = 100_000 + zlib.crc32(str(seed).encode()) % 900_000
    return Job(
        job_id=str(first + 211 * number),  # other users' jobs are submitted in between
        scheduler=SLURM,
        user=_USERS[digest % len(_USERS)],
        name=name or "training",
        start_time=start_ns / SECOND,
    )


class SimulatedScheduler:
    """The trace's job table for a simulated node, written through the agent's own JobLog.

    A job holds the whole node (all eight GPUs: RULE_WHOLE_NODE, as collector.jobs.topology
    decides for a job that names every GPU): the rails for compute, the storage NIC with
    role storage. A line is written where a job's first iteration begins and where the
    fabric goes idle after its last, at model time m + ``wall_offset_ns`` (the mapping of
    the samples and the collective logs).
    """

    def __init__(self, trace: Path, host: str, seed: int, wall_offset_ns: int) -> None:
        self.log = JobLog(trace)
        self.host = host
        self.seed = seed
        self.wall_offset_ns = wall_offset_ns
        self.jobs = 0  # jobs begun
        self._table = EMPTY_TABLE
        self._running = -1  # the model's number of the job in the table; -1 none
        self._next_block = 0  # the index of the first block not yet looked at

    def follow(self, model: TrafficModel, until_ns: int) -> None:
        """Write the changes of the blocks that begin before model time ``until_ns``."""
        model.extend_to(until_ns)
        for block in model.blocks():
            if block.index < self._next_block or block.start_ns >= until_ns:
                continue
            self._next_block = block.index + 1
            if block.job == self._running:
                continue
            when = block.start_ns + self.wall_offset_ns
            table = EMPTY_TABLE
            if block.job >= 0:
                name = block.shape.name if block.shape is not None else ""
                self.jobs += 1
                table = self._holding_node(simulated_job(self.seed, block.job, name, when))
            self.log.on_change(when, self._table, table)
            self._table, self._running = table, block.job

    def _holding_node(self, job: Job) -> JobTable:
        holdings = [
            Holding(
                job.job_id,
                port.device,
                port.port,
                STORAGE if index == STORAGE_PORT_INDEX else COMPUTE,
                RULE_WHOLE_NODE,
            )
            for index, port in enumerate(PORTS)
        ]
        return JobTable.build([job], holdings)


def simulate_trace(
    model: TrafficModel,
    writer: TraceWriter,
    duration_ns: int,
    interval_ns: int = 1_000_000,
    start_wall_ns: int = FIXED_EPOCH_NS,
    progress: Callable[[int], None] | None = None,
    node: NodeTiming | None = None,
    collective_logs: CollectiveLogs | None = None,
    scheduler: SimulatedScheduler | None = None,
    throttle: tuple[ThrottleEpisode, ...] = (),
) -> int:
    """Write ``duration_ns`` of samples (ticks at 0, interval, ... duration) and return the rows.

    Counters are what the port reports: 4-octet words times four, like ``record`` of an
    InfiniBand source. The model forgets each chunk once written, so memory stays bounded.
    ``node`` makes this one node of a fleet running the model's job: its own sampler
    timing, the job reaching it ``skew_ns`` late, its clock ``clock_offset_ns`` off.
    ``collective_logs`` gets the collectives issued in each chunk's model time and is closed
    at the end; it must map model time m to m + skew_ns + start_wall_ns + clock_offset_ns
    (wall_offset_ns), as the samples here do; ``scheduler``, with the same mapping, writes
    the job table as the model's jobs begin and end. ``throttle``: episodes whose counts
    the slow counters carry on top of the background (collector.simulation.congestion).
    """
    node = node or NodeTiming(model.seed)
    ticks_total = duration_ns // interval_ns + 1
    ports = model.ports
    slow = _SlowPolls(model, interval_ns, start_wall_ns, throttle)
    rows = 0
    for first in range(0, ticks_total, CHUNK_TICKS):
        count = min(CHUNK_TICKS, ticks_total - first)
        chunk = first // CHUNK_TICKS
        times = sample_times(chunk, count, interval_ns, len(ports), node.timing_seed)
        xmit, rcv = model.counters_at(np.maximum(times.midpoint_ns - node.skew_ns, 0))
        xmit_words = (xmit // DATA_COUNTER_OCTETS * DATA_COUNTER_OCTETS).astype(np.uint64)
        rcv_words = (rcv // DATA_COUNTER_OCTETS * DATA_COUNTER_OCTETS).astype(np.uint64)
        wall = times.midpoint_ns + (start_wall_ns + node.clock_offset_ns)
        writer.append_slow(slow.rows(first, times.midpoint_ns, (xmit, rcv)))
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
        if collective_logs is not None:
            until = (first + count) * interval_ns
            collective_logs.write(model.collectives(first * interval_ns, until), until)
        if scheduler is not None:
            scheduler.follow(model, (first + count) * interval_ns)
        model.forget_before((first + count) * interval_ns)
        if progress is not None:
            progress((first + count) * interval_ns)
    writer.close()
    if collective_logs is not None:
        collective_logs.close()
    return rows
