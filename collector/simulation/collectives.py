"""The simulated job's collectives: who each chain event is, its groups, and the ground truth.

Every event of an iteration's chain (workload.py) is one collective call of the node's eight
ranks (one per GPU; GPU i drives rail i): its parallelism class, NCCL's name for it, the
micro-batch and layer it serves and the communicator it runs on. ``CollectiveSchedule`` holds
them with their times, as TrafficModel.collectives returns them.

The job's layout (Megatron-style MoE, one node of it simulated):

- 8 GPUs per node, tensor parallel 8 inside the node (NVLink: no rail traffic, not modelled);
- pipeline parallel 8 (this node is stage ``PIPELINE_STAGES - 1 - warmup``: 4 for the moe and
  dense jobs, whose 1F1B warm-up is 3 forwards);
- data parallel 16, with expert parallel 8 inside it (MoE jobs);
- so 1024 ranks on 128 nodes. Per local rank: the EP group has 8 ranks on 8 nodes, the
  pipeline group 8 ranks on 8 nodes, whose Send and Recv run on two-rank communicators (one
  per neighbour: PyTorch's ProcessGroupNCCL makes a communicator per peer pair for P2P), and
  the DP group 16 ranks on 16 nodes: the largest group, so inference by the largest group
  (detectors/collective_classes.py) finds DP.

A node's place in its data-parallel group comes from its host name; its stage from the job.
Communicator ids are NCCL-style hashes ("0x" and 16 hex digits) of the seed, the job's
number and the group's members, so two nodes of one job in the same group share one id.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

import numpy as np

from burstscope.detectors.arrays import I64

# Classes, as bits (the join's class masks use the same values: EP 1, PP 2, DP 4).
EP, PP, DP = 1, 2, 4
CLASS_NAMES: dict[int, str] = {EP: "EP", PP: "PP", DP: "DP"}

# Collectives: codes into COLLECTIVE_NAMES, NCCL's spelling.
ALL_TO_ALL, RECV, SEND, REDUCE_SCATTER, ALL_GATHER = range(5)
COLLECTIVE_NAMES = ("AllToAll", "Recv", "Send", "ReduceScatter", "AllGather")

# Communicators of one local rank: codes into GROUPS.
EP_GROUP, PP_PREVIOUS, PP_NEXT, DP_GROUP = range(4)

GPUS_PER_NODE = 8
PIPELINE_STAGES = 8
DATA_PARALLEL = 16
EXPERT_PARALLEL = 8
WORLD_RANKS = GPUS_PER_NODE * PIPELINE_STAGES * DATA_PARALLEL
NO_INDEX = -1  # micro_batch or layer of a collective that serves none


@dataclass(frozen=True, slots=True)
class Group:
    """One of a rank's communicators, and the PyTorch process group it belongs to."""

    name: str  # our short name: EP, PP-previous, PP-next, DP
    kind: int  # EP, PP or DP
    n_ranks: int  # NCCL communicator size (Inspector header.n_ranks)
    nnodes: int  # nodes it spans (header.nnodes): every member on its own node
    description: str  # Megatron's name for the process group (PyTorch "Process Group
    #                   Description")
    process_group_size: int  # the process group's size ("Group size")


GROUPS: tuple[Group, ...] = (
    Group("EP", EP, EXPERT_PARALLEL, EXPERT_PARALLEL, "EXPERT_MODEL_PARALLEL_GROUP", 8),
    Group("PP-previous", PP, 2, 2, "PIPELINE_MODEL_PARALLEL_GROUP", PIPELINE_STAGES),
    Group("PP-next", PP, 2, 2, "PIPELINE_MODEL_PARALLEL_GROUP", PIPELINE_STAGES),
    Group("DP", DP, DATA_PARALLEL, DATA_PARALLEL, "DATA_PARALLEL_GROUP", DATA_PARALLEL),
)


