"""Supervision of a pipeline's sampler process and slow poller: restart rules and backoff.

A sampler that died or stopped ticking, or a slow poller thread that ended or hung in a
read, is restarted after a backoff that doubles from FIRST_RESTART_SECONDS to
MAX_RESTART_SECONDS and starts over after HEALTHY_SECONDS of good running. More than
MAX_RESTARTS restarts within RESTART_WINDOW_SECONDS is a fault restarting does not cure:
supervision gives up (``on_fatal``) so the service manager sees the agent fail, the way
systemd's StartLimitBurst= within StartLimitIntervalSec= gives up on a unit
(systemd.unit(5)).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from burstscope.collector.ring import Ring
from burstscope.collector.sampler import Sampler, SamplerError
from burstscope.collector.slow_poller import SlowPoller
from burstscope.collector.sources.base import CounterSource

_LOG = logging.getLogger(__name__)

FIRST_RESTART_SECONDS = 0.25
MAX_RESTART_SECONDS = 30.0
HEALTHY_SECONDS = 60.0
MAX_RESTARTS = 4
RESTART_WINDOW_SECONDS = 120.0
# No tick for this long (or three intervals, if longer): the sampler is stalled.
SAMPLER_STALL_SECONDS = 5.0
# A slow poll busy for this long (or ten poll intervals, if longer) is stuck.
SLOW_STALL_SECONDS = 30.0


class Supervised(Protocol):
    """What supervision needs of a pipeline (collector.pipeline.Pipeline)."""

    source: CounterSource
    sampler: Sampler
    slow: SlowPoller | None
    interval_ns: int

    def heartbeat_ns(self) -> int:
        """CLOCK_MONOTONIC of the sampler's latest tick; 0 before the first."""
        ...

    def drain(self) -> None:
        """Take in what the sampler wrote, as the pipeline's drain does."""
        ...

    def adopt_sampler(self, sampler: Sampler, ring: Ring) -> None:
        """Drain ``sampler``'s ring from now on, in place of the one that failed."""
        ...


@dataclass(slots=True)
class _Watch:
    """Restart bookkeeping of one supervised component."""

    name: str
    restarts: int = 0
    recent: list[float] = field(default_factory=list)  # monotonic times of recent failures
    backoff: float = FIRST_RESTART_SECONDS
    restart_at: float | None = None  # set while waiting to restart
    healthy_since: float = 0.0

    def failed(self, now: float) -> bool:
        """Record a failure; False when there were too many to keep restarting."""
        self.recent = [t for t in self.recent if now - t < RESTART_WINDOW_SECONDS]
        self.recent.append(now)
        if now - self.healthy_since >= HEALTHY_SECONDS:
            self.backoff = FIRST_RESTART_SECONDS
        self.restart_at = now + self.backoff
        self.backoff = min(self.backoff * 2, MAX_RESTART_SECONDS)
        return len(self.recent) <= MAX_RESTARTS


class Supervisor:
    """Checks the pipeline's sampler and slow poller; restarts them, or gives up."""

    def __init__(self, pipeline: Supervised, on_fatal: Callable[[str], None]) -> None:
        """``on_fatal(reason)``: called once, when restarting does not cure a fault."""
        self.pipeline = pipeline
        self.on_fatal = on_fatal
        self._sampler = _Watch("sampler")
        self._slow = _Watch("slow_poller")
        self.failure: str | None = None  # why supervision gave up

    @property
    def restarts(self) -> dict[str, int]:
        """Restarts so far, by component: sampler, slow_poller."""
        return {watch.name: watch.restarts for watch in (self._sampler, self._slow)}

    def started(self) -> None:
        """The components just started: healthy from now."""
        self._sampler.healthy_since = self._slow.healthy_since = time.monotonic()

    def check(self) -> None:
        """One round of supervision (the pipeline thread, about every 100 ms)."""
        if self.failure is not None:
            return
        now = time.monotonic()
        self._check_sampler(now)
        slow = self.pipeline.slow
        if self.failure is None and slow is not None:
            self._check_slow(slow, now)

    def _give_up(self, component: str, reason: str) -> None:
        self.failure = (
            f"{reason}; {MAX_RESTARTS + 1} failures within {RESTART_WINDOW_SECONDS:g} s: "
            f"giving up on the {component}"
        )
        _LOG.critical("%s", self.failure)
        self.on_fatal(self.failure)

    def _check_sampler(self, now: float) -> None:
        watch = self._sampler
        if watch.restart_at is not None:
            if now >= watch.restart_at:
                self._restart_sampler(watch, now)
            return
        pipeline = self.pipeline
        sampler = pipeline.sampler
        reason = None
        if not sampler.alive:
            reason = f"the sampler process died ({sampler.failure()})"
        else:
            stall_ns = max(SAMPLER_STALL_SECONDS * 1e9, 3 * pipeline.interval_ns)
            heartbeat = pipeline.heartbeat_ns()
            if heartbeat and time.monotonic_ns() - heartbeat > stall_ns:
                reason = (
                    f"the sampler process stalled (pid {sampler.pid}: no tick for "
                    f"{(time.monotonic_ns() - heartbeat) / 1e9:.1f} s); killed"
                )
                sampler.kill()
        if reason is None:
            return
        pipeline.drain()  # what it wrote before it went
        self._restart_later(watch, "sampler", reason, now)

    def _restart_sampler(self, watch: _Watch, now: float) -> None:
        watch.restart_at = None
        pipeline = self.pipeline
        candidate = Sampler(pipeline.source, pipeline.sampler.config)
        try:
            ring = candidate.start()
        except SamplerError as exc:
            candidate.close()
            reason = f"the sampler did not restart: {exc}"
            if not watch.failed(now):
                self._give_up("sampler", reason)
            else:
                _LOG.error("%s; trying again in %.2g s", reason, watch.backoff / 2)
            return
        pipeline.adopt_sampler(candidate, ring)
        watch.restarts += 1
        watch.healthy_since = time.monotonic()
        _LOG.warning(
            "sampler restarted (pid %s, restart %d); each port's first sample is a new baseline",
            candidate.pid,
            watch.restarts,
        )

    def _check_slow(self, slow: SlowPoller, now: float) -> None:
        watch = self._slow
        if watch.restart_at is not None:
            if now >= watch.restart_at:
                watch.restart_at = None
                slow.restart()
                watch.restarts += 1
                watch.healthy_since = now
                _LOG.warning("slow poller restarted (restart %d)", watch.restarts)
            return
        reason = None
        busy_since = slow.busy_since_ns
        stall_ns = max(SLOW_STALL_SECONDS, 10 * slow.interval_seconds) * 1e9
        if not slow.alive:
            reason = f"the slow poller thread ended ({slow.failure or 'no reason given'})"
        elif busy_since is not None and time.monotonic_ns() - busy_since > stall_ns:
            reason = (
                f"the slow poller is stuck reading {slow.busy_source} for "
                f"{(time.monotonic_ns() - busy_since) / 1e9:.0f} s"
            )
        if reason is None:
            return
        self._restart_later(watch, "slow poller", reason, now)

    def _restart_later(self, watch: _Watch, name: str, reason: str, now: float) -> None:
        """Schedule a restart after the backoff, or give up after too many failures."""
        if not watch.failed(now):
            self._give_up(name, reason)
            return
        assert watch.restart_at is not None
        _LOG.error(
            "%s; restarting it in %.2g s (restart %d)",
            reason,
            watch.restart_at - now,
            watch.restarts + 1,
        )
