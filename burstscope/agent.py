"""The running agent: settings merged from flags and file, its wiring, reload and main loop.

The command line only parses flags (burstscope/commands/agent.py) and calls ``serve``;
``demo`` builds an ``Agent`` from ``AgentSettings`` directly.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, ProcessCollector

from burstscope import __version__
from burstscope.arguments import LINE_RATE_HINT, build_source_from
from burstscope.attribution import JobSettings, JobSettingsError, build_watcher, job_settings
from burstscope.collective_labels import (
    CollectiveSettings,
    attach_collectives,
    build_collectives,
    collective_settings,
)
from burstscope.collector.config import AgentConfig, ConfigError, load_config, spin_problem
from burstscope.collector.discovery import DEFAULT_SYSFS_ROOT
from burstscope.collector.exporter import (
    FULL,
    PEAK_WINDOWS,
    PROFILES,
    BurstscopeCollector,
    pfc_watchdog_families,
    step_families,
)
from burstscope.collector.http import DEFAULT_LISTEN, HttpError, MetricsServer
from burstscope.collector.intake import AGENT_DRAIN_SECONDS
from burstscope.collector.mqtt import MqttHandle, MqttSettings, MqttSettingsError, attach_mqtt
from burstscope.collector.pfc_watchdog import (
    PfcStormEvent,
    WatchdogSettings,
    build_pfc_watchdog,
    watchdog_settings,
)
from burstscope.collector.pipeline import Pipeline, wait_for_first_drain
from burstscope.collector.recording import Recording, Retention
from burstscope.collector.sampler import SamplerConfig, SamplerError, parse_interval
from burstscope.collector.sources.base import CounterSource
from burstscope.collector.step_summaries import LiveSteps, StepSettings, step_settings
from burstscope.collector.threads import get_interruptibly
from burstscope.collector.throttle_live import LiveThrottle
from burstscope.collector.trace import DIRECTORY_MODE, TraceError, TraceInfo
from burstscope.collector.web_config import (
    WebConfig,
    WebConfigError,
    from_tls_flags,
    load_web_config,
)
from burstscope.detectors.config import Thresholds
from burstscope.detectors.silence import SilenceWatch
from burstscope.detectors.stragglers import NodeStep
from burstscope.detectors.throttle import ThrottleLimits
from burstscope.errors import UsageError
from burstscope.logging_journal import setup_logging as setup_journal_logging
from burstscope.logging_journal import stderr_is_journal
from burstscope.mqtt_arguments import mqtt_settings_from_args
from burstscope.sdnotify import Notifier, Watchdog, heartbeat_recent, watchdog_period

if TYPE_CHECKING:  # the writer loads pyarrow: only an agent that records needs it
    from burstscope.collector.collectives.live import CollectiveTail
    from burstscope.collector.jobs.watcher import JobWatcher
    from burstscope.collector.trace import TraceWriter

_LOG = logging.getLogger("burstscope.agent")
_SWITCH_INTERVAL_S = 0.001


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """Command line over configuration file over defaults, validated."""

    source: CounterSource
    sampler: SamplerConfig
    thresholds: Thresholds
    listen: str
    web: WebConfig | None  # --web.config.file, or the --tls-* flags as one
    slow_interval_seconds: float
    sysfs_root: str
    mqtt: MqttSettings | None = None  # --mqtt: publish burst and link events
    recording_dir: str | None = None  # --record / [recording] path
    recording_piece_seconds: float = 5.0
    retention: Retention = field(default_factory=Retention)  # [recording] max_bytes, max_age
    source_spec: str | None = None  # as given, for a reload and the trace's metadata
    line_rate_gbits: float | None = None  # --line-rate / line_rate_gbits, if given
    line_rates_gbits: tuple[tuple[str, float], ...] = ()  # [source.line_rates], --line-rate-for
    ethtool: bool | None = None  # --ethtool / source.ethtool, if given
    jobs: JobSettings = field(default_factory=JobSettings)  # [jobs], --slurm-jobs-dir, ...
    # [collectives], --nccl-inspector-dir, ...
    collectives: CollectiveSettings = field(default_factory=CollectiveSettings)
    # [pfc_watchdog], --pfc-watchdog: pause counters at 10 Hz, storms (collector.pfc_watchdog)
    pfc_watchdog: WatchdogSettings = field(default_factory=WatchdogSettings)
    # [throttle] xmit_wait_tick_ns: port_xmit_wait's tick, for the throttled seconds' causes
    xmit_wait_tick_ns: float | None = None
    # [steps]: one summary per step of the training rails on MQTT (collector.step_summaries)
    steps: StepSettings = field(default_factory=StepSettings)
    # [metrics] profile, --metrics-profile: what /metrics serves (collector.exporter.PROFILES)
    metrics_profile: str = FULL


def _config(args: argparse.Namespace) -> AgentConfig:
    path = getattr(args, "config", None)
    if path is None:
        return AgentConfig()
    try:
        return load_config(path)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def settings_from_args(args: argparse.Namespace) -> AgentSettings:
    """Command line over configuration file over defaults; ``args`` is left as given.

    A flag the command does not have (``top`` has no --listen, ``demo`` no --config) is
    taken as not given.
    """
    config = _config(args)

    def pick(flag: str, table: str, key: str, default: Any) -> Any:
        value = getattr(args, flag, None)
        return value if value is not None else config.get(table, key, default)

    spec = pick("source", "source", "spec", "sysfs")
    sysfs_root = pick("sysfs_root", "source", "sysfs_root", DEFAULT_SYSFS_ROOT)
    line_rate = pick("line_rate", "source", "line_rate_gbits", None)
    # Per device: the command line's over the file's, device by device.
    line_rates = {
        **config.get("source", "line_rates", {}),
        **dict(getattr(args, "line_rate_for", None) or ()),
    }
    interval = config.get("source", "interval", 1_000_000)
    if getattr(args, "interval", None) is not None:
        try:
            interval = parse_interval(args.interval)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    ethtool = pick("ethtool", "source", "ethtool", None)
    source = build_source_from(
        spec,
        sysfs_root,
        pick("include", "source", "include", None),
        pick("exclude", "source", "exclude", None),
        line_rate,
        line_rates,
        ethtool,
    )
    web = _web_config(pick)
    thresholds = config.values.get("thresholds", {})
    try:
        chosen = Thresholds(**thresholds)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    problem = spin_problem(config.get("sampler", "spin", 0), interval)
    if problem is not None:
        raise UsageError(problem)
    mqtt = _mqtt_settings(args, config)
    try:
        steps = step_settings(config.get, mqtt is not None, interval)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    profile = pick("metrics_profile", "metrics", "profile", FULL)
    if profile not in PROFILES:
        raise UsageError(f"--metrics-profile must be one of {', '.join(PROFILES)}, not {profile!r}")
    return AgentSettings(
        source=source,
        sampler=SamplerConfig(
            interval_ns=interval,
            realtime_priority=config.get("sampler", "realtime_priority", 10),
            cpu=config.get("sampler", "cpu", None),
            spin_ns=config.get("sampler", "spin", 0),
        ),
        thresholds=chosen,
        listen=pick("listen", "listen", "address", DEFAULT_LISTEN),
        web=web,
        slow_interval_seconds=config.get("source", "slow_interval", 1.0),
        sysfs_root=sysfs_root,
        mqtt=mqtt,
        recording_dir=pick("record", "recording", "path", None),
        recording_piece_seconds=config.get("recording", "piece_seconds", 5.0),
        retention=Retention(
            config.get("recording", "max_bytes", None), config.get("recording", "max_age", None)
        ),
        source_spec=spec,
        line_rate_gbits=line_rate,
        line_rates_gbits=tuple(sorted(line_rates.items())),
        ethtool=ethtool,
        jobs=job_settings(config.get, args),
        collectives=collective_settings(config.get, args),
        pfc_watchdog=_pfc_watchdog_settings(config, args),
        xmit_wait_tick_ns=config.get("throttle", "xmit_wait_tick_ns", None),
        steps=steps,
        metrics_profile=profile,
    )


def _web_config(pick: Callable[[str, str, str, Any], Any]) -> WebConfig | None:
    """--web.config.file, or the --tls-* flags (shorthand for its tls_server_config): never
    both, so no setting of one silently loses to the other."""
    path = pick("web_config_file", "listen", "web_config_file", None)
    cert = pick("tls_cert", "listen", "tls_cert", None)
    key = pick("tls_key", "listen", "tls_key", None)
    client_ca = pick("tls_client_ca", "listen", "tls_client_ca", None)
    if path is not None and (cert, key, client_ca) != (None, None, None):
        raise UsageError(
            "--web.config.file and --tls-cert/--tls-key/--tls-client-ca exclude each other: "
            "put the certificate in the web configuration's tls_server_config"
        )
    if path is not None:
        try:
            return load_web_config(path)
        except WebConfigError as exc:
            raise UsageError(str(exc)) from None
    if (cert is None) != (key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    if client_ca is not None and cert is None:
        raise UsageError("--tls-client-ca needs --tls-cert and --tls-key")
    return from_tls_flags(cert, key, client_ca) if cert is not None else None


def startup_notes(settings: AgentSettings) -> list[str]:
    """What an operator should know about the ports at start, one line each (logged once).

    A port without a usable line rate is sampled all the same; its utilization is absent
    until a rate appears. A port whose kernel counters are cached for longer than the
    sampling interval is read at the cache's pace.
    """
    notes = []
    for port in settings.source.ports:
        if port.line_rate_bytes_per_second <= 0:
            why = port.rate_problem or "no usable rate"
            notes.append(
                f"{port.device} port {port.port}: line rate unknown ({why}); its bytes are "
                f"sampled, its utilization is absent until a rate appears; {LINE_RATE_HINT}"
            )
        if port.min_read_interval_ns > settings.sampler.interval_ns:
            notes.append(
                f"{port.device} port {port.port}: the kernel caches its counters for "
                f"{port.min_read_interval_ns / 1e6:g} ms (hw_counters lifespan or driver update "
                f"period), finer than --interval {settings.sampler.interval_ns / 1e6:g} ms: "
                f"read every {port.min_read_interval_ns / 1e6:g} ms "
                "(burstscope_port_resolution_seconds)"
            )
    for kept in settings.source.unsampled:
        notes.append(f"{kept.device} port {kept.port}: not sampled: {kept.reason}")
    interval = settings.sampler.interval_ns
    steps = settings.steps
    if settings.mqtt is not None and not steps.publish and not steps.fits(interval):
        notes.append(
            f"step summaries not published: [steps] quiet {steps.quiet_ns / 1e6:g} ms "
            f"is not more than two sampling intervals ({interval / 1e6:g} ms each)"
        )
    return notes


def open_recording(settings: AgentSettings) -> Recording | None:
    """A trace for this run under the recording directory, so restarts never collide."""
    if settings.recording_dir is None:
        return None
    from burstscope.collector.trace import TraceWriter, prepare_output

    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = Path(settings.recording_dir)
    path = root / started
    try:
        if not root.is_dir():
            root.mkdir(parents=True)
            os.chmod(root, DIRECTORY_MODE)
        prepare_output(path)
    except OSError as exc:
        raise UsageError(f"cannot record to {settings.recording_dir!r}: {exc.strerror}") from None
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    writer = TraceWriter(path, settings.recording_piece_seconds, trace_info(settings))
    return Recording(writer, root, settings.retention)


def trace_info(settings: AgentSettings) -> TraceInfo:
    """What the agent's recordings say about themselves."""
    return TraceInfo.here(
        settings.sampler.interval_ns, settings.source_spec or settings.source.name
    )


