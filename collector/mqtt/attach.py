"""Runs the MQTT publisher beside a pipeline: its own event loop thread, fed through a queue.

``attach_mqtt(pipeline, settings, collector)`` returns a handle; ``start()`` after the
pipeline, ``stop()`` before it. The pipeline thread only converts closed bursts to plain
records, tagged with the jobs holding the port in the table in force at that drain (the
table the drain's per-job figures and the snapshot use), and puts them on a thread-safe
queue: it never waits on the network. The event loop thread applies the rate policy,
derives link and job events from snapshots once a second, numbers and spools the messages,
and delivers them. With collective labels (an agent tailing NCCL Inspector dumps), bursts
wait for them first: each goes to the policy once the labels' delay has passed since it
ended, tagged with the collectives it ran under (collector.collectives.live). PFC storms
and step summaries (collector.step_summaries: a few a second) bypass the rate policy and go
to the same spool, where a full spool drops the oldest messages and counts them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import Metric

from burstscope.collector.jobs.model import EMPTY_TABLE, JobTable
from burstscope.collector.mqtt.jobs import JobTag, job_events, port_tags
from burstscope.collector.mqtt.messages import (
    Identity,
    burst_payload,
    link_event_payload,
    node_topic,
    pfc_storm_payload,
    port_topic,
    readings_from_snapshot,
    recording_event,
    step_payload,
    steps_topic,
    summary_payload,
)
from burstscope.collector.mqtt.policy import (
    BurstRecord,
    PolicyState,
    RatePolicy,
    apply_policy,
    flush,
)
from burstscope.collector.mqtt.settings import MqttSettings, MqttSettingsError
from burstscope.collector.mqtt.spool import open_spool
from burstscope.collector.threads import name_os_thread
from burstscope.detectors.link_events import LinkEventDeriver

if TYPE_CHECKING:
    from burstscope.collector.collectives.live import CollectiveLabels
    from burstscope.collector.exporter import BurstscopeCollector
    from burstscope.collector.mqtt.publisher import MqttPublisher, Outcome, PublisherStats
    from burstscope.collector.pfc_watchdog import PfcStormEvent
    from burstscope.collector.pipeline import Pipeline
    from burstscope.collector.sources.base import PortSpec
    from burstscope.detectors.bursts import Bursts
    from burstscope.detectors.stragglers import NodeStep

_LOG = logging.getLogger("burstscope.mqtt")
INTAKE_SECONDS = 0.1
LINK_POLL_SECONDS = 1.0
# Job events follow the watcher's table this closely: a job is on the bus within a poll of
# the watcher (0.25 s) plus this of its prolog's write.
JOB_POLL_SECONDS = 0.1
PortDirection = tuple[str, int, str]


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    """Run ``callback`` on the publisher's loop; an ended loop is a reload error."""
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:
        raise MqttSettingsError("the MQTT publisher is not running") from None


def records_from_bursts(bursts: Bursts, jobs: tuple[JobTag, ...] = ()) -> list[BurstRecord]:
    return [
        BurstRecord(int(s), int(e), int(b), float(p), float(m), jobs=jobs)
        for s, e, b, p, m in zip(
            bursts.start_ns.tolist(),
            bursts.end_ns.tolist(),
            bursts.bytes.tolist(),
            bursts.peak_utilization.tolist(),
            bursts.mean_utilization.tolist(),
            strict=True,
        )
    ]


