"""The simulated node's ports and the training profiles that drive them, as plain parameters."""

from __future__ import annotations

from dataclasses import dataclass, replace

# 400 Gb/s NDR rails and a 200 Gb/s HDR storage port. Integer bytes per nanosecond, so
# line rate x any integer interval is an exact integer and the cap can be tested exactly.
TRAINING_BYTES_PER_NS = 50
STORAGE_BYTES_PER_NS = 25
TRAINING_PORTS = 8
STORAGE_PORT_INDEX = TRAINING_PORTS

# Every burst lasts at least this long and every gap between bursts on one channel at
# least MIN_GAP_NS: a 1 ms sampler then sees each burst in at least one whole sample and
# each gap in at least two, so the schedule is resolvable ground truth at 1 ms.
MIN_BURST_NS = 3_000_000
MIN_GAP_NS = 3_000_000
MS = 1_000_000
SECOND = 1_000_000_000


@dataclass(frozen=True, slots=True)
class SimPort:
    """One simulated port: an mlx5 RoCE function with one port."""

    device: str
    port: int
    bytes_per_ns: int
    rate_text: str  # the kernel's ``rate`` file

    @property
    def line_rate_bytes_per_second(self) -> int:
        return self.bytes_per_ns * SECOND


PORTS: tuple[SimPort, ...] = (
    *(
        SimPort(f"mlx5_{i}", 1, TRAINING_BYTES_PER_NS, "400 Gb/sec (4X NDR)")
        for i in range(TRAINING_PORTS)
    ),
    SimPort(f"mlx5_{STORAGE_PORT_INDEX}", 1, STORAGE_BYTES_PER_NS, "200 Gb/sec (4X HDR)"),
)


# Kinds of rail fault the simulated node can carry (RailFault).
SLOW_RAIL = "slow"
LIGHT_RAIL = "light"


@dataclass(frozen=True, slots=True)
class RailFault:
    """A training rail that misbehaves from the first iteration starting at or after
    ``start_ns`` (model time) until the first starting at or after ``end_ns`` (None: on).

    ``slow``: the rail sends at ``fraction`` of the rate it would have (a degraded lane,
    a link trained at a lower width): the same bytes at a lower peak, for longer.
    ``light``: the rail carries ``fraction`` of its share of every message and its peers
    carry the rest evenly (hash polarisation, NCCL using fewer rails), at the usual rates.
    """

    port: int  # index of a training rail, 0 .. TRAINING_PORTS - 1
    kind: str  # SLOW_RAIL or LIGHT_RAIL
    fraction: float  # in (0, 1]
    start_ns: int = 0
    end_ns: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port < TRAINING_PORTS:
            raise ValueError(f"rail fault port must be a training rail, got {self.port}")
        if self.kind not in (SLOW_RAIL, LIGHT_RAIL):
            raise ValueError(f"rail fault kind must be {SLOW_RAIL!r} or {LIGHT_RAIL!r}")
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"rail fault fraction must be in (0, 1], got {self.fraction}")

    def active(self, iteration_start_ns: int) -> bool:
        return self.start_ns <= iteration_start_ns and (
            self.end_ns is None or iteration_start_ns < self.end_ns
        )


@dataclass(frozen=True, slots=True)
class JobShape:
    """One training job's iteration, as seen from one pipeline stage of one node.

    Sizes are bytes per rail; rates are fractions of line rate the software asks for
    (above 1.0 the NIC is the bottleneck and the message queues); times are nanoseconds.
    """

    micro_batches: int  # 1F1B: this many forwards and backwards per iteration
    warmup: int  # forwards before the first backward (stages downstream of this one)
    layers: int  # transformer layers on this stage
    moe: bool  # expert-parallel all-to-all (dispatch and combine) per layer
    attention_ns: int  # forward attention + dense compute per layer; backward is 2x
    expert_ns: int  # forward expert compute per layer (MoE only)
    all_to_all_bytes: float
    all_to_all_rate: tuple[float, float]
    imbalance: float  # lognormal sigma of per-rail all-to-all bytes (expert routing skew)
    pipeline_bytes: float  # activations (forward) or their gradients (backward) per micro-batch
    pipeline_rate: tuple[float, float]
    gradient_bytes: float  # ZeRO-2 reduce-scatter, and the all-gather of the updated shard
    gradient_buckets: int  # reduce-scatter buckets, issued faster than the wire drains them
    bucket_spacing_ns: int  # between buckets after the backward (unused with overlap)
    collective_rate: tuple[float, float]
    optimizer_ns: int
    bubble_ns: int  # pipeline fill and drain on this stage
    load_bytes: float  # data loader read on the storage port per iteration
    checkpoint_bytes: float  # synchronous checkpoint write on the storage port
    checkpoint_every_ns: int
    # Reduce-scatter the gradients during the last micro-batch's backward pass, each bucket
    # as its layer's gradients are complete, instead of after it (workload.py says how).
    overlap_grad_reduce: bool = False
    name: str = ""  # what the job's owner called it (the simulated scheduler's job name)


