"""Stragglers and slow rails injected into a simulated job's nodes, and detectors.stragglers
scored on them.

The truth is the injection (collector.simulation.stragglers.JobGroup): ``Straggler`` makes
one host reach step k's first collective late by a known delay, and every node's bulk
waits for it; a group ``RailFault`` slows one training rail on every node from a known
time. Each node is sampled exactly as ``burstscope simulate --host H --job-hosts ...``
samples it (collector.tracegen.simulate_trace: its own sampler noise, the job reaching it
``skew_ns`` late, its clock ``clock_offset_ns`` off, counters in 4-octet words), its eight
training rails' transmit counters go through a StepSplitter, and every node's steps through
``judge``, as the fleet report does.

Matching. The step index k is the model's block index: block k is one iteration, the
same blocks on every node of the group (each step ends when its last rank is done). A
verdict's onset is wall-clock time on the median node's clock; a node's wall clock is model
time + skew + start + clock offset, so the model time of a verdict as ``host`` sees it is
its onset less that node's offset, and k is the block that holds it. A straggler call
matches the truth when the host it names was injected late in that k; a slow rail call
when the rail it names was slowed in that step. Only iterations the run covers whole are
scored.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import (
    DEFAULT_PROFILE,
    PORTS,
    SECOND,
    SLOW_RAIL,
    TRAINING_PORTS,
    RailFault,
)
from burstscope.collector.simulation.stragglers import JobGroup, Straggler
from burstscope.collector.trace import PortColumns, SlowRow, TraceWriter
from burstscope.collector.tracegen import FIXED_EPOCH_NS, NodeTiming, simulate_trace
from burstscope.detectors.stragglers import (
    NodeStep,
    StepLimits,
    StepSplitter,
    StepVerdict,
    judge,
)
from burstscope.testing import scoring

INTERVAL_NS = 1_000_000
DELAYS_MS = (2, 3, 5, 10, 20)  # the 2-20 ms


@dataclass(frozen=True, slots=True)
class Iteration:
    """One iteration block of the model, in model time."""

    index: int  # k: the step
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class SimulatedNode:
    host: str
    offset_ns: int  # wall clock minus model time: skew + start + clock offset
    steps: tuple[NodeStep, ...]


@dataclass(frozen=True, slots=True)
class SimulatedFleet:
    group: JobGroup
    seconds: float  # simulated
    nodes: tuple[SimulatedNode, ...]
    iterations: tuple[Iteration, ...]  # covered whole by the run, by index
    verdicts: tuple[StepVerdict, ...]

    def step_of(self, verdict: StepVerdict, host: str) -> int | None:
        """k of the iteration holding ``verdict`` as ``host``'s clock places it; None
        outside the iterations covered whole."""
        offset = next(node.offset_ns for node in self.nodes if node.host == host)
        model_ns = verdict.onset_ns - offset
        position = bisect.bisect_right([i.start_ns for i in self.iterations], model_ns) - 1
        if position < 0 or model_ns >= self.iterations[position].end_ns:
            return None
        return self.iterations[position].index


class _Steps(TraceWriter):
    """A trace writer that writes nothing: it splits the node's steps from what
    simulate_trace hands it, and notes the model's iterations before they are forgotten."""

    def __init__(self, host: str, model: TrafficModel, limits: StepLimits) -> None:
        super().__init__(Path(os.devnull))
        self.model = model
        self.splitter = StepSplitter(host, INTERVAL_NS, limits)
        self.steps: list[NodeStep] = []
        self.iterations: dict[int, Iteration] = {}

    def append(self, ports: Sequence[PortColumns]) -> None:
        for port, rail in zip(ports[:TRAINING_PORTS], self.model.ports, strict=False):
            self.splitter.feed(
                f"{port.device}/{port.port}",
                rail.line_rate_bytes_per_second,
                port.timestamp_ns,
                port.xmit_bytes.astype(np.int64),
                port.rebaseline,
            )
        self.steps += self.splitter.close()
        # simulate_trace forgets the blocks once this chunk is written: note them now.
        for block in self.model.blocks():
            if block.shape is not None:
                self.iterations[block.index] = Iteration(block.index, block.start_ns, block.end_ns)

    def append_slow(self, rows: Sequence[SlowRow]) -> None:
        pass

    def close(self) -> None:
        self.steps += self.splitter.close(final=True)


def simulate_fleet(
    group: JobGroup,
    seconds: float,
    profile: str = DEFAULT_PROFILE,
    limits: StepLimits | None = None,
) -> SimulatedFleet:
    """Every node of ``group`` for ``seconds``, split into steps and judged across nodes."""
    limits = limits or StepLimits()
    duration_ns = round(seconds * SECOND)
    nodes = []
    iterations: dict[int, Iteration] = {}
    for host in group.hosts:
        model = TrafficModel(profile, group.seed, group=group, host=host)
        timing = NodeTiming.for_host(host, group.seed)
        writer = _Steps(host, model, limits)
        simulate_trace(model, writer, duration_ns, INTERVAL_NS, FIXED_EPOCH_NS, node=timing)
        offset = timing.skew_ns + FIXED_EPOCH_NS + timing.clock_offset_ns
        nodes.append(SimulatedNode(host, offset, tuple(writer.steps)))
        # Every node of a group has the same blocks: a step ends when its last rank is done.
        if iterations and any(iterations.get(k, i) != i for k, i in writer.iterations.items()):
            raise ValueError(f"{host}: the model's iterations differ from its group's")
        iterations.update(writer.iterations)
    whole = tuple(iterations[k] for k in sorted(iterations) if iterations[k].end_ns <= duration_ns)
    verdicts = judge([step for node in nodes for step in node.steps], limits)
    return SimulatedFleet(group, seconds, tuple(nodes), whole, tuple(verdicts))


