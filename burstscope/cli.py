"""The ``burstscope`` command: one sub-command per module in burstscope/commands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from burstscope import __version__
from burstscope.errors import UsageError

# Adding a command touches its module and this line.
COMMANDS = ("discover", "record", "report", "agent", "simulate", "top", "demo", "events", "capture")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="burstscope",
        description="Millisecond InfiniBand and RoCE port telemetry: "
        "the bursts that 15-second averages hide.",
    )
    parser.add_argument("--version", action="version", version=f"burstscope {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"burstscope.commands.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args)
    except UsageError as exc:
        # One clear line naming the problem, status 2, never a traceback.
        print(f"burstscope {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