@dataclass(frozen=True, slots=True)
class CollectiveSchedule:
    """Ground truth: the collectives the node's ranks ran, one row per call, by issue time.

    Times are model nanoseconds (the model's own clock, before a node's skew and clock
    offset: tracegen.simulate_trace sees model time m at node wall time m + skew_ns +
    start_wall_ns + clock_offset_ns, and the collective logs use the same mapping).

    In flight: a collective is in flight on the host over [issue_ns, end_ns): from when the
    node's program issued it (all eight ranks at once: the chain is the node's program
    order) until the last byte of it left or reached any rail of the node, either
    direction (end exclusive, the nanosecond after the last byte). Its bytes lie inside that
    span on every rail; they start after issue_ns by the rail's skew, jitter and queueing. A
    millisecond's true class set is the set of ``kind`` of the collectives in flight during
    any part of it. Storage traffic (data loading, checkpoints) belongs to no collective.
    """

    issue_ns: I64  # when the chain issued it
    end_ns: I64  # the last byte of it on any training rail, exclusive
    rank_start_ns: I64  # (n, 8): its first byte on rail i (GPU i), either direction
    rank_end_ns: I64  # (n, 8): its last byte on rail i, exclusive
    kind: I64  # EP, PP or DP (class bits)
    collective: I64  # code into COLLECTIVE_NAMES
    micro_batch: I64  # 0-based, in 1F1B order of this stage; NO_INDEX for DP
    layer: I64  # 0-based layer of this stage for EP; NO_INDEX for PP and DP
    forward: I64  # 1 forward pass, 0 backward pass (and DP after it)
    communicator: I64  # code into GROUPS (each local rank has its own communicator of it)
    sequence: I64  # NCCL's seqNumber[func] of the communicator at this call (coll_sn)
    message_bytes: I64  # per rank, as NCCL counts it (coll_msg_size_bytes)
    wire_bytes: I64  # expected bytes per rail and direction (before per-rail spread)
    job: I64  # the job's number in the model (0, 1, ...): communicators are per job
    stage: I64  # this node's pipeline stage in that job

    def __len__(self) -> int:
        return len(self.issue_ns)

    def take(self, keep: np.ndarray) -> CollectiveSchedule:
        """The rows selected by a boolean mask or index array."""
        return CollectiveSchedule(*(getattr(self, name)[keep] for name in _FIELDS))

    def class_names(self) -> list[str]:
        return [CLASS_NAMES[int(k)] for k in self.kind]

    def collective_names(self) -> list[str]:
        return [COLLECTIVE_NAMES[int(c)] for c in self.collective]


_FIELDS = CollectiveSchedule.__slots__


def empty_schedule() -> CollectiveSchedule:
    one = np.empty(0, dtype=np.int64)
    two = np.empty((0, GPUS_PER_NODE), dtype=np.int64)
    return CollectiveSchedule(one, one, two, two, *([one] * 11))


def concat_schedules(parts: list[CollectiveSchedule]) -> CollectiveSchedule:
    if not parts:
        return empty_schedule()
    return CollectiveSchedule(
        *(np.concatenate([getattr(p, name) for p in parts]) for name in _FIELDS)
    )


def in_flight(schedule: CollectiveSchedule, kind: int) -> tuple[I64, I64]:
    """When collectives of class ``kind`` were in flight on the host: the union of their
    [issue_ns, end_ns) spans as disjoint, sorted [start, end) intervals."""
    chosen = schedule.kind == kind
    order = np.argsort(schedule.issue_ns[chosen], kind="stable")
    starts, ends = schedule.issue_ns[chosen][order], schedule.end_ns[chosen][order]
    if not len(starts):
        return starts, ends
    reach = np.maximum.accumulate(ends)
    # A span begins a new interval when it starts after every earlier one has ended.
    first = np.concatenate(([True], starts[1:] > reach[:-1]))
    last = np.concatenate((first[1:], [True]))
    return starts[first], reach[last]


def collision_ns(
    schedule: CollectiveSchedule, first: int, second: int, start_ns: int, end_ns: int
) -> int:
    """How long collectives of both classes were in flight at once within [start_ns,
    end_ns) of model time: the host's collision time of the pair, the truth a report's
    collision table measures in samples."""
    a_start, a_end = (np.clip(x, start_ns, end_ns) for x in in_flight(schedule, first))
    b_start, b_end = (np.clip(x, start_ns, end_ns) for x in in_flight(schedule, second))
    total, i, j = 0, 0, 0
    while i < len(a_start) and j < len(b_start):
        total += max(0, int(min(a_end[i], b_end[j])) - int(max(a_start[i], b_start[j])))
        if a_end[i] < b_end[j]:
            i += 1
        else:
            j += 1
    return total


