"""Polls the slow counter sources (errors, congestion, PFC) at <= 1 Hz in one background thread.

This runs in the consumer process beside the exporter, never in the 1 ms sampler process:
these reads are firmware commands on mlx5 (drivers/infiniband/hw/mlx5/mad.c) and a slow one must not
cost the sampler a tick. Counter arithmetic is detectors.counters.CounterTracker's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from burstscope.collector.sources.base import SlowReading, SlowSource
from burstscope.collector.threads import name_os_thread
from burstscope.collector.trace.schema import SlowRow
from burstscope.detectors.counters import CounterTracker

_LOG = logging.getLogger(__name__)

DEFAULT_INTERVAL_SECONDS = 1.0
# The design limit: faster would multiply firmware commands for no operator benefit.
MINIMUM_INTERVAL_SECONDS = 1.0
# Slow reads are firmware commands on mlx5: tens of microseconds to a second.
READ_BUCKETS_SECONDS = (1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0)

CounterKey = tuple[str, int, str]  # (device, port, name)


@runtime_checkable
class ReportsReadErrors(Protocol):
    """Sources that skip individual files report how many reads failed and the last reason."""

    read_errors: int
    last_error: str | None


@dataclass(frozen=True, slots=True)
class CounterState:
    """The latest reading of one slow counter or gauge."""

    source: str
    device: str
    port: int
    name: str
    value: int  # the latest raw value (a gauge's value for state, rate)
    increment: int | None  # known increments summed since the first poll; None for gauges
    resets: int  # times the counter went backwards and was re-baselined
    saturated: bool  # a PortCounter at all-ones: the value is a lower bound
    timestamp_ns: int  # CLOCK_MONOTONIC midpoint of the poll that read it


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """How one source is doing: enough to export a read-duration Histogram later."""

    name: str
    polls: int  # polls that returned
    errors: int  # failed opens and polls, plus files the source skipped
    last_error: str | None
    last_read_seconds: float | None
    read_seconds_sum: float
    read_seconds_count: int
    read_buckets: tuple[int, ...]  # cumulative per READ_BUCKETS_SECONDS, then +Inf


@dataclass(frozen=True, slots=True)
class _RecordedPoll:
    """One poll of one source as it read, kept for a trace when recording."""

    timestamp_ns: int  # CLOCK_MONOTONIC midpoint of the poll
    rebaseline: bool  # first poll after the source was (re)opened
    readings: tuple[SlowReading, ...]


RefusedKey = tuple[str, int, str, str]  # (device, port, counter name, reason)


@dataclass(frozen=True, slots=True)
class SlowSnapshot:
    counters: dict[CounterKey, CounterState]
    sources: tuple[SourceHealth, ...]  # in the order the sources were given
    refused: dict[RefusedKey, int] = field(default_factory=dict)  # readings out of range


def refusal(reading: SlowReading) -> str | None:
    """Why a reading cannot be a value of its counter (None: it can).

    A file can say anything (a firmware bug, a driver printing -1 for "unsupported", a
    FUSE or test tree): a counter's reading must fit its width, a gauge's the trace's
    unsigned 64-bit column. One bad reading costs that counter that interval only.
    """
    top = (1 << 64) - 1 if reading.counter is None else reading.counter.maximum
    if reading.value < 0:
        return "negative"
    if reading.value > top:
        return "out_of_range"
    return None


@dataclass
class _SourceState:
    source: SlowSource
    interval_ns: int
    next_due_ns: int = 0
    opened: bool = False
    rebaseline: bool = False
    polls: int = 0
    errors: int = 0
    reported_read_errors: int = 0
    last_error: str | None = None
    last_read_seconds: float | None = None
    read_seconds_sum: float = 0.0
    read_buckets: list[int] = field(default_factory=lambda: [0] * (len(READ_BUCKETS_SECONDS) + 1))


class SlowPoller:
    """Polls each source at its own interval in one daemon thread; snapshot() is thread-safe.

    A source whose open() or poll() raises is counted, closed, and reopened at its next
    interval; the first poll after a reopen re-baselines its counters (no increment across
    the outage). Other sources are unaffected.
    """

    def __init__(
        self,
        sources: Sequence[SlowSource],
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        intervals: Mapping[str, float] | None = None,
        minimum_interval_seconds: float = MINIMUM_INTERVAL_SECONDS,
        record: bool = False,
    ) -> None:
        """``record``: keep every poll's readings until take_rows() (for a trace)."""
        self._record = record
        self._recorded: list[_RecordedPoll] = []
        chosen = dict(intervals or {})
        self._states: list[_SourceState] = []
        for source in sources:
            seconds = chosen.get(source.name, interval_seconds)
            if not seconds >= minimum_interval_seconds:
                raise ValueError(
                    f"slow source {source.name!r}: interval {seconds} s is below the "
                    f"minimum of {minimum_interval_seconds} s"
                )
            self._states.append(_SourceState(source, round(seconds * 1e9)))
        self._lock = threading.Lock()
        self._trackers: dict[CounterKey, CounterTracker] = {}
        self._counters: dict[CounterKey, CounterState] = {}
        self._refused: dict[RefusedKey, int] = {}
        self._stop = threading.Event()
        self._final_poll = False
        self._thread: threading.Thread | None = None
        # Supervision (collector.supervisor): a thread that ended is restarted; one stuck in a
        # read is replaced by a new thread (generation) and left to return on its own.
        self._generation = 0
        self.failure: str | None = None
        self.busy_since_ns: int | None = None  # CLOCK_MONOTONIC when the current poll began
        self.busy_source: str | None = None

    def adopt(self, previous: SlowPoller) -> None:
        """Carry on the totals of a poller this one replaces (a reload changed the ports).

        Counters of ports kept keep their cumulative increments, so exported counters
        stay monotonic; the interval across the replacement is re-baselined, not counted.
        """
        with previous._lock:
            counters = dict(previous._counters)
            trackers = dict(previous._trackers)
            recorded, previous._recorded = previous._recorded, []
        with self._lock:
            self._counters.update(counters)
            self._trackers.update(trackers)
            if self._record:
                self._recorded[:0] = recorded  # not yet in the trace: keep them first

    def take_rows(self, wall_offset_ns: int) -> list[SlowRow]:
        """The readings polled since the last call (recording only), oldest first, as trace
        rows on the samples' wall clock (CLOCK_MONOTONIC + ``wall_offset_ns``)."""
        with self._lock:
            recorded, self._recorded = self._recorded, []
        return [
            reading.as_trace_row(poll.timestamp_ns + wall_offset_ns, poll.rebaseline)
            for poll in recorded
            for reading in poll.readings
        ]

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("SlowPoller already started")
        self._stop.clear()
        self._spawn()

    def _spawn(self) -> None:
        self._generation += 1
        self.failure = None
        self.busy_since_ns = None
        self._thread = threading.Thread(
            target=self._run,
            args=(self._generation,),
            name="burstscope-slow-poller",
            daemon=True,
        )
        self._thread.start()

    @property
    def interval_seconds(self) -> float:
        """The longest of the sources' poll intervals."""
        return max((state.interval_ns for state in self._states), default=0) / 1e9

    @property
    def alive(self) -> bool:
        """False once started and the thread has ended without being stopped."""
        thread = self._thread
        return thread is None or thread.is_alive() or self._stop.is_set()

    def restart(self) -> None:
        """A new polling thread; one that is stuck in a read exits when it returns."""
        if self._stop.is_set():
            return
        self._spawn()

    def stop(self, timeout: float | None = 10.0, final_poll: bool = False) -> None:
        """``final_poll``: read every source once more on the way out, so a recording's
        slow counters cover it to its end."""
        self._final_poll = final_poll
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> SlowPoller:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self, generation: int) -> None:
        name_os_thread()
        try:
            while not self._stop.is_set() and generation == self._generation:
                now = time.monotonic_ns()
                for state in self._states:
                    if state.next_due_ns <= now:
                        self._poll_guarded(state)
                        # Absolute deadlines, so a slow poll does not shift the cadence;
                        # a source that fell a whole interval behind skips, never bunches.
                        deadline = (state.next_due_ns or now) + state.interval_ns
                        state.next_due_ns = deadline if deadline > now else now + state.interval_ns
                due = min((s.next_due_ns for s in self._states), default=now + 10**9)
                self._stop.wait(max(0, due - time.monotonic_ns()) / 1e9)
            if self._final_poll and generation == self._generation:
                self.poll_once()
        except BaseException as exc:
            self.failure = f"{type(exc).__name__}: {exc}"
            _LOG.debug("slow poller thread ended", exc_info=True)
        finally:
            if generation == self._generation:
                self.close()

    def _poll_guarded(self, state: _SourceState) -> None:
        self.busy_source = state.source.name
        self.busy_since_ns = time.monotonic_ns()
        try:
            self._poll(state)
        except Exception as exc:  # whatever one source does stays with that source
            self._fail(state, f"poll: {type(exc).__name__}: {exc}")
        finally:
            self.busy_since_ns = None

    def poll_once(self) -> None:
        """Poll every source now, in the caller's thread (for tools and tests; not with start())."""
        for state in self._states:
            self._poll_guarded(state)

    def close(self) -> None:
        for state in self._states:
            if state.opened:
                state.opened = False
                try:
                    state.source.close()
                except OSError as exc:
                    _LOG.debug("closing slow source %s: %s", state.source.name, exc)

    def _forget_gauges(self, source: str, kept: set[CounterKey]) -> None:
        """Drop ``source``'s gauges not in ``kept`` (caller holds the lock)."""
        for key, counter in list(self._counters.items()):
            if counter.source == source and counter.increment is None and key not in kept:
                del self._counters[key]

    def _fail(self, state: _SourceState, message: str) -> None:
        with self._lock:
            state.errors += 1
            state.last_error = message
            self._forget_gauges(state.source.name, set())
        if state.opened:
            state.opened = False
            try:
                state.source.close()
            except Exception as exc:  # a failing close must not stop the poller
                _LOG.debug("closing slow source %s: %s", state.source.name, exc)

    def _poll(self, state: _SourceState) -> None:
        read = self._read(state)
        if read is None:
            return
        readings, midpoint, seconds = read
        rebaseline, state.rebaseline = state.rebaseline, False
        source = state.source
        with self._lock:
            self._count_poll(state, seconds)
            readings = self._accepted(readings)
            # A gauge the source no longer reads (the port is gone, its state file fails)
            # is no longer known: exporting the last value would show a vanished port ACTIVE.
            self._forget_gauges(
                source.name, {(r.device, r.port, r.name) for r in readings if r.counter is None}
            )
            if self._record and readings:
                self._recorded.append(_RecordedPoll(midpoint, rebaseline, tuple(readings)))
            if isinstance(source, ReportsReadErrors):
                new_errors = source.read_errors - state.reported_read_errors
                if new_errors > 0:
                    state.errors += new_errors
                    state.last_error = source.last_error
                state.reported_read_errors = source.read_errors
            self._update_counters(source.name, readings, midpoint, rebaseline)

    def _read(self, state: _SourceState) -> tuple[list[SlowReading], int, float] | None:
        """One poll of the source, opened first if it is not: (readings, CLOCK_MONOTONIC
        midpoint, seconds it took); None when the open or the poll failed (counted)."""
        source = state.source
        if not state.opened:
            try:
                source.open()
            except Exception as exc:  # any failure of one source stays with that source
                self._fail(state, f"open: {type(exc).__name__}: {exc}")
                return None
            state.opened = True
            state.rebaseline = True
        before = time.monotonic_ns()
        try:
            readings = source.poll()
        except Exception as exc:
            self._fail(state, f"poll: {type(exc).__name__}: {exc}")
            return None
        after = time.monotonic_ns()
        return readings, (before + after) >> 1, (after - before) / 1e9

    @staticmethod
    def _count_poll(state: _SourceState, seconds: float) -> None:
        """A poll that returned, into the source's health (the lock held)."""
        state.polls += 1
        state.last_read_seconds = seconds
        state.read_seconds_sum += seconds
        for index, bound in enumerate((*READ_BUCKETS_SECONDS, float("inf"))):
            if seconds <= bound:
                state.read_buckets[index] += 1

    def _accepted(self, readings: list[SlowReading]) -> list[SlowReading]:
        """The readings that can be values of their counters; the rest are counted, logged
        once per (port, counter, reason), and rebaseline their counter (the lock held)."""
        accepted = []
        for reading in readings:
            reason = refusal(reading)
            if reason is None:
                accepted.append(reading)
                continue
            refused_key = (reading.device, reading.port, reading.name, reason)
            if refused_key not in self._refused:
                _LOG.warning(
                    "%s port %d: %s reads %d (%s): that reading is dropped and the "
                    "counter rebaselined; counted in burstscope_port_refused_readings_total",
                    reading.device,
                    reading.port,
                    reading.name,
                    reading.value,
                    reason,
                )
            self._refused[refused_key] = self._refused.get(refused_key, 0) + 1
            # The next good reading starts a new baseline: no increment across this one.
            self._trackers.pop((reading.device, reading.port, reading.name), None)
        return accepted

    def _update_counters(
        self, source: str, readings: list[SlowReading], midpoint: int, rebaseline: bool
    ) -> None:
        """Each reading into its latest state: a gauge's value, a counter's increments
        through its tracker (wraps, resets, saturation) (the lock held)."""
        for reading in readings:
            key = (reading.device, reading.port, reading.name)
            previous = self._counters.get(key)
            if reading.counter is None:
                self._counters[key] = CounterState(
                    source, *key, reading.value, None, 0, False, midpoint
                )
                continue
            tracker = self._trackers.get(key)
            if tracker is None or tracker.spec != reading.counter:
                tracker = self._trackers[key] = CounterTracker(reading.counter)
            delta = tracker.update(reading.value, rebaseline)
            total = previous.increment if previous and previous.increment is not None else 0
            self._counters[key] = CounterState(
                source,
                *key,
                reading.value,
                total + (delta or 0),
                tracker.resets,
                tracker.saturated,
                midpoint,
            )

    def gauge(self, name: str) -> dict[tuple[str, int], tuple[int, int]]:
        """One gauge of every port that has it: (value, CLOCK_MONOTONIC of its poll)."""
        with self._lock:
            return {
                (state.device, state.port): (state.value, state.timestamp_ns)
                for state in self._counters.values()
                if state.name == name
            }

    def snapshot(self) -> SlowSnapshot:
        with self._lock:
            counters = dict(self._counters)
            health = tuple(
                SourceHealth(
                    name=s.source.name,
                    polls=s.polls,
                    errors=s.errors,
                    last_error=s.last_error,
                    last_read_seconds=s.last_read_seconds,
                    read_seconds_sum=s.read_seconds_sum,
                    read_seconds_count=s.polls,
                    read_buckets=tuple(s.read_buckets),
                )
                for s in self._states
            )
            refused = dict(self._refused)
        return SlowSnapshot(counters, health, refused)
