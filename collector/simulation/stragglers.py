"""The nodes of one job waiting for each other: when each rank reaches a step's first
collective, and the stragglers injected into it.

The honest model (issue 27; docs/culprits.md says which signatures it leaves):

* Every node of a job runs the same iterations (one ``TrafficModel`` seed), and each step's
  first collective that a node sends in can move its bulk only when the **last** rank has
  arrived: NCCL's ring and all-to-all kernels wait for the peer's buffer credits before
  each slot, and a late rank posts none (NCCL's ``NCCL_BUFFSIZE``, docs "Environment
  Variables": 4 MiB by default). So the step's collectives, and everything after them in
  the step, start ``group_ns`` late on every node: the latest arrival.
* A rank that arrives early sends what its peers' buffers take at once, then waits: on
  each rail, ``EAGER_BYTES`` at the moment it arrives. That send is what survives of the
  arrival order in the counters; the rank that arrives last sends it with its bulk.
  The receive side is not a signature: a straggler's buffers take the early peers' sends
  before it arrives, so its receive counters move on time.
* Arrivals: each rank is ``jitter`` late (exponential, mean 100 us, at most 400 us: ranks
  that wait on nothing) plus the delay of any straggler injected for it in that step.
* A slow link paces every rank of its ring: a slow rail is a ``RailFault`` on the same rail
  of every node of the group (``rail_faults``), not a per-node fault.

The step index is the model's block index (one iteration per block; idle stretches have
blocks too but no collectives). Arrivals draw from their own generator, seeded with
(seed, step), so a node's traffic without stragglers is the same as without a group.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from burstscope.collector.simulation.profiles import RailFault
from burstscope.detectors.arrays import I64

EAGER_BYTES = 4 * 1024 * 1024  # NCCL_BUFFSIZE's default: what an early rank sends per rail
# The eager send goes at line rate (about 84 us at 400 Gb/s): shorter than a sample, so it is
# no burst of the ground-truth schedule (model._merge leaves out runs under a millisecond).
EAGER_RATE = 1.0
JITTER_MEAN_NS = 100_000
JITTER_MAX_NS = 400_000
_ARRIVAL_STREAM = 0x57A6


@dataclass(frozen=True, slots=True)
class Straggler:
    """``host`` reaches the step's first collective ``delay_ns`` late in steps
    ``first_step``, ``first_step + every``, ... up to ``last_step`` (None: for ever)."""

    host: str
    delay_ns: int
    first_step: int = 0
    last_step: int | None = None
    every: int = 1

    def __post_init__(self) -> None:
        if self.delay_ns < 0:
            raise ValueError(f"a straggler's delay must be >= 0 ns, got {self.delay_ns}")
        if self.every < 1 or self.first_step < 0:
            raise ValueError("a straggler's steps need every >= 1 and first_step >= 0")

    def late_in(self, step: int) -> bool:
        if step < self.first_step or (self.last_step is not None and step > self.last_step):
            return False
        return (step - self.first_step) % self.every == 0


@dataclass(frozen=True, slots=True)
class Arrival:
    """One node's view of a step: when it arrived, the last rank, and its first peer."""

    own_ns: int  # this node's arrival after the step's nominal start of its collective
    group_ns: int  # the latest arrival: when the bulk moves on every node
    first_peer_ns: int  # the earliest other rank's arrival (its eager send reaches us)


@dataclass(frozen=True, slots=True)
class JobGroup:
    """The nodes of one job, by name, and what is injected into them."""

    hosts: tuple[str, ...]
    stragglers: tuple[Straggler, ...] = ()
    seed: int = 0
    rail_faults: tuple[RailFault, ...] = ()  # on every node: a slow link paces its ring

    def __post_init__(self) -> None:
        if len(self.hosts) < 2 or len(set(self.hosts)) != len(self.hosts):
            raise ValueError("a job group needs two or more distinct host names")
        unknown = [s.host for s in self.stragglers if s.host not in self.hosts]
        if unknown:
            raise ValueError(f"straggler {unknown[0]!r} is not one of the group's hosts")

    def delay_ns(self, host: str, step: int) -> int:
        """The delay injected for ``host`` in ``step`` (0: on time): the truth."""
        return sum(s.delay_ns for s in self.stragglers if s.host == host and s.late_in(step))

    def arrivals_ns(self, step: int) -> I64:
        """Every host's arrival in ``step``, in the order of ``hosts``."""
        rng = np.random.default_rng((self.seed, _ARRIVAL_STREAM, step))
        jitter = np.minimum(rng.exponential(JITTER_MEAN_NS, len(self.hosts)), JITTER_MAX_NS)
        delays = [self.delay_ns(host, step) for host in self.hosts]
        return jitter.astype(np.int64) + np.asarray(delays, dtype=np.int64)

    def arrival(self, host: str, step: int) -> Arrival:
        arrivals = self.arrivals_ns(step)
        index = self.hosts.index(host)
        others = np.delete(arrivals, index)
        return Arrival(int(arrivals[index]), int(arrivals.max()), int(others.min()))


STRAGGLERS_FILE = "_stragglers.jsonl"  # a simulated trace's injected stragglers, the truth


def injected(group: JobGroup, step: int) -> list[tuple[str, int]]:
    """(host, delay) of every host injected late in ``step``, by host order."""
    return [(h, d) for h in group.hosts if (d := group.delay_ns(h, step)) > 0]


def step_starts(
    blocks: Iterable[tuple[int, int, int]], group: JobGroup
) -> list[dict[str, int | str]]:
    """Truth records from (step, start, end) of each iteration on one node's clock."""
    return [
        {"step": step, "host": host, "delay_ns": delay, "start_ns": start, "end_ns": end}
        for step, start, end in blocks
        for host, delay in injected(group, step)
    ]
