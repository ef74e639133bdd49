"""``burstscope report``: a recorded trace or CSV through the detectors, as a table, JSON or PNG."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from burstscope import invocation
from burstscope.cluster import dask_cluster, start_local_workers_early
from burstscope.detectors.config import Thresholds
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
    start_local_workers_early(args.workers, args.scheduler)
    # Loaded after that, and here rather than with this module: numpy, pyarrow and the
    # detectors (0.15 s) load while the local workers' forkserver loads the same.
    from burstscope.report_model import analyze_paths
    from burstscope.report_view import print_table, to_json

    with dask_cluster(args.workers, args.scheduler) as cluster:
        report = analyze_paths(
            args.paths, args.line_rate, args.plot is not None, thresholds, cluster
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
