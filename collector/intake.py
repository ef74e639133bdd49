"""The ring drained: each port's new rows stating the line rate in force for each, recorded.

This is the one place that decides the rate in force. The slow poller re-reads every port's
data rate (``DATA_RATE_GAUGE``) about once a second; a reading that differs from the rate
in force applies to the rows sampled at or after it, and every row handed on (to the
detectors, to a trace) states the rate it is divided by. ``agent --record`` and ``record``
both record through ``Intake.take``, so a trace across a renegotiated link states the new
rate from the change on whichever command wrote it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from burstscope.collector.ring import Ring, RingReader
from burstscope.collector.slow_poller import SlowPoller
from burstscope.collector.sources.base import DATA_RATE_GAUGE, PortSpec
from burstscope.collector.trace.schema import PortColumns, SlowRow

# How often the ring is drained. Each drain through the detectors costs a fixed numpy
# overhead per port direction, so fewer, larger drains cost less per sample
# (bench/detection.py measures both): the agent drains every AGENT_DRAIN_SECONDS; the
# interactive view and a recording alone every DRAIN_SECONDS.
DRAIN_SECONDS = 0.1
AGENT_DRAIN_SECONDS = 1.0

# Where the rows go when a trace is kept: the samples, then the slow readings beside them.
Record = Callable[[Sequence[PortColumns], Sequence[SlowRow]], None]


@dataclass(frozen=True, slots=True)
class Taken:
    """What one drain took from the ring, in the source's port order."""

    columns: list[PortColumns]  # each row stating the line rate in force for it
    rates: tuple[int, ...]  # per port, the rate in force after these rows (0: unknown)
    failed_reads: tuple[int, ...]  # per port, readings that failed since the last drain
    # Per port, data counter readings refused since the last drain: (file, reason) -> count.
    refused: tuple[dict[tuple[str, str], int], ...]
    lateness_ns: npt.NDArray[np.int64]  # of every tick
    read_ns: npt.NDArray[np.int64]  # of every successful read


class Intake:
    """Follows one sampler's ring; the rates in force live here and nowhere else."""

    def __init__(self, ring: Ring, ports: tuple[PortSpec, ...], record: Record | None) -> None:
        """``ports`` with the rate each starts at; ``record``: where rows go (None: nowhere)."""
        self.reader = RingReader(ring, ports)
        self.rates = [spec.line_rate_bytes_per_second for spec in ports]
        self.record = record

    def follow(self, ring: Ring, ports: tuple[PortSpec, ...]) -> None:
        """Drain a new ring (a restarted sampler, a new port set): kept ports keep their rate
        in force (the slow poll follows it); new ones start at their own."""
        kept = dict(zip(((s.device, s.port) for s in self.reader.ports), self.rates, strict=True))
        self.reader = RingReader(ring, ports)
        self.rates = [
            kept.get((spec.device, spec.port), spec.line_rate_bytes_per_second) for spec in ports
        ]

    def take(self, slow: SlowPoller | None) -> Taken:
        """Every row the sampler wrote since the last call, each with its rate in force,
        recorded (with ``slow``'s readings since then) before it is returned."""
        reader = self.reader
        missing_before = list(reader.missing_by_port)
        refused_before = [dict(refused) for refused in reader.refused_by_port]
        columns, lateness, read_ns = reader.poll_with_timing()
        offset = reader.wall_offset_ns
        changes = self._rate_changes(slow, offset)
        stamped = [
            self._stamped(index, port, changes.get(index)) for index, port in enumerate(columns)
        ]
        if self.record is not None:
            self.record(stamped, slow.take_rows(offset) if slow is not None else [])
        return Taken(
            stamped,
            tuple(self.rates),
            tuple(
                now - before
                for now, before in zip(reader.missing_by_port, missing_before, strict=True)
            ),
            tuple(
                _new_refusals(now, before)
                for now, before in zip(reader.refused_by_port, refused_before, strict=True)
            ),
            lateness,
            read_ns,
        )

    def _rate_changes(self, slow: SlowPoller | None, offset_ns: int) -> dict[int, tuple[int, int]]:
        """Ports whose data rate, as the slow sources last read it, differs from the rate in
        force: port index -> (new rate, wall-clock time of the reading)."""
        if slow is None:
            return {}
        found = slow.gauge(DATA_RATE_GAUGE)
        changes = {}
        for index, (spec, rate) in enumerate(zip(self.reader.ports, self.rates, strict=True)):
            reading = found.get((spec.device, spec.port))
            # An unreadable rate (0) keeps the last usable one: utilization stays honest
            # for the link as last seen, and a link that lost its width carries nothing.
            if reading is not None and reading[0] > 0 and reading[0] != rate:
                changes[index] = (reading[0], reading[1] + offset_ns)
        return changes

    def _stamped(
        self, index: int, port: PortColumns, change: tuple[int, int] | None
    ) -> PortColumns:
        """The port's rows, each with the rate in force for it; a change applies to the rows
        sampled at or after its reading, and to every row after them."""
        rate = self.rates[index]
        if change is None:
            return dataclasses.replace(port, line_rate_bytes_per_second=rate)
        new, at = change
        self.rates[index] = new
        rates = np.full(port.timestamp_ns.size, new, dtype=np.int64)
        rates[: int(np.searchsorted(port.timestamp_ns, at))] = rate
        return dataclasses.replace(port, line_rate_bytes_per_second=rates)


def _new_refusals(
    now: dict[tuple[str, str], int], before: dict[tuple[str, str], int]
) -> dict[tuple[str, str], int]:
    """The refused readings counted since ``before``, by (counter file, reason)."""
    return {
        key: count - before.get(key, 0) for key, count in now.items() if count > before.get(key, 0)
    }