@dataclass(frozen=True, slots=True)
class StragglerScore:
    """Straggler calls against the injection, per (host, step)."""

    injected: int  # (host, step) pairs injected late, in iterations covered whole
    found: int  # of those, named a straggler in that step
    false_alarms: int  # straggler calls naming a (host, step) not injected
    delays_injected_ns: tuple[int, ...]  # every injected pair's delay
    delays_found_ns: tuple[int, ...]  # the found pairs' delays
    missed: tuple[tuple[str, int, int], ...]  # (host, step, delay) not found
    judged: int  # steps judged
    iterations: int  # iterations covered whole

    @property
    def recall(self) -> float:
        return scoring.recall(self.found, self.injected)

    @property
    def precision(self) -> float:
        return scoring.precision(self.found, self.false_alarms)

    @property
    def smallest_found_ns(self) -> int | None:
        return min(self.delays_found_ns, default=None)


def score_stragglers(fleet: SimulatedFleet) -> StragglerScore:
    group = fleet.group
    covered = {i.index for i in fleet.iterations}
    truth = {
        (host, k): group.delay_ns(host, k)
        for k in covered
        for host in group.hosts
        if group.delay_ns(host, k) > 0
    }
    called: set[tuple[str, int]] = set()
    false_alarms = 0
    for verdict in fleet.verdicts:
        for host in verdict.stragglers:
            k = fleet.step_of(verdict, host)
            if k is None:
                continue  # an iteration the run cut: neither truth nor alarm
            if (host, k) in truth:
                called.add((host, k))
            else:
                false_alarms += 1
    return StragglerScore(
        len(truth),
        len(called),
        false_alarms,
        tuple(sorted(truth.values())),
        tuple(sorted(truth[pair] for pair in called)),
        tuple(sorted((h, k, d) for (h, k), d in truth.items() if (h, k) not in called)),
        sum(1 for v in fleet.verdicts if _covered(fleet, v)),
        len(covered),
    )


def _covered(fleet: SimulatedFleet, verdict: StepVerdict) -> bool:
    return fleet.step_of(verdict, verdict.nodes[0]) is not None


@dataclass(frozen=True, slots=True)
class SlowRailScore:
    """Slow rail calls against a group rail fault, per step."""

    injected: int  # judged steps with a rail slowed on every node
    found: int  # of those, the step's slow rail is the slowed one
    false_alarms: int  # judged steps naming a rail that was not slowed in them
    fractions_found: tuple[float, ...] = field(default=())

    @property
    def recall(self) -> float:
        return scoring.recall(self.found, self.injected)

    @property
    def precision(self) -> float:
        return scoring.precision(self.found, self.false_alarms)


def rail_label(rail: int) -> str:
    return f"{PORTS[rail].device}/{PORTS[rail].port}"


def score_slow_rails(fleet: SimulatedFleet) -> SlowRailScore:
    """Each judged step of an iteration covered whole: the rails slowed in force at its
    start (RailFault.active, as the model applies them) against the step's slow rail."""
    starts = {i.index: i.start_ns for i in fleet.iterations}
    found = injected = false_alarms = 0
    fractions: set[float] = set()
    for verdict in fleet.verdicts:
        k = fleet.step_of(verdict, verdict.nodes[0])
        if k is None:
            continue
        slowed = {
            rail_label(f.port): f.fraction
            for f in fleet.group.rail_faults
            if f.kind == SLOW_RAIL and f.active(starts[k])
        }
        injected += bool(slowed)
        if verdict.slow_rail is None:
            continue
        if verdict.slow_rail in slowed:
            found += 1
            fractions.add(slowed[verdict.slow_rail])
        else:
            false_alarms += 1
    return SlowRailScore(injected, found, false_alarms, tuple(sorted(fractions)))


def hosts(count: int) -> tuple[str, ...]:
    return tuple(f"node-{index:03d}" for index in range(count))


def injected_group(count: int, seed: int) -> JobGroup:
    """A job of ``count`` nodes with a straggler on every fourth node (one at least): each
    late by one of DELAYS_MS (in turn) in every 3rd, 4th or 5th step from a seeded step;
    at most a quarter of the nodes are late in one step, so the median node is on time."""
    names = hosts(count)
    rng = np.random.default_rng(seed)
    stragglers = []
    for number, host in enumerate(names[1::4] or names[:1]):
        delay_ms = DELAYS_MS[number % len(DELAYS_MS)]
        every = int(rng.integers(3, 6))
        stragglers.append(
            Straggler(host, delay_ms * 1_000_000, int(rng.integers(0, every)), None, every)
        )
    return JobGroup(names, tuple(stragglers), seed)


def slow_rail_group(count: int, seed: int, rail: int, fraction: float, start_s: float) -> JobGroup:
    """A clean job of ``count`` nodes whose ``rail`` runs at ``fraction`` of its rate on
    every node from ``start_s``."""
    fault = RailFault(rail, SLOW_RAIL, fraction, round(start_s * SECOND))
    return JobGroup(hosts(count), (), seed, (fault,))
