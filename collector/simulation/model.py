"""The traffic model: exact cumulative byte counters and the ground-truth burst schedule of a node.

Traffic on each channel (port and direction) is a sequence of piecewise-constant rate
segments. The cumulative counter at time t is ``base[i] + floor(rate[i] * (t - start[i]))``
for the segment i holding t, so any time grid is evaluated exactly with one searchsorted,
and a segment's bytes are the same integer whichever grid reads it. Time is generated in
blocks (one training iteration or one idle stretch), block k drawn from a generator seeded
with (seed, k), so the result is identical however the time range is walked; old blocks
can be forgotten to keep a months-long run bounded.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from burstscope.collector.simulation.collectives import (
    GPUS_PER_NODE,
    CollectiveSchedule,
    concat_schedules,
    empty_schedule,
    message_bytes,
    stage_for,
)
from burstscope.collector.simulation.profiles import (
    DEFAULT_PROFILE,
    PORTS,
    JobShape,
    Profile,
    RailFault,
    SimPort,
    profile_named,
)
from burstscope.collector.simulation.stragglers import JobGroup
from burstscope.collector.simulation.workload import (
    CHANNELS,
    IterationPlan,
    WireItems,
    empty_items,
    plan_iteration,
)
from burstscope.detectors.arrays import F64, I64

# A burst is a maximal run of on-wire time above this fraction of line rate (Zhang et al.,
# IMC 2017).
BURST_THRESHOLD = 0.5
# Counters of a port that has been up for a while: a random start below 2**44 bytes.
_INITIAL_BYTES = 1 << 44
_INITIAL_STREAM = 0x5EED
_SHORTEST_BURST_NS = 1_000_000


@dataclass(frozen=True, slots=True)
class Schedule:
    """Ground truth: the bursts the model put on the wire, one entry per burst, by start time."""

    port: I64  # index into TrafficModel.ports
    direction: I64  # 0 transmit, 1 receive
    start_ns: I64
    end_ns: I64
    bytes: I64

    def __len__(self) -> int:
        return len(self.start_ns)

    def select(self, port: int, direction: int) -> Schedule:
        keep = (self.port == port) & (self.direction == direction)
        return Schedule(
            self.port[keep],
            self.direction[keep],
            self.start_ns[keep],
            self.end_ns[keep],
            self.bytes[keep],
        )

    def rows(self) -> list[tuple[str, int, str, int, int, int]]:
        """(device, port, "xmit"|"rcv", start_ns, end_ns, bytes) per burst."""
        return [
            (PORTS[p].device, PORTS[p].port, "rcv" if d else "xmit", int(s), int(e), int(b))
            for p, d, s, e, b in zip(
                self.port, self.direction, self.start_ns, self.end_ns, self.bytes, strict=True
            )
        ]


@dataclass(slots=True)
class Block:
    """One iteration or idle stretch: every channel's segments over [start_ns, end_ns)."""

    index: int
    start_ns: int
    end_ns: int
    segment_start: list[I64]  # per channel
    segment_rate: list[F64]  # bytes per ns
    segment_base: list[I64]  # cumulative bytes at the segment's start
    bursts: Schedule
    collectives: CollectiveSchedule  # issued in this block, by issue time
    job: int = -1  # the number of the job whose iteration this is (0, 1, ...); -1 idle
    shape: JobShape | None = None  # that job's shape; None for an idle stretch
    _lists: dict[int, tuple[list[int], list[float], list[int]]] = field(default_factory=dict)

    def lists(self, channel: int) -> tuple[list[int], list[float], list[int]]:
        """The channel's segments as Python lists, for the per-sample scalar path."""
        found = self._lists.get(channel)
        if found is None:
            found = (
                self.segment_start[channel].tolist(),
                self.segment_rate[channel].tolist(),
                self.segment_base[channel].tolist(),
            )
            self._lists[channel] = found
        return found


def _interleave(a: npt.NDArray[np.generic], b: npt.NDArray[np.generic]) -> npt.NDArray[np.generic]:
    out = np.empty(2 * len(a), dtype=np.result_type(a, b))
    out[0::2] = a
    out[1::2] = b
    return out


