"""``burstscope discover``: every InfiniBand and RoCE port, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from burstscope.arguments import LINE_RATE_HINT, add_port_selection
from burstscope.collector.discovery import (
    Discovery,
    DiscoveryError,
    compile_filter,
    discover,
)
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
    console = Console()
    table = Table(title=f"RDMA ports under {args.sysfs_root}")
    for column in (
        "device",
        "port",
        "link layer",
        "state",
        "rate",
        "data rate",
        "bytes from",
        "netdev",
        "note",
    ):
        table.add_column(column)
    for port in (*found.ports, *found.unsampled):
        rate, data = port.rate_bytes_per_second, port.data_rate_bytes_per_second
        files = port.byte_files
        notes = []
        if port.not_sampled:
            notes.append(f"not sampled: {port.not_sampled}")
        if port.rate_problem:
            notes.append(f"{port.rate_problem}: utilization absent; {LINE_RATE_HINT}")
        if files is not None and files.min_read_interval_ns:
            notes.append(f"resolution {files.min_read_interval_ns / 1e6:g} ms (kernel cache)")
        if port.saturated:
            notes.append(f"stuck at all-ones: {', '.join(port.saturated)}")
        table.add_row(
            port.device,
            str(port.port),
            port.link_layer,
            port.state.name if port.state else "?",
            f"{rate * 8 / 1e9:g} Gb/s" if rate else "?",
            f"{data * 8 / 1e9:.6g} Gb/s" if data else "?",
            f"{files.directory}/{'+'.join(files.transmit)}" if files else "-",
            port.netdev or "",
            "; ".join(notes),
        )
    console.print(table)
    if found.skipped:
        print("skipped:", file=sys.stderr if not found.ports else sys.stdout)
        for skip in found.skipped:
            where = skip.device if skip.port is None else f"{skip.device}/{skip.port}"
            print(f"  {where}: {skip.reason}")
    if not found.ports:
        print(f"no sampled InfiniBand or RoCE ports under {args.sysfs_root}/class/infiniband")
    return 0
