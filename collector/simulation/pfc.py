"""The simulated node's PFC pauses: short congestion pauses always, storms only where injected.

Each port direction of the lossless RoCE priority pauses in short episodes, as an incast
does (Poisson, ``PAUSES_PER_SECOND``, exponential lengths of mean ``PAUSE_MEAN_NS``, none
longer than ``PAUSE_MAX_NS``): a working fabric's back-pressure, which a watchdog must not
call a storm. Injected storms are given by start and length (the ground truth): during one
the port is paused ``STORM_DUTY`` of every ``STORM_CYCLE_NS`` or more (a stuck receiver keeps
refreshing its pause, with the odd gap). The times and lengths are plausible constants,
not calibrated on hardware; everything is deterministic by seed.

Counters as mlx5 shows them: ``rx_prio<p>_pause_duration`` is the time this port was paused
by its peer, ``tx_prio<p>_pause_duration`` the time it paused its peer, in microseconds
(drivers/net/ethernet/mellanox/mlx5/core/en_stats.c, pport_per_prio_pfc_stats_desc).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from burstscope.collector.simulation.profiles import MS, SECOND

# The lossless RoCE priority of NVIDIA's RoCE configuration guides (DSCP 26 -> priority 3).
PRIORITY = 3
DIRECTIONS = ("receive", "transmit")
PAUSE_DURATION_COUNTERS = {
    "receive": f"rx_prio{PRIORITY}_pause_duration",
    "transmit": f"tx_prio{PRIORITY}_pause_duration",
}
PAUSES_PER_SECOND = 0.5
PAUSE_MEAN_NS = 20 * MS
PAUSE_MAX_NS = 150 * MS
STORM_CYCLE_NS = 10 * MS
STORM_DUTY = (0.9, 1.0)  # the paused share of each cycle, drawn per storm
CHUNK_NS = 60 * SECOND  # background pauses are drawn a minute at a time


@dataclass(frozen=True, slots=True)
class InjectedStorm:
    """One injected storm: which port direction, when, how long (ground truth)."""

    port: int  # index into the node's ports
    direction: str  # "receive" (the port is paused) or "transmit" (it pauses its peer)
    start_ns: int  # model time
    duration_ns: int

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


def _merge(
    starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The union of intervals [start, end) as sorted, disjoint intervals."""
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.ones(starts.size, dtype=bool)
    new[1:] = starts[1:] > reach[:-1]
    group = np.cumsum(new) - 1
    merged_ends = np.zeros(int(group[-1]) + 1, dtype=np.int64)
    np.maximum.at(merged_ends, group, reach)
    return starts[new], merged_ends


