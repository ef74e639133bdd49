"""The simulated node as a fast counter source: ``--source sim[:PROFILE[:SEED]]``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from collector.discovery import DATA_COUNTER_OCTETS
from collector.simulation.cursor import CounterCursor
from collector.simulation.model import Schedule, TrafficModel
from collector.simulation.profiles import DEFAULT_PROFILE, PORTS, profile_named
from collector.sources import SourceOptions
from collector.sources.base import STATUS_OK, STATUS_REBASELINE, PortSpec, SampleRow, SourceError


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
    name: str = field(init=False)
    ports: tuple[PortSpec, ...] = field(init=False)
    _cursor: CounterCursor | None = field(init=False, default=None, repr=False)
    _next_status: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:
            profile_named(self.profile)
        except ValueError as exc:
            raise SourceError(str(exc)) from None
        self.name = f"sim:{self.profile}"
        self.ports = tuple(PortSpec(p.device, p.port, p.line_rate_bytes_per_second) for p in PORTS)
        self._next_status = [STATUS_REBASELINE] * len(PORTS)

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_cursor"] = None  # the model's arrays are built where the source is opened
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def open(self) -> None:
        self._cursor = CounterCursor(TrafficModel(self.profile, self.seed))
        self._next_status = [STATUS_REBASELINE] * len(PORTS)

    def close(self) -> None:
        self._cursor = None

    def read_into(self, row: SampleRow) -> None:
        cursor = self._cursor
        assert cursor is not None, "open() first"
        clock = time.monotonic_ns
        bytes_at = cursor.bytes_at
        zero = self.zero_monotonic_ns
        timestamps, xmit, rcv = row.timestamp_ns, row.xmit_bytes, row.rcv_bytes
        durations, status, next_status = row.read_ns, row.status, self._next_status
        octets = DATA_COUNTER_OCTETS
        for index in range(len(PORTS)):
            # A simulated read takes no time of its own; the midpoint of the two clock
            # reads is the instant the counters are latched, as for a real port.
            before = clock()
            after = clock()
            midpoint = (before + after) >> 1
            model_time = max(midpoint - zero, 0)
            # The port counts 4-octet words (see collector.discovery.DATA_COUNTER_OCTETS).
            xmit[index] = bytes_at(2 * index, model_time) // octets * octets
            rcv[index] = bytes_at(2 * index + 1, model_time) // octets * octets
            timestamps[index] = midpoint
            durations[index] = after - before
            status[index] = next_status[index]
            next_status[index] = STATUS_OK

    def model_time_ns(self, monotonic_ns: int) -> int:
        return monotonic_ns - self.zero_monotonic_ns

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


def from_spec(argument: str | None, options: SourceOptions) -> SimSource:
    """``sim``, ``sim:PROFILE`` or ``sim:PROFILE:SEED``."""
    del options  # the simulated ports have fixed names and line rates
    profile, _, seed_text = (argument or DEFAULT_PROFILE).partition(":")
    try:
        seed = int(seed_text) if seed_text else 0
    except ValueError:
        raise SourceError(f"sim seed {seed_text!r} is not an integer") from None
    return SimSource(profile or DEFAULT_PROFILE, seed)
