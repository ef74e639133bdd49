"""``burstscope capture``: RoCEv2 packet analysis of a pcap or a live interface, and coflows."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from burstscope.capture.analysis import analyze_capture
from burstscope.capture.coflows import MappingError, collisions, read_mapping
from burstscope.capture.decode import decode
from burstscope.capture.live import DEFAULT_SNAPLEN, LiveCaptureError, capture
from burstscope.capture.pcap import PcapError, parse_pcap, read_pcap
from burstscope.capture_view import capture_json, print_text
from burstscope.errors import UsageError
from burstscope.invocation import stop_on_signals


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Decode RoCEv2 (UDP 4791 + BTH) from a pcap file or a live interface "
        "(AF_PACKET, needs CAP_NET_RAW). Coflow mapping format: see capture/"
        "coflows.py (lines of `qp=N|dscp=N EP|PP|DP MICRO-BATCH LAYER`)."
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--interface", metavar="IF", help="capture live on this interface")
    source.add_argument("--pcap", metavar="FILE", type=Path, help="read a pcap file")
    parser.add_argument("--duration", type=float, metavar="SECONDS", help="live capture length")
    parser.add_argument("--snaplen", type=int, default=DEFAULT_SNAPLEN, help="live bytes kept")
    parser.add_argument("--write", metavar="FILE", type=Path, help="write the live capture pcap")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--coflows", metavar="MAPPING", type=Path, help="coflow mapping file")
    parser.add_argument(
        "--line-rate", metavar="GBITS", type=float, help="link line rate in Gb/s (coflows)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.interface is not None:
        if args.duration is None or args.duration <= 0:
            raise UsageError("--interface needs a positive --duration")
        if not 64 <= args.snaplen <= 262_144:
            raise UsageError(f"--snaplen {args.snaplen} is outside 64..262144")
    elif args.write is not None:
        raise UsageError("--write saves a live capture; it needs --interface")
    mapping = None
    line_rate = None
    if args.coflows is not None:
        if args.line_rate is None or args.line_rate <= 0:
            raise UsageError("--coflows needs a positive --line-rate (Gb/s)")
        line_rate = round(args.line_rate * 1e9 / 8)
        try:
            mapping = read_mapping(args.coflows)
        except MappingError as exc:
            raise UsageError(str(exc)) from None

    extra: dict[str, Any] = {}
    try:
        if args.interface is not None:
            live = capture(
                args.interface,
                args.duration,
                args.snaplen,
                on_ready=lambda: print(
                    f"capturing on {args.interface} for {args.duration:g} s "
                    "(Ctrl-C or SIGTERM ends it early and reports what was captured)",
                    file=sys.stderr,
                    flush=True,
                ),
                should_stop=stop_on_signals().is_set,
            )
            extra = {"interface": args.interface, "kernel_drops": live.kernel_drops}
            if args.write is not None:
                try:
                    args.write.write_bytes(live.pcap)
                except OSError as exc:
                    raise UsageError(f"cannot write {str(args.write)!r}: {exc.strerror}") from None
            records = parse_pcap(live.pcap, args.interface)
        else:
            extra = {"pcap": str(args.pcap)}
            records = read_pcap(args.pcap)
    except (LiveCaptureError, PcapError) as exc:
        raise UsageError(str(exc)) from None
    decoded = decode(records)
    analysis = analyze_capture(records, decoded)
    coflow_report = (
        None
        if mapping is None or line_rate is None
        else collisions(records, decoded, mapping, line_rate)
    )
    if args.json:
        json.dump(capture_json(analysis, extra, coflow_report), sys.stdout)
        sys.stdout.write("\n")
    else:
        print_text(analysis, extra, coflow_report)
    return 0
