"""``burstscope agent``: sample continuously, detect bursts, serve /metrics until stopped."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry

from burstscope.commands.record import add_source_arguments, source_from_args
from burstscope.errors import UsageError
from collector.config import AgentConfig, ConfigError, load_config
from collector.exporter import BurstscopeCollector
from collector.http import DEFAULT_LISTEN, HttpError, MetricsServer, TlsConfig
from collector.mqtt import (
    MqttHandle,
    MqttSettings,
    MqttSettingsError,
    add_mqtt_arguments,
    attach_mqtt,
    mqtt_settings_from_args,
)
from collector.pipeline import Pipeline
from collector.sampler import SamplerConfig, SamplerError, parse_interval
from collector.slow_poller import slow_sources_for
from collector.sources.base import CounterSource, SlowSource
from collector.trace import TraceWriter
from detectors.config import Thresholds

_LOG = logging.getLogger("burstscope.agent")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("agent", help="sample continuously and serve Prometheus metrics")
    add_source_arguments(parser, defaults=False)
    add_agent_arguments(parser)
    parser.add_argument(
        "--check-config", metavar="FILE", help="validate a configuration file and exit"
    )
    parser.set_defaults(func=run)


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen", metavar="ADDR:PORT", help=f"where to serve /metrics (default {DEFAULT_LISTEN})"
    )
    parser.add_argument("--config", metavar="FILE", help="agent configuration (TOML)")
    parser.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", metavar="FILE", help="private key of --tls-cert")
    parser.add_argument(
        "--tls-client-ca", metavar="FILE", help="require client certificates signed by this CA"
    )
    add_mqtt_arguments(parser)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """Command line over configuration file over defaults, validated."""

    source: CounterSource
    sampler: SamplerConfig
    thresholds: Thresholds
    listen: str
    tls: TlsConfig | None
    slow_interval_seconds: float
    sysfs_root: str
    mqtt: MqttSettings | None = None  # --mqtt: publish burst and link events


def _config(args: argparse.Namespace) -> AgentConfig:
    if args.config is None:
        return AgentConfig()
    try:
        return load_config(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def settings_from_args(args: argparse.Namespace) -> AgentSettings:
    config = _config(args)

    def pick(flag: str, table: str, key: str, default: Any) -> Any:
        value = getattr(args, flag, None)
        return value if value is not None else config.get(table, key, default)

    args.source = pick("source", "source", "spec", "sysfs")
    args.sysfs_root = pick("sysfs_root", "source", "sysfs_root", "/sys")
    args.include = pick("include", "source", "include", None)
    args.exclude = pick("exclude", "source", "exclude", None)
    args.line_rate = pick("line_rate", "source", "line_rate_gbits", None)
    interval = config.get("source", "interval", 1_000_000)
    if args.interval is not None:
        try:
            interval = parse_interval(args.interval)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    source = source_from_args(args)
    unknown = [p for p in source.ports if p.line_rate_bytes_per_second <= 0]
    if unknown:
        first = unknown[0]
        raise UsageError(
            f"line rate of {first.device} port {first.port} is unknown: pass --line-rate GBITS"
        )
    cert = pick("tls_cert", "listen", "tls_cert", None)
    key = pick("tls_key", "listen", "tls_key", None)
    client_ca = pick("tls_client_ca", "listen", "tls_client_ca", None)
    if (cert is None) != (key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    if client_ca is not None and cert is None:
        raise UsageError("--tls-client-ca needs --tls-cert and --tls-key")
    thresholds = config.values.get("thresholds", {})
    try:
        chosen = Thresholds(**thresholds)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
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
        tls=TlsConfig(cert, key, client_ca) if cert is not None else None,
        slow_interval_seconds=config.get("source", "slow_interval", 1.0),
        sysfs_root=args.sysfs_root,
        mqtt=_mqtt_settings(args, config),
    )


def _mqtt_settings(args: argparse.Namespace, config: AgentConfig) -> MqttSettings | None:
    try:
        return mqtt_settings_from_args(args, config.get)
    except MqttSettingsError as exc:
        raise UsageError(str(exc)) from None


def slow_sources(settings: AgentSettings) -> list[SlowSource]:
    try:
        return slow_sources_for(settings.source, settings.sysfs_root)
    except TypeError:
        return []  # simulated and replayed sources have no slow counters of their own


def setup_logging() -> None:
    """One line per event; under systemd (JOURNAL_STREAM) journald adds the timestamps."""
    import os

    under_journal = "JOURNAL_STREAM" in os.environ
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s"
        if under_journal
        else "%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


class Agent:
    """The running agent: pipeline plus metrics server; start() then stop()."""

    def __init__(self, settings: AgentSettings, trace: TraceWriter | None = None) -> None:
        self.settings = settings
        self.pipeline = Pipeline(
            settings.source,
            settings.sampler,
            settings.thresholds,
            slow_sources(settings),
            settings.slow_interval_seconds,
            trace,
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = BurstscopeCollector(self.pipeline.snapshot)
        self.registry.register(self.collector)
        self.mqtt: MqttHandle | None = None
        self.server: MetricsServer | None = None

    def start(self) -> None:
        # Bind first: a port in use is bad input and should fail before sampling starts.
        try:
            self.server = MetricsServer(self.registry, self.settings.listen, self.settings.tls)
        except HttpError as exc:
            raise UsageError(str(exc)) from None
        try:
            self.pipeline.start()
        except SamplerError as exc:
            self.server.close()
            raise UsageError(f"sampler failed to start: {exc}") from None
        if self.settings.mqtt is not None:
            self.mqtt = attach_mqtt(self.pipeline, self.settings.mqtt, self.collector)
            try:
                self.mqtt.start()  # bad credentials: fatal; an unreachable broker is not
            except MqttSettingsError as exc:
                self.mqtt = None
                self.pipeline.close()
                self.server.close()
                raise UsageError(str(exc)) from None

    def stop(self) -> None:
        if self.mqtt is not None:
            self.mqtt.stop()  # publishes the offline status while the pipeline still runs
        self.pipeline.close()
        if self.server is not None:
            self.server.close()


def run(args: argparse.Namespace) -> int:
    if args.check_config is not None:
        try:
            load_config(args.check_config)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        print(f"{args.check_config}: configuration is valid")
        return 0
    setup_logging()
    settings = settings_from_args(args)
    agent = Agent(settings)
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    agent.start()
    assert agent.server is not None
    _LOG.info(
        "sampling %d port(s) from %s every %g ms; metrics on %s://%s/metrics",
        len(settings.source.ports),
        settings.source.name,
        settings.sampler.interval_ns / 1e6,
        agent.server.scheme,
        settings.listen,
    )
    try:
        stop.wait()
    finally:
        agent.stop()
        _LOG.info("stopped")
    return 0
