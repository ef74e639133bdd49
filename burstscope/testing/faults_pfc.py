"""The PFC storm watchdog scored against the storms the simulation injected (ground truth).

Offline and fast: a simulated fleet's pause counters (collector.simulation.pfc) read as the
watchdog reads them, at its interval with a few milliseconds of jitter, in microseconds as
mlx5 counts them, through the same detector (detectors.pfc_watchdog.storms, which equals
the live StormWatch poll by poll). Nothing here runs in real time: a simulated hour of a
24-node fleet takes seconds.

``score_pfc_watchdog`` injects storms of known start and length and returns precision,
recall, the recall of each magnitude and the smallest magnitude found; ``false_alarms``
counts the storms declared on a clean fleet. ``bench/detection.py`` or any benchmark can
call both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from burstscope.collector.simulation.pfc import (
    DIRECTIONS,
    InjectedStorm,
    place_storms,
    timeline,
)
from burstscope.collector.simulation.profiles import MS, PORTS, SECOND
from burstscope.detectors.pfc_watchdog import (
    DEFAULT_CONFIG,
    DEFAULT_INTERVAL_NS,
    PAUSE_DURATION_NS_PER_UNIT,
    Storm,
    WatchdogConfig,
    storms,
)

# The magnitudes: storms of 0.5 to 5 s.
TARGET_MAGNITUDES_NS = tuple(int(s * SECOND) for s in (0.5, 0.75, 1, 1.5, 2, 3, 4, 5))
# Shorter ones, to find where detection stops.
SHORT_MAGNITUDES_NS = tuple(int(s * SECOND) for s in (0.2, 0.3, 0.35, 0.4, 0.45))
POLL_JITTER_NS = 5 * MS  # a 10 Hz thread wakes a little late, never early
RECALL_FOUND = 0.95  # a magnitude is "found" when at least this share of its storms is


@dataclass(frozen=True, slots=True)
class Detected:
    node: int
    port: int
    direction: str
    storm: Storm


@dataclass(frozen=True, slots=True)
class PfcScore:
    precision: float  # detections that match an injected storm
    recall: float  # injected storms detected
    smallest_found_ns: int | None  # smallest magnitude with recall >= RECALL_FOUND
    recall_by_magnitude: dict[int, float]
    injected: int
    detected: int


def poll_times(seed: int, span_ns: int, interval_ns: int) -> np.ndarray:
    """When a watchdog polling every ``interval_ns`` reads (late by up to 5 ms)."""
    rng = np.random.default_rng([seed, 0x7011])
    nominal = np.arange(0, span_ns, interval_ns, dtype=np.int64)
    return nominal + rng.integers(0, POLL_JITTER_NS, nominal.size)


def node_storms(
    node_seed: int,
    span_ns: int,
    injected: tuple[InjectedStorm, ...] = (),
    config: WatchdogConfig = DEFAULT_CONFIG,
    interval_ns: int = DEFAULT_INTERVAL_NS,
) -> list[tuple[int, str, Storm]]:
    """The storms the watchdog declares on one simulated node: (port, direction, storm)."""
    times = poll_times(node_seed, span_ns, interval_ns)
    found = []
    for port in range(len(PORTS)):
        for direction in DIRECTIONS:
            pauses = timeline(node_seed, port, direction, span_ns, injected)
            counter_us = pauses.paused_ns(times) // PAUSE_DURATION_NS_PER_UNIT
            increment = np.zeros(times.size, dtype=np.int64)
            increment[1:] = np.minimum(
                np.diff(counter_us) * PAUSE_DURATION_NS_PER_UNIT, np.diff(times)
            )
            found += [(port, direction, s) for s in storms(times, increment, config)]
    return found


def _node_seed(seed: int, node: int) -> int:
    return seed * 1_000 + node


def false_alarms(
    seed: int = 0,
    nodes: int = 24,
    seconds: float = 3600.0,
    config: WatchdogConfig = DEFAULT_CONFIG,
    interval_ns: int = DEFAULT_INTERVAL_NS,
) -> int:
    """Storms declared on a clean simulated fleet (congestion pauses only, no storm)."""
    span = int(seconds * SECOND)
    return sum(
        len(node_storms(_node_seed(seed, node), span, (), config, interval_ns))
        for node in range(nodes)
    )


def score_pfc_watchdog(
    seed: int = 0,
    nodes: int = 24,
    seconds: float = 3600.0,
    magnitudes_ns: tuple[int, ...] = TARGET_MAGNITUDES_NS,
    repeats: int = 2,
    config: WatchdogConfig = DEFAULT_CONFIG,
    interval_ns: int = DEFAULT_INTERVAL_NS,
) -> PfcScore:
    """Inject ``repeats`` storms of each magnitude on every node at seeded times and port
    directions, and score what the watchdog declares against them.

    A declared storm matches an injected one on the same node, port and direction when it is
    declared between the injected start and its end plus one window and two polls (the
    latest a window can still reach into it); each injected storm matches at most once.
    """
    span = int(seconds * SECOND)
    lengths = tuple(m for m in magnitudes_ns for _ in range(repeats))
    matched: dict[int, list[bool]] = {m: [] for m in magnitudes_ns}
    declared = true_positive = 0
    late = config.window_ns + 2 * interval_ns
    for node in range(nodes):
        node_seed = _node_seed(seed, node)
        injected = place_storms(node_seed, lengths, len(PORTS), span)
        found = node_storms(node_seed, span, injected, config, interval_ns)
        declared += len(found)
        used: set[int] = set()
        for truth in injected:
            hit = next(
                (
                    index
                    for index, (port, direction, storm) in enumerate(found)
                    if index not in used
                    and port == truth.port
                    and direction == truth.direction
                    and truth.start_ns <= storm.start_ns <= truth.end_ns + late
                ),
                None,
            )
            if hit is not None:
                used.add(hit)
            matched[truth.duration_ns].append(hit is not None)
        true_positive += len(used)
    by_magnitude = {m: float(np.mean(hits)) for m, hits in matched.items()}
    found_magnitudes = [m for m, share in by_magnitude.items() if share >= RECALL_FOUND]
    total = sum(len(hits) for hits in matched.values())
    return PfcScore(
        precision=true_positive / declared if declared else 1.0,
        recall=true_positive / total if total else 0.0,
        smallest_found_ns=min(found_magnitudes) if found_magnitudes else None,
        recall_by_magnitude=by_magnitude,
        injected=total,
        detected=declared,
    )
