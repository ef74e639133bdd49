"""When each rank's part of a simulated collective happened on the node's clock, and where.

Lags are drawn per collective (job, communicator, collective, sequence), rank and channel
from the seed with a counter-based mix, so the same collective gets the same lags however
the model's time was walked, and two nodes of one job differ only by their clocks.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from burstscope.collector.simulation.collectives import CollectiveSchedule, NodePlace
from burstscope.detectors.arrays import I64

NCCL_CHANNELS = 2  # channels each collective's kernel runs on

# Lags, (low, high) in nanoseconds, each drawn per collective, rank (and channel).
KERNEL_LAUNCH_NS = (2_000, 6_000)
KERNEL_DRAIN_NS = (500, 2_000)
PROXY_POLL_NS = (1_000, 8_000)
CPU_AHEAD_NS = (5_000, 40_000)  # the launch on the CPU before the kernel starts
# What those make of a verbose span against the model's in-flight span, in microseconds:
# start - issue and end - in-flight end, over all of a node's ranks.
SPAN_START_LAG_US = (
    (KERNEL_LAUNCH_NS[0] + PROXY_POLL_NS[0]) // 1000 - 1,
    (KERNEL_LAUNCH_NS[1] + PROXY_POLL_NS[1]) // 1000,
)
SPAN_END_LAG_US = (
    (KERNEL_DRAIN_NS[0] + PROXY_POLL_NS[0]) // 1000 - 1,
    (KERNEL_DRAIN_NS[1] + PROXY_POLL_NS[1]) // 1000 + 1,
)

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def mixed(*keys: I64 | int) -> np.ndarray:
    """A well-mixed uint64 per row of the integer keys (splitmix64 of their combination)."""
    value = np.zeros(np.broadcast(*[np.asarray(k) for k in keys]).shape, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for key in keys:
            value = (value * np.uint64(0x100000001B3)) ^ np.asarray(key).astype(np.uint64)
            value = (value + np.uint64(0x9E3779B97F4A7C15)) & _MASK
            value = (value ^ (value >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            value = (value ^ (value >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            value = value ^ (value >> np.uint64(31))
    return value


def lag(bounds: tuple[int, int], *keys: I64 | int) -> I64:
    """A lag in [low, high] nanoseconds per row, from the keys."""
    low, high = bounds
    return (mixed(*keys) % np.uint64(high - low + 1)).astype(np.int64) + low


@dataclass(frozen=True, slots=True)
class RankTimes:
    """One local rank's part of each collective in a chunk, on the node's wall clock (ns)."""

    issue_ns: I64  # (n,)
    kernel_start_ns: I64  # (n,) GPU
    kernel_end_ns: I64  # (n,) GPU
    channel_start_us: I64  # (n, NCCL_CHANNELS) proxy-observed, floored
    channel_stop_us: I64  # (n, NCCL_CHANNELS)
    launch_ns: I64  # (n,) the CPU's launch (coll_start_ts)


def rank_times(
    schedule: CollectiveSchedule, rank: int, seed: int, wall_offset_ns: int
) -> RankTimes:
    keys = (seed, schedule.job, schedule.communicator, schedule.collective, schedule.sequence)
    issue = schedule.issue_ns + wall_offset_ns
    start = issue + lag(KERNEL_LAUNCH_NS, *keys, rank, 1)
    end = schedule.rank_end_ns[:, rank] + wall_offset_ns + lag(KERNEL_DRAIN_NS, *keys, rank, 2)
    channel = np.arange(NCCL_CHANNELS)[None, :]
    column = [k if isinstance(k, int) else k[:, None] for k in keys]
    poll_start = lag(PROXY_POLL_NS, *column, rank, channel, 3)
    poll_stop = lag(PROXY_POLL_NS, *column, rank, channel, 4)
    return RankTimes(
        issue_ns=issue,
        kernel_start_ns=start,
        kernel_end_ns=end,
        channel_start_us=(start[:, None] + poll_start) // 1000,
        channel_stop_us=(end[:, None] + poll_stop) // 1000,
        launch_ns=issue - lag(CPU_AHEAD_NS, *keys, rank, 5),
    )


class Place:
    """A NodePlace's answers, each worked out once (they are asked per record)."""

    def __init__(self, place: NodePlace) -> None:
        self.place = place
        self._ids: dict[tuple[int, int], str] = {}
        self._ranks: dict[tuple[int, int], int] = {}

    def communicator_id(self, group: int, rank: int) -> str:
        key = (group, rank)
        if key not in self._ids:
            self._ids[key] = self.place.communicator_id(group, rank)
        return self._ids[key]

    def rank_in(self, group: int, rank: int) -> int:
        key = (group, rank)
        if key not in self._ranks:
            self._ranks[key] = self.place.rank_in(group, rank)
        return self._ranks[key]


class Places:
    """The node's place in each job of the model (a new job makes new communicators)."""

    def __init__(self, host: str, seed: int) -> None:
        self.host = host
        self.seed = seed
        self._known: dict[tuple[int, int], Place] = {}

    def at(self, job: int, stage: int) -> Place:
        key = (job, stage)
        if key not in self._known:
            self._known = {key: Place(NodePlace.for_host(self.host, self.seed, job, stage))}
        return self._known[key]


def process_id(host: str, rank: int) -> int:
    """The training process of ``rank`` on ``host``: a plausible pid, the same every run."""
    return 1000 + zlib.crc32(f"{host}/{rank}".encode()) % 3_000_000
