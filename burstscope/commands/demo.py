"""``burstscope demo``: the simulated GPU node through the real agent, then the report of the run.

Eight 400 Gb/s rails and a 200 Gb/s storage port carrying LLM-training traffic are read
by the real sampler process, the streaming detectors and the Prometheus exporter (and
published over MQTT with --mqtt); a terminal shows the live view; at the end the run's
recording goes through the same report as ``burstscope report``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from burstscope import invocation
from burstscope.agent import Agent, AgentSettings, settings_from_args, trace_info
from burstscope.arguments import add_every_argument, check_every
from burstscope.collector.http import DEFAULT_LISTEN
from burstscope.collector.intake import AGENT_DRAIN_SECONDS, DRAIN_SECONDS
from burstscope.collector.simulation.profiles import DEFAULT_PROFILE, PROFILES
from burstscope.collector.trace import TraceError, TraceWriter, prepare_output
from burstscope.errors import UsageError
from burstscope.invocation import stop_on_signals
from burstscope.live_view import watch
from burstscope.mqtt_arguments import add_mqtt_arguments
from burstscope.report_model import analyze_paths
from burstscope.report_view import print_table, to_json


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long")
    parser.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        help=f"traffic: {', '.join(PROFILES)} (default {DEFAULT_PROFILE})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the traffic model")
    parser.add_argument(
        "--listen", metavar="ADDR:PORT", help=f"/metrics address (default {DEFAULT_LISTEN})"
    )
    add_mqtt_arguments(parser)  # --mqtt URL: also publish burst events to this broker
    parser.add_argument("--json", action="store_true", help="print the final report as JSON only")
    add_every_argument(parser)
    parser.add_argument(
        "-o",
        "--output",
        metavar="DIR",
        help="keep the run's trace here (default: a temporary directory)",
    )
    parser.set_defaults(func=run)


def demo_settings(args: argparse.Namespace) -> AgentSettings:
    """The agent's settings for the demo's flags, from the agent's own builder.

    What the demo changes, on purpose: its source is the simulated node of --profile and
    --seed (the agent's ``--source sim:PROFILE[:SEED]``) and it reads no configuration
    file. Its recording (-o) and drain period are arguments of the Agent, not settings.
    """
    spec = f"sim:{args.profile}" + (f":{args.seed}" if args.seed else "")
    return settings_from_args(argparse.Namespace(**vars(args), source=spec))


def run(args: argparse.Namespace) -> int:
    if args.duration is not None and not args.duration > 0:
        raise UsageError(f"--duration {args.duration:g} must be positive")
    every = check_every(args.every)
    settings = demo_settings(args)
    path = Path(args.output) if args.output else Path(tempfile.mkdtemp(prefix="burstscope-demo-"))
    try:
        prepare_output(path)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    # The live view redraws four times a second: drain as often as a top does.
    agent = Agent(
        settings,
        TraceWriter(path, info=trace_info(settings)),
        drain_seconds=AGENT_DRAIN_SECONDS if args.json else DRAIN_SECONDS,
    )
    stop = stop_on_signals()
    agent.start()
    assert agent.server is not None
    print(
        f"simulated node ({args.profile}): metrics on http://{agent.server.address}/metrics, "
        f"recording to {path}" + (f", events to {args.mqtt}" if args.mqtt else ""),
        file=sys.stderr,
    )
    try:
        if args.json:
            stop.wait(args.duration)
        else:
            watch(
                agent.pipeline.snapshot,
                stop,
                args.duration,
                title=f"burstscope demo: {args.profile}",
                every_seconds=every,
            )
    finally:
        agent.stop()
    report = analyze_paths([path], None, False, settings.thresholds)
    if args.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        print_table(report)
        program = invocation.command()
        print(f"\nThe run's trace: {path}\nReport on it again: {program} report {path}")
        if invocation.plot_available():
            print(f"With a figure: {program} report {path} --plot run.png")
        else:
            pip = Path(sys.executable).with_name("pip")
            print(f"With a figure: {pip} install matplotlib, then add --plot run.png")
    return 0
