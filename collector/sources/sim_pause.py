"""The simulated PFC pause counters alone: what the PFC watchdog polls on ``--source sim``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from burstscope.collector.simulation.pfc import (
    DIRECTIONS,
    PAUSE_DURATION_COUNTERS,
    InjectedStorm,
    LivePauses,
)
from burstscope.collector.simulation.profiles import PORTS
from burstscope.collector.sources.base import SlowReading
from burstscope.detectors.counters import RESETTING_64


@dataclass
class SimPauseSource:
    """``{rx,tx}_prio3_pause_duration`` (microseconds, as mlx5's) of every simulated port, on
    the model's clock: congestion pauses always, storms where ``storms`` injects them (model
    time, ns since ``zero_monotonic_ns``)."""

    seed: int = 0
    zero_monotonic_ns: int = field(default_factory=time.monotonic_ns)
    storms: tuple[InjectedStorm, ...] = ()
    name: str = "pfc-watchdog:sim"
    _pauses: list[tuple[str, int, str, LivePauses]] = field(
        init=False, default_factory=list, repr=False
    )

    def open(self) -> None:
        self._pauses = [
            (
                port.device,
                port.port,
                PAUSE_DURATION_COUNTERS[direction],
                LivePauses(self.seed, index, direction, self.storms),
            )
            for index, port in enumerate(PORTS)
            for direction in DIRECTIONS
        ]

    def poll(self) -> list[SlowReading]:
        now = max(time.monotonic_ns() - self.zero_monotonic_ns, 0)
        return [
            SlowReading(device, port, name, pauses.paused_ns_at(now) // 1_000, RESETTING_64)
            for device, port, name, pauses in self._pauses
        ]

    def close(self) -> None:
        self._pauses = []
