"""Scores the throttle classifier (detectors/throttle.py) against injected episodes.

A simulated node (collector.tracegen) is given throttling episodes of every cause with known
times, durations and intensities (collector.simulation.congestion.place_episodes); its trace
goes through ``burstscope report``'s model, and each classified second is compared with what
was injected, never with the classifier's own output:

- a candidate second's truth is the cause of an episode covering at least ``min_cover`` of
  it (the first in precedence order where several do), ``clean`` where none touches it, and
  unscored where an episode only grazes it (the counters are read once a second, so a brief
  overlap cannot be placed) or where the episode is shorter than the magnitude scored;
- per cause, precision (of the seconds called that cause, the share that truly were) and
  recall (of the seconds that truly were, the share called so), and the smallest episode
  (duration) with a second called by its cause.

``python -m burstscope.testing.faults_throttle`` prints the table; a benchmark can call
``score_node``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from burstscope.collector.simulation.congestion import (
    XMIT_WAIT_TICK_NS,
    ThrottleEpisode,
    place_episodes,
)
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.trace import TraceInfo, TraceWriter, prepare_output
from burstscope.collector.tracegen import FIXED_EPOCH_NS, simulate_trace
from burstscope.detectors.config import NS_PER_SECOND, Thresholds
from burstscope.detectors.throttle import CAUSES, CLEAN, ThrottleLimits
from burstscope.report_model import PortReport, analyze_paths

# The magnitudes (a PFC storm of 0.5-5 s), and shorter ones to find the floor.
DURATIONS_NS = tuple(
    int(s * NS_PER_SECOND) for s in (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
)
SCORED_FROM_NS = 500_000_000
RAILS = tuple(range(8))  # the storage port (8) is rarely saturated: nothing to classify
UNSCORED = -1


@dataclass(frozen=True, slots=True)
class CauseScore:
    cause: str
    truth_seconds: int  # scored seconds whose truth is this cause
    called_seconds: int  # scored seconds the classifier gave this cause
    correct_seconds: int
    precision: float | None
    recall: float | None
    smallest_found_seconds: float | None  # shortest episode with a second called its cause
    episodes: int


def truth(
    seconds: np.ndarray,
    episodes: Sequence[ThrottleEpisode],
    start_wall_ns: int,
    min_cover: float,
    scored_from_ns: int,
) -> np.ndarray:
    """Each candidate second's true cause (index into CAUSES), or UNSCORED."""
    result = np.full(seconds.size, CAUSES.index(CLEAN), dtype=np.int64)
    begin = seconds * NS_PER_SECOND - start_wall_ns  # model time of each second
    best = np.full(seconds.size, len(CAUSES), dtype=np.int64)
    grazed = np.zeros(seconds.size, dtype=np.bool_)
    for episode in episodes:
        cover = np.clip(
            np.minimum(begin + NS_PER_SECOND, episode.end_ns) - np.maximum(begin, episode.start_ns),
            0,
            None,
        )
        touched = cover > 0
        if episode.duration_ns < scored_from_ns:
            grazed |= touched
            continue
        strong = cover >= min_cover * NS_PER_SECOND
        grazed |= touched & ~strong
        best[strong] = np.minimum(best[strong], CAUSES.index(episode.cause))
    result[grazed] = UNSCORED
    known = best < len(CAUSES)
    result[known] = best[known]
    return result


def score_ports(
    ports: Sequence[PortReport],
    episodes: Sequence[ThrottleEpisode],
    start_wall_ns: int,
    min_cover: float = 0.2,
    scored_from_ns: int = SCORED_FROM_NS,
) -> dict[str, CauseScore]:
    """Precision, recall and smallest magnitude found per cause, over a node's ports (in
    the order of the simulated node's ports)."""
    truths, calls = [], []
    found: dict[str, float] = {}
    for index, port in enumerate(ports):
        for direction in port.directions:
            throttle = direction.throttle
            if throttle is None:
                continue
            mine = [e for e in episodes if e.port == index and e.direction == direction.direction]
            truths.append(truth(throttle.seconds, mine, start_wall_ns, min_cover, scored_from_ns))
            calls.append(throttle.causes)
            begin = throttle.seconds * NS_PER_SECOND - start_wall_ns
            for episode in mine:
                over = (begin < episode.end_ns) & (begin + NS_PER_SECOND > episode.start_ns)
                if (throttle.causes[over] == CAUSES.index(episode.cause)).any():
                    seconds = episode.duration_ns / NS_PER_SECOND
                    found[episode.cause] = min(found.get(episode.cause, seconds), seconds)
    true = np.concatenate(truths) if truths else np.empty(0, np.int64)
    called = np.concatenate(calls) if calls else np.empty(0, np.int64)
    scored = true != UNSCORED
    true, called = true[scored], called[scored]
    scores = {}
    for index, cause in enumerate(CAUSES):
        is_true, is_called = true == index, called == index
        correct = int(np.count_nonzero(is_true & is_called))
        t, c = int(is_true.sum()), int(is_called.sum())
        scores[cause] = CauseScore(
            cause,
            t,
            c,
            correct,
            correct / c if c else None,
            correct / t if t else None,
            found.get(cause),
            sum(1 for e in episodes if e.cause == cause),
        )
    return scores


def score_node(
    directory: Path,
    seed: int = 0,
    durations_ns: tuple[int, ...] = DURATIONS_NS,
    span_ns: int | None = None,
    limits: ThrottleLimits | None = None,
) -> dict[str, CauseScore]:
    """Simulate a node with episodes of every cause into ``directory`` (a new trace), run
    the report's model over it, and score. The tick is the simulated HCA's unless
    ``limits`` says otherwise."""
    gap_ns = 3 * NS_PER_SECOND
    if span_ns is None:  # room for the transmit side's three causes of every duration
        span_ns = 3 * sum(durations_ns) + gap_ns * (3 * len(durations_ns) + 2)
    episodes = place_episodes(seed, durations_ns, RAILS, span_ns, gap_ns)
    model = TrafficModel("moe", seed)
    prepare_output(directory)
    writer = TraceWriter(directory, info=TraceInfo(1_000_000, "sim:moe", "throttle-node", 0))
    simulate_trace(model, writer, span_ns, throttle=episodes)
    limits = limits or ThrottleLimits(xmit_wait_tick_ns=XMIT_WAIT_TICK_NS)
    report = analyze_paths([directory], None, False, Thresholds(), throttle=limits)
    return score_ports(report.ports, episodes, FIXED_EPOCH_NS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--presence", action="store_true", help="judge credit by presence (no tick)"
    )
    args = parser.parse_args(argv)
    limits = ThrottleLimits() if args.presence else None
    with tempfile.TemporaryDirectory() as scratch:
        scores = score_node(Path(scratch) / "trace", args.seed, limits=limits)
    for score in scores.values():
        print(json.dumps(asdict(score)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