@dataclass(frozen=True, slots=True)
class Profile:
    """A named workload: one job shape forever, or a mix of jobs with idle stretches."""

    name: str
    jobs: tuple[tuple[float, JobShape], ...]  # (weight, shape)
    job_ns: tuple[int, int] | None = None  # None: one job that never ends
    idle_ns: tuple[int, int] = (0, 0)
    trickle: float = 2e-4  # background traffic between bursts, fraction of line rate


MOE = JobShape(
    micro_batches=8,
    warmup=3,
    layers=4,
    moe=True,
    # Long enough that the 15 s average lands under 25% while every collective still
    # runs at line rate: the picture Acme (NSDI 2024) saw from 15 s samples.
    attention_ns=14 * MS,
    expert_ns=12 * MS,
    all_to_all_bytes=180e6,
    all_to_all_rate=(0.82, 1.08),
    imbalance=0.12,
    pipeline_bytes=150e6,
    pipeline_rate=(0.7, 1.0),
    gradient_bytes=2.0e9,
    gradient_buckets=4,
    bucket_spacing_ns=8 * MS,
    collective_rate=(0.93, 1.1),
    optimizer_ns=30 * MS,
    bubble_ns=60 * MS,
    load_bytes=200e6,
    checkpoint_bytes=40e9,
    checkpoint_every_ns=90 * SECOND,
    name="moe-pretrain",
)

# The MoE job as Megatron-LM runs it with its distributed optimizer and
# DistributedDataParallelConfig(overlap_grad_reduce=True) ("overlap grad all-reduce /
# reduce-scatter with backward compute", megatron/core/distributed/
# distributed_data_parallel_config.py): a bucket is reduce-scattered as soon as the backward
# pass has produced all of its gradients (param_and_grad_buffer.py, register_grad_ready ->
# start_grad_sync), in the last micro-batch's backward only (pipeline_parallel/schedules.py
# enables grad sync for the last micro-batch; the others accumulate under no_sync), and the
# optimizer waits for all (finish_grad_sync). PyTorch DDP does the same with its buckets:
# "When gradients in one bucket are all ready, the Reducer kicks off an asynchronous
# allreduce on that bucket" (pytorch docs/source/notes/ddp.rst, Internal Design). The buckets
# share the rails with that backward pass's all-to-alls and its send to the previous stage:
# EP, PP and DP collide. Two buckets per layer (its experts' gradients, then the rest), as
# NeMo chunks DP traffic by transformer layer (docs/source/features/optimizations/
# communication_overlap.rst); MoE expert gradients are large: 750 MB per rail and bucket.
MOE_OVERLAP = replace(
    MOE,
    gradient_bytes=6.0e9,
    gradient_buckets=2 * MOE.layers,
    bucket_spacing_ns=0,
    overlap_grad_reduce=True,
    name="moe-pretrain-overlap",
)

DENSE = JobShape(
    micro_batches=8,
    warmup=3,
    layers=6,
    moe=False,
    attention_ns=9 * MS,
    expert_ns=0,
    all_to_all_bytes=0.0,
    all_to_all_rate=(1.0, 1.0),
    imbalance=0.0,
    pipeline_bytes=200e6,
    pipeline_rate=(0.7, 1.0),
    gradient_bytes=4.0e9,
    gradient_buckets=6,
    bucket_spacing_ns=10 * MS,
    collective_rate=(0.93, 1.1),
    optimizer_ns=40 * MS,
    bubble_ns=80 * MS,
    load_bytes=150e6,
    checkpoint_bytes=60e9,
    checkpoint_every_ns=120 * SECOND,
    name="dense-pretrain",
)

# The jobs of a shared cluster that leave the fabric idle most of the time: small
# data-parallel jobs with long compute, so even while they run the 15 s average stays low.
LIGHT = JobShape(
    micro_batches=4,
    warmup=1,
    layers=8,
    moe=False,
    attention_ns=40 * MS,
    expert_ns=0,
    all_to_all_bytes=0.0,
    all_to_all_rate=(1.0, 1.0),
    imbalance=0.0,
    pipeline_bytes=150e6,
    pipeline_rate=(0.7, 1.0),
    gradient_bytes=1.5e9,
    gradient_buckets=3,
    bucket_spacing_ns=10 * MS,
    collective_rate=(0.93, 1.1),
    optimizer_ns=60 * MS,
    bubble_ns=200 * MS,
    load_bytes=100e6,
    checkpoint_bytes=20e9,
    checkpoint_every_ns=300 * SECOND,
    name="finetune",
)

PROFILES: dict[str, Profile] = {
    "moe": Profile("moe", ((1.0, MOE),)),
    "moe-overlap": Profile("moe-overlap", ((1.0, MOE_OVERLAP),)),
    "dense": Profile("dense", ((1.0, DENSE),)),
    "idle-heavy": Profile(
        "idle-heavy",
        ((0.85, LIGHT), (0.15, MOE)),
        job_ns=(60 * SECOND, 180 * SECOND),
        idle_ns=(150 * SECOND, 600 * SECOND),
    ),
}
DEFAULT_PROFILE = "moe"


def profile_named(name: str) -> Profile:
    """The profile called ``name``; ValueError listing the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(PROFILES)
        raise ValueError(f"unknown profile {name!r} (known: {known})") from None
