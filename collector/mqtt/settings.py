"""MQTT settings: broker URL, credentials, TLS files and spool, validated (no command line)."""

from __future__ import annotations

import socket
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Any

DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}
URL_FORM = "mqtt://[user:pass@]host[:port] or mqtts://..."


class MqttSettingsError(ValueError):
    """Bad MQTT input, one line: the URL, a TLS file, a flag combination."""


@dataclass(frozen=True, slots=True)
class BrokerUrl:
    """A parsed mqtt:// or mqtts:// URL."""

    tls: bool
    host: str
    port: int
    username: str | None
    password: str | None


@dataclass(frozen=True, slots=True)
class MqttSettings:
    """Everything the publisher and the events command need to reach the broker."""

    url: str
    broker: BrokerUrl
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None  # mqtts: verify the broker with this CA (default: system CAs)
    cert_file: str | None = None  # mqtts: client certificate
    key_file: str | None = None
    hostname: str = ""  # this node's name in topics and payloads; "" means socket.gethostname()
    spool_dir: str | None = None  # set: the spool is a sqlite3 file here and survives restarts
    spool_messages: int = 100_000
    merge_gap_ns: int = 5_000_000
    max_events_per_second: float = 10.0
    backoff_initial_seconds: float = 0.5
    backoff_max_seconds: float = 30.0
    # How long start() waits for the first CONNACK to tell bad credentials from no broker.
    connect_check_seconds: float = 3.0
    keepalive_seconds: int = 10
    stop_flush_seconds: float = 1.0  # on stop, time allowed to deliver what is spooled

    @property
    def node(self) -> str:
        return self.hostname or socket.gethostname()

    @property
    def endpoint(self) -> str:
        scheme = "mqtts" if self.broker.tls else "mqtt"
        return f"{scheme}://{self.broker.host}:{self.broker.port}"


def parse_broker_url(text: str) -> BrokerUrl:
    """``mqtt://[user:pass@]host[:port]`` or ``mqtts://...``; raises MqttSettingsError."""
    problem = f"--mqtt {text!r} is not {URL_FORM}"
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError:
        raise MqttSettingsError(problem) from None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise MqttSettingsError(problem)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise MqttSettingsError(f"{problem}: no path or query allowed")
    if port == 0:
        raise MqttSettingsError(f"{problem}: port 0")
    username = urllib.parse.unquote(parts.username) if parts.username else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return BrokerUrl(
        tls=parts.scheme == "mqtts",
        host=parts.hostname,
        port=port or DEFAULT_PORTS[parts.scheme],
        username=username,
        password=password,
    )


def client_tls_context(settings: MqttSettings) -> ssl.SSLContext | None:
    """The client TLS context for mqtts://, loading every file now so errors surface at start."""
    if not settings.broker.tls:
        return None
    files = [f for f in (settings.ca_file, settings.cert_file, settings.key_file) if f]
    try:
        context = ssl.create_default_context(cafile=settings.ca_file)
        if settings.cert_file is not None:
            context.load_cert_chain(settings.cert_file, settings.key_file)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise MqttSettingsError(
            f"cannot load MQTT TLS files ({', '.join(files)}): {reason}"
        ) from None
    return context


def build_settings(
    url: str,
    *,
    username: str | None = None,
    password: str | None = None,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    **options: Any,
) -> MqttSettings:
    """Validated settings: URL credentials are overridden by explicit ones; TLS files loaded."""
    broker = parse_broker_url(url)
    tls_files = [f for f in (ca_file, cert_file, key_file) if f]
    if tls_files and not broker.tls:
        raise MqttSettingsError("--mqtt-ca, --mqtt-cert and --mqtt-key need an mqtts:// URL")
    if key_file is not None and cert_file is None:
        raise MqttSettingsError("--mqtt-key needs --mqtt-cert")
    user = username if username is not None else broker.username
    secret = password if password is not None else broker.password
    if secret is not None and user is None:
        raise MqttSettingsError("an MQTT password needs a user name")
    settings = MqttSettings(
        url=url,
        broker=broker,
        username=user,
        password=secret,
        ca_file=ca_file,
        cert_file=cert_file,
        key_file=key_file,
        **options,
    )
    client_tls_context(settings)
    return settings
