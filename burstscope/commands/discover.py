"""``burstscope discover``: every InfiniBand and RoCE port, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from burstscope.arguments import add_port_selection
from burstscope.collector.discovery import (
    Discovery,
    DiscoveryError,
    compile_filter,
    discover,
)
from burstscope.discover_view import print_ports
from burstscope.errors import UsageError


def register(parser: argparse.ArgumentParser) -> None:
    add_port_selection(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
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
    if args.json:
        print(json.dumps(found.to_json(), indent=2))
        return 0
    print_ports(found, args.sysfs_root, Console())
    if found.skipped:
        print("skipped:", file=sys.stderr if not found.ports else sys.stdout)
        for skip in found.skipped:
            where = skip.device if skip.port is None else f"{skip.device}/{skip.port}"
            print(f"  {where}: {skip.reason}")
    if not found.ports:
        print(f"no sampled InfiniBand or RoCE ports under {args.sysfs_root}/class/infiniband")
    return 0
