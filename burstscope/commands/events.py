"""``burstscope events``: subscribe to the fleet's MQTT events; a live table or JSON lines."""

from __future__ import annotations

import argparse
import asyncio

from burstscope.collector.mqtt.settings import MqttSettingsError
from burstscope.errors import UsageError
from burstscope.fleet_events import follow
from burstscope.mqtt_arguments import add_connection_arguments, mqtt_settings_from_args


def register(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser, required=True)
    parser.add_argument("--host", metavar="H", help="only events from this node")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per line instead of a live table"
    )
    parser.add_argument(
        "--session",
        metavar="NAME",
        help="persistent MQTT session with this client id: the broker keeps QoS 1 messages "
        "for it while it is away",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import aiomqtt  # noqa: F401
    except ImportError:
        raise UsageError("needs aiomqtt: pip install 'burstscope[mqtt]'") from None
    try:
        settings = mqtt_settings_from_args(args)
    except MqttSettingsError as exc:
        raise UsageError(str(exc)) from None
    assert settings is not None  # --mqtt is required
    problem: str | None = None
    try:
        asyncio.run(follow(args, settings))
    except* MqttSettingsError as group:  # from inside the TaskGroup of the live view
        problem = str(group.exceptions[0])
    if problem is not None:
        raise UsageError(problem)
    return 0