def stage_for(warmup: int) -> int:
    """The pipeline stage whose 1F1B warm-up is ``warmup`` forwards."""
    return PIPELINE_STAGES - 1 - warmup


@dataclass(frozen=True, slots=True)
class NodePlace:
    """Where one simulated node sits in the job: its pipeline stage and data-parallel index."""

    seed: int
    job: int
    stage: int
    data_parallel_index: int

    @classmethod
    def for_host(cls, host: str, seed: int, job: int, stage: int) -> NodePlace:
        return cls(seed, job, stage, zlib.crc32(host.encode()) % DATA_PARALLEL)

    def global_rank(
        self, local_rank: int, stage: int | None = None, index: int | None = None
    ) -> int:
        stage = self.stage if stage is None else stage
        index = self.data_parallel_index if index is None else index
        return (stage * DATA_PARALLEL + index) * GPUS_PER_NODE + local_rank

    def members(self, group: int, local_rank: int) -> tuple[int, ...]:
        """Global ranks of the communicator ``group`` of ``local_rank``, in rank order."""
        index = self.data_parallel_index
        if group == EP_GROUP:
            first = index - index % EXPERT_PARALLEL
            return tuple(
                self.global_rank(local_rank, index=i) for i in range(first, first + EXPERT_PARALLEL)
            )
        if group == PP_PREVIOUS:
            return (self.global_rank(local_rank, self.stage - 1), self.global_rank(local_rank))
        if group == PP_NEXT:
            return (self.global_rank(local_rank), self.global_rank(local_rank, self.stage + 1))
        return tuple(self.global_rank(local_rank, index=i) for i in range(DATA_PARALLEL))

    def process_group_ranks(self, group: int, local_rank: int) -> tuple[int, ...]:
        """Global ranks of the PyTorch process group (the whole pipeline for Send/Recv)."""
        if group in (PP_PREVIOUS, PP_NEXT):
            return tuple(self.global_rank(local_rank, s) for s in range(PIPELINE_STAGES))
        return self.members(group, local_rank)

    def rank_in(self, group: int, local_rank: int) -> int:
        """This rank's rank in the communicator (Inspector header.rank)."""
        return self.members(group, local_rank).index(self.global_rank(local_rank))

    def communicator_id(self, group: int, local_rank: int) -> str:
        """NCCL-style communicator hash, the same on every member of the group."""
        text = f"{self.seed}:{self.job}:{GROUPS[group].name}:{self.members(group, local_rank)}"
        if group in (PP_PREVIOUS, PP_NEXT):  # one pair, whichever side names it
            text = f"{self.seed}:{self.job}:PP:{self.members(group, local_rank)}"
        digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        return f"0x{digest}"

    def process_group_name(self, group: int, local_rank: int) -> str:
        """PyTorch's group uid: new_group's running count, made in Megatron's order."""
        kind = GROUPS[group]
        if kind.kind == DP:
            return str(1 + self.stage * GPUS_PER_NODE + local_rank)
        if kind.kind == PP:
            return str(
                1 + PIPELINE_STAGES * GPUS_PER_NODE + self.data_parallel_index * 8 + local_rank
            )
        base = 1 + PIPELINE_STAGES * GPUS_PER_NODE + DATA_PARALLEL * GPUS_PER_NODE
        ep_index = self.data_parallel_index // EXPERT_PARALLEL
        return str(base + (self.stage * 2 + ep_index) * GPUS_PER_NODE + local_rank)


def message_bytes(collective: int, group: int, wire_bytes: float) -> int:
    """Bytes per rank as NCCL counts the call (count x type size, bf16), from the bytes
    each rail carries per direction: a ring ReduceScatter or AllGather of n ranks moves
    (n - 1) x its count per rank, an AllToAll (n - 1) / n of its send buffer."""
    n = GROUPS[group].n_ranks
    if collective in (REDUCE_SCATTER, ALL_GATHER):
        size = wire_bytes / (n - 1)
    elif collective == ALL_TO_ALL:
        size = wire_bytes * n / (n - 1)
    else:
        size = wire_bytes
    return 2 * max(round(size / 2), 1)
