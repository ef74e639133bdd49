"""``burstscope export``: a trace's utilization, bursts and congestion as Chrome trace events."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from burstscope.collector.discovery import compile_filter
from burstscope.errors import UsageError


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write a recorded trace (`burstscope record`, `simulate -o`) in the Chrome trace-event "
        "format for Perfetto or chrome://tracing: per port and direction a counter of 1 ms "
        "utilization (share of line rate) and a slice per burst, and per port the congestion "
        "counters' increments per second. With --merge, into a rank's PyTorch profiler trace "
        "on its clock, so the NIC's bursts show under the NCCL kernels."
    )
    parser.add_argument("trace", metavar="TRACE", type=Path, help="trace directory or file")
    parser.add_argument(
        "--chrome-trace",
        required=True,
        metavar="OUT",
        type=Path,
        help="write the Chrome trace-event JSON here",
    )
    parser.add_argument(
        "--merge",
        metavar="PYTORCH_TRACE",
        type=Path,
        help="a rank's torch.profiler trace (.json or .json.gz) to add the events to: every "
        "event of it is kept as written, ours take its time base and a pid it does not use; "
        "the window defaults to its extent",
    )
    parser.add_argument(
        "--start",
        type=float,
        metavar="SECONDS",
        help="begin this long after the trace's first sample (default: at it)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        metavar="SECONDS",
        help="write this much of the trace (default: to its end); at 1 ms each port writes "
        "up to 2,000 utilization events a second, about 190 kB",
    )
    parser.add_argument("--include", metavar="RE", help="only devices matching this expression")
    parser.add_argument(
        "--line-rate",
        metavar="GBITS",
        type=float,
        help="line rate in Gb/s for every port (overrides the trace's line rate column)",
    )
    parser.set_defaults(func=run)


def _seconds_ns(value: float | None, flag: str, positive: bool) -> int | None:
    if value is None:
        return None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        kind = "positive" if positive else "non-negative"
        raise UsageError(f"{flag} {value:g} must be a {kind} number of seconds")
    return round(value * 1e9)


def run(args: argparse.Namespace) -> int:
    start_ns = _seconds_ns(args.start, "--start", positive=False)
    duration_ns = _seconds_ns(args.duration, "--duration", positive=True)
    try:
        include = compile_filter(args.include, "--include")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.line_rate is not None and not (math.isfinite(args.line_rate) and args.line_rate > 0):
        raise UsageError(f"--line-rate must be positive, got {args.line_rate:g}")
    line_rate = None if args.line_rate is None else round(args.line_rate * 1e9 / 8)
    # numpy, pyarrow and the detectors load here, not for `burstscope -h`.
    from burstscope.chrome_trace import Window, export
    from burstscope.kineto_merge import open_target

    merge = None if args.merge is None else open_target(args.merge)
    explicit = start_ns is not None or duration_ns is not None
    window = Window(start_ns, duration_ns) if explicit or merge is None else None
    tally = export(args.trace, args.chrome_trace, merge, window, include, line_rate)
    into = "" if merge is None else f" into {args.merge} (pid {merge.free_pid}, its time base)"
    print(
        f"wrote {args.chrome_trace}{into}: {tally.ports} ports, {tally.counter_events} "
        f"utilization events, {tally.bursts} bursts, {tally.congestion_events} congestion events"
    )
    if tally.counter_events == 0:
        print(
            "burstscope export: note: no sample fell in the window"
            + ("" if merge is None else " (the PyTorch trace's extent: check the clocks)"),
            file=sys.stderr,
        )
    return 0
