"""``burstscope stragglers``: the fleet's step summaries judged per job, served as metrics."""

from __future__ import annotations

import argparse

from burstscope.collector.mqtt.settings import MqttSettingsError
from burstscope.detectors.stragglers import QUIET_NS
from burstscope.errors import UsageError
from burstscope.mqtt_arguments import add_connection_arguments, mqtt_settings_from_args
from burstscope.straggler_watch import (
    DEFAULT_GROUP,
    DEFAULT_LISTEN,
    DEFAULT_SETTLE_SECONDS,
    serve,
    watch_settings,
)


def register(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser, required=True)
    parser.add_argument(
        "--listen",
        metavar="ADDR:PORT",
        default=DEFAULT_LISTEN,
        help=f"serve the standings on /metrics here (default {DEFAULT_LISTEN})",
    )
    parser.add_argument(
        "--group",
        metavar="NAME",
        default=DEFAULT_GROUP,
        help="the group of nodes whose summaries name no job (default %(default)s)",
    )
    parser.add_argument(
        "--settle",
        metavar="S",
        default=str(DEFAULT_SETTLE_SECONDS),
        help="seconds a step waits past its end and quiet for the last nodes' summaries "
        "(the agents' drain, the broker, the clocks; default %(default)s)",
    )
    parser.add_argument(
        "--quiet",
        metavar="DURATION",
        help="the silence that ends a step, as the agents' [steps] quiet "
        f"(default {QUIET_NS / 1e6:g}ms)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per step with a straggler or a slow rail instead of a line",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import aiomqtt  # noqa: F401
    except ImportError:
        raise UsageError("needs aiomqtt: pip install 'burstscope[mqtt]'") from None
    from burstscope.collector.http import HttpError, parse_listen
    from burstscope.logging_journal import setup_logging, stderr_is_journal

    try:
        mqtt = mqtt_settings_from_args(args)
        settings = watch_settings(args.group, args.settle, args.quiet)
        parse_listen(args.listen)
    except (MqttSettingsError, ValueError, HttpError) as exc:
        raise UsageError(str(exc)) from None
    assert mqtt is not None  # --mqtt is required
    setup_logging("info", under_journal=stderr_is_journal())
    problem: str | None = None
    try:
        serve(args.listen, args.json, mqtt, settings)
    except* (HttpError, MqttSettingsError) as group:  # a port in use; a broker that refuses
        problem = str(group.exceptions[0])
    if problem is not None:
        raise UsageError(problem)
    return 0
