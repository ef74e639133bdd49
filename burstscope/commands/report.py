"""``burstscope report``: a recorded trace or CSV through the detectors, as a table, JSON or PNG."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from burstscope import invocation
from burstscope.cluster import dask_cluster, start_local_workers_early
from burstscope.detectors.config import Thresholds
from burstscope.detectors.throttle import ThrottleLimits
from burstscope.errors import UsageError


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Analyse Parquet traces written by `burstscope record` (a directory of "
        "part-*.parquet pieces, or one .parquet file) or CSV files with the header "
        "timestamp_ns,device,port,xmit_bytes,rcv_bytes (cumulative byte counters; optional "
        "line_rate_bytes_per_second and rebaseline columns). A recorded trace's _slow/ "
        "pieces (congestion counters at 1 Hz) add the share of congestion that fell in "
        "saturated seconds."
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", type=Path, help="trace or CSV")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="analyse the traces on a local Dask cluster of N worker processes, one task "
        "per trace (needs burstscope[fleet])",
    )
    parser.add_argument(
        "--scheduler",
        metavar="URL",
        help="analyse the traces on the Dask cluster whose scheduler is at URL "
        "(tcp://HOST:8786); every worker must see the PATHs (shared file system)",
    )
    parser.add_argument(
        "--plot",
        metavar="FILE",
        type=Path,
        help="write a figure of the contrast: PNG (150 dpi), SVG or PDF by the extension "
        "(needs matplotlib, the [plot] extra)",
    )
    parser.add_argument(
        "--line-rate",
        metavar="GBITS",
        type=float,
        help="line rate in Gb/s for every port (overrides the trace's line rate column)",
    )
    parser.add_argument(
        "--xmit-wait-tick",
        metavar="NANOSECONDS",
        type=float,
        help="port_xmit_wait's tick on these HCAs (PortSamplesControl.Tick, e.g. from "
        "perfquery -c; sysfs does not give it): credit-starved seconds are then those "
        "stalled >= 0.1%% of the time, instead of any tick at all",
    )
    records = parser.add_argument_group(
        "collectives",
        "label each sample and burst with the collectives in flight on its host "
        "(docs/collectives.md); a trace directory's own collectives/ is read by default",
    )
    records.add_argument(
        "--nccl-inspector",
        action="append",
        metavar="PATH",
        type=Path,
        help="an NCCL Inspector dump file or directory (repeatable); only the trace's host's "
        "records are read; only verbose dumps (NCCL_INSPECTOR_DUMP_VERBOSE=1) are placed in time",
    )
    records.add_argument(
        "--pytorch-trace",
        action="append",
        metavar="PATH",
        type=Path,
        help="a torch.profiler Chrome trace (.json or .json.gz) of a rank on the trace's host "
        "(repeatable)",
    )
    records.add_argument(
        "--collective-map",
        metavar="FILE",
        type=Path,
        help='TOML: "communicator id or group name" = "EP" | "PP" | "DP" | "other"',
    )
    records.add_argument(
        "--collective-clock-offset",
        default="0",
        metavar="DURATION",
        help="added to every record's time to put it on the counters' clock (default 0)",
    )
    records.add_argument(
        "--collective-ports",
        metavar="LIST",
        help="label only these ports: DEVICE or DEVICE/PORT, comma-separated (default: every "
        "port the trace's job table does not mark storage)",
    )
    defaults = Thresholds()
    for name, meaning in (
        ("burst", "a burst is a run of samples above this share of line rate"),
        ("saturated", "at or above this share a sample is saturated"),
        ("idle", "below this share a sample or window is idle"),
        ("busy", "the 'above 25%%' and quiet-window threshold"),
    ):
        parser.add_argument(
            f"--{name}",
            type=float,
            metavar="SHARE",
            default=getattr(defaults, name),
            help=f"{meaning} (default {getattr(defaults, name):g})",
        )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        thresholds = Thresholds(
            burst=args.burst, saturated=args.saturated, idle=args.idle, busy=args.busy
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    throttle = _throttle_limits(args.xmit_wait_tick)
    if args.plot is not None:
        # Before any output: a missing plotting library must not cost the whole analysis.
        from burstscope.plot import check_path

        try:
            check_path(args.plot)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if not invocation.plot_available():
            raise UsageError(
                "--plot needs matplotlib: pip install 'burstscope[plot]' (or matplotlib)"
            )
    from burstscope.report_collectives import (
        CollectiveOptions,
        parse_offset,
        parse_ports,
    )

    collectives = CollectiveOptions.build(
        args.nccl_inspector or [],
        args.pytorch_trace or [],
        args.collective_map,
        parse_offset(args.collective_clock_offset),
        parse_ports(args.collective_ports),
    )
    start_local_workers_early(args.workers, args.scheduler)
    # Loaded after that, and here rather than with this module: numpy, pyarrow and the
    # detectors (0.15 s) load while the local workers' forkserver loads the same.
    from burstscope.report_model import analyze_paths
    from burstscope.report_view import print_table, to_json

    with dask_cluster(args.workers, args.scheduler) as cluster:
        report = analyze_paths(
            args.paths,
            args.line_rate,
            args.plot is not None,
            thresholds,
            cluster,
            collectives,
            throttle,
        )
    if args.plot is not None:
        from burstscope.plot import fleet_plot_path, write_fleet_plot, write_plot

        try:
            write_plot(report, args.plot)
            written = [args.plot]
            if report.fleet is not None:
                write_fleet_plot(report.fleet, fleet_plot_path(args.plot))
                written.append(fleet_plot_path(args.plot))
        except OSError as exc:
            raise UsageError(f"cannot write {str(args.plot)!r}: {exc.strerror}") from None
        # On stderr, like the other commands' notes, so that --json output stays JSON.
        for path in written:
            print(f"burstscope report: wrote {path}", file=sys.stderr)
    if args.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        print_table(report)
    return 0


def _throttle_limits(tick_ns: float | None) -> ThrottleLimits:
    if tick_ns is not None and not (math.isfinite(tick_ns) and tick_ns > 0):
        raise UsageError(f"--xmit-wait-tick {tick_ns:g} must be a positive number of nanoseconds")
    return ThrottleLimits(xmit_wait_tick_ns=tick_ns)
