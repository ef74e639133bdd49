"""Injected slow and light rails on the simulated node, and detectors.rails scored on them.

The truth is the injection (collector.simulation.profiles.RailFault): from a known model
time one training rail sends at a fraction of its rate (slow: a degraded lane) or carries a
fraction of its share of every message, its peers the rest (light: hash polarisation, NCCL
using fewer rails). The node is sampled as the agent samples it (1 ms ticks with the
sampler's timing noise, collector.tracegen.sample_times), each rail direction goes through
the analyzer (bursts as detectors.bursts defines them) into RailBins, and the verdicts are
compared with the faults: a fault is found when a finding of its kind on its rail covers
a step after its start; any other finding is a false alarm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import (
    LIGHT_RAIL,
    PORTS,
    TRAINING_PORTS,
    RailFault,
)
from burstscope.collector.tracegen import CHUNK_TICKS, sample_times
from burstscope.detectors.analyzer import Chunk, DirectionAnalyzer
from burstscope.detectors.config import NS_PER_SECOND, scale_key
from burstscope.detectors.rails import (
    LIGHT,
    SLOW,
    LiveRails,
    RailBins,
    RailFinding,
    RailLimits,
    RailTable,
    node_steps,
    rail_table,
    step_verdicts,
    verdicts,
)
from burstscope.detectors.scales import Windows
from burstscope.testing import scoring

INTERVAL_NS = 1_000_000
FALLBACK_WINDOW_NS = NS_PER_SECOND  # steps where no period is found (as the report)
DIRECTIONS = 2


@dataclass(frozen=True, slots=True)
class NodeRails:
    """One simulated node's rail tables and findings, per direction (transmit, receive)."""

    tables: tuple[RailTable, RailTable]
    findings: tuple[tuple[RailFinding, ...], tuple[RailFinding, ...]]