def _pfc_watchdog_settings(config: AgentConfig, args: argparse.Namespace) -> WatchdogSettings:
    try:
        return watchdog_settings(config.get, args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _mqtt_settings(args: argparse.Namespace, config: AgentConfig) -> MqttSettings | None:
    try:
        return mqtt_settings_from_args(args, config.get)
    except MqttSettingsError as exc:
        raise UsageError(str(exc)) from None


def setup_logging(level: str = "info") -> None:
    """One line per event, repeats rate-limited; under systemd (JOURNAL_STREAM) no timestamps."""
    setup_journal_logging(level, under_journal=stderr_is_journal())


class Agent:
    """The running agent: pipeline plus metrics server; start() then stop()."""

    def __init__(
        self,
        settings: AgentSettings,
        trace: TraceWriter | Recording | None = None,
        drain_seconds: float = AGENT_DRAIN_SECONDS,
        peak_windows: Sequence[tuple[str, int]] = PEAK_WINDOWS,
    ) -> None:
        """``drain_seconds``: how often the detectors catch up with the sampler; a live
        view on the same pipeline (the demo) wants collector.intake.DRAIN_SECONDS.
        ``peak_windows``: the exporter's trailing peak windows (collector.exporter)."""
        self.settings = settings
        slow_sources = settings.source.slow_sources()
        self.pipeline = Pipeline(
            settings.source,
            settings.sampler,
            settings.thresholds,
            slow_sources,
            settings.slow_interval_seconds,
            trace,
            drain_seconds,
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = BurstscopeCollector(
            self.pipeline.snapshot, __version__, peak_windows, settings.metrics_profile
        )
        self.registry.register(self.collector)
        # Each saturated or long-burst second by its cause (collector.throttle_live).
        if settings.xmit_wait_tick_ns is not None:
            self.pipeline.throttle = LiveThrottle(
                ThrottleLimits(xmit_wait_tick_ns=settings.xmit_wait_tick_ns)
            )
        self.collector.extra_families.append(self.pipeline.throttle.families)
        # process_cpu_seconds_total, process_resident_memory_bytes, ... of this (the main)
        # process, for the agent's own cost on the fleet dashboard; the sampler process's
        # CPU and memory are burstscope_sampler_* beside them.
        ProcessCollector(registry=self.registry)
        self.mqtt: MqttHandle | None = None
        self.server: MetricsServer | None = None
        self.jobs: JobWatcher | None = None
        self.collectives: CollectiveTail | None = build_collectives(settings.collectives)
        self.pfc_watchdog = build_pfc_watchdog(
            settings.pfc_watchdog, slow_sources, settings.source.ports
        )
        if settings.steps.publish and settings.mqtt is not None:
            self.pipeline.steps = LiveSteps(
                settings.mqtt.node, settings.sampler.interval_ns, settings.steps.limits
            )

    def start(self) -> None:
        # Bind first: a port in use is bad input and should fail before sampling starts.
        try:
            self.server = MetricsServer(
                self.registry,
                self.settings.listen,
                self.settings.web,
                ready=self.pipeline.drained.is_set,  # /-/ready: as systemd's READY=1
            )
        except HttpError as exc:
            raise UsageError(str(exc)) from None
        self._build_jobs()
        try:
            self.pipeline.start()
        except SamplerError as exc:
            self.server.close()
            if self.jobs is not None:
                self.jobs.stop()
            raise UsageError(f"sampler failed to start: {exc}") from None
        for note in self.pipeline.tuning_notes():
            _LOG.info("sampler: %s", note)
        if self.collectives is not None:
            attach_collectives(self.collectives, self.pipeline, self.collector)
        if self.settings.mqtt is not None:
            self.mqtt = attach_mqtt(
                self.pipeline,
                self.settings.mqtt,
                self.collector,
                version=__version__,
                collectives=self.collectives.labels if self.collectives is not None else None,
            )
            try:
                self.mqtt.start()  # bad credentials: fatal; an unreachable broker is not
            except MqttSettingsError as exc:
                self.mqtt = None
                self.stop()
                raise UsageError(str(exc)) from None
        self._start_jobs()
        self._start_pfc_watchdog()
        self._start_steps()

    def _start_steps(self) -> None:
        """The steps' summaries to whichever publisher a reload leaves running, and their
        count on /metrics."""
        steps = self.pipeline.steps
        if steps is None:
            return

        def publish(step: NodeStep) -> None:
            if self.mqtt is not None:
                self.mqtt.on_step(step)
                steps.published += 1

        steps.listeners.append(publish)
        self.collector.extra_families.append(lambda: step_families(steps.published))

    def _start_pfc_watchdog(self) -> None:
        """Its thread, its families on /metrics, its storms on MQTT (whichever publisher a
        reload leaves running)."""
        watchdog = self.pfc_watchdog
        if watchdog is None:
            return

        def publish(storm: PfcStormEvent) -> None:
            if self.mqtt is not None:
                self.mqtt.on_pfc_storm(storm)

        watchdog.listeners.append(publish)
        self.collector.extra_families.append(lambda: pfc_watchdog_families(watchdog.figures()))
        watchdog.start()

    def _build_jobs(self) -> None:
        """Job attribution, when on and this node has a job source (collector.jobs); built
        before the sampler starts, so a setting only the source can judge stops nothing."""
        settings = self.settings
        try:
            self.jobs = build_watcher(settings.jobs, settings.source.ports, settings.sysfs_root)
        except JobSettingsError as exc:
            assert self.server is not None
            self.server.close()
            raise UsageError(str(exc)) from None
        if self.jobs is not None:
            self.pipeline.jobs = self.jobs.table
            self.pipeline.silence = SilenceWatch(int(settings.jobs.silence_seconds * 1e9))

    def _start_jobs(self) -> None:
        """The watcher's thread, and the trace's side table of which job held which port
        when (collector.jobs.spans), when the agent records."""
        if self.jobs is None:
            return
        if self.pipeline.trace is not None:
            from burstscope.collector.jobs.spans import JobLog

            self.jobs.listeners.append(JobLog(self.pipeline.trace.path).on_change)
        self.jobs.start()

    def stop(self) -> None:
        if self.pfc_watchdog is not None:
            self.pfc_watchdog.stop()
        if self.mqtt is not None:
            self.mqtt.stop()  # publishes the offline status while the pipeline still runs
        if self.jobs is not None:
            self.jobs.stop()
        if self.collectives is not None:
            self.collectives.stop()
        self.pipeline.close()
        if self.server is not None:
            self.server.close()


# What a reload cannot change: it shapes the sampler process, the ring or the socket.
def _restart_only(settings: AgentSettings) -> dict[str, Any]:
    sampler = settings.sampler
    return {
        "source.spec": settings.source_spec,
        "source.sysfs_root": settings.sysfs_root,
        "source.line_rate_gbits": settings.line_rate_gbits,
        "source.line_rates": settings.line_rates_gbits,
        "source.ethtool": settings.ethtool,
        "source.interval": sampler.interval_ns,
        "source.slow_interval": settings.slow_interval_seconds,
        "sampler": (sampler.realtime_priority, sampler.cpu, sampler.spin_ns),
        "listen.address": settings.listen,
        "listen TLS and web configuration": settings.web,
        "jobs": settings.jobs,
        "collectives": settings.collectives,
        "pfc_watchdog": settings.pfc_watchdog,
        "throttle.xmit_wait_tick_ns": settings.xmit_wait_tick_ns,
        "steps": settings.steps,
        "metrics.profile": settings.metrics_profile,
        "recording": (
            settings.recording_dir,
            settings.recording_piece_seconds,
            settings.retention,
        ),
    }


def reload_agent(agent: Agent, cli_args: argparse.Namespace) -> None:
    """SIGHUP: re-read the config file, apply what can change live, log what cannot.

    ``cli_args`` are the flags as given (they still override the file). A file that
    fails validation changes nothing.
    """
    if cli_args.config is None:
        _LOG.warning("reload: no --config file was given; nothing to reload")
        return
    try:
        new = settings_from_args(cli_args)
    except UsageError as exc:
        _LOG.error("reload failed, keeping the previous configuration: %s", exc)
        return
    old = agent.settings
    before, after = _restart_only(old), _restart_only(new)
    changed = [key for key in before if before[key] != after[key]]
    if changed:
        _LOG.warning("reload: %s changed: needs a restart; running unchanged", ", ".join(changed))
    settings = old
    if new.thresholds != old.thresholds:
        agent.pipeline.retune(new.thresholds)
        settings = replace(settings, thresholds=new.thresholds)
        thresholds = new.thresholds
        _LOG.info(
            "reload: thresholds applied: burst=%g saturated=%g idle=%g busy=%g",
            thresholds.burst,
            thresholds.saturated,
            thresholds.idle,
            thresholds.busy,
        )
    ports_before = [(p.device, p.port) for p in old.source.ports]
    ports_after = [(p.device, p.port) for p in new.source.ports]
    if ports_after != ports_before and "source.spec" not in changed:
        try:
            agent.pipeline.replace_source(
                new.source, new.source.slow_sources(), old.slow_interval_seconds
            )
        except SamplerError as exc:
            _LOG.error("reload: port filter not applied, still sampling the old ports: %s", exc)
        else:
            settings = replace(settings, source=new.source)
            _LOG.info(
                "reload: sampler restarted on %d port(s); added %s; removed %s",
                len(ports_after),
                _names(set(ports_after) - set(ports_before)),
                _names(set(ports_before) - set(ports_after)),
            )
    if new.mqtt != old.mqtt:
        settings = replace(settings, mqtt=_reload_mqtt(agent, old.mqtt, new.mqtt))
    if settings is old and not changed and new.mqtt == old.mqtt:
        _LOG.info("reload: %s unchanged", cli_args.config)
    agent.settings = settings


def _reload_mqtt(
    agent: Agent, old: MqttSettings | None, mqtt: MqttSettings | None
) -> MqttSettings | None:
    """Start, stop or move the MQTT publisher; the settings in force afterwards."""
    if mqtt is None:
        if agent.mqtt is not None:
            agent.mqtt.stop()  # the status goes offline, as at a stop
            agent.mqtt = None
        _LOG.info("reload: mqtt publishing stopped")
        return None
    if agent.mqtt is None:
        labels = agent.collectives.labels if agent.collectives is not None else None
        handle = attach_mqtt(
            agent.pipeline, mqtt, agent.collector, version=__version__, collectives=labels
        )
        try:
            handle.start()
        except MqttSettingsError as exc:
            _LOG.error("reload: mqtt not started, keeping the previous configuration: %s", exc)
            return old
        agent.mqtt = handle
        _LOG.info("reload: mqtt publishing to %s", mqtt.endpoint)
        return mqtt
    try:
        applied, kept = agent.mqtt.reload(mqtt)
    except MqttSettingsError as exc:
        _LOG.error("reload: mqtt settings not applied, keeping the previous ones: %s", exc)
        return old
    if kept:
        _LOG.warning("reload: %s changed: needs a restart; kept", ", ".join(kept))
    _LOG.info("reload: mqtt settings applied: publishing to %s", mqtt.endpoint)
    return applied


def _names(ports: set[tuple[str, int]]) -> str:
    return ", ".join(f"{device}/{port}" for device, port in sorted(ports)) or "none"


def _start_watchdog(agent: Agent, notifier: Notifier) -> Watchdog | None:
    """WATCHDOG=1 every WATCHDOG_USEC/2 while the sampler's heartbeat advances."""
    period = watchdog_period()
    if period is None or not notifier.enabled:
        return None

    def sampler_progresses() -> bool:
        health = agent.pipeline.snapshot().health
        return health.sampler_alive and heartbeat_recent(
            health.heartbeat_ns, health.interval_ns, period
        )

    watchdog = Watchdog(notifier, period, sampler_progresses)
    watchdog.start()
    return watchdog


def serve(args: argparse.Namespace) -> int:
    """Run the agent the flags describe until SIGTERM or SIGINT; SIGHUP reloads."""
    settings = settings_from_args(args)
    # The pipeline thread's drain (every second, a few ms of detector work) and a scrape
    # share the GIL: at CPython's default 5 ms switch interval a scrape that arrives during
    # a drain waits for it in 5 ms slices. 1 ms keeps a scrape's latency near its own CPU.
    sys.setswitchinterval(_SWITCH_INTERVAL_S)
    agent = Agent(settings, open_recording(settings))
    notifier = Notifier()
    # Signals and a fatal pipeline failure, in order: a signal number or the failure's reason.
    # SimpleQueue, not an Event: a handler runs between any two bytecodes of the main thread,
    # and Event.set() takes the lock that the main thread may hold right then inside
    # Event.wait() or clear(), which would hang for ever. SimpleQueue.put() is reentrant
    # (its documentation says so), and a blocked get() runs the handlers; in slices
    # (get_interruptibly), as a signal the kernel gives another thread does not wake it.
    wake: queue.SimpleQueue[int | str] = queue.SimpleQueue()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        wake.put(signum)

    def on_fatal(reason: str) -> None:
        wake.put(reason)

    agent.pipeline.on_fatal = on_fatal

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    agent.start()
    for note in startup_notes(settings):
        _LOG.warning("%s", note)
    for note in settings.source.notes:
        _LOG.info("%s", note)
    assert agent.server is not None
    status = (
        f"sampling {len(settings.source.ports)} port(s) from {settings.source.name} every "
        f"{settings.sampler.interval_ns / 1e6:g} ms; metrics on "
        f"{agent.server.scheme}://{agent.server.address}/metrics"
    )
    _LOG.info("%s", status)
    watchdog: Watchdog | None = None
    try:
        # READY=1 only once /metrics is bound (start) and the first drain has fed the
        # sampler's rows through: from then on the data counters carry the kernel's values.
        if not wait_for_first_drain(
            agent.pipeline,
            max(30.0, 3 * settings.sampler.interval_ns / 1e9 + 3 * agent.pipeline.drain_seconds),
        ):
            _LOG.error("the sampler produced no sample; stopping")
            return 1
        notifier.ready(status)
        watchdog = _start_watchdog(agent, notifier)
        while True:
            events = [get_interruptibly(wake)]
            with contextlib.suppress(queue.Empty):
                while True:  # what came together is acted on once: a stop before a reload
                    events.append(wake.get_nowait())
            fatal = [event for event in events if isinstance(event, str)]
            if fatal:
                # Restarting did not cure it: exit non-zero so the service manager (or
                # whoever runs us) sees the failure instead of a node that looks healthy.
                _LOG.critical("stopping: %s", fatal[0])
                return 1
            if signal.SIGTERM in events or signal.SIGINT in events:
                break
            if signal.SIGHUP in events:
                notifier.reloading()
                try:
                    reload_agent(agent, args)
                except Exception:  # a reload must never take a running agent down
                    _LOG.exception(
                        "reload failed unexpectedly; still running, with what the lines "
                        "above say was applied"
                    )
                notifier.ready(status)
    finally:
        notifier.stopping()
        if watchdog is not None:
            watchdog.stop()
        agent.stop()
        _LOG.info("stopped")
    return 0
