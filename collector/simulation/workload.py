"""One training iteration as on-wire items per channel: the 1F1B chain, then the NIC queue."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from burstscope.collector.simulation.collectives import (
    ALL_GATHER,
    ALL_TO_ALL,
    DP,
    DP_GROUP,
    EP,
    EP_GROUP,
    GPUS_PER_NODE,
    NO_INDEX,
    PP,
    PP_NEXT,
    PP_PREVIOUS,
    RECV,
    REDUCE_SCATTER,
    SEND,
)
from burstscope.collector.simulation.profiles import (
    LIGHT_RAIL,
    MIN_BURST_NS,
    MIN_GAP_NS,
    PORTS,
    STORAGE_PORT_INDEX,
    TRAINING_PORTS,
    JobShape,
    RailFault,
)
from burstscope.collector.simulation.stragglers import EAGER_BYTES, EAGER_RATE, Arrival
from burstscope.detectors.arrays import F64, I64

XMIT = 0
RCV = 1
CHANNELS = 2 * len(PORTS)  # channel = 2 * port index + direction

# Which directions an event loads on the training rails.
_SEND, _RECEIVE, _BOTH = 1, 2, 3
# Rails are not perfectly in step: a per-iteration offset per rail and a per-message jitter.
_RAIL_SKEW_NS = 150_000
_MESSAGE_JITTER_NS = 30_000
# The receive side of a symmetric collective starts a little after the send side.
_RECEIVE_LAG_NS = (2_000, 20_000)
# A light rail's shortened messages may last down to this (two 1 ms samples, so one of them
# lies wholly inside): below MIN_BURST_NS, but the peers' schedule stays resolvable.
_LIGHT_MIN_NS = 2_000_000


@dataclass(frozen=True, slots=True)
class WireItems:
    """What one channel put on the wire: [start, end) at a constant rate in bytes/ns."""

    start_ns: I64
    end_ns: I64
    bytes_per_ns: F64
    event: I64  # the chain event (collective) each item belongs to; -1 for storage


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a chain event is (collectives.py's codes)."""

    kind: int  # EP, PP or DP
    collective: int  # ALL_TO_ALL ... ALL_GATHER
    communicator: int  # EP_GROUP ... DP_GROUP
    micro_batch: int = NO_INDEX
    layer: int = NO_INDEX
    forward: bool = False


@dataclass(frozen=True, slots=True)
class ChainCollectives:
    """The chain's events of one iteration: identity, issue time and on-wire extent."""

    identities: tuple[Identity, ...]
    issue_ns: I64
    size: F64  # expected bytes per rail and direction
    rank_start_ns: I64  # (events, training ports): first byte on the rail, either direction
    rank_end_ns: I64  # (events, training ports): last byte on the rail, exclusive


@dataclass(frozen=True, slots=True)
class IterationPlan:
    end_ns: int
    channels: tuple[WireItems, ...]  # CHANNELS entries
    collectives: ChainCollectives


def empty_items() -> WireItems:
    return WireItems(
        np.empty(0, dtype=np.int64),
        np.empty(0, dtype=np.int64),
        np.empty(0, dtype=np.float64),
        np.empty(0, dtype=np.int64),
    )


class _Chain:
    """The node's program order: each event is issued a compute gap after the chain may go on.

    It also keeps a nominal clock of its own: when the chain may go on (``ready``) and when
    each direction's wire would drain (``free``) if every message took its expected time.
    Only the overlapped backward pass reads it, to wait for an all-to-all that queued behind
    a gradient bucket, and the optimizer for the last bucket.
    """

    def __init__(self) -> None:
        self.gap: list[int] = []
        self.wait: list[int] = []  # how long the chain waits after issuing (0: asynchronous)
        self.directions: list[int] = []
        self.size: list[float] = []
        self.rate_low: list[float] = []
        self.rate_high: list[float] = []
        self.spread: list[float] = []  # lognormal sigma of per-rail bytes
        self.identity: list[Identity] = []
        self.ready = 0  # nominal: when the chain may issue its next event
        self.free = {_SEND: 0, _RECEIVE: 0}  # nominal: when each direction's queue drains

    def add(
        self,
        identity: Identity,
        gap: int,
        directions: int,
        size: float,
        rate: tuple[float, float],
        spread: float = 0.01,
        blocking: bool = True,
        wait: int | None = None,
        queued: bool = False,
    ) -> None:
        """One event; ``queued``: a blocking event waits until it would leave the queue."""
        self.gap.append(max(gap, MIN_GAP_NS))
        expected = int(size / (PORTS[0].bytes_per_ns * min(sum(rate) / 2, 1.0)))
        issue = self.ready + self.gap[-1]
        end = issue + expected
        for direction in self.free:
            if directions & direction:
                end = max(end, self.free[direction] + expected)
        for direction in self.free:
            if directions & direction:
                self.free[direction] = end
        if queued and wait is None:
            wait = end - issue
        self.wait.append((expected if wait is None else wait) if blocking else 0)
        self.ready = issue + self.wait[-1]
        self.directions.append(directions)
        self.size.append(size)
        self.rate_low.append(rate[0])
        self.rate_high.append(rate[1])
        self.spread.append(spread)
        self.identity.append(identity)

    def backlog(self) -> int:
        """How long after the chain may go on its queues still drain (nominal)."""
        return max(max(self.free.values()) - self.ready, 0)


