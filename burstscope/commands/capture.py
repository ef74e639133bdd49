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
from burstscope.detectors.packets import Analysis, GroupStats
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
        data = {**extra, **analysis.to_json()}
        if coflow_report is not None:
            data["coflows"] = coflow_report
        json.dump(data, sys.stdout)
        sys.stdout.write("\n")
    else:
        _print_text(analysis, extra, coflow_report)
    return 0


def _rate(bytes_per_second: float) -> str:
    return f"{bytes_per_second * 8 / 1e9:.3f} Gb/s"


def _group_line(label: str, group: GroupStats) -> str:
    top = sorted(group.opcodes.items(), key=lambda kv: -kv[1])[:3]
    mix = ", ".join(f"{name} {count}" for name, count in top)
    return (
        f"  {label:<28} {group.packets:>9} pkts {group.bytes:>13} B  "
        f"1-ms peak {_rate(group.peak_bytes_per_second_1ms):>12}  "
        f"CNP {group.cnp_packets} CE {group.ecn_ce_packets} "
        f"FECN {group.fecn_packets} BECN {group.becn_packets}  [{mix}]"
    )


def _print_text(analysis: Analysis, extra: dict[str, Any], coflows: dict[str, Any] | None) -> None:
    source = extra.get("pcap") or extra.get("interface")
    skipped = {k: v for k, v in analysis.skipped.items() if v}
    print(
        f"{source}: {analysis.records} records, {analysis.roce_packets} RoCEv2 packets "
        f"({analysis.roce_bytes} B); CNP {analysis.cnp_packets}, ECN-CE "
        f"{analysis.ecn_ce_packets}, FECN {analysis.fecn_packets}, BECN {analysis.becn_packets}"
    )
    if skipped:
        print("skipped: " + ", ".join(f"{k} {v}" for k, v in skipped.items()))
    if extra.get("kernel_drops"):
        print(f"the kernel dropped {extra['kernel_drops']} packets during the capture")
    print("per destination QP:")
    for group in analysis.queue_pairs:
        print(_group_line(f"{group.key['destination']} qp {group.key['qp']:#08x}", group))
    print("per traffic class:")
    for group in analysis.traffic_classes:
        print(_group_line(f"dscp {group.key['dscp']}", group))
    if analysis.congestion:
        print(f"congestion marks in {len(analysis.congestion)} 1-ms bins")
    if coflows is not None:
        print(
            f"coflow collisions: {len(coflows['collisions'])} ({coflows['moments']} saturated "
            f"ms), {coflows['out_of_order']} served out of Hermod's order, "
            f"{coflows['urgent_bytes_waited']} B of urgent coflows waited"
        )
        for c in coflows["collisions"]:
            names = ", ".join(f"{f['name']} {f['bytes']} B" for f in c["coflows"])
            order = "in order" if c["in_order"] else "OUT OF ORDER"
            print(
                f"  {c['start_ns']} +{c['moments']} ms  peak {c['peak_utilization']:.2f}  "
                f"{names}; first {c['first']}, Hermod first {c['hermod_first']}: {order}"
            )
