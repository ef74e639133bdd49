"""The culprit detectors scored against faults injected into the simulated fleet.

Each detector runs over a clean simulated fleet and over the same fleet with its fault
injected at known times and magnitudes; the truth is the injection, never a detector's own
output. Prints ONE JSON line: per detector, precision, recall, the smallest magnitude found
and the false alarms on the clean fleet, and whether the issue's targets hold (precision
and recall >= 0.95 at the injected magnitudes; at most one false alarm per detector on a
clean fleet of ``--nodes`` nodes over ``--hours`` simulated hours).

    .venv/bin/python bench/culprits.py --json [--nodes 24] [--hours 1]

Detectors: silence under a job and links below their peers (detectors.silence); rail
imbalance inside a node (detectors.rails: a slow rail and a light rail, 1 ms samples); the
PFC storm watchdog (detectors.pfc_watchdog: storms of 0.5 to 5 s in the pause counters read
at 10 Hz); why saturated seconds were throttled (detectors.throttle, per second: PFC, ECN/CNP
and credit-wait episodes of 0.5 to 5 s; about 3 s of wall time per node); stragglers
across the nodes of one job (detectors.stragglers: a node 2 to 20 ms late in known steps,
per host and step) and a slow rail across them (a group rail fault at 0.5 to 0.8 of its
rate, per step), both on the job's nodes sampled as ``simulate --job-hosts`` samples them
(about 7 s of wall time per node-hour). ``--detectors`` runs a subset.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from burstscope.collector.simulation.profiles import LIGHT_RAIL, SLOW_RAIL, RailFault
from burstscope.collector.simulation.stragglers import JobGroup
from burstscope.detectors.stragglers import MIN_NODES
from burstscope.detectors.throttle import CLEAN
from burstscope.testing import scoring
from burstscope.testing.faults_pfc import false_alarms as pfc_false_alarms
from burstscope.testing.faults_pfc import score_pfc_watchdog
from burstscope.testing.faults_rails import score_rails, simulate_rails
from burstscope.testing.faults_silence import (
    SilentRail,
    inject_silence,
    node_counters,
    score_below_peers,
    score_silence,
)
from burstscope.testing.faults_stragglers import (
    SimulatedFleet,
    hosts,
    injected_group,
    score_slow_rails,
    score_stragglers,
    simulate_fleet,
    slow_rail_group,
)
from burstscope.testing.faults_throttle import score_node

DETECTORS = (
    "silence_under_job",
    "below_peers",
    "rails",
    "pfc_storms",
    "throttle",
    "stragglers",
    "slow_rail_across_nodes",
)
TARGET_PRECISION = 0.95
TARGET_RECALL = 0.95
MAX_FALSE_ALARMS = 1
SILENCE_S = 600  # the agent's default [jobs] silence
RAILS = 8  # training rails of the simulated node; port 8 is its storage NIC
RAIL_BYTES_PER_SECOND = 50_000_000_000  # 400 Gb/s


def silence(nodes: int, seconds: int, seed: int) -> dict[str, Any]:
    """Every node of the fleet for ``seconds``; half of them lose one rail at a random
    second at least a threshold before the end. Clean: the same counters, nothing lost."""
    rng = np.random.default_rng(seed)
    found = injected = false_alarms = clean_false_alarms = 0
    delays: list[float] = []
    for node in range(nodes):
        counters = node_counters(seed=seed * 1000 + node, seconds=seconds)
        clean_false_alarms += score_silence(counters, [], SILENCE_S).false_alarms
        if node % 2:
            continue
        at = int(rng.integers(60, seconds - SILENCE_S - 60))
        faults = [SilentRail(int(rng.integers(0, RAILS)), at)]
        score = score_silence(inject_silence(counters, faults), faults, SILENCE_S)
        found += score.found
        injected += score.injected
        false_alarms += score.false_alarms
        delays += score.delays_s
    return _verdict(
        found,
        injected,
        false_alarms,
        clean_false_alarms,
        {"smallest_silence_found_s": min(delays) if delays else None},
    )


def below_peers(nodes: int, seed: int) -> dict[str, Any]:
    """Per node one rail at a fraction of its peers' rate, from 0.5 (half the lanes or the
    previous speed grade) to 0.99; clean: every rail at the same rate."""
    rng = np.random.default_rng(seed)
    rates = [RAIL_BYTES_PER_SECOND] * RAILS
    found = injected = false_alarms = 0
    fractions: list[float] = []
    for _ in range(nodes):
        fraction = float(rng.choice([0.5, 0.75, 0.9, 0.99]))
        score = score_below_peers(rates, {int(rng.integers(0, RAILS)): fraction})
        found, injected = found + score.found, injected + score.injected
        false_alarms += score.false_alarms
        if score.smallest_fraction_found is not None:
            fractions.append(score.smallest_fraction_found)
    clean = sum(score_below_peers(rates, {}).false_alarms for _ in range(nodes))
    return _verdict(
        found,
        injected,
        false_alarms,
        clean,
        {"mildest_slowdown_found": max(fractions) if fractions else None},
    )


RAIL_FAULT_S = 240  # each faulty node's run: a fault from second 30-90 on, 150 s of it at least
RAIL_FRACTIONS = (0.5, 0.6, 0.7, 0.8)


def rails(nodes: int, seconds: int, seed: int) -> dict[str, Any]:
    """Every node clean for ``seconds`` (its false alarms), then once more with one rail
    faulty from a random second: even nodes a slow rail (a fraction of its rate), odd
    nodes a light rail (a fraction of its share), the fraction from RAIL_FRACTIONS."""
    rng = np.random.default_rng(seed)
    found = injected = false_alarms = clean = 0
    mildest: dict[str, float] = {}
    for node in range(nodes):
        clean += score_rails(simulate_rails(seed * 1000 + node, seconds), []).false_alarms
        kind = SLOW_RAIL if node % 2 == 0 else LIGHT_RAIL
        fault = RailFault(
            int(rng.integers(0, RAILS)),
            kind,
            float(rng.choice(RAIL_FRACTIONS)),
            int(rng.integers(30, 90)) * 1_000_000_000,
        )
        score = score_rails(simulate_rails(seed * 1000 + node, RAIL_FAULT_S, [fault]), [fault])
        found, injected = found + score.found, injected + score.injected
        false_alarms += score.false_alarms
        for fraction in score.fractions_found:
            mildest[kind] = max(mildest.get(kind, 0.0), fraction)
    return _verdict(
        found,
        injected,
        false_alarms,
        clean,
        {
            "mildest_slowdown_found": mildest.get(SLOW_RAIL),
            "mildest_deficit_found": mildest.get(LIGHT_RAIL),
        },
    )


def pfc_storms(nodes: int, seconds: int, seed: int) -> dict[str, Any]:
    """The PFC watchdog over every node's pause counters: two storms of each magnitude from
    0.5 to 5 s per node at seeded times, ports and directions; clean: congestion pauses only
    (burstscope.testing.faults_pfc)."""
    score = score_pfc_watchdog(seed=seed, nodes=nodes, seconds=float(seconds))
    clean = pfc_false_alarms(seed=seed, nodes=nodes, seconds=float(seconds))
    found = round(score.recall * score.injected)
    smallest = score.smallest_found_ns
    return _verdict(
        found,
        score.injected,
        score.detected - found,
        clean,
        {"smallest_storm_found_s": None if smallest is None else smallest / 1e9},
    )


def throttle(nodes: int, seed: int) -> dict[str, Any]:
    """Each saturated or long-burst second's cause, on simulated nodes whose slow counters
    carry PFC, ECN/CNP and credit-wait episodes of 0.5 to 5 s (burstscope.testing.
    faults_throttle, through the report's model); per second, not per episode: precision and
    recall over the judged seconds of every cause but clean, a clean second called throttled
    being the false alarm. ``nodes`` simulated traces of about 80 s each."""
    found = injected = false_alarms = 0
    shortest: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="burstscope-culprits-") as scratch:
        for node in range(nodes):
            scores = score_node(Path(scratch) / f"node{node}", seed=seed * 1000 + node)
            for cause, score in scores.items():
                if cause == CLEAN:
                    false_alarms += score.truth_seconds - score.correct_seconds
                    continue
                found += score.correct_seconds
                injected += score.truth_seconds
                false_alarms += score.called_seconds - score.correct_seconds
                if score.smallest_found_seconds is not None:
                    shortest[cause] = min(
                        shortest.get(cause, score.smallest_found_seconds),
                        score.smallest_found_seconds,
                    )
    return _verdict(
        found,
        injected,
        false_alarms,
        0,  # the clean seconds' misses are counted in false_alarms above
        {"shortest_episode_found_s": shortest},
    )


STRAGGLER_INJECTED_S = 900  # the injected job's run: about 270 steps, 400 late (host, step)


def stragglers(nodes: int, clean: SimulatedFleet, seed: int) -> dict[str, Any]:
    """The job's nodes clean (its false alarms: any straggler named), then for
    STRAGGLER_INJECTED_S with a straggler on every fourth node, 2, 3, 5, 10 or 20 ms late in
    every 3rd to 5th step (faults_stragglers.injected_group); per (host, step)."""
    seconds = min(STRAGGLER_INJECTED_S, clean.seconds)
    score = score_stragglers(simulate_fleet(injected_group(nodes, seed), seconds))
    smallest = score.smallest_found_ns
    return _verdict(
        score.found,
        score.injected,
        score.false_alarms,
        score_stragglers(clean).false_alarms,
        {
            "smallest_delay_found_ms": None if smallest is None else smallest / 1e6,
            "found_of_injected_by_delay_ms": {
                f"{delay / 1e6:g}": [
                    score.delays_found_ns.count(delay),
                    score.delays_injected_ns.count(delay),
                ]
                for delay in sorted(set(score.delays_injected_ns))
            },
            "injected_simulated_seconds": seconds,
            "steps_judged_clean": score_stragglers(clean).judged,
            "steps_judged_injected": score.judged,
        },
    )


SLOW_RAIL_S = 240  # each injected run: the rail slowed from second 30-90 on


def slow_rail_across_nodes(nodes: int, clean: SimulatedFleet, seed: int) -> dict[str, Any]:
    """The same clean job (its false alarms: any step naming a slow rail), then one run per
    fraction of RAIL_FRACTIONS with one training rail at that fraction of its rate on every
    node from a seeded second (a slow link paces its ring); per step."""
    rng = np.random.default_rng(seed)
    found = injected = false_alarms = 0
    mildest = None
    for fraction in RAIL_FRACTIONS:
        rail = int(rng.integers(0, RAILS))
        group = slow_rail_group(nodes, seed, rail, fraction, int(rng.integers(30, 90)))
        score = score_slow_rails(simulate_fleet(group, SLOW_RAIL_S))
        found, injected = found + score.found, injected + score.injected
        false_alarms += score.false_alarms
        if score.fractions_found:
            mildest = max(mildest or 0.0, *score.fractions_found)
    return _verdict(
        found,
        injected,
        false_alarms,
        score_slow_rails(clean).false_alarms,
        {
            "mildest_slowdown_found": mildest,
            "injected_simulated_seconds": SLOW_RAIL_S * len(RAIL_FRACTIONS),
            "steps_judged_clean": score_stragglers(clean).judged,
        },
    )


def _verdict(
    found: int, injected: int, false_alarms: int, clean: int, extra: dict[str, Any]
) -> dict[str, Any]:
    precision = scoring.precision(found, false_alarms)
    recall = scoring.recall(found, injected)
    return {
        "injected": injected,
        "found": found,
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "false_alarms_clean_fleet": clean,
        **extra,
        "targets_met": precision >= TARGET_PRECISION
        and recall >= TARGET_RECALL
        and clean <= MAX_FALSE_ALARMS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=24, help="simulated nodes (24)")
    parser.add_argument("--hours", type=float, default=1.0, help="simulated hours (1)")
    parser.add_argument("--seed", type=int, default=1, help="the faults' seed (1)")
    parser.add_argument(
        "--detectors",
        default=",".join(DETECTORS),
        help=f"comma-separated, of {', '.join(DETECTORS)} (all)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.detectors.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(DETECTORS))
    if unknown or not chosen:
        parser.error(f"--detectors: unknown {', '.join(unknown) or 'none given'}")
    if args.nodes < 2:
        parser.error("--nodes must be at least 2")
    across = {"stragglers", "slow_rail_across_nodes"} & set(chosen)
    if across and args.nodes < MIN_NODES:
        parser.error(f"--nodes must be at least {MIN_NODES} for {', '.join(sorted(across))}")
    seconds = int(args.hours * 3600)
    if seconds < SILENCE_S + 180:
        parser.error(f"--hours must leave room for a {SILENCE_S} s silence: at least 0.22")
    started = time.monotonic()
    clean_job: list[SimulatedFleet] = []

    def clean() -> SimulatedFleet:
        """The clean job, simulated once for both detectors across nodes."""
        if not clean_job:
            clean_job.append(simulate_fleet(JobGroup(hosts(args.nodes), (), args.seed), seconds))
        return clean_job[0]

    run = {
        "silence_under_job": lambda: silence(args.nodes, seconds, args.seed),
        "below_peers": lambda: below_peers(args.nodes, args.seed),
        "rails": lambda: rails(args.nodes, seconds, args.seed),
        "pfc_storms": lambda: pfc_storms(args.nodes, seconds, args.seed),
        "throttle": lambda: throttle(args.nodes, args.seed),
        "stragglers": lambda: stragglers(args.nodes, clean(), args.seed),
        "slow_rail_across_nodes": lambda: slow_rail_across_nodes(args.nodes, clean(), args.seed),
    }
    detectors = {name: run[name]() for name in DETECTORS if name in chosen}
    result = {
        "benchmark": "culprits",
        "nodes": args.nodes,
        "simulated_seconds": seconds,
        "detectors": detectors,
        "targets_met": all(d["targets_met"] for d in detectors.values()),
        "wall_seconds": round(time.monotonic() - started, 1),
    }
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for name, figures in detectors.items():
            print(f"{name}: {figures}")
    return 0 if result["targets_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
