"""The PFC storm watchdog's poll thread: only the pause counters of RoCE ports, at 10 Hz.

The slow poller reads every slow counter at most once a second (collector.slow_poller); a
400 ms storm needs the pause counters at 10 Hz or more. This thread, in the consumer
process beside the slow poller and never in the 1 ms sampler process, polls only the
sources' pause counters (``pause_counters()`` of the slow sources that have them: ethtool's
per-priority pause counters, the simulated node's) at ``[pfc_watchdog] interval`` and feeds
each port direction priority to detectors.pfc_watchdog.StormWatch. A storm's start and end
go to the listeners (MQTT) and into the figures the exporter reads.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from burstscope.collector.sources.base import PortSpec, SlowReading, SlowSource
from burstscope.collector.threads import name_os_thread
from burstscope.detectors.counters import CounterTracker
from burstscope.detectors.pfc_watchdog import (
    DEFAULT_END_THRESHOLD,
    DEFAULT_INTERVAL_NS,
    DEFAULT_THRESHOLD,
    DEFAULT_WINDOW_NS,
    PAUSE_DURATION_NS_PER_UNIT,
    StormEvent,
    StormWatch,
    WatchdogConfig,
    paused_ns_from_frames,
)

_LOG = logging.getLogger(__name__)

# mlx5's names (en_stats.c pport_per_prio_pfc_stats_desc): rx_ = received from the peer (this
# port was paused), tx_ = sent (this port paused its peer); _duration in microseconds.
_PAUSE = re.compile(r"^(rx|tx)_prio(\d)_pause(_duration)?$")
DIRECTION_OF = {"rx": "receive", "tx": "transmit"}
# A source that failed waits this long before it is opened again (not every 100 ms).
RETRY_SECONDS = 1.0

StormKey = tuple[str, int, str, int]  # (device, port, direction, priority)


@runtime_checkable
class HasPauseCounters(Protocol):
    """A slow source that can hand out its pause counters alone (ethtool, the simulation)."""

    def pause_counters(self) -> SlowSource: ...


def pause_sources(slow_sources: Sequence[SlowSource]) -> list[SlowSource]:
    """The watchdog's sources: the pause counters of the slow sources that have them."""
    return [s.pause_counters() for s in slow_sources if isinstance(s, HasPauseCounters)]


@dataclass(frozen=True, slots=True)
class WatchdogSettings:
    """``[pfc_watchdog]`` and the --pfc-watchdog flags."""

    enabled: bool = False
    interval_ns: int = DEFAULT_INTERVAL_NS
    window_ns: int = DEFAULT_WINDOW_NS
    threshold: float = DEFAULT_THRESHOLD
    end_threshold: float = DEFAULT_END_THRESHOLD

    @property
    def config(self) -> WatchdogConfig:
        return WatchdogConfig(self.window_ns, self.threshold, self.end_threshold)


def watchdog_settings(config_get: Callable[[str, str, Any], Any], args: Any) -> WatchdogSettings:
    """Flags over the file's ``[pfc_watchdog]`` over defaults; ValueError (one line) when
    the combination cannot work."""

    def pick(flag: str, key: str, default: Any) -> Any:
        value = getattr(args, flag, None)
        return value if value is not None else config_get("pfc_watchdog", key, default)

    interval = pick("pfc_watchdog_interval", "interval", DEFAULT_INTERVAL_NS / 1e9)
    window = pick("pfc_watchdog_window", "window", DEFAULT_WINDOW_NS / 1e9)
    threshold = pick("pfc_watchdog_threshold", "threshold", DEFAULT_THRESHOLD)
    end = config_get("pfc_watchdog", "end_threshold", min(DEFAULT_END_THRESHOLD, threshold / 2))
    settings = WatchdogSettings(
        bool(pick("pfc_watchdog", "enabled", False)),
        round(interval * 1e9),
        round(window * 1e9),
        float(threshold),
        float(end),
    )
    if not 0 < settings.interval_ns <= settings.window_ns // 2:
        raise ValueError(
            f"pfc_watchdog interval {interval:g} s must be positive and at most half the "
            f"window ({window:g} s): a window needs at least two polls"
        )
    try:
        settings.config  # noqa: B018 - validates window and thresholds
    except ValueError as exc:
        raise ValueError(f"pfc_watchdog {exc}") from None
    return settings