def _one_f_one_b(shape: JobShape) -> list[bool]:
    """True for a forward, False for a backward, in 1F1B order on this stage."""
    warmup = min(shape.warmup, shape.micro_batches)
    steady = shape.micro_batches - warmup
    return [True] * warmup + [True, False] * steady + [False] * warmup


class _Buckets:
    """Overlapped gradient reduction: which ready point of the last backward issues which.

    A ready point is where a layer's backward has produced a group of its gradients: its
    experts' (MoE) when their backward ends, the rest when the layer's ends. Bucket i of B
    goes out at the first point by which its share of the gradients is complete:
    ceil((i + 1) P / B) - 1 of P points, so the last bucket waits for the last point.
    """

    def __init__(self, shape: JobShape) -> None:
        self.shape = shape
        per_layer = 2 if shape.moe else 1
        points = per_layer * shape.layers
        self.at = [0] * points  # buckets issued at each point
        for index in range(shape.gradient_buckets):
            self.at[-(-(index + 1) * points // shape.gradient_buckets) - 1] += 1
        self.point = 0

    def ready(self, chain: _Chain, compute: int, syncing: bool) -> int:
        """Issue the buckets of the next ready point (in the syncing pass; asynchronous, like
        Megatron's start_grad_sync) after ``compute``; the gap left before the next event."""
        if not syncing:
            return compute
        count = self.at[self.point]
        self.point += 1
        size = self.shape.gradient_bytes / self.shape.gradient_buckets
        for index in range(count):
            gap = MIN_GAP_NS if index else compute
            bucket = Identity(DP, REDUCE_SCATTER, DP_GROUP)
            chain.add(bucket, gap, _BOTH, size, self.shape.collective_rate, blocking=False)
        return MIN_GAP_NS if count else compute


def _overlapped_backward(chain: _Chain, shape: JobShape, batch: int, sync: _Buckets | None) -> int:
    """One backward pass in its real order, issuing gradient buckets if ``sync`` is given;
    returns the compute left before the send to the previous stage.

    A MoE layer's backward undoes its forward from the end: the combine's all-to-all, the
    experts' backward, the dispatch's all-to-all, then attention. A blocking all-to-all
    that queued behind a bucket on the rail completes only when the bucket has gone
    (``queued``): the computation after it waits that long.
    """
    carried = 0
    syncing = sync is not None
    buckets = sync or _Buckets(shape)
    rate = shape.all_to_all_rate
    for index in range(shape.layers):
        if shape.moe:
            layer = shape.layers - 1 - index
            expert = Identity(EP, ALL_TO_ALL, EP_GROUP, batch, layer, False)
            size = shape.all_to_all_bytes
            chain.add(expert, carried, _BOTH, size, rate, shape.imbalance, queued=True)
            gap = buckets.ready(chain, 2 * shape.expert_ns, syncing)
            chain.add(expert, gap, _BOTH, size, rate, shape.imbalance, queued=True)
            carried = 0
        carried = buckets.ready(chain, carried + 2 * shape.attention_ns, syncing)
    return carried


def _chain_for(shape: JobShape) -> _Chain:
    chain = _Chain()
    gap = shape.bubble_ns
    passes = {True: 0, False: 0}  # micro-batches begun, per direction
    order = _one_f_one_b(shape)
    for step, forward in enumerate(order):
        scale = 1 if forward else 2
        batch = passes[forward]
        passes[forward] += 1
        # Forward receives from the previous stage and sends to the next; backward the reverse.
        before, after = (PP_PREVIOUS, PP_NEXT) if forward else (PP_NEXT, PP_PREVIOUS)
        # Activations (forward) or their gradients (backward) arrive from the neighbour stage.
        receive = Identity(PP, RECV, before, batch, NO_INDEX, forward)
        chain.add(receive, gap, _RECEIVE, shape.pipeline_bytes, shape.pipeline_rate)
        compute = 0
        if shape.overlap_grad_reduce and not forward:
            # Grad sync is enabled for the last micro-batch's backward only (Megatron's
            # schedules.py; the others accumulate under no_sync): 1F1B ends on it.
            sync = _Buckets(shape) if step == len(order) - 1 else None
            compute = _overlapped_backward(chain, shape, batch, sync)
        else:
            for index in range(shape.layers):
                compute += shape.attention_ns * scale
                if shape.moe:
                    # Backward runs the layers in reverse; each layer dispatches, then combines.
                    layer = index if forward else shape.layers - 1 - index
                    expert = Identity(EP, ALL_TO_ALL, EP_GROUP, batch, layer, forward)
                    rate = shape.all_to_all_rate
                    size = shape.all_to_all_bytes
                    chain.add(expert, compute, _BOTH, size, rate, shape.imbalance)
                    chain.add(expert, shape.expert_ns * scale, _BOTH, size, rate, shape.imbalance)
                    compute = 0
        # The send to the other neighbour is asynchronous (isend): compute goes on.
        send = Identity(PP, SEND, after, batch, NO_INDEX, forward)
        chain.add(send, compute, _SEND, shape.pipeline_bytes, shape.pipeline_rate, blocking=False)
        gap = MIN_GAP_NS
    optimizer = shape.optimizer_ns
    if shape.overlap_grad_reduce:
        # The buckets went out during the last backward; the optimizer waits for the last
        # (Megatron's finish_grad_sync) before it updates the shard.
        optimizer += chain.backlog()
    else:
        _reduce_after_backward(chain, shape)
    # The optimizer updates this rank's shard, then the shard is all-gathered.
    gather = Identity(DP, ALL_GATHER, DP_GROUP)
    chain.add(gather, optimizer, _BOTH, shape.gradient_bytes, shape.collective_rate)
    return chain


def _reduce_after_backward(chain: _Chain, shape: JobShape) -> None:
    """ZeRO-2 without overlap: gradient buckets are reduce-scattered once the backward is
    done, faster than the wire drains them, so they queue into one long burst; the
    optimizer waits for all."""
    buckets = shape.gradient_buckets
    bucket = shape.gradient_bytes / buckets
    drain = int(shape.gradient_bytes / PORTS[0].bytes_per_ns)
    for index in range(buckets):
        last = index == buckets - 1
        wait = max(drain - (buckets - 1) * shape.bucket_spacing_ns, 0)
        chain.add(
            Identity(DP, REDUCE_SCATTER, DP_GROUP),
            shape.bucket_spacing_ns if index else MIN_GAP_NS,
            _BOTH,
            bucket,
            shape.collective_rate,
            blocking=last,
            wait=wait,
        )


def fifo(arrival: I64, duration: I64) -> tuple[I64, I64]:
    """Start and end of each message on a FIFO wire, one wire per row (Lindley's recursion).

    end[i] = max(arrival[i], end[i-1]) + duration[i] = D[i] + max_{j<=i}(arrival[j] - D[j-1])
    with D the running sum of durations. A gap shorter than MIN_GAP_NS that the queue
    leaves is widened to MIN_GAP_NS (the host posted a little late): every gap on the wire
    is then either zero (queued back to back) or resolvable by a 1 ms sampler.
    """
    arrival = arrival.copy()
    total = np.cumsum(duration, axis=-1)
    before = total - duration
    while True:
        end = total + np.maximum.accumulate(arrival - before, axis=-1)
        start = end - duration
        gaps = start[..., 1:] - end[..., :-1]
        short = (gaps > 0) & (gaps < MIN_GAP_NS)
        if not short.any():
            return start, end
        # Fix the first short gap of each row; later ones move with it, so look again.
        rows = np.nonzero(short.any(axis=-1))[0]
        first = np.argmax(short[rows], axis=-1)
        arrival[rows, first + 1] = end[rows, first] + MIN_GAP_NS


def _rates(low: F64, high: F64, shape: tuple[int, ...], rng: np.random.Generator) -> F64:
    # Demand above line rate is capped: the NIC sends at line rate and the message lasts longer.
    demand: F64 = low + (high - low) * rng.random(shape)
    return np.minimum(demand, 1.0)


def _durations(size: F64, rate: F64) -> I64:
    duration = np.ceil(size / rate).astype(np.int64)
    return np.maximum(duration, MIN_BURST_NS)


def _with_rail_faults(
    faults: tuple[RailFault, ...], nbytes: F64, rate: F64
) -> tuple[F64, F64, I64]:
    """Bytes, rates and durations of the rails' items (rails x events) with ``faults``: a
    slow rail's rate scaled down (same bytes, longer), a light rail's bytes scaled down and
    the difference spread over its peers. A light rail's message keeps its rate unless it
    would last under _LIGHT_MIN_NS; then it is slowed to last that long with its bytes."""
    nbytes, rate = nbytes.copy(), rate.copy()
    floor = np.full((TRAINING_PORTS, 1), MIN_BURST_NS, dtype=np.int64)
    for fault in faults:
        if fault.kind == LIGHT_RAIL:
            moved = nbytes[fault.port] * (1.0 - fault.fraction)
            nbytes[fault.port] -= moved
            peers = np.arange(TRAINING_PORTS) != fault.port
            nbytes[peers] += moved / (TRAINING_PORTS - 1)
            floor[fault.port] = _LIGHT_MIN_NS
            rate[fault.port] = np.minimum(rate[fault.port], nbytes[fault.port] / _LIGHT_MIN_NS)
        else:
            rate[fault.port] *= fault.fraction
    duration = np.maximum(np.ceil(nbytes / rate).astype(np.int64), floor)
    return nbytes, rate, duration


def plan_iteration(
    shape: JobShape,
    rng: np.random.Generator,
    start_ns: int,
    checkpoint: bool,
    rail_faults: tuple[RailFault, ...] = (),
    arrival: Arrival | None = None,
) -> IterationPlan:
    """The wire items of one iteration starting at ``start_ns`` on every channel;
    ``rail_faults``: the rail faults in force for it (profiles.RailFault). They draw nothing
    from ``rng``, so the rest of the node is the same with or without them. ``arrival``:
    this node as one of a job's nodes (simulation.stragglers): the chain's first event it
    sends in, and every event after it, waits for the last rank (``arrival.group_ns``), and
    the node sends its eager bytes when it arrives itself. It draws nothing from ``rng``."""
    chain = _chain_for(shape)
    gap = np.asarray(chain.gap, dtype=np.int64)
    wait = np.asarray(chain.wait, dtype=np.int64)
    # issue[i] = issue[i-1] + wait[i-1] + gap[i]
    issue = start_ns + np.cumsum(gap + np.concatenate(([0], wait[:-1])))
    directions = np.asarray(chain.directions)
    sends = np.flatnonzero(directions & _SEND)
    first_send = int(sends[0]) if arrival is not None and len(sends) else -1
    if first_send >= 0 and arrival is not None:
        issue[first_send:] += arrival.group_ns
    chain_end = int(issue[-1] + wait[-1])
    size = np.asarray(chain.size)
    low, high = np.asarray(chain.rate_low), np.asarray(chain.rate_high)
    spread = np.asarray(chain.spread)
    rail_offset = rng.integers(0, _RAIL_SKEW_NS, size=(TRAINING_PORTS, 1))
    line = float(PORTS[0].bytes_per_ns)

    channels: list[WireItems] = []
    per_direction: list[WireItems] = []
    for direction, mask in ((XMIT, _SEND), (RCV, _RECEIVE)):
        chosen = (directions & mask) != 0
        count = int(chosen.sum())
        shape2 = (TRAINING_PORTS, count)
        arrival_ns = issue[chosen] + rail_offset + rng.integers(0, _MESSAGE_JITTER_NS, size=shape2)
        if direction == RCV:
            arrival_ns += rng.integers(*_RECEIVE_LAG_NS, size=shape2)
        nbytes = size[chosen] * rng.lognormal(0.0, spread[chosen], size=shape2)
        rate = _rates(low[chosen], high[chosen], shape2, rng) * line
        if rail_faults:
            nbytes, rate, duration = _with_rail_faults(rail_faults, nbytes, rate)
        else:
            duration = _durations(nbytes, rate)
        start, end = fifo(arrival_ns.astype(np.int64), duration)
        # A FIFO keeps each rail's items in chain order: item j is the j-th chosen event.
        event = np.flatnonzero(chosen).astype(np.int64)
        items = [WireItems(start[r], end[r], rate[r], event) for r in range(TRAINING_PORTS)]
        if first_send >= 0 and arrival is not None and chosen[first_send]:
            at = int(np.searchsorted(event, first_send))
            # When this node arrived (send) or its first peer's eager bytes reached it
            # (receive), against the bulk, which waited for the last rank.
            early = arrival.group_ns - (
                arrival.own_ns if direction == XMIT else arrival.first_peer_ns
            )
            items = [_with_eager(item, at, early, line) for item in items]
        per_direction.extend(items)
    # per_direction holds all xmit rails then all rcv rails; interleave into channel order.
    for port in range(TRAINING_PORTS):
        channels.append(per_direction[port])
        channels.append(per_direction[TRAINING_PORTS + port])

    # Storage: the data loader reads the iteration's samples at its start; a checkpoint is
    # written synchronously at its end, so training stalls until the write drains.
    storage_line = float(PORTS[STORAGE_PORT_INDEX].bytes_per_ns)
    load_rate = float(_rates(np.array([0.7]), np.array([1.0]), (1,), rng)[0]) * storage_line
    load_start = start_ns + MIN_GAP_NS + int(rng.integers(0, 500_000))
    load_bytes = shape.load_bytes * float(rng.uniform(0.8, 1.2))
    load_end = load_start + max(int(np.ceil(load_bytes / load_rate)), MIN_BURST_NS)
    reads = WireItems(
        np.array([load_start], dtype=np.int64),
        np.array([load_end], dtype=np.int64),
        np.array([load_rate]),
        np.array([-1], dtype=np.int64),
    )
    writes = empty_items()
    finish = max(chain_end, *(int(c.end_ns[-1]) for c in channels if len(c.end_ns)), load_end)
    if checkpoint:
        write_rate = float(rng.uniform(0.85, 0.95)) * storage_line
        write_start = finish + MIN_GAP_NS
        write_bytes = shape.checkpoint_bytes * float(rng.uniform(0.95, 1.05))
        write_end = write_start + int(np.ceil(write_bytes / write_rate))
        writes = WireItems(
            np.array([write_start], dtype=np.int64),
            np.array([write_end], dtype=np.int64),
            np.array([write_rate]),
            np.array([-1], dtype=np.int64),
        )
        finish = write_end
    channels.extend((writes, reads))
    collectives = _chain_collectives(chain, issue, channels[: 2 * TRAINING_PORTS])
    return IterationPlan(finish + MIN_GAP_NS, tuple(channels), collectives)


def _with_eager(items: WireItems, at: int, early_ns: int, line: float) -> WireItems:
    """``items`` with an eager send of EAGER_BYTES ``early_ns`` before item ``at`` (the
    first event this node sends in) was queued, where it fits between that item and the
    one before it; where it does not (the node was about the last to arrive), the eager
    bytes are part of the bulk and nothing is added."""
    rate = EAGER_RATE * line
    duration = int(np.ceil(EAGER_BYTES / rate))
    begin = int(items.start_ns[at]) - early_ns
    before = int(items.end_ns[at - 1]) if at > 0 else -1
    if early_ns <= duration or begin <= before:
        return items
    return WireItems(
        np.insert(items.start_ns, at, begin),
        np.insert(items.end_ns, at, begin + duration),
        np.insert(items.bytes_per_ns, at, rate),
        np.insert(items.event, at, items.event[at]),
    )


def _chain_collectives(chain: _Chain, issue: I64, training: list[WireItems]) -> ChainCollectives:
    """Each event's first and last byte on every rail, from the items that carry it."""
    events = len(chain.identity)
    first = np.full((events, GPUS_PER_NODE), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full((events, GPUS_PER_NODE), np.iinfo(np.int64).min, dtype=np.int64)
    for channel, items in enumerate(training):
        rail = np.full(len(items.event), channel // 2)
        np.minimum.at(first, (items.event, rail), items.start_ns)
        np.maximum.at(last, (items.event, rail), items.end_ns)
    return ChainCollectives(
        tuple(chain.identity), issue.astype(np.int64), np.asarray(chain.size), first, last
    )