def background_pauses(
    seed: int, port: int, direction: int, chunk: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The congestion pauses starting in one chunk of model time (start, end ns)."""
    rng = np.random.default_rng([seed, port, direction, chunk, 0x50FC])
    count = rng.poisson(PAUSES_PER_SECOND * CHUNK_NS / SECOND)
    starts = np.sort(rng.integers(0, CHUNK_NS, count)).astype(np.int64) + chunk * CHUNK_NS
    lengths = np.minimum(rng.exponential(PAUSE_MEAN_NS, count), PAUSE_MAX_NS).astype(np.int64)
    return starts, starts + np.maximum(lengths, 1)


def storm_pauses(
    storm: InjectedStorm, seed: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """A storm as pause intervals: ``STORM_DUTY`` of every cycle, from its start to its end."""
    rng = np.random.default_rng([seed, storm.port, storm.start_ns, 0x5704])
    duty = rng.uniform(*STORM_DUTY)
    starts = np.arange(storm.start_ns, storm.end_ns, STORM_CYCLE_NS, dtype=np.int64)
    ends = np.minimum(starts + int(duty * STORM_CYCLE_NS), storm.end_ns)
    return starts, ends


class PauseTimeline:
    """Cumulative paused time of one port direction at any model time (ns, from 0)."""

    def __init__(self, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]) -> None:
        self.starts, self.ends = _merge(starts, ends)
        lengths = self.ends - self.starts
        self._before = np.concatenate(([0], np.cumsum(lengths)))  # paused before interval k

    def paused_ns(self, times_ns: npt.ArrayLike) -> npt.NDArray[np.int64]:
        t = np.asarray(times_ns, dtype=np.int64)
        k = np.searchsorted(self.starts, t, side="right") - 1
        inside = np.zeros(t.size, dtype=np.int64)
        some = k >= 0
        ks = k[some]
        inside[some] = np.minimum(t[some] - self.starts[ks], self.ends[ks] - self.starts[ks])
        return np.where(some, self._before[np.maximum(k, 0)] + inside, 0)


def timeline(
    seed: int,
    port: int,
    direction: str,
    span_ns: int,
    storms: tuple[InjectedStorm, ...] = (),
) -> PauseTimeline:
    """The pauses of one port direction over [0, span_ns): background and its storms."""
    which = DIRECTIONS.index(direction)
    parts = [background_pauses(seed, port, which, c) for c in range(-(-span_ns // CHUNK_NS))]
    parts += [storm_pauses(s, seed) for s in storms if s.port == port and s.direction == direction]
    starts = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    ends = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    return PauseTimeline(starts, ends)


def place_storms(
    seed: int, lengths_ns: tuple[int, ...], ports: int, span_ns: int, gap_ns: int = 10 * SECOND
) -> tuple[InjectedStorm, ...]:
    """Storms of the given lengths at seeded times and port directions, one per slot of the
    span, at least ``gap_ns`` apart on a port direction (ground truth for a run)."""
    if not lengths_ns:
        return ()
    slot = span_ns // len(lengths_ns)
    if slot < max(lengths_ns) + 2 * gap_ns:
        raise ValueError(f"{len(lengths_ns)} storms do not fit in {span_ns / SECOND:g} s")
    rng = np.random.default_rng([seed, 0x57A7])
    placed = []
    for index, length in enumerate(lengths_ns):
        start = index * slot + gap_ns + int(rng.integers(0, slot - length - 2 * gap_ns + 1))
        placed.append(
            InjectedStorm(
                int(rng.integers(0, ports)),
                DIRECTIONS[int(rng.integers(0, len(DIRECTIONS)))],
                start,
                int(length),
            )
        )
    return tuple(placed)


class LivePauses:
    """The cumulative paused time of one port direction read forward in time (the live
    simulated source): each reading adds the pauses since the previous one, drawn from the
    chunks around them, so memory stays flat however long the node runs."""

    def __init__(
        self, seed: int, port: int, direction: str, storms: tuple[InjectedStorm, ...] = ()
    ) -> None:
        self.seed, self.port, self.direction = seed, port, direction
        self.storms = tuple(s for s in storms if s.port == port and s.direction == direction)
        self._last_ns: int | None = None
        self._total_ns = 0
        self._chunks: tuple[int, int] | None = None
        self._timeline: PauseTimeline | None = None

    def _around(self, low_ns: int, high_ns: int) -> PauseTimeline:
        # A background pause is shorter than a chunk, so one chunk before covers its tail.
        chunks = (max(low_ns // CHUNK_NS - 1, 0), high_ns // CHUNK_NS + 1)
        if chunks != self._chunks or self._timeline is None:
            which = DIRECTIONS.index(self.direction)
            parts = [background_pauses(self.seed, self.port, which, c) for c in range(*chunks)]
            parts += [storm_pauses(s, self.seed) for s in self.storms]
            self._timeline = PauseTimeline(
                np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            )
            self._chunks = chunks
        return self._timeline

    def paused_ns_at(self, model_ns: int) -> int:
        """Total paused time from the first reading to ``model_ns`` (readings in order)."""
        if self._last_ns is not None and model_ns > self._last_ns:
            timeline = self._around(self._last_ns, model_ns)
            before, after = timeline.paused_ns([self._last_ns, model_ns]).tolist()
            self._total_ns += after - before
        if self._last_ns is None or model_ns > self._last_ns:
            self._last_ns = model_ns
        return self._total_ns