@dataclass(frozen=True, slots=True)
class PfcStormEvent:
    """A storm's start or end, for listeners: wall-clock times (ns since the epoch)."""

    device: str
    port: int
    direction: str  # receive: the port was paused; transmit: it paused its peer
    priority: int
    started: bool
    time_ns: int  # the poll that decided it
    start_ns: int  # when the storm was declared
    paused_fraction: float  # the window's paused fraction at that poll
    peak_fraction: float
    paused_seconds: float  # paused time in the storm so far
    window_seconds: float
    basis: str  # "duration" (the driver's pause time) or "frames" (an upper bound)


@dataclass(frozen=True, slots=True)
class WatchdogFigures:
    """What the exporter shows of the watchdog."""

    polls: int
    errors: int
    read_seconds: float
    storms: int  # declared since start
    storming: dict[StormKey, float]  # in a storm now: the latest window's paused fraction
    storm_seconds: dict[tuple[str, int], float]  # paused time inside storms, per port


@dataclass
class _SourceState:
    source: SlowSource
    opened: bool = False
    retry_at_ns: int = 0
    logged: bool = False


@dataclass
class _KeyState:
    tracker: CounterTracker
    last_ns: int | None = None
    basis: str = "duration"


class PfcWatchdog:
    """Polls the pause sources every ``interval_ns`` in one daemon thread."""

    def __init__(
        self,
        sources: Sequence[SlowSource],
        settings: WatchdogSettings = WatchdogSettings(enabled=True),
        line_rate: Callable[[str, int], int | None] = lambda device, port: None,
    ) -> None:
        """``line_rate``: a port's data rate in bytes/s, for drivers that count pause frames
        but not their duration (None: such a port is not watched)."""
        self.settings = settings
        self.watch = StormWatch(settings.config)
        self.line_rate = line_rate
        self.listeners: list[Callable[[PfcStormEvent], None]] = []
        self._sources = [_SourceState(s) for s in sources]
        self._keys: dict[StormKey, _KeyState] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._polls = 0
        self._errors = 0
        self._read_seconds = 0.0
        self._storms = 0
        self._storm_seconds: dict[tuple[str, int], float] = {}
        self._storming: set[StormKey] = set()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name="burstscope-pfc-watchdog", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        for state in self._sources:
            if state.opened:
                state.opened = False
                try:
                    state.source.close()
                except Exception as exc:  # closing must not stop the agent's shutdown
                    _LOG.debug("closing %s: %s", state.source.name, exc)

    def _run(self) -> None:
        name_os_thread()
        interval = self.settings.interval_ns
        due = time.monotonic_ns()
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # never let one poll end the watchdog
                _LOG.exception("PFC watchdog poll failed")
            # Absolute deadlines: a slow poll does not shift the cadence, nor bunch polls.
            now = time.monotonic_ns()
            due += interval
            if due <= now:
                due = now + interval
            self._stop.wait((due - now) / 1e9)

    def poll_once(self) -> None:
        """Read every source once and feed the detector (the thread's step; tests call it)."""
        for state in self._sources:
            readings = self._read(state)
            if readings is not None:
                self.feed(*readings)

    def _read(self, state: _SourceState) -> tuple[list[SlowReading], int] | None:
        now = time.monotonic_ns()
        if not state.opened:
            if now < state.retry_at_ns:
                return None
            try:
                state.source.open()
            except Exception as exc:  # one source's failure stays with it
                self._fail(state, "open", exc, now)
                return None
            state.opened = True
        before = time.monotonic_ns()
        try:
            readings = state.source.poll()
        except Exception as exc:
            self._fail(state, "poll", exc, now)
            return None
        after = time.monotonic_ns()
        with self._lock:
            self._polls += 1
            self._read_seconds += (after - before) / 1e9
        return readings, (before + after) >> 1

    def _fail(self, state: _SourceState, what: str, exc: Exception, now: int) -> None:
        with self._lock:
            self._errors += 1
        if not state.logged:  # once per source: a missing netdev would say it ten times a second
            _LOG.warning(
                "PFC watchdog: %s %s failed (%s: %s); retrying every %g s, counted in "
                "burstscope_pfc_watchdog_errors_total",
                state.source.name,
                what,
                type(exc).__name__,
                exc,
                RETRY_SECONDS,
            )
            state.logged = True
        if state.opened:
            state.opened = False
            try:
                state.source.close()
            except Exception as close_exc:
                _LOG.debug("closing %s: %s", state.source.name, close_exc)
        state.retry_at_ns = now + round(RETRY_SECONDS * 1e9)

    def feed(self, readings: Sequence[SlowReading], timestamp_ns: int) -> list[PfcStormEvent]:
        """One poll's readings (any counters: the pause counters are picked) at CLOCK_MONOTONIC
        ``timestamp_ns``; returns the storms' starts and ends it decided."""
        durations = {
            (r.device, r.port, m.group(1), int(m.group(2)))
            for r in readings
            if (m := _PAUSE.match(r.name)) and m.group(3)
        }
        out = []
        for reading in readings:
            match = _PAUSE.match(reading.name)
            if match is None or reading.counter is None:
                continue
            side, priority, is_duration = match.group(1), int(match.group(2)), match.group(3)
            if not is_duration and (reading.device, reading.port, side, priority) in durations:
                continue  # the driver's duration is the measurement; frames only bound it
            key: StormKey = (reading.device, reading.port, DIRECTION_OF[side], priority)
            increment = self._increment(key, reading, timestamp_ns, bool(is_duration))
            event = self.watch.update(key, timestamp_ns, increment)
            with self._lock:
                if key in self._storming and increment:
                    port = (reading.device, reading.port)
                    self._storm_seconds[port] = self._storm_seconds.get(port, 0.0) + increment / 1e9
                if event is not None:
                    if event.started:
                        self._storms += 1
                        self._storming.add(key)
                        self._storm_seconds.setdefault((reading.device, reading.port), 0.0)
                    else:
                        self._storming.discard(key)
            if event is not None:
                storm = self._storm(key, event)
                out.append(storm)
                for listener in self.listeners:
                    listener(storm)
        return out

    def _increment(
        self, key: StormKey, reading: SlowReading, timestamp_ns: int, is_duration: bool
    ) -> int | None:
        assert reading.counter is not None
        state = self._keys.get(key)
        if state is None or state.tracker.spec != reading.counter:
            state = self._keys[key] = _KeyState(CounterTracker(reading.counter))
        delta = state.tracker.update(reading.value)
        last, state.last_ns = state.last_ns, timestamp_ns
        if delta is None or last is None:
            return None
        if is_duration:
            state.basis = "duration"
            return min(delta * PAUSE_DURATION_NS_PER_UNIT, timestamp_ns - last)
        rate = self.line_rate(reading.device, reading.port)
        if not rate:
            return None  # frames without a link speed say nothing about time
        state.basis = "frames"
        return int(paused_ns_from_frames([delta], [timestamp_ns - last], rate * 8)[0])

    def _storm(self, key: StormKey, event: StormEvent) -> PfcStormEvent:
        wall = time.time_ns() - time.monotonic_ns()
        device, port, direction, priority = key
        state = self._keys.get(key)
        return PfcStormEvent(
            device,
            port,
            direction,
            priority,
            event.started,
            event.time_ns + wall,
            event.start_ns + wall,
            event.paused_fraction,
            event.peak_fraction,
            event.paused_ns / 1e9,
            self.settings.window_ns / 1e9,
            state.basis if state is not None else "duration",
        )

    def figures(self) -> WatchdogFigures:
        storming = cast(dict[StormKey, float], self.watch.storming())
        with self._lock:
            return WatchdogFigures(
                self._polls,
                self._errors,
                self._read_seconds,
                self._storms,
                storming,
                dict(self._storm_seconds),
            )


def build_pfc_watchdog(
    settings: WatchdogSettings,
    slow_sources: Sequence[SlowSource],
    ports: Sequence[PortSpec],
) -> PfcWatchdog | None:
    """The watchdog for an agent's sources, not started; None when it is off or no source
    has pause counters (said once: a node without RoCE netdevs has nothing to watch)."""
    if not settings.enabled:
        return None
    sources = pause_sources(slow_sources)
    if not sources:
        _LOG.warning(
            "PFC watchdog: no source has PFC pause counters (ethtool of a RoCE netdev, or "
            "the simulated node); nothing to watch"
        )
        return None
    rates = {(p.device, p.port): p.line_rate_bytes_per_second for p in ports}
    return PfcWatchdog(sources, settings, lambda device, port: rates.get((device, port)))
