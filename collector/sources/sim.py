"""The simulated node as a fast counter source: ``--source sim[:PROFILE[:SEED]]``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from burstscope.collector.discovery import DATA_COUNTER_OCTETS, DeviceInfo
from burstscope.collector.simulation.congestion import SATURATED, congestion_counters
from burstscope.collector.simulation.cursor import CounterCursor
from burstscope.collector.simulation.model import Schedule, TrafficModel
from burstscope.collector.simulation.profiles import (
    DEFAULT_PROFILE,
    MS,
    PORTS,
    SECOND,
    SimPort,
    profile_named,
)
from burstscope.collector.sources.base import (
    DATA_RATE_GAUGE,
    STATUS_OK,
    STATUS_REBASELINE,
    PortSpec,
    SampleRow,
    SlowReading,
    SlowSource,
    SourceError,
    SourceOptions,
    UnsampledPort,
)
from burstscope.collector.sources.hw_counters import hw_counter_spec
from burstscope.collector.sources.port_counters import PORT_COUNTER_SPECS


@dataclass
class SimSource:
    """Reads the traffic model at the current CLOCK_MONOTONIC time, one port at a time.

    Model time zero is ``zero_monotonic_ns`` (by default, when the source is built in the
    parent process), and every profile starts with traffic, so a sampler sees bursts from
    its first second. CLOCK_MONOTONIC is system-wide, so the parent can ask for the ground
    truth of the run (``schedule``) in the same time base the sampler process records.
    """

    profile: str = DEFAULT_PROFILE
    seed: int = 0
    zero_monotonic_ns: int = field(default_factory=time.monotonic_ns)
    line_rates: tuple[tuple[str, int], ...] = ()  # the operator's, by device
    name: str = field(init=False)
    ports: tuple[PortSpec, ...] = field(init=False)
    unsampled: tuple[UnsampledPort, ...] = ()
    notes: tuple[str, ...] = ()
    devices: tuple[DeviceInfo, ...] = ()
    _cursor: CounterCursor | None = field(init=False, default=None, repr=False)
    _next_status: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            profile_named(self.profile)
        except ValueError as exc:
            raise SourceError(str(exc)) from None
        self.name = f"sim:{self.profile}"
        rates = dict(self.line_rates)
        self.ports = tuple(
            PortSpec(p.device, p.port, rates.get(p.device, p.line_rate_bytes_per_second))
            for p in PORTS
        )
        self._next_status = [STATUS_REBASELINE] * len(PORTS)

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_cursor"] = None  # the model's arrays are built where the source is opened
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def open(self) -> None:
        self._cursor = CounterCursor(TrafficModel(self.profile, self.seed), ahead=True)
        self._next_status = [STATUS_REBASELINE] * len(PORTS)

    def close(self) -> None:
        if self._cursor is not None:
            self._cursor.close()
        self._cursor = None

    def read_into(self, row: SampleRow) -> None:
        cursor = self._cursor
        assert cursor is not None, "open() first"
        bytes_at = cursor.bytes_at
        timestamps, xmit, rcv = row.timestamp_ns, row.xmit_bytes, row.rcv_bytes
        durations, status, next_status = row.read_ns, row.status, self._next_status
        octets = DATA_COUNTER_OCTETS
        # A simulated read takes no time of its own: every port's counters are latched at
        # one instant, the midpoint of two clock reads (one pair a tick, not one a port:
        # this runs every millisecond).
        before = time.monotonic_ns()
        after = time.monotonic_ns()
        midpoint = (before + after) >> 1
        model_time = max(midpoint - self.zero_monotonic_ns, 0)
        took = after - before
        for index in range(len(PORTS)):
            # The port counts 4-octet words (see collector.discovery.DATA_COUNTER_OCTETS).
            xmit[index] = bytes_at(2 * index, model_time) // octets * octets
            rcv[index] = bytes_at(2 * index + 1, model_time) // octets * octets
            timestamps[index] = midpoint
            durations[index] = took
            status[index] = next_status[index]
            next_status[index] = STATUS_OK

    def slow_sources(self) -> list[SlowSource]:
        """The simulated node's congestion counters, on the same model and clock (no ethtool:
        nothing here asks the running kernel)."""
        return [SimSlowSource(self.profile, self.seed, self.zero_monotonic_ns, self.line_rates)]

    def schedule(self, start_monotonic_ns: int, end_monotonic_ns: int) -> Schedule:
        """Ground-truth bursts starting in [start, end), in CLOCK_MONOTONIC ns.

        Built by a fresh model (the sampler's model forgets as it goes), so its cost grows
        with the time since model zero.
        """
        zero = self.zero_monotonic_ns
        found = TrafficModel(self.profile, self.seed).schedule(
            max(start_monotonic_ns - zero, 0), max(end_monotonic_ns - zero, 0)
        )
        return Schedule(
            found.port,
            found.direction,
            found.start_ns + np.int64(zero),
            found.end_ns + np.int64(zero),
            found.bytes,
        )


def sim_slow_readings(
    port: SimPort,
    transmit_saturated_ms: float,
    receive_saturated_ms: float,
    data_rate: int | None = None,
) -> list[SlowReading]:
    """What the simulated port's slow sources read after this much saturated time."""
    rate = port.line_rate_bytes_per_second
    readings = [
        SlowReading(port.device, port.port, "state", 4, None),
        SlowReading(port.device, port.port, "rate_bytes_per_second", rate, None),
        SlowReading(port.device, port.port, DATA_RATE_GAUGE, data_rate or rate, None),
    ]
    for name, value in congestion_counters(transmit_saturated_ms, receive_saturated_ms).items():
        spec = PORT_COUNTER_SPECS.get(name) or hw_counter_spec(name)
        readings.append(SlowReading(port.device, port.port, name, value, spec))
    return readings


@dataclass
class SimSlowSource:
    """The simulated node's slow counters: congestion rising with saturated milliseconds.

    Polled at <= 1 Hz in the consumer process, it replays the model on a 1 ms grid since
    the last poll (vectorised, a few hundred microseconds) to count saturated
    milliseconds, then reports what an mlx5 port would (collector.simulation.congestion).
    """

    profile: str = DEFAULT_PROFILE
    seed: int = 0
    zero_monotonic_ns: int = field(default_factory=time.monotonic_ns)
    line_rates: tuple[tuple[str, int], ...] = ()
    name: str = "sim-slow"
    _model: TrafficModel | None = field(init=False, default=None, repr=False)
    _last_ns: int = field(init=False, default=0)
    _saturated_ms: npt.NDArray[np.float64] = field(init=False, repr=False)

    def open(self) -> None:
        self._model = TrafficModel(self.profile, self.seed)
        self._last_ns = max(time.monotonic_ns() - self.zero_monotonic_ns, 0)
        self._saturated_ms = np.zeros((len(PORTS), 2))

    def poll(self) -> list[SlowReading]:
        model = self._model
        assert model is not None, "open() first"
        now = max(time.monotonic_ns() - self.zero_monotonic_ns, 0)
        start = max(self._last_ns, now - 10 * SECOND)  # a long pause is not replayed whole
        grid = np.arange(start, now + 1, MS, dtype=np.int64)
        if grid.size >= 2:
            model.extend_to(int(grid[-1]))
            rates = np.array([p.bytes_per_ns for p in PORTS], dtype=np.float64)[:, None]
            for direction, counters in enumerate(model.counters_at(grid)):
                utilization = np.diff(counters, axis=1) / (rates * MS)
                self._saturated_ms[:, direction] += np.count_nonzero(
                    utilization >= SATURATED, axis=1
                )
            model.forget_before(int(grid[-1]) - SECOND)
            self._last_ns = int(grid[-1])
        readings = []
        for index, port in enumerate(PORTS):
            sent, received = self._saturated_ms[index]
            override = dict(self.line_rates).get(port.device)
            readings += sim_slow_readings(port, float(sent), float(received), override)
        return readings

    def close(self) -> None:
        self._model = None

    def pause_counters(self) -> SlowSource:
        """The simulated PFC pause counters alone, for the PFC watchdog's fast poll."""
        from burstscope.collector.sources.sim_pause import SimPauseSource

        return SimPauseSource(self.seed, self.zero_monotonic_ns)


def from_spec(argument: str | None, options: SourceOptions) -> SimSource:
    """``sim``, ``sim:PROFILE`` or ``sim:PROFILE:SEED``."""
    profile, _, seed_text = (argument or DEFAULT_PROFILE).partition(":")
    try:
        seed = int(seed_text) if seed_text else 0
    except ValueError:
        raise SourceError(f"sim seed {seed_text!r} is not an integer") from None
    return SimSource(profile or DEFAULT_PROFILE, seed, line_rates=options.line_rates)
