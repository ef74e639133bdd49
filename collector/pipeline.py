"""The agent's consumer side: sampler ring -> streaming detectors -> live state, in one thread.

Every ``drain_seconds`` the pipeline takes the ring's new rows through its intake (which
states the rate in force for each and records them, collector.intake), feeds each port
direction's analyzer and live figures, and hands closed bursts to listeners (MQTT, the
terminal view). Readers (the exporter's scrape threads, the terminal view, MQTT) take an
immutable snapshot (collector.snapshot): it is built when a reader asks for it, at most
once per drain, under the lock the feeding holds, so a scrape never sees half an update,
never changes anything, and nothing is copied for a reader that never comes (Prometheus
asks every 15 s). collector.supervisor restarts a failed sampler or slow poller; reloads
(new thresholds, a new port set) run here, between two drains.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from burstscope.collector.intake import DRAIN_SECONDS, Intake, Taken
from burstscope.collector.jobs.accounting import JobAccounts
from burstscope.collector.jobs.model import EMPTY_TABLE, STORAGE, JobTable
from burstscope.collector.probe import ReadCost, judge_ring, verdict
from burstscope.collector.recording import Recording
from burstscope.collector.ring import Field, Ring
from burstscope.collector.sampler import (
    Sampler,
    SamplerConfig,
    SamplerError,
    tick_description,
    tuning_notes,
)
from burstscope.collector.slow_poller import SlowPoller
from burstscope.collector.snapshot import (
    TIMING_BUCKETS_SECONDS,
    Health,
    PortView,
    RailVerdicts,
    Snapshot,
    direction_view,
)
from burstscope.collector.sources.base import CounterSource, PortSpec, SlowSource
from burstscope.collector.step_summaries import LiveSteps
from burstscope.collector.supervisor import Supervisor
from burstscope.collector.threads import name_os_thread
from burstscope.collector.throttle_live import LiveThrottle
from burstscope.collector.trace.schema import PortColumns
from burstscope.detectors.analyzer import Chunk, DirectionAnalyzer
from burstscope.detectors.bursts import Bursts
from burstscope.detectors.config import DIRECTIONS, Thresholds
from burstscope.detectors.line_rate import rate_runs
from burstscope.detectors.live import LiveDirection, cumulative_counts
from burstscope.detectors.rails import LiveRails, rail_groups
from burstscope.detectors.silence import SilenceStarted, SilenceWatch

if TYPE_CHECKING:  # the writer loads pyarrow: only an agent that records needs it
    from burstscope.collector.trace.writer import TraceWriter

_LOG = logging.getLogger(__name__)

BurstListener = Callable[[PortSpec, str, Bursts], None]
# Sees each port direction's drained chunk under the state lock (collector.collectives.live
# keeps its saturated samples for labelling): it must only copy, never wait.
ChunkListener = Callable[[PortSpec, str, Chunk], None]


@dataclass(slots=True)
class _PortState:
    spec: PortSpec  # line_rate_bytes_per_second: the rate in force
    analyzers: dict[str, DirectionAnalyzer] | None  # None until a usable rate is known
    live: dict[str, LiveDirection] = field(default_factory=dict)
    # The raw count as last read; None until the first reading (absent, never 0: a 0
    # before the kernel's cumulative value reads as a reset to Prometheus' rate()).
    latest: dict[str, int | None] = field(default_factory=dict)
    failed_reads: int = 0
    rate_changes: int = 0
    refused: dict[tuple[str, str], int] = field(default_factory=dict)


class Pipeline:
    """Owns the sampler process, the slow poller and the streaming detectors of one agent."""

    def __init__(
        self,
        source: CounterSource,
        sampler_config: SamplerConfig | None = None,
        thresholds: Thresholds | None = None,
        slow_sources: Sequence[SlowSource] = (),
        slow_interval_seconds: float = 1.0,
        trace: TraceWriter | Recording | None = None,
        drain_seconds: float = DRAIN_SECONDS,
    ) -> None:
        self.source = source
        self.drain_seconds = drain_seconds
        # When set, every sample is also recorded; a failing recording pauses, never more.
        self.trace = trace if trace is None or isinstance(trace, Recording) else Recording(trace)
        self.thresholds = thresholds or Thresholds()
        self.sampler = Sampler(source, sampler_config)
        self.interval_ns = self.sampler.config.interval_ns
        self.slow = self._slow_poller(slow_sources, slow_interval_seconds)
        self.listeners: list[BurstListener] = []
        self.chunk_listeners: list[ChunkListener] = []
        self._ports = [self._new_port(spec) for spec in source.ports]
        self._lock = threading.Lock()
        self._drain_lock = threading.Lock()
        self._stop = threading.Event()
        # Set by the first drain that fed samples: from then on the data counters carry
        # the kernel's values (systemd READY=1 waits for it, wait_for_first_drain).
        self.drained = threading.Event()
        self._thread: threading.Thread | None = None
        self._requests: queue.SimpleQueue[tuple[Callable[[], None], Future[None]]] = (
            queue.SimpleQueue()
        )
        self.intake: Intake | None = None  # once started: the ring, drained
        self._ring: Ring | None = None
        self._now_ns = 0
        self._lateness = np.zeros(len(TIMING_BUCKETS_SECONDS) + 1, dtype=np.int64)
        self._lateness_sum = 0.0
        self._reads = np.zeros(len(TIMING_BUCKETS_SECONDS) + 1, dtype=np.int64)
        self._read_sum = 0.0
        # The finest honest interval, judged once from the sampler's first seconds of reads.
        self.read_cost: ReadCost | None = None
        # What readers see: built on demand from the state as of the latest drain (the
        # generation), immutable, kept until a drain changes the state again.
        self._generation = 0
        self._views: tuple[PortView, ...] = ()
        self._views_generation = -1
        self._views_now_ns = 0
        # Ticks of samplers replaced by a restart or a reload, so the totals stay monotonic.
        self._ticks_before = 0
        self._missed_before = 0
        self.on_fatal: Callable[[str], None] = lambda reason: None
        # The job table in force (collector.jobs.watcher), when attribution is on: each
        # drain adds its increments to the jobs holding each port then.
        self.jobs: Callable[[], JobTable] | None = None
        self.job_accounts = JobAccounts()
        self.silence = SilenceWatch()  # the agent sets its threshold ([jobs] silence)
        # Each saturated or long-burst second by its cause (collector.throttle_live).
        self.throttle = LiveThrottle()
        # Each port's coarse windows beside its peers' (detectors.rails): rails imbalanced.
        self.rails: LiveRails[tuple[str, int]] = LiveRails(
            coarse_window_ns=self.thresholds.coarse_window_ns
        )
        # Each step of the training rails, summarised for the fleet consumer (the agent sets
        # it when it publishes them: collector.step_summaries).
        self.steps: LiveSteps | None = None
        self.supervisor = Supervisor(self, lambda reason: self.on_fatal(reason))

    @property
    def failure(self) -> str | None:
        """Why supervision gave up; None while it has not."""
        return self.supervisor.failure

    def _slow_poller(self, sources: Sequence[SlowSource], interval: float) -> SlowPoller | None:
        if not sources:
            return None
        return SlowPoller(sources, interval, record=self.trace is not None)

    def _analyzers(self, spec: PortSpec) -> dict[str, DirectionAnalyzer] | None:
        # Without a usable rate there is no utilization: its series stay absent, not zero.
        if spec.line_rate_bytes_per_second <= 0:
            return None
        return {
            direction: DirectionAnalyzer(
                spec.line_rate_bytes_per_second,
                self.thresholds,
                max(self.interval_ns, spec.min_read_interval_ns),
                keep_bursts=False,
                saturated_second_retention=120,
            )
            for direction in DIRECTIONS
        }

    def _new_port(self, spec: PortSpec) -> _PortState:
        state = _PortState(spec, self._analyzers(spec))
        state.live = {direction: LiveDirection() for direction in DIRECTIONS}
        state.latest = dict.fromkeys(DIRECTIONS)
        return state

    def _apply_rate(self, state: _PortState, rate: int) -> None:
        old = state.spec.line_rate_bytes_per_second
        state.spec = dataclasses.replace(state.spec, line_rate_bytes_per_second=rate)
        if state.analyzers is None:
            state.analyzers = self._analyzers(state.spec)
        else:
            for analyzer in state.analyzers.values():
                analyzer.set_line_rate(rate)
        if old > 0:
            state.rate_changes += 1
        _LOG.warning(
            "%s port %d: line rate %s -> %g Gb/s; utilization uses it from the next sample",
            state.spec.device,
            state.spec.port,
            f"{old * 8 / 1e9:g} Gb/s" if old > 0 else "unknown",
            rate * 8 / 1e9,
        )

    def start(self) -> None:
        """Start sampling; raises SamplerError if the sampler process cannot start."""
        self._ring = self.sampler.start()
        _LOG.debug("sampler: %s", tick_description(self._ring))
        self.intake = Intake(
            self._ring, self.source.ports, self.trace.append if self.trace is not None else None
        )
        if self.slow is not None:
            self.slow.start()
        self.supervisor.started()
        self._thread = threading.Thread(target=self._run, name="burstscope-pipeline", daemon=True)
        self._thread.start()

    def tuning_notes(self) -> list[str]:
        """What the sampler process asked for at start and was refused (see sampler.py)."""
        return tuning_notes(self._ring, self.sampler.config) if self._ring is not None else []

    def _run(self) -> None:
        name_os_thread()
        # Supervision and reload requests keep the 100 ms cadence whatever the drain's.
        next_drain = time.monotonic() + self.drain_seconds
        while not self._stop.wait(min(DRAIN_SECONDS, self.drain_seconds)):
            self._run_requests()
            if time.monotonic() >= next_drain:
                next_drain = time.monotonic() + self.drain_seconds
                try:
                    self.drain()
                except Exception:  # keep serving; the failure shows in the log and health
                    _LOG.exception("pipeline drain failed")
            try:
                self.supervisor.check()
            except Exception:
                _LOG.exception("supervising the sampler failed")

    # -- what supervision needs (collector.supervisor) -------------------------------
    def heartbeat_ns(self) -> int:
        """CLOCK_MONOTONIC of the sampler's latest tick; 0 before the first."""
        return self._ring.get(Field.HEARTBEAT_NS) if self._ring is not None else 0

    def adopt_sampler(self, sampler: Sampler, ring: Ring) -> None:
        """Drain a restarted sampler's ring from now on, the same ports as before."""
        with self._drain_lock:
            self._swap(sampler, self.source, ring)

    def drain(self) -> None:
        """Move whatever the sampler wrote since the last drain through the detectors.

        The pipeline thread calls it every DRAIN_SECONDS; a caller elsewhere (a benchmark
        closing a phase, stop()) waits for a drain in progress instead of racing it.
        """
        with self._drain_lock:
            self._drain()

    def _drain(self) -> None:
        assert self.intake is not None
        # One drain at a time (the drain lock). Reading the ring and recording happen
        # outside the state lock; feeding holds it, so a reader building its snapshot
        # waits at most for one feed, never for a recording's piece to close. A failing
        # recording pauses (collector.recording): the take never raises for it.
        taken = self.intake.take(self.slow)
        closed: list[tuple[PortSpec, str, Bursts]] = []
        with self._lock:
            for index, state in enumerate(self._ports):
                self._feed_port(state, index, taken, closed)
            slow = self.slow.snapshot() if self.slow is not None else None
            self.throttle.observe(slow, self.intake.reader.wall_offset_ns)
            self._generation += 1
            if any(port.timestamp_ns.size for port in taken.columns):
                self.drained.set()
            if taken.lateness_ns.size:
                seconds = taken.lateness_ns / 1e9
                self._lateness += cumulative_counts(seconds, TIMING_BUCKETS_SECONDS)
                self._lateness_sum += float(seconds.sum())
            if taken.read_ns.size:
                seconds = taken.read_ns / 1e9
                self._reads += cumulative_counts(seconds, TIMING_BUCKETS_SECONDS)
                self._read_sum += float(seconds.sum())
            if self.jobs is not None:
                table = self.jobs()
                self.job_accounts.add(table, self._port_totals())
                self._watch_silence(table)
            self._judge_rails()
        if self.read_cost is None:
            self._judge_reads()
        for spec, direction, bursts in closed:
            for listener in self.listeners:
                listener(spec, direction, bursts)
        if self.steps is not None:  # only this thread feeds it, under the drain lock
            self.steps.close(self.jobs() if self.jobs is not None else EMPTY_TABLE)

    def _watch_silence(self, table: JobTable) -> None:
        """Each port's bytes and the jobs holding it, to the silence watch (one update a
        drain, on the wall clock: a port whose reads fail moves nothing either); a port that
        goes silent or comes back is said once in the log."""
        ports: dict[tuple[str, int], tuple[int | None, tuple[str, ...]]] = {}
        for state in self._ports:
            counts = [state.latest.get(direction) for direction in DIRECTIONS]
            total = None if None in counts else sum(c for c in counts if c is not None)
            key = (state.spec.device, state.spec.port)
            ports[key] = (total, tuple(job.job_id for job in table.jobs_of(*key)))
        for (device, port), change in self.silence.update(time.time_ns(), ports):
            if isinstance(change, SilenceStarted):
                quiet = (time.time_ns() - change.silent_since_ns) / 1e9
                _LOG.warning(
                    "%s port %d: silent for %.0f s under job %s, which it carried traffic "
                    "for: a hung job or a dead path (burstscope_port_silent_under_job)",
                    device,
                    port,
                    quiet,
                    ", ".join(change.jobs),
                )
            else:
                _LOG.info(
                    "%s port %d: silence over after %.0f s (%s)",
                    device,
                    port,
                    change.silent_seconds,
                    change.reason.replace("_", " "),
                )

    def _judge_rails(self) -> None:
        """The rails of one line rate side by side, a job's storage NICs left out."""
        table = self.jobs() if self.jobs is not None else EMPTY_TABLE
        storage = {(h.device, h.port) for h in table.holdings if h.role == STORAGE}
        ports = [
            ((s.spec.device, s.spec.port), s.spec.line_rate_bytes_per_second) for s in self._ports
        ]
        self.rails.judge(rail_groups(ports, storage))

    def _port_totals(self) -> list[tuple[str, int, int, int, int]]:
        """Each port's cumulative saturated and hidden saturated ns and burst bytes, both
        directions summed, for the per-job figures."""
        totals = []
        for state in self._ports:
            analyzers = state.analyzers or {}
            totals.append(
                (
                    state.spec.device,
                    state.spec.port,
                    sum(analyzer.saturated_ns for analyzer in analyzers.values()),
                    sum(analyzer.hidden_saturated_ns for analyzer in analyzers.values()),
                    sum(live.burst_bytes for live in state.live.values()),
                )
            )
        return totals

    def _judge_reads(self) -> None:
        """Once: the finest interval the sampler's first seconds of reads leave honest
        (collector.probe, the judgement ``discover --probe`` makes), logged and exported;
        a warning when --interval is finer."""
        assert self._ring is not None
        cost = judge_ring(self._ring, self.interval_ns)
        if cost is None:
            return
        self.read_cost = cost
        sentence, too_fine = verdict(cost, self.interval_ns)
        (_LOG.warning if too_fine else _LOG.info)("sampler reads: %s", sentence)

    def _feed_port(
        self,
        state: _PortState,
        index: int,
        taken: Taken,
        closed: list[tuple[PortSpec, str, Bursts]],
    ) -> None:
        """One port's new samples into its analyzers and live figures (the state lock held):
        the rows of each rate in turn, each divided by the rate it states."""
        state.failed_reads += taken.failed_reads[index]
        for key, new in taken.refused[index].items():
            if key not in state.refused:
                _LOG.warning(
                    "%s port %d: counters/%s refused (%s): the port's samples are "
                    "dropped and rebaselined until it reads well; counted in "
                    "burstscope_port_refused_readings_total",
                    state.spec.device,
                    state.spec.port,
                    *key,
                )
            state.refused[key] = state.refused.get(key, 0) + new
        port = taken.columns[index]
        stamps = port.timestamp_ns
        if stamps.size:
            self._now_ns = max(self._now_ns, int(stamps[-1]))
            rates = np.broadcast_to(port.line_rate_bytes_per_second, stamps.shape)
            for run in rate_runs(rates, state.spec.line_rate_bytes_per_second):
                if run.rate != state.spec.line_rate_bytes_per_second:
                    self._apply_rate(state, run.rate)
                self._feed(state, port, run.rows, closed)
        # A new rate read after the last of these rows applies from the next one.
        if taken.rates[index] != state.spec.line_rate_bytes_per_second:
            self._apply_rate(state, taken.rates[index])

    def _feed(
        self,
        state: _PortState,
        port: PortColumns,
        piece: slice,
        closed: list[tuple[PortSpec, str, Bursts]],
    ) -> None:
        stamps = port.timestamp_ns[piece]
        if not stamps.size:
            return
        for direction, values in (
            ("transmit", port.xmit_bytes[piece]),
            ("receive", port.rcv_bytes[piece]),
        ):
            state.latest[direction] = int(values[-1])
            if direction == "transmit" and self.steps is not None:
                self.steps.feed(state.spec, stamps, values, port.rebaseline[piece])
            if state.analyzers is None:
                continue
            chunk = state.analyzers[direction].feed(stamps, values, port.rebaseline[piece])
            state.live[direction].update(chunk)
            self.throttle.feed(state.spec, direction, chunk, state.analyzers[direction])
            key = (state.spec.device, state.spec.port)
            self.rails.feed_chunk(key, direction, state.spec.line_rate_bytes_per_second, chunk)
            for listener in self.chunk_listeners:
                listener(state.spec, direction, chunk)
            if len(chunk.bursts):
                closed.append((state.spec, direction, chunk.bursts))

    def snapshot(self) -> Snapshot:
        with self._lock:
            if self._views_generation != self._generation:
                # The first reader since the latest drain builds the views; later readers
                # (another Prometheus, top, MQTT) share them until the next drain.
                self._views = tuple(self._view(state) for state in self._ports)
                self._views_generation = self._generation
                self._views_now_ns = self._now_ns
            ports = self._views
            ring = self._ring
            health = Health(
                ticks=self._ticks_before + (ring.get(Field.TICKS) if ring else 0),
                missed_ticks=self._missed_before + (ring.get(Field.MISSED_TICKS) if ring else 0),
                lost_rows=self.intake.reader.lost_rows if self.intake else 0,
                realtime=bool(ring.get(Field.REALTIME)) if ring else False,
                cpu=ring.get(Field.CPU) if ring else -1,
                interval_ns=self.interval_ns,
                sampler_alive=self.sampler.alive,
                lateness_buckets=self._lateness.copy(),
                lateness_sum_seconds=self._lateness_sum,
                read_buckets=self._reads.copy(),
                read_sum_seconds=self._read_sum,
                heartbeat_ns=self.heartbeat_ns(),
                restarts=self.supervisor.restarts,
                sampler_pid=ring.get(Field.PID) if ring and self.sampler.alive else 0,
                finest_interval_ns=(self.read_cost.finest_interval_ns or 0)
                if self.read_cost is not None
                else 0,
            )
            now = self._views_now_ns
            figures = self.job_accounts.figures() if self.jobs is not None else {}
            silent_since = self.silence.states() if self.jobs is not None else {}
            rails = RailVerdicts(dict(self.rails.flagged), len(self.rails.judged))
        jobs = self.jobs() if self.jobs is not None else EMPTY_TABLE
        slow = self.slow.snapshot() if self.slow is not None else None
        recording = self.trace.health() if self.trace is not None else None
        source = self.source
        return Snapshot(
            source.name,
            now,
            ports,
            health,
            slow,
            self.thresholds,
            recording,
            source.unsampled,
            source.devices,
            jobs,
            figures,
            silent_since,
            rails,
        )

    def _view(self, state: _PortState) -> PortView:
        analyzers = state.analyzers or {}
        return PortView(
            state.spec,
            {
                direction: direction_view(
                    state.latest[direction], state.live[direction], analyzers.get(direction)
                )
                for direction in DIRECTIONS
            },
            state.failed_reads,
            dict(state.refused),
            state.rate_changes,
            max(self.interval_ns, state.spec.min_read_interval_ns),
        )

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self.slow is not None:
            with contextlib.suppress(Exception):
                self.slow.stop(final_poll=self.trace is not None)
        self.sampler.stop()
        if self.intake is not None:
            with contextlib.suppress(Exception):
                self.drain()
        if self.trace is not None:
            self.trace.close()  # the last piece is closed and readable

    def close(self) -> None:
        self.stop()
        self.sampler.close()

    # -- live reconfiguration (SIGHUP) ----------------------------------------------
    # Only the pipeline thread feeds the analyzers, so changes to them run there too,
    # between two drains; the caller waits for the outcome.
    def _in_pipeline_thread(self, change: Callable[[], None], timeout: float = 30.0) -> None:
        if self._thread is None:
            change()
            return
        done: Future[None] = Future()
        self._requests.put((change, done))
        done.result(timeout)

    def _run_requests(self) -> None:
        while True:
            try:
                change, done = self._requests.get_nowait()
            except queue.Empty:
                return
            try:
                change()
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

    def retune(self, thresholds: Thresholds) -> None:
        """Classify samples from now on with new thresholds; every running total is kept."""

        def change() -> None:
            for state in self._ports:
                for analyzer in (state.analyzers or {}).values():
                    analyzer.retune(thresholds)
            self.thresholds = thresholds

        self._in_pipeline_thread(change)

    def replace_source(
        self,
        source: CounterSource,
        slow_sources: Sequence[SlowSource] = (),
        slow_interval_seconds: float = 1.0,
    ) -> None:
        """Sample a new port set: restart the sampler process, keep kept ports' detectors.

        Ports present before and after keep their analyzers, so their exported counters
        stay monotonic across the restart (the pause is one long interval, a gap if over
        max_gap). A recording goes on: its rows name their port. Raises SamplerError, with
        the old port set sampled again, if the new sampler cannot start.
        """
        if self.intake is None:
            raise RuntimeError("start() first")
        self._in_pipeline_thread(lambda: self._replace_source(source))
        previous = self.slow
        if previous is not None:
            with contextlib.suppress(Exception):
                previous.stop()
        self.slow = self._slow_poller(slow_sources, slow_interval_seconds)
        if self.slow is not None:
            if previous is not None:
                self.slow.adopt(previous)  # kept ports' slow totals carry on
            self.slow.start()

    def _replace_source(self, source: CounterSource) -> None:
        self.sampler.stop()
        self.drain()  # the old sampler's last rows
        candidate = Sampler(source, self.sampler.config)
        try:
            ring = candidate.start()
        except SamplerError:
            candidate.close()
            previous = Sampler(self.source, self.sampler.config)
            self._swap(previous, self.source, previous.start())
            raise
        self._swap(candidate, source, ring)
        self.read_cost = None  # a new port set: its reads are judged afresh

    def _swap(self, sampler: Sampler, source: CounterSource, ring: Ring) -> None:
        # Kept ports keep their detectors and the rate in force (the slow poll follows it).
        kept = {(s.spec.device, s.spec.port): s for s in self._ports}
        ports = [
            kept.get((spec.device, spec.port)) or self._new_port(spec) for spec in source.ports
        ]
        with self._lock:
            old = self.sampler
            if self._ring is not None:
                self._ticks_before += self._ring.get(Field.TICKS)
                self._missed_before += self._ring.get(Field.MISSED_TICKS)
            self._ports = ports
            self._generation += 1
            self.source = source
            self.sampler = sampler
            self._ring = ring
            assert self.intake is not None
            self.intake.follow(ring, source.ports)
            old.close()


def wait_for_first_drain(pipeline: Pipeline, timeout: float = 10.0) -> bool:
    """True once a drain has fed samples through the detectors (systemd READY): before it
    the data counters are absent from the exposition; after it they carry the kernel's."""
    return pipeline.drained.wait(timeout)


def wait_for_first_sample(pipeline: Pipeline, timeout: float = 10.0) -> bool:
    """True once the sampler has ticked at least once (systemd READY, tests)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pipeline.snapshot().health.ticks > 0:
            return True
        time.sleep(0.01)
    return False
