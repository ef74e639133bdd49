"""``burstscope discover``: every InfiniBand and RoCE port, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from rich.console import Console

from burstscope.arguments import add_port_selection, build_source_from
from burstscope.collector.discovery import (
    Discovery,
    DiscoveryError,
    compile_filter,
    discover,
)
from burstscope.discover_view import print_ports, print_probe
from burstscope.errors import UsageError

if TYPE_CHECKING:
    from burstscope.collector.probe import Probe


def register(parser: argparse.ArgumentParser) -> None:
    add_port_selection(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--probe",
        action="store_true",
        help="time each sampled port's data counter reads (a few seconds), back to back and "
        "at --interval, and name the finest interval at which they fit a tick with margin",
    )
    parser.add_argument(
        "--interval", default="1ms", help="with --probe: the sampling interval to try (1ms)"
    )
    parser.set_defaults(func=run)


def run_discovery(args: argparse.Namespace) -> Discovery:
    try:
        include = compile_filter(args.include, "--include")
        exclude = compile_filter(args.exclude, "--exclude")
        return discover(args.sysfs_root, include, exclude)
    except (ValueError, DiscoveryError) as exc:
        raise UsageError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    found = run_discovery(args)
    probed = run_probe(args) if args.probe and found.ports else None
    if args.json:
        document = found.to_json()
        if probed is not None:
            document["probe"] = probed.to_json()
        print(json.dumps(document, indent=2))
        return 0
    console = Console()
    print_ports(found, args.sysfs_root, console)
    if found.skipped:
        print("skipped:", file=sys.stderr if not found.ports else sys.stdout)
        for skip in found.skipped:
            where = skip.device if skip.port is None else f"{skip.device}/{skip.port}"
            print(f"  {where}: {skip.reason}")
    if not found.ports:
        print(f"no sampled InfiniBand or RoCE ports under {args.sysfs_root}/class/infiniband")
    if probed is not None:
        print_probe(console, probed)
    return 0


def run_probe(args: argparse.Namespace) -> Probe:
    """The sampler's reads of every sampled port, timed (collector.probe)."""
    # Here, not at the top: the probe runs a sampler and loads numpy; discovery alone does not.
    from burstscope.collector.probe import probe
    from burstscope.collector.sampler import SamplerError, parse_interval

    try:
        interval_ns = parse_interval(args.interval)
    except ValueError as exc:
        raise UsageError(f"--interval: {exc}") from None
    source = build_source_from(
        "sysfs", args.sysfs_root, args.include, args.exclude, None, ethtool=False
    )
    try:
        return probe(source, interval_ns)
    except SamplerError as exc:
        raise UsageError(f"--probe: the sampler failed to start: {exc}") from None
