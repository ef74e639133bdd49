"""Timing the sampler's own data counter reads: ``discover --probe`` and the agent's judgement.

On mlx5 every read of a ``counters/`` file is a firmware command: show_pma_counter builds a
PerfMgt GET and calls the driver's process_mad, one call per file and no cache
(drivers/infiniband/core/sysfs.c), and mlx5 answers the data counters with one
QUERY_VPORT_COUNTER command, or a MAD_IFC command without the vport_counters capability
(drivers/infiniband/hw/mlx5/mad.c, process_pma_cmd). What a tick's reads cost therefore
depends on the HCA, its firmware and its load, and decides how fine an interval is honest.
Both roads here measure exactly what the sampler reads, the way it reads it: the source's
open descriptors, read by the sampler's own tick (collector.sampler.ticking_for: the
compiled tick where it is built, the Python path otherwise) into a ring, and they judge the
rows with one function (detectors.read_cost): the probe right away, back to back and then in
a sampler process at the requested interval; the agent from its sampler's first
``JUDGE_SECONDS``, once, reading the ring a single time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from burstscope.collector.ring import Field, Ring, RingRows
from burstscope.collector.sampler import MIN_INTERVAL_NS, Sampler, SamplerConfig, ticking_for
from burstscope.collector.sources.base import STATUS_MISSING, CounterSource, PortSpec
from burstscope.detectors.read_cost import (
    INTERVAL_GRAIN_NS,
    MARGIN,
    Spread,
    finest_interval_ns,
    spread,
    tick_read_windows,
)

# The agent judges from its sampler's first seconds (counting missed deadlines, so a sampler
# whose ticks overrun is judged as soon as one that keeps pace), and from 20 ticks at least.
JUDGE_SECONDS = 2.0
JUDGE_MIN_TICKS = 20
# Back to back: this many ticks, or this long, whichever comes first.
BACK_TO_BACK_TICKS = 1000
BACK_TO_BACK_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class ReadCost:
    """The reads of ``ticks`` ticks: per port (the source's order) and the whole tick's window."""

    ports: tuple[Spread | None, ...]  # None: the port was never read
    window: Spread | None  # first read's start to last read's end, per tick
    ticks: int

    @property
    def finest_interval_ns(self) -> int | None:
        """The finest honest interval (detectors.read_cost); None when nothing was read."""
        return None if self.window is None else finest_interval_ns(self.window)


def read_cost(rows: RingRows) -> ReadCost:
    """What the ticks in ``rows`` spent reading (failed and held ports left out)."""
    read = rows.status < STATUS_MISSING
    ports = tuple(spread(rows.read_ns[read[:, index], index]) for index in range(read.shape[1]))
    windows = tick_read_windows(rows.timestamp_ns, rows.read_ns, read)
    return ReadCost(ports, spread(windows), int(read.shape[0]))


def judge_ring(ring: Ring, interval_ns: int) -> ReadCost | None:
    """The cost of a sampler's ticks so far, once they span JUDGE_SECONDS of deadlines and
    JUDGE_MIN_TICKS ticks; None before (two header reads: nearly free to ask each drain)."""
    ticks = ring.get(Field.TICKS)
    deadlines = ticks + ring.get(Field.MISSED_TICKS)
    if ticks < JUDGE_MIN_TICKS or deadlines * interval_ns < JUDGE_SECONDS * 1e9:
        return None
    return read_cost(ring.read_since(0)[1])


def verdict(cost: ReadCost, interval_ns: int) -> tuple[str, bool]:
    """One sentence on ``cost`` against ``interval_ns``, and whether the interval is too fine."""
    finest = cost.finest_interval_ns
    if finest is None or cost.window is None:
        return f"no successful read in {cost.ticks} ticks: nothing to judge", False
    basis = (
        f"finest honest interval {_ms(finest)} ({MARGIN} x the p99 tick read window "
        f"{_us(cost.window.p99_ns)} over {cost.ticks} ticks, rounded up to "
        f"{_ms(INTERVAL_GRAIN_NS)})"
    )
    if interval_ns >= finest:
        return f"{basis}; --interval {_ms(interval_ns)} fits", False
    return (
        f"--interval {_ms(interval_ns)} is finer than the {basis}: ticks overrun their "
        f"interval and deadlines are skipped; sample at {_ms(finest)} or coarser",
        True,
    )


def _ms(nanoseconds: int) -> str:
    return f"{nanoseconds / 1e6:g} ms"


def _us(nanoseconds: int) -> str:
    return f"{nanoseconds / 1e3:.1f} us"


@dataclass(frozen=True, slots=True)
class Probe:
    """``discover --probe``: the same reads back to back and at ``interval_ns``."""

    ports: tuple[PortSpec, ...]
    interval_ns: int
    back_to_back: ReadCost
    paced: ReadCost  # in a sampler process, as the agent would read: the judgement's basis
    compiled: bool  # the compiled tick read them (else the Python path)

    def to_json(self) -> dict[str, Any]:
        def figures(item: Spread | None) -> dict[str, int] | None:
            if item is None:
                return None
            return {"p50_ns": item.p50_ns, "p99_ns": item.p99_ns, "max_ns": item.max_ns}

        return {
            "interval_ns": self.interval_ns,
            "compiled_tick": self.compiled,
            "ports": [
                {
                    "device": spec.device,
                    "port": spec.port,
                    "back_to_back": figures(self.back_to_back.ports[index]),
                    "at_interval": figures(self.paced.ports[index]),
                }
                for index, spec in enumerate(self.ports)
            ],
            "tick_read_window": {
                "back_to_back": figures(self.back_to_back.window),
                "at_interval": figures(self.paced.window),
            },
            "ticks": {"back_to_back": self.back_to_back.ticks, "at_interval": self.paced.ticks},
            "finest_interval_ns": self.paced.finest_interval_ns,
        }


def probe(source: CounterSource, interval_ns: int, timeout: float = 120.0) -> Probe:
    """Time ``source``'s reads back to back here, then in a sampler at ``interval_ns``
    until judge_ring judges them (JUDGE_SECONDS); SamplerError if it cannot start."""
    back_to_back, compiled = _back_to_back(source)
    with Sampler(source, SamplerConfig(interval_ns=interval_ns)) as ring:
        deadline = time.monotonic() + timeout
        while (paced := judge_ring(ring, interval_ns)) is None:
            if time.monotonic() > deadline:
                paced = read_cost(ring.read_since(0)[1])
                break
            time.sleep(0.05)
    return Probe(source.ports, interval_ns, back_to_back, paced, compiled)


def _back_to_back(source: CounterSource) -> tuple[ReadCost, bool]:
    """The sampler's tick over an in-process ring, run again as soon as it returns."""
    ring = Ring.create(len(source.ports), BACK_TO_BACK_TICKS + 2)
    try:
        source.open()
        try:
            ticking = ticking_for(source, ring, MIN_INTERVAL_NS)
            ends = time.monotonic_ns() + int(BACK_TO_BACK_SECONDS * 1e9)
            for _ in range(BACK_TO_BACK_TICKS):
                ticking.tick(0)
                if time.monotonic_ns() > ends:
                    break
        finally:
            source.close()
        return read_cost(ring.read_since(0)[1]), ticking.compiled
    finally:
        ring.close()