class MqttHandle:
    """The publisher thread of one agent (or demo) run."""

    def __init__(
        self,
        pipeline: Pipeline,
        settings: MqttSettings,
        collector: BurstscopeCollector | None = None,
        *,
        version: str,
        collectives: CollectiveLabels | None = None,
    ) -> None:
        """``version``: the agent's, announced in the status and every event;
        ``collectives``: the labels burst events wait for, when the agent has them."""
        self.pipeline = pipeline
        self.collectives = collectives
        self._unlabelled: dict[PortDirection, list[BurstRecord]] = {}
        self.settings = settings
        self.collector = collector
        self.policy = RatePolicy(settings.merge_gap_ns, settings.max_events_per_second)
        run = time.time_ns()
        self.identity = Identity(
            host=settings.node,
            run=run,
            version=version,
            start_time=run / 1e9,
            ports=tuple((p.device, p.port) for p in pipeline.source.ports),
            threshold=pipeline.thresholds.burst,
        )
        self.stats: PublisherStats | None = None
        self._queue: queue.SimpleQueue[tuple[PortDirection, list[BurstRecord]]] = (
            queue.SimpleQueue()
        )
        self._policies: dict[PortDirection, PolicyState] = {}
        # Port events from other threads (the PFC watchdog's storms), ready to publish.
        self._events: queue.SimpleQueue[tuple[str, dict[str, Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._first = threading.Event()
        self._first_outcome: tuple[Outcome, str] | None = None
        self._failure: BaseException | None = None
        self._swap: asyncio.Event | None = None
        self._next_settings: MqttSettings | None = None

    # -- the pipeline thread's side -------------------------------------------------
    def on_bursts(self, spec: PortSpec, direction: str, bursts: Bursts) -> None:
        """A pipeline BurstListener: hand closed bursts over, never block. They name the
        jobs of the table in force now, at the drain that closed them (within a drain of
        their end), as the per-job figures count them."""
        table = self.pipeline.jobs() if self.pipeline.jobs is not None else EMPTY_TABLE
        tags = port_tags(table, spec.device, spec.port)
        self._queue.put(((spec.device, spec.port, direction), records_from_bursts(bursts, tags)))

    def on_pfc_storm(self, storm: PfcStormEvent) -> None:
        """A PFC watchdog listener (collector.pfc_watchdog): the storm's start or end on the
        port's event topic, with the jobs holding the port now; never blocks."""
        table = self.pipeline.jobs() if self.pipeline.jobs is not None else EMPTY_TABLE
        jobs = port_tags(table, storm.device, storm.port)
        topic = port_topic(self.identity.host, storm.device, storm.port, "event")
        self._events.put((topic, pfc_storm_payload(self.identity, storm, jobs)))

    def on_step(self, step: NodeStep) -> None:
        """A step summary listener (collector.step_summaries): the node's step on its steps
        topic, through the spool like every event; never blocks."""
        self._events.put((steps_topic(self.identity.host), step_payload(self.identity, step)))

    def submit(self, device: str, port: int, direction: str, records: list[BurstRecord]) -> None:
        """Hand bursts over directly (tests, replay): same path as the listener."""
        self._queue.put(((device, port, direction), records))

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        """Start the thread and try the broker briefly.

        Raises MqttSettingsError (one line, meant for exit status 2) when the broker refuses
        the credentials or certificate, the spool cannot be opened or aiomqtt is missing; an
        unreachable broker is not an error: messages wait in the spool.
        """
        try:
            from burstscope.collector.mqtt.publisher import PublisherStats
        except ImportError:
            raise MqttSettingsError(
                "--mqtt needs aiomqtt: pip install 'burstscope[mqtt]'"
            ) from None
        try:
            spool = open_spool(self.settings.spool_dir, self.settings.spool_messages)
        except (OSError, ValueError) as exc:
            raise MqttSettingsError(
                f"cannot open MQTT spool in {self.settings.spool_dir}: {exc}"
            ) from None
        self.stats = PublisherStats()
        # Metrics and bursts from the first moment: the broker check below takes seconds.
        self.pipeline.listeners.append(self.on_bursts)
        if self.collector is not None:
            self.collector.extra_families.append(self.families)
        self._thread = threading.Thread(
            target=self._thread_main, args=(spool,), name="burstscope-mqtt", daemon=True
        )
        self._thread.start()
        self._ready.wait(5)
        if self._failure is not None:
            self.stop()
            raise MqttSettingsError(f"MQTT publisher failed to start: {self._failure}")
        self._first.wait(self.settings.connect_check_seconds)
        outcome = self._first_outcome
        if outcome is not None and outcome[0].value == "refused":
            self.stop()
            raise MqttSettingsError(
                f"MQTT broker {self.settings.endpoint} refused us: {outcome[1]}"
            )
        if outcome is None or outcome[0].value != "connected":
            _LOG.warning(
                "MQTT broker %s not reachable yet; spooling up to %d messages meanwhile",
                self.settings.endpoint,
                self.settings.spool_messages,
            )

    def stop(self) -> None:
        """Flush what the policy holds, deliver briefly, publish offline, end the thread."""
        with contextlib.suppress(ValueError):
            self.pipeline.listeners.remove(self.on_bursts)
        if self.collector is not None:
            with contextlib.suppress(ValueError):
                self.collector.extra_families.remove(self.families)
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(self.settings.stop_flush_seconds * 2 + 5)
        self._thread = None

    def reload(self, settings: MqttSettings) -> tuple[MqttSettings, list[str]]:
        """SIGHUP with new MQTT settings: move to them live, keeping run, seq and spool.

        The new broker is tried first: if it refuses the credentials or certificate, this
        raises MqttSettingsError and the publisher carries on as it was. An unreachable
        broker is accepted (messages spool until it answers). A change of the rate policy
        alone applies without reconnecting. The spool's place and size are fixed for the
        run; returns the settings applied and the keys kept unchanged.
        """
        from burstscope.collector.mqtt.publisher import Outcome, probe

        loop, swap = self._loop, self._swap
        if self._thread is None or not self._thread.is_alive() or loop is None or swap is None:
            raise MqttSettingsError("the MQTT publisher is not running")
        kept = [
            f"mqtt.{name}"
            for name in ("spool_dir", "spool_messages")
            if getattr(settings, name) != getattr(self.settings, name)
        ]
        settings = replace(
            settings, spool_dir=self.settings.spool_dir, spool_messages=self.settings.spool_messages
        )
        policy_only = replace(
            settings,
            merge_gap_ns=self.settings.merge_gap_ns,
            max_events_per_second=self.settings.max_events_per_second,
        )
        if policy_only == self.settings:  # same broker and identity: no reconnect needed

            def retune() -> None:
                self.settings = settings
                self.policy = RatePolicy(settings.merge_gap_ns, settings.max_events_per_second)

            _call_soon(loop, retune)
            return settings, kept
        try:
            outcome, detail = asyncio.run_coroutine_threadsafe(probe(settings), loop).result(
                settings.connect_check_seconds + 5
            )
        except RuntimeError:  # the loop ended meanwhile
            raise MqttSettingsError("the MQTT publisher is not running") from None
        except TimeoutError:
            raise MqttSettingsError(f"no answer from {settings.endpoint} in time") from None
        if outcome is Outcome.REFUSED:
            raise MqttSettingsError(f"MQTT broker {settings.endpoint} refused us: {detail}")
        if outcome is not Outcome.CONNECTED:
            _LOG.warning(
                "MQTT broker %s not reachable yet (%s); spooling meanwhile",
                settings.endpoint,
                detail,
            )

        def request() -> None:
            self._next_settings = settings
            swap.set()

        _call_soon(loop, request)
        return settings, kept

    def _thread_main(self, spool: Any) -> None:
        name_os_thread()
        try:
            asyncio.run(self._main(spool))
        except BaseException as exc:  # report to start(); the agent keeps sampling
            self._failure = exc
            _LOG.exception("MQTT publisher stopped")
        finally:
            self._ready.set()
            self._first.set()

    def _on_first_attempt(self, outcome: Outcome, detail: str) -> None:
        self._first_outcome = (outcome, detail)
        self._first.set()

    async def _main(self, spool: Any) -> None:
        from burstscope.collector.mqtt.publisher import MqttPublisher

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._swap = asyncio.Event()
        assert self.stats is not None
        seq = 0
        while True:
            try:
                publisher = MqttPublisher(
                    self.settings,
                    spool,
                    self.identity,
                    self.stats,
                    self._on_first_attempt,
                    first_seq=seq,
                )
            except MqttSettingsError as exc:
                self._failure = exc
                self._ready.set()
                return
            self._ready.set()
            async with publisher:
                publisher.spawn(self._intake(publisher), "mqtt-intake")
                publisher.spawn(self._link_events(publisher), "mqtt-link-events")
                publisher.spawn(self._job_events(publisher), "mqtt-job-events")
                if await self._stop_or_swap():
                    return
                # Reconfigured: this connection says offline and delivers what it can in
                # stop_flush_seconds; the rest of the spool goes to the next publisher.
                publisher.keep_spool = True
                publisher.offline_reason = "reconfigured"
            seq = publisher.seq
            self._swap.clear()
            assert self._next_settings is not None
            self._apply(self._next_settings)
            _LOG.info("MQTT settings applied: publishing to %s", self.settings.endpoint)

    async def _stop_or_swap(self) -> bool:
        """Wait for stop() (True) or a reload's new settings (False)."""
        assert self._stop is not None and self._swap is not None
        stop = asyncio.create_task(self._stop.wait(), name="mqtt-stop")
        swap = asyncio.create_task(self._swap.wait(), name="mqtt-swap")
        try:
            done, _ = await asyncio.wait({stop, swap}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when the publisher's TaskGroup cancels us
            stop.cancel()
            swap.cancel()
        return stop in done

    def _apply(self, settings: MqttSettings) -> None:
        """New settings for the next publisher: rate policy and node name included."""
        self.settings = settings
        self.policy = RatePolicy(settings.merge_gap_ns, settings.max_events_per_second)
        if settings.node != self.identity.host:
            self.identity = replace(self.identity, host=settings.node)

    # -- event loop tasks -----------------------------------------------------------
    async def _intake(self, publisher: MqttPublisher) -> None:
        while True:
            closing = publisher.closing.is_set()
            fresh: dict[PortDirection, list[BurstRecord]] = {}
            with contextlib.suppress(queue.Empty):
                while True:
                    key, records = self._queue.get_nowait()
                    fresh.setdefault(key, []).extend(records)
            now_ns = time.time_ns()
            if self.collectives is not None:
                fresh = self._labelled(fresh, now_ns, closing)
            if self.identity.threshold != self.pipeline.thresholds.burst:  # a reload retuned it
                self.identity = replace(self.identity, threshold=self.pipeline.thresholds.burst)
            outgoing: list[tuple[str, dict[str, Any]]] = []
            for key in sorted(set(self._policies) | set(fresh)):
                state = self._policies.get(key, PolicyState())
                state, out = apply_policy(self.policy, state, fresh.get(key, []), now_ns)
                if closing:
                    state, rest = flush(self.policy, state)
                    out.extend(rest)
                self._policies[key] = state
                device, port, direction = key
                topic = port_topic(self.identity.host, device, port, "burst")
                for item in out:
                    payload = (
                        burst_payload(self.identity, device, port, direction, item)
                        if isinstance(item, BurstRecord)
                        else summary_payload(self.identity, device, port, direction, item)
                    )
                    outgoing.append((topic, payload))
            if outgoing:
                outgoing.sort(key=lambda item: int(item[1]["end_ns"]))
                publisher.enqueue(outgoing)
            events = []
            with contextlib.suppress(queue.Empty):
                while True:
                    events.append(self._events.get_nowait())
            if events:
                publisher.enqueue(events)
            if closing:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(INTAKE_SECONDS):
                    await publisher.closing.wait()

    def _labelled(
        self, fresh: dict[PortDirection, list[BurstRecord]], now_ns: int, closing: bool
    ) -> dict[PortDirection, list[BurstRecord]]:
        """The bursts whose label delay has passed (all of them when closing), tagged; the
        others wait for a later pass."""
        labels = self.collectives
        assert labels is not None
        cutoff = now_ns - labels.label_delay_ns
        out: dict[PortDirection, list[BurstRecord]] = {}
        for key in set(self._unlabelled) | set(fresh):
            waiting = self._unlabelled.pop(key, []) + fresh.get(key, [])
            ready = [r for r in waiting if closing or r.end_ns <= cutoff]
            rest = [r for r in waiting if not (closing or r.end_ns <= cutoff)]
            if rest:
                self._unlabelled[key] = rest
            if ready:
                out[key] = [replace(r, collectives=labels.tag(r.start_ns, r.end_ns)) for r in ready]
        return out

    async def _job_events(self, publisher: MqttPublisher) -> None:
        """Jobs starting, changing and ending on the node topic, within JOB_POLL_SECONDS of
        the watcher's change (the table is swapped by reference: a poll is one comparison).
        A job running when the agent starts is said to start too."""
        said: JobTable = EMPTY_TABLE
        while not publisher.closing.is_set():
            jobs = self.pipeline.jobs() if self.pipeline.jobs is not None else EMPTY_TABLE
            if jobs is not said:
                changes = job_events(self.identity, said, jobs, time.time_ns())
                said = jobs
                if changes:
                    node = node_topic(self.identity.host)
                    publisher.enqueue([(node, payload) for payload in changes])
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(JOB_POLL_SECONDS):
                    await publisher.closing.wait()

    async def _link_events(self, publisher: MqttPublisher) -> None:
        deriver = LinkEventDeriver()
        recording_paused = False
        jobs: JobTable = EMPTY_TABLE
        while not publisher.closing.is_set():
            recording = None
            try:
                snapshot = self.pipeline.snapshot()
                readings = readings_from_snapshot(snapshot)
                recording = snapshot.recording
                jobs = snapshot.jobs
            except Exception:  # a snapshot failure must not end publishing
                _LOG.exception("snapshot for MQTT link events failed")
                readings = {}
            if recording is not None and recording.paused != recording_paused:
                recording_paused = recording.paused
                publisher.enqueue(
                    [
                        (
                            node_topic(self.identity.host),
                            recording_event(
                                self.identity,
                                recording.paused,
                                recording.last_error,
                                recording.dropped_rows,
                                time.time_ns(),
                            ),
                        )
                    ]
                )
            events = deriver.update(readings, time.time_ns()) if readings else []
            if events:
                publisher.enqueue(
                    [
                        (
                            port_topic(self.identity.host, e.device, e.port, "event"),
                            link_event_payload(self.identity, e, port_tags(jobs, e.device, e.port)),
                        )
                        for e in events
                    ]
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(LINK_POLL_SECONDS):
                    await publisher.closing.wait()

    # -- metrics --------------------------------------------------------------------
    def families(self) -> Iterable[Metric]:
        """The publisher's metric families, for BurstscopeCollector.extra_families."""
        from burstscope.collector.exporter import mqtt_families

        return mqtt_families(self.stats)


def attach_mqtt(
    pipeline: Pipeline,
    settings: MqttSettings,
    collector: BurstscopeCollector | None = None,
    *,
    version: str,
    collectives: CollectiveLabels | None = None,
) -> MqttHandle:
    """The publisher for a pipeline: start() after pipeline.start(), stop() before close()."""
    return MqttHandle(pipeline, settings, collector, version=version, collectives=collectives)
