"""The MQTT flags of ``agent``, ``demo`` and ``events``, and the settings they build.

Not in burstscope.arguments, which ``discover`` loads too: the MQTT settings come with the
MQTT package (rich, prometheus-client), which ``discover`` has no use for.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from burstscope.collector.mqtt.settings import URL_FORM, MqttSettings, build_settings

PASSWORD_ENVIRONMENT = "BURSTSCOPE_MQTT_PASSWORD"  # keeps the password out of `ps`


def add_connection_arguments(parser: argparse.ArgumentParser, required: bool = False) -> None:
    """--mqtt URL and its credentials and TLS files (agent, demo, events)."""
    parser.add_argument("--mqtt", metavar="URL", required=required, help=f"MQTT broker: {URL_FORM}")
    parser.add_argument("--mqtt-username", metavar="USER", help="MQTT user name")
    parser.add_argument(
        "--mqtt-password",
        metavar="PASSWORD",
        help=f"MQTT password (or set {PASSWORD_ENVIRONMENT}, which `ps` cannot see)",
    )
    parser.add_argument("--mqtt-ca", metavar="FILE", help="CA that signed the broker (mqtts)")
    parser.add_argument("--mqtt-cert", metavar="FILE", help="client certificate (mqtts)")
    parser.add_argument("--mqtt-key", metavar="FILE", help="private key of --mqtt-cert")


def add_mqtt_arguments(parser: argparse.ArgumentParser) -> None:
    """The publisher's flags: connection plus the spool directory."""
    add_connection_arguments(parser)
    parser.add_argument(
        "--mqtt-spool-dir",
        metavar="DIR",
        help="keep undelivered MQTT messages on disk here, so a restart keeps them",
    )


def mqtt_settings_from_args(
    args: argparse.Namespace, config_get: Callable[[str, str, Any], Any] | None = None
) -> MqttSettings | None:
    """Flags over the [mqtt] table of the config file; None when no URL is given anywhere.

    ``config_get(table, key, default)`` is AgentConfig.get; raises MqttSettingsError.
    """

    def pick(flag: str, key: str) -> Any:
        value = getattr(args, flag, None)
        if value is None and config_get is not None:
            value = config_get("mqtt", key, None)
        return value

    url = pick("mqtt", "url")
    if url is None:
        return None
    password = pick("mqtt_password", "password")
    if password is None:
        password = os.environ.get(PASSWORD_ENVIRONMENT)
    chosen: dict[str, Any] = {}
    spool_dir = pick("mqtt_spool_dir", "spool_dir")
    if spool_dir is not None:
        chosen["spool_dir"] = spool_dir
    if config_get is not None:
        for key, field_name in (
            ("spool_messages", "spool_messages"),
            ("merge_gap", "merge_gap_ns"),
            ("max_events_per_second", "max_events_per_second"),
        ):
            value = config_get("mqtt", key, None)
            if value is not None:
                chosen[field_name] = value
    return build_settings(
        url,
        username=pick("mqtt_username", "username"),
        password=password,
        ca_file=pick("mqtt_ca", "ca_file"),
        cert_file=pick("mqtt_cert", "cert_file"),
        key_file=pick("mqtt_key", "key_file"),
        **chosen,
    )