class TrafficModel:
    """A deterministic simulated node: 8 training rails at 400 Gb/s and a 200 Gb/s storage port."""

    def __init__(
        self,
        profile: str = DEFAULT_PROFILE,
        seed: int = 0,
        rail_faults: tuple[RailFault, ...] = (),
        group: JobGroup | None = None,
        host: str | None = None,
    ) -> None:
        self.profile: Profile = profile_named(profile)
        self.seed = seed
        # Injected rail faults (profiles.RailFault): each iteration gets those in force at
        # its start; they draw no random numbers, so nothing else about the node changes.
        # A group's rail faults are on every node of it (a slow link paces its ring).
        self.rail_faults = rail_faults + (group.rail_faults if group is not None else ())
        # This node as ``host`` of the job ``group`` (simulation.stragglers): each step waits
        # for the group's last rank. Every node of the group must use the same seed.
        if (group is None) != (host is None):
            raise ValueError("give a job group and this node's host name together")
        if group is not None and host not in group.hosts:
            raise ValueError(f"host {host!r} is not one of the job group's hosts")
        self.group = group
        self.host = host
        self.ports: tuple[SimPort, ...] = PORTS
        self._line = np.array([p.bytes_per_ns for p in PORTS for _ in range(2)], dtype=np.float64)
        self._trickle = self._line * self.profile.trickle
        initial = np.random.default_rng((seed, _INITIAL_STREAM))
        self._total = initial.integers(0, _INITIAL_BYTES, size=CHANNELS, dtype=np.int64)
        self._blocks: deque[Block] = deque()
        self._next_index = 0
        self._next_start = 0
        self._job: JobShape | None = None
        self._job_end = 0
        self._next_checkpoint = 0
        self._job_number = -1  # jobs begun: communicators are made anew for each
        self._sequence: dict[tuple[int, int], int] = {}  # (communicator, collective) -> calls
        self._concatenated: tuple[list[I64], list[F64], list[I64]] | None = None

    # -- generation -----------------------------------------------------------------

    @property
    def earliest_ns(self) -> int:
        """Model time from which traffic is still held (earlier blocks were forgotten)."""
        return self._blocks[0].start_ns if self._blocks else self._next_start

    def extend_to(self, time_ns: int) -> None:
        """Generate blocks until ``time_ns`` is covered."""
        while self._next_start <= time_ns:
            self._append(self._generate())

    def forget_before(self, time_ns: int) -> None:
        """Drop blocks that end at or before ``time_ns``: their bytes stay in the counters."""
        while self._blocks and self._blocks[0].end_ns <= time_ns:
            self._blocks.popleft()
            self._concatenated = None

    def blocks(self) -> tuple[Block, ...]:
        return tuple(self._blocks)

    def block_after(self, block: Block) -> Block:
        """The block following ``block``, generating it if needed."""
        self.extend_to(block.end_ns)
        position = block.index - self._blocks[0].index + 1
        return self._blocks[position]

    def block_at(self, time_ns: int) -> Block:
        self.extend_to(time_ns)
        if time_ns < self.earliest_ns:
            raise ValueError(f"time {time_ns} ns was forgotten (held from {self.earliest_ns} ns)")
        for block in self._blocks:
            if time_ns < block.end_ns:
                return block
        raise AssertionError("extend_to covers time_ns")

    def _generate(self) -> tuple[int, IterationPlan | None]:
        """The next block's end, and its iteration (None for an idle stretch)."""
        rng = np.random.default_rng((self.seed, self._next_index))
        start = self._next_start
        profile = self.profile
        if self._job is None or (profile.job_ns is not None and start >= self._job_end):
            if self._job is not None:
                # The job ended: the fabric idles until the scheduler starts the next one.
                self._job = None
                return start + int(rng.integers(*profile.idle_ns)), None
            weights = np.array([w for w, _ in profile.jobs])
            choice = int(rng.choice(len(profile.jobs), p=weights / weights.sum()))
            self._job = profile.jobs[choice][1]
            self._job_number += 1
            self._sequence = {}
            if profile.job_ns is not None:
                self._job_end = start + int(rng.integers(*profile.job_ns))
            self._next_checkpoint = start + self._job.checkpoint_every_ns
        checkpoint = start >= self._next_checkpoint
        if checkpoint:
            self._next_checkpoint += self._job.checkpoint_every_ns
        faults = tuple(fault for fault in self.rail_faults if fault.active(start))
        arrival = None
        if self.group is not None and self.host is not None:
            arrival = self.group.arrival(self.host, self._next_index)
        plan = plan_iteration(self._job, rng, start, checkpoint, faults, arrival)
        return plan.end_ns, plan

    def _append(self, generated: tuple[int, IterationPlan | None]) -> None:
        end, plan = generated
        start = self._next_start
        starts: list[I64] = []
        rates: list[F64] = []
        bases: list[I64] = []
        burst_parts: list[tuple[int, I64, I64, I64]] = []
        for channel in range(CHANNELS):
            items = plan.channels[channel] if plan is not None else empty_items()
            trickle = self._trickle[channel]
            segment_start = np.concatenate(([start], _interleave(items.start_ns, items.end_ns)))
            segment_rate = np.concatenate(
                ([trickle], _interleave(items.bytes_per_ns, np.full(len(items.end_ns), trickle)))
            ).astype(np.float64)
            length = np.diff(np.append(segment_start, end))
            segment_bytes = np.floor(segment_rate * length).astype(np.int64)
            running = np.cumsum(segment_bytes)
            bases.append(self._total[channel] + running - segment_bytes)
            self._total[channel] += running[-1]
            starts.append(segment_start.astype(np.int64))
            rates.append(segment_rate)
            if len(items.start_ns):
                burst_parts.append((channel, *self._merge(items, segment_bytes[1::2], channel)))
        collectives = self._collectives(plan) if plan is not None else empty_schedule()
        self._blocks.append(
            Block(
                self._next_index,
                start,
                end,
                starts,
                rates,
                bases,
                _schedule(burst_parts),
                collectives,
                self._job_number if plan is not None else -1,
                self._job if plan is not None else None,
            )
        )
        self._next_index += 1
        self._next_start = end
        self._concatenated = None

    def _collectives(self, plan: IterationPlan) -> CollectiveSchedule:
        chain = plan.collectives
        assert self._job is not None
        sequence = []
        for identity in chain.identities:
            key = (identity.communicator, identity.collective)
            sequence.append(self._sequence.get(key, 0))
            self._sequence[key] = sequence[-1] + 1
        identities = chain.identities

        def column(values: list[int]) -> I64:
            return np.asarray(values, dtype=np.int64)

        count = len(identities)
        return CollectiveSchedule(
            issue_ns=chain.issue_ns,
            end_ns=chain.rank_end_ns.max(axis=1) if count else column([]),
            rank_start_ns=chain.rank_start_ns.reshape(count, GPUS_PER_NODE),
            rank_end_ns=chain.rank_end_ns.reshape(count, GPUS_PER_NODE),
            kind=column([i.kind for i in identities]),
            collective=column([i.collective for i in identities]),
            micro_batch=column([i.micro_batch for i in identities]),
            layer=column([i.layer for i in identities]),
            forward=column([int(i.forward) for i in identities]),
            communicator=column([i.communicator for i in identities]),
            sequence=column(sequence),
            message_bytes=column(
                [
                    message_bytes(i.collective, i.communicator, float(size))
                    for i, size in zip(identities, chain.size, strict=True)
                ]
            ),
            wire_bytes=np.round(chain.size).astype(np.int64),
            job=np.full(count, self._job_number, dtype=np.int64),
            stage=np.full(count, stage_for(self._job.warmup), dtype=np.int64),
        )

    def _merge(self, items: WireItems, item_bytes: I64, channel: int) -> tuple[I64, I64, I64]:
        # Messages queued back to back are one burst on the wire.
        first = np.concatenate(([True], items.start_ns[1:] != items.end_ns[:-1]))
        last = np.concatenate((first[1:], [True]))
        start = items.start_ns[first]
        end = items.end_ns[last]
        total = np.add.reduceat(item_bytes, np.nonzero(first)[0])
        keep = total >= BURST_THRESHOLD * self._line[channel] * (end - start)
        # A send shorter than a millisecond (a job's eager send, simulation.stragglers) is
        # no burst a 1 ms sampler can resolve: the other items last MIN_BURST_NS or 2 ms.
        keep &= end - start >= _SHORTEST_BURST_NS
        return start[keep], end[keep], total[keep]

    # -- evaluation -----------------------------------------------------------------

    def _segments(self) -> tuple[list[I64], list[F64], list[I64]]:
        if self._concatenated is None:
            blocks = self._blocks
            self._concatenated = (
                [np.concatenate([b.segment_start[c] for b in blocks]) for c in range(CHANNELS)],
                [np.concatenate([b.segment_rate[c] for b in blocks]) for c in range(CHANNELS)],
                [np.concatenate([b.segment_base[c] for b in blocks]) for c in range(CHANNELS)],
            )
        return self._concatenated

    def counters_at(self, times_ns: npt.ArrayLike) -> tuple[I64, I64]:
        """Cumulative (transmit, receive) bytes of every port at model times ``times_ns``.

        ``times_ns`` is one grid for all ports, shape (n,), or one per port, shape
        (ports, n). Both results have shape (ports, n).
        """
        times = np.asarray(times_ns, dtype=np.int64)
        grid = np.broadcast_to(times, (len(PORTS), times.shape[-1]))
        if grid.size == 0:
            empty = np.zeros(grid.shape, dtype=np.int64)
            return empty, empty.copy()
        self.extend_to(int(grid.max()))
        if int(grid.min()) < self.earliest_ns:
            raise ValueError(f"time {int(grid.min())} ns was forgotten or is negative")
        starts, rates, bases = self._segments()
        out = np.empty((2, len(PORTS), grid.shape[1]), dtype=np.int64)
        for channel in range(CHANNELS):
            port, direction = divmod(channel, 2)
            t = grid[port]
            index = np.searchsorted(starts[channel], t, side="right") - 1
            elapsed = t - starts[channel][index]
            out[direction, port] = bases[channel][index] + np.floor(
                rates[channel][index] * elapsed
            ).astype(np.int64)
        return out[0], out[1]

    def schedule(self, start_ns: int, end_ns: int) -> Schedule:
        """The bursts that start in [start_ns, end_ns), sorted by start time."""
        self.extend_to(end_ns)
        if start_ns < self.earliest_ns:
            raise ValueError(f"time {start_ns} ns was forgotten (use a fresh model)")
        parts = [b.bursts for b in self._blocks if b.end_ns > start_ns and b.start_ns < end_ns]
        merged = _concat_schedules(parts)
        keep = (merged.start_ns >= start_ns) & (merged.start_ns < end_ns)
        order = np.argsort(merged.start_ns[keep], kind="stable")
        return Schedule(
            merged.port[keep][order],
            merged.direction[keep][order],
            merged.start_ns[keep][order],
            merged.end_ns[keep][order],
            merged.bytes[keep][order],
        )

    def collectives(self, start_ns: int, end_ns: int) -> CollectiveSchedule:
        """The collectives issued in [start_ns, end_ns) of model time, by issue time.

        Each is whole (its end may lie past ``end_ns``); walking time in any steps gives
        each collective once and the same rows. See CollectiveSchedule for "in flight".
        """
        self.extend_to(end_ns)
        if start_ns < self.earliest_ns:
            raise ValueError(f"time {start_ns} ns was forgotten (use a fresh model)")
        parts = [b.collectives for b in self._blocks if b.end_ns > start_ns and b.start_ns < end_ns]
        merged = concat_schedules(parts)
        return merged.take((merged.issue_ns >= start_ns) & (merged.issue_ns < end_ns))


def _schedule(parts: list[tuple[int, I64, I64, I64]]) -> Schedule:
    if not parts:
        return _concat_schedules([])
    channel = np.concatenate([np.full(len(s), c, dtype=np.int64) for c, s, _, _ in parts])
    return Schedule(
        channel // 2,
        channel % 2,
        np.concatenate([s for _, s, _, _ in parts]),
        np.concatenate([e for _, _, e, _ in parts]),
        np.concatenate([b for _, _, _, b in parts]),
    )


def _concat_schedules(parts: list[Schedule]) -> Schedule:
    def join(arrays: list[I64]) -> I64:
        return np.concatenate(arrays) if arrays else np.empty(0, dtype=np.int64)

    return Schedule(
        join([p.port for p in parts]),
        join([p.direction for p in parts]),
        join([p.start_ns for p in parts]),
        join([p.end_ns for p in parts]),
        join([p.bytes for p in parts]),
    )
