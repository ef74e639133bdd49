"""``burstscope top``: a live view of every port, refreshed at most 10 times a second."""

from __future__ import annotations

import argparse

from burstscope.agent import settings_from_args
from burstscope.arguments import (
    add_every_argument,
    add_job_arguments,
    add_source_arguments,
    check_every,
)
from burstscope.errors import UsageError
from burstscope.live_view import watch_source


def register(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser, defaults=False)
    parser.add_argument("--config", metavar="FILE", help="agent configuration (TOML)")
    parser.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long")
    add_every_argument(parser)
    add_job_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.duration is not None and not args.duration > 0:
        raise UsageError(f"--duration {args.duration:g} must be positive")
    every = check_every(args.every)
    watch_source(settings_from_args(args), args.duration, every)
    return 0