def simulate_rails(
    seed: int,
    seconds: float,
    faults: Sequence[RailFault] = (),
    profile: str = "moe",
    limits: RailLimits | None = None,
) -> NodeRails:
    """The node's training rails for ``seconds`` with ``faults``, through the detector."""
    model = TrafficModel(profile, seed=seed, rail_faults=tuple(faults))
    rails = [PORTS[r] for r in range(TRAINING_PORTS)]
    analyzers = [
        [DirectionAnalyzer(p.line_rate_bytes_per_second, keep_bursts=False) for p in rails]
        for _ in range(DIRECTIONS)
    ]
    bins = [[RailBins() for _ in rails] for _ in range(DIRECTIONS)]
    ticks = int(seconds * NS_PER_SECOND) // INTERVAL_NS + 1
    for first in range(0, ticks, CHUNK_TICKS):
        count = min(CHUNK_TICKS, ticks - first)
        times = sample_times(first // CHUNK_TICKS, count, INTERVAL_NS, len(PORTS), seed)
        counters = model.counters_at(times.midpoint_ns)
        for direction in range(DIRECTIONS):
            for rail, port in enumerate(rails):
                chunk = analyzers[direction][rail].feed(
                    times.midpoint_ns[rail], counters[direction][rail], None
                )
                _bin(bins[direction][rail], chunk, port.line_rate_bytes_per_second)
        model.forget_before((first + count) * INTERVAL_NS)
    for direction in range(DIRECTIONS):
        for rail, port in enumerate(rails):
            chunk = analyzers[direction][rail].finish()
            _bin(bins[direction][rail], chunk, port.line_rate_bytes_per_second)
    # The steps from both directions' bursts: one node, one job.
    every = [b for side in bins for b in side]
    starts, ends, periods = node_steps(every, FALLBACK_WINDOW_NS, timing=bins[0])
    peers = [0] * len(rails)
    tables, found = [], []
    for direction in range(DIRECTIONS):
        table = rail_table(bins[direction], starts, ends, periods)
        codes, judged = step_verdicts(table.bytes, table.peak, peers, limits)
        tables.append(table)
        found.append(verdicts(codes, judged, limits))
    return NodeRails((tables[0], tables[1]), (found[0], found[1]))


def _bin(bins: RailBins, chunk: Chunk, line_rate: int) -> None:
    """What the report does with each chunk (report_model._Direction._bin)."""
    windows = chunk.windows.get(bins.window_key, Windows.empty())
    bins.feed(windows.end_ns, windows.utilization, windows.covered_ns, line_rate, chunk.bursts)


def live_flags(
    seed: int, seconds: float, faults: Sequence[RailFault] = (), profile: str = "moe"
) -> dict[int, tuple[int, int]]:
    """The agent's verdict (detectors.rails.LiveRails over its 15 s windows) on the node:
    rail -> (kind, model ns of the first drain that flagged it), judged every 5 s."""
    model = TrafficModel(profile, seed=seed, rail_faults=tuple(faults))
    rails = [PORTS[r] for r in range(TRAINING_PORTS)]
    analyzers = [
        [DirectionAnalyzer(p.line_rate_bytes_per_second, keep_bursts=False) for p in rails]
        for _ in range(DIRECTIONS)
    ]
    live: LiveRails[int] = LiveRails()
    coarse = scale_key(analyzers[0][0].thresholds.coarse_window_ns)
    first: dict[int, tuple[int, int]] = {}
    ticks = int(seconds * NS_PER_SECOND) // INTERVAL_NS + 1
    for start in range(0, ticks, CHUNK_TICKS):
        count = min(CHUNK_TICKS, ticks - start)
        times = sample_times(start // CHUNK_TICKS, count, INTERVAL_NS, len(PORTS), seed)
        counters = model.counters_at(times.midpoint_ns)
        for direction, name in enumerate(("transmit", "receive")):
            for rail, port in enumerate(rails):
                chunk = analyzers[direction][rail].feed(
                    times.midpoint_ns[rail], counters[direction][rail], None
                )
                windows = chunk.windows.get(coarse, Windows.empty())
                live.feed(
                    rail,
                    name,
                    port.line_rate_bytes_per_second,
                    (windows.end_ns, windows.utilization, windows.covered_ns),
                    chunk.bursts,
                )
        for key, kind in live.judge(dict.fromkeys(range(len(rails)), 0)).items():
            first.setdefault(key, (kind, (start + count) * INTERVAL_NS))
        model.forget_before((start + count) * INTERVAL_NS)
    return first


@dataclass(frozen=True, slots=True)
class RailScore:
    injected: int
    found: int  # faults with a finding of their kind on their rail after their start
    false_alarms: int  # findings matching no fault
    fractions_found: tuple[float, ...]  # the found faults' fractions (1 would be no fault)

    @property
    def recall(self) -> float:
        return scoring.recall(self.found, self.injected)

    @property
    def precision(self) -> float:
        return scoring.precision(self.found, self.false_alarms)


def score_rails(node: NodeRails, faults: Sequence[RailFault]) -> RailScore:
    """Findings of either direction against the injected faults (each fault loads both)."""
    found_faults: set[int] = set()
    false_alarms = 0
    for direction in range(DIRECTIONS):
        table = node.tables[direction]
        for finding in node.findings[direction]:
            matched = [
                index for index, fault in enumerate(faults) if _matches(finding, fault, table)
            ]
            if matched:
                found_faults.update(matched)
            else:
                false_alarms += 1
    return RailScore(
        len(faults),
        len(found_faults),
        false_alarms,
        tuple(faults[index].fraction for index in sorted(found_faults)),
    )


def _matches(finding: RailFinding, fault: RailFault, table: RailTable) -> bool:
    kind = LIGHT if fault.kind == LIGHT_RAIL else SLOW
    if finding.rail != fault.port or finding.kind != kind:
        return False
    # The fault begins with the first iteration that starts at or after start_ns: a step
    # that ends before then holds none of it.
    last_end = int(table.end_ns[finding.last_step])
    first_start = int(table.start_ns[finding.first_step])
    ends = fault.end_ns if fault.end_ns is not None else np.iinfo(np.int64).max
    return last_end > fault.start_ns and first_start < ends
