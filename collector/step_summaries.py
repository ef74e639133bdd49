"""The running agent's steps: one summary per step of the node's training rails, for MQTT.

detectors.stragglers.StepSplitter cuts a node's steps from its training rails' transmit
counters (a run of active samples, any rail, closed by ``quiet`` of silence: its onset,
end, and per rail the first and last bytes, bytes and peak). ``LiveSteps`` feeds it from
the pipeline: every port's transmit readings as the drain hands them over (``feed``, the
state lock held), and once a drain ``close`` hands the steps that are over to the
listeners (the MQTT publisher: ``burstscope/<host>/steps``), tagged with the jobs holding
the rails then. The fleet consumer (``burstscope stragglers``) matches them across the
nodes of a job.

Which ports are the training rails is decided as detectors.rails decides it for the rails
side by side (``rail_groups``: ports of one line rate, three or more, a job's storage NIC
left out), anew at every drain; of several such groups, the largest (the faster on a tie).
A port that stops being read (failed reads, a reload that removed it) leaves the rails once
it is ``STALE_NS`` behind the others, or no step would ever close. When the rails change,
the splitter starts afresh: a step in progress then is lost, not cut wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from burstscope.collector.jobs.model import COMPUTE, STORAGE, JobTable
from burstscope.collector.sources.base import PortSpec
from burstscope.detectors.arrays import I64, B
from burstscope.detectors.rails import rail_groups
from burstscope.detectors.stragglers import FLOOR, QUIET_NS, NodeStep, StepLimits, StepSplitter

_LOG = logging.getLogger(__name__)

# A rail read this far behind the newest rail is left out: the splitter closes a step only
# once every rail has been read past its quiet end.
STALE_NS = 2_000_000_000
PortKey = tuple[str, int]
StepListener = Callable[[NodeStep], None]


@dataclass(frozen=True, slots=True)
class StepSettings:
    """``[steps]``: whether the agent publishes its steps, and how it cuts them."""

    publish: bool = False
    quiet_ns: int = QUIET_NS
    floor: float = FLOOR

    @property
    def limits(self) -> StepLimits:
        return StepLimits(quiet_ns=self.quiet_ns, floor=self.floor)

    def fits(self, interval_ns: int) -> bool:
        """Whether steps can be cut at this sampling interval: a silence of ``quiet`` must
        be more than two samples, or one missed sample would end a step."""
        return self.quiet_ns > 2 * interval_ns


def step_settings(
    config_get: Callable[[str, str, Any], Any], mqtt: bool, interval_ns: int
) -> StepSettings:
    """The file's ``[steps]`` over defaults: published by default when MQTT is on (``mqtt``)
    and the sampling interval is fine enough for ``quiet`` (a coarser one leaves them off:
    ``StepSettings.fits``); ValueError (one line) for a combination asked for that cannot
    work."""
    publish = config_get("steps", "publish", None)
    if publish and not mqtt:
        raise ValueError("steps.publish needs MQTT (--mqtt or [mqtt] url) to publish to")
    settings = StepSettings(
        mqtt if publish is None else bool(publish),
        config_get("steps", "quiet", QUIET_NS),
        config_get("steps", "floor", FLOOR),
    )
    if not settings.publish or settings.fits(interval_ns):
        return settings
    if publish is None and config_get("steps", "quiet", None) is None:
        return replace(settings, publish=False)  # the agent says why at start
    raise ValueError(
        f"steps.quiet {settings.quiet_ns / 1e6:g} ms must be more than two sampling "
        f"intervals ({interval_ns / 1e6:g} ms each): one missed sample would end a step"
    )


def rail_label(device: str, port: int) -> str:
    """A rail as step summaries name it."""
    return f"{device}/{port}"


@dataclass(slots=True)
class _Seen:
    spec: PortSpec  # as last fed: the rate in force
    latest_ns: int  # the latest reading's end


def training_rails(
    ports: list[tuple[PortKey, int]], storage: set[PortKey] | frozenset[PortKey] = frozenset()
) -> tuple[PortKey, ...]:
    """The node's training rails among (port, line rate): detectors.rails' peer groups, the
    largest group (the faster on a tie), in port order; () when no group has three rails."""
    groups = rail_groups(ports, storage)
    sizes: dict[int, int] = {}
    for group in groups.values():
        if group >= 0:
            sizes[group] = sizes.get(group, 0) + 1
    if not sizes:
        return ()
    # Group ids rise with the line rate (peer_groups): the higher id wins a tie.
    chosen = max(sizes, key=lambda group: (sizes[group], group))
    return tuple(sorted(key for key, group in groups.items() if group == chosen))


class LiveSteps:
    """One node's steps from its training rails, fed by the pipeline thread only."""

    def __init__(self, host: str, interval_ns: int, limits: StepLimits | None = None) -> None:
        self.host = host
        self.interval_ns = interval_ns
        self.limits = limits or StepLimits()
        self.listeners: list[StepListener] = []
        self.published = 0  # steps handed to the MQTT publisher (the agent counts them)
        self.rails: tuple[PortKey, ...] = ()  # the training rails in force
        self._seen: dict[PortKey, _Seen] = {}
        self._splitter = StepSplitter(host, interval_ns, self.limits)

    def feed(
        self, spec: PortSpec, stamps_ns: I64, values: npt.NDArray[np.integer], restart: B
    ) -> None:
        """One port's transmit readings of this drain (interval ends, cumulative bytes, the
        readings with no delta into them), in the rate in force for them."""
        if not len(stamps_ns):
            return
        key = (spec.device, spec.port)
        self._seen[key] = _Seen(spec, int(stamps_ns[-1]))
        if key in self.rails:
            self._splitter.feed(
                rail_label(*key),
                spec.line_rate_bytes_per_second,
                stamps_ns,
                # The kernel's counters are far below 2**63: as signed, the splitter's deltas.
                values.astype(np.int64, copy=False),
                restart,
            )

    def close(self, table: JobTable) -> list[NodeStep]:
        """Once a drain: the steps over by now, tagged with the jobs holding the rails in
        ``table``, to every listener; then the rails for the next drain."""
        self._splitter.jobs = tuple(
            sorted(
                {
                    h.job_id
                    for h in table.holdings
                    if h.role == COMPUTE and (h.device, h.port) in self.rails
                }
            )
        )
        steps = self._splitter.close()
        for step in steps:
            for listener in self.listeners:
                listener(step)
        self._choose(table)
        return steps

    def _choose(self, table: JobTable) -> None:
        if not self._seen:
            return
        newest = max(seen.latest_ns for seen in self._seen.values())
        current = [
            (key, seen.spec.line_rate_bytes_per_second)
            for key, seen in sorted(self._seen.items())
            if seen.spec.line_rate_bytes_per_second > 0 and newest - seen.latest_ns <= STALE_NS
        ]
        storage = {(h.device, h.port) for h in table.holdings if h.role == STORAGE}
        rails = training_rails(current, storage)
        interval = max(
            [self.interval_ns]
            + [self._seen[key].spec.min_read_interval_ns for key in rails if key in self._seen]
        )
        if rails == self.rails and interval == self._splitter.interval_ns:
            return
        if rails:
            _LOG.info(
                "step summaries: %d training rail(s) %s",
                len(rails),
                ", ".join(rail_label(*key) for key in rails),
            )
        elif self.rails:
            _LOG.info("step summaries: no training rails (fewer than three of one line rate)")
        self.rails = rails
        self._splitter = StepSplitter(self.host, interval, self.limits)
