"""``burstscope record``: sample a source at a fixed interval into a Parquet trace."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

from burstscope.arguments import (
    add_source_arguments,
    format_interval,
    sampler_config_from_args,
    source_from_args,
)
from burstscope.collector.recorder import record
from burstscope.collector.sampler import SamplerError
from burstscope.collector.sources.base import CounterSource
from burstscope.collector.trace import TraceError, prepare_output
from burstscope.errors import UsageError


def register(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser)
    parser.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long")
    parser.add_argument("-o", "--output", required=True, metavar="PATH", help="trace directory")
    parser.add_argument(
        "--no-slow",
        action="store_true",
        help="do not record the slow counters (errors, congestion, PFC) polled at 1 Hz",
    )
    parser.set_defaults(func=run)


def _refuse_unknown_line_rates(source: CounterSource) -> None:
    """A port without a line rate at the start is refused here, not by ``report`` later.

    ``report`` divides by the recorded rate and stops on a port that has none, so a trace
    recorded without one (``--source netdev:lo``: the loopback has no speed) would be
    recorded for nothing. The agent samples such a port all the same: its figures are live,
    and a rate may appear while it runs.
    """
    for port in source.ports:
        if port.line_rate_bytes_per_second <= 0:
            why = f" ({port.rate_problem})" if port.rate_problem else ""
            raise UsageError(
                f"{port.device} port {port.port}: line rate unknown{why}, so `report` could "
                f"not read the trace: give it with --line-rate GBITS (every port) or "
                f"--line-rate-for {port.device}=GBITS, or leave the device out with "
                f"--exclude"
            )


def run(args: argparse.Namespace) -> int:
    if args.duration is not None and args.duration <= 0:
        raise UsageError(f"--duration {args.duration:g} must be positive")
    config = sampler_config_from_args(args)
    source = source_from_args(args)
    _refuse_unknown_line_rates(source)
    path = Path(args.output)
    try:
        prepare_output(path)
    except TraceError as exc:
        raise UsageError(str(exc)) from None

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        summary = record(
            source,
            path,
            args.duration,
            config,
            should_stop=lambda: stopping,
            source_spec=args.source,
            on_sampling=lambda: print(
                *(f"burstscope record: {note}" for note in source.notes),
                f"sampling {len(source.ports)} port(s) every "
                f"{format_interval(config.interval_ns)} into {path}",
                sep="\n",
                file=sys.stderr,
                flush=True,
            ),
            slow_sources=[] if args.no_slow else source.slow_sources(),
        )
    except (SamplerError, TraceError) as exc:
        raise UsageError(str(exc)) from None
    print(
        f"recorded {summary.rows} rows of {len(source.ports)} port(s) and "
        f"{summary.slow_rows} slow counter readings in {summary.pieces} "
        f"piece(s) to {path}: {summary.ticks} ticks, {summary.missed_ticks} missed, "
        f"{summary.missing_samples} failed reads, "
        f"{'SCHED_FIFO' if summary.realtime else 'normal scheduling'}"
        + (f", CPU {summary.cpu}" if summary.cpu >= 0 else ""),
        file=sys.stderr,
    )
    for note in summary.notes:
        print(f"burstscope record: {note}", file=sys.stderr)
    return 0
