"""What ``burstscope capture`` shows: its JSON document and its text lines (no statistics here)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from burstscope.detectors.coflows import Coflow, Collision, Collisions
from burstscope.detectors.packets import Analysis, GroupStats, QueuePair

# The shape of `capture --json` (docs/report.md#json-outputs); raised when a key changes.
SCHEMA_VERSION = 1


def capture_json(
    analysis: Analysis, source: dict[str, Any], coflows: Collisions | None
) -> dict[str, Any]:
    """``source`` names the capture (``pcap``, or ``interface`` and ``kernel_drops``)."""
    data = {"schema_version": SCHEMA_VERSION, **source, **analysis_json(analysis)}
    if coflows is not None:
        data["coflows"] = collisions_json(coflows)
    return data


def analysis_json(analysis: Analysis) -> dict[str, Any]:
    return {
        "records": analysis.records,
        "roce_packets": analysis.roce_packets,
        "roce_bytes": analysis.roce_bytes,
        "bytes_total": analysis.bytes_total,
        "first_ns": analysis.first_ns,
        "last_ns": analysis.last_ns,
        "duration_seconds": analysis.duration_seconds,
        "cnp_packets": analysis.cnp_packets,
        "ecn_ce_packets": analysis.ecn_ce_packets,
        "fecn_packets": analysis.fecn_packets,
        "becn_packets": analysis.becn_packets,
        "skipped": analysis.skipped,
        "queue_pairs": [_group_json(g) for g in analysis.queue_pairs],
        "traffic_classes": [_group_json(g) for g in analysis.traffic_classes],
        "congestion_1ms": [asdict(marks) for marks in analysis.congestion],
    }


def _group_json(group: GroupStats) -> dict[str, Any]:
    """The group's key fields first, then its statistics in GroupStats' field order."""
    figures = asdict(group)
    del figures["key"]
    return {**asdict(group.key), **figures}


def collisions_json(found: Collisions) -> dict[str, Any]:
    return {
        "line_rate_bytes_per_second": found.line_rate_bytes_per_second,
        "saturated": found.saturated,
        "coflows": [_coflow_json(c) for c in found.coflows],
        "unmapped_packets": found.unmapped_packets,
        "collisions": [_collision_json(c) for c in found.collisions],
        "moments": found.moments,
        "out_of_order": found.out_of_order,
        "urgent_bytes_waited": found.urgent_bytes_waited,
    }


def _coflow_json(coflow: Coflow) -> dict[str, Any]:
    return {
        "name": coflow.name,
        "type": coflow.kind,
        "micro_batch": coflow.micro_batch,
        "layer": coflow.layer,
    }


def _collision_json(collision: Collision) -> dict[str, Any]:
    return {
        "start_ns": collision.start_ns,
        "end_ns": collision.end_ns,
        "moments": collision.moments,
        "peak_utilization": collision.peak_utilization,
        "coflows": [
            {"name": share.coflow.name, "bytes": share.bytes, "arrival_ns": share.arrival_ns}
            for share in collision.shares
        ],
        "first": collision.first.name,
        "hermod_first": collision.urgent.name,
        "in_order": collision.in_order,
        "urgent_bytes_waited": collision.urgent_bytes_waited,
    }


def _rate(bytes_per_second: float) -> str:
    return f"{bytes_per_second * 8 / 1e9:.3f} Gb/s"


def _group_line(group: GroupStats) -> str:
    key = group.key
    if isinstance(key, QueuePair):
        label = f"{key.destination} qp {key.qp:#08x}"
    else:
        label = f"dscp {key.dscp}"
    top = sorted(group.opcodes.items(), key=lambda kv: -kv[1])[:3]
    mix = ", ".join(f"{name} {count}" for name, count in top)
    return (
        f"  {label:<28} {group.packets:>9} pkts {group.bytes:>13} B  "
        f"1-ms peak {_rate(group.peak_bytes_per_second_1ms):>12}  "
        f"CNP {group.cnp_packets} CE {group.ecn_ce_packets} "
        f"FECN {group.fecn_packets} BECN {group.becn_packets}  [{mix}]"
    )


def print_text(analysis: Analysis, source: dict[str, Any], coflows: Collisions | None) -> None:
    name = source.get("pcap") or source.get("interface")
    skipped = {k: v for k, v in analysis.skipped.items() if v}
    print(
        f"{name}: {analysis.records} records, {analysis.roce_packets} RoCEv2 packets "
        f"({analysis.roce_bytes} B); CNP {analysis.cnp_packets}, ECN-CE "
        f"{analysis.ecn_ce_packets}, FECN {analysis.fecn_packets}, BECN {analysis.becn_packets}"
    )
    if skipped:
        print("skipped: " + ", ".join(f"{k} {v}" for k, v in skipped.items()))
    if source.get("kernel_drops"):
        print(f"the kernel dropped {source['kernel_drops']} packets during the capture")
    print("per destination QP:")
    for group in analysis.queue_pairs:
        print(_group_line(group))
    print("per traffic class:")
    for group in analysis.traffic_classes:
        print(_group_line(group))
    if analysis.congestion:
        print(f"congestion marks in {len(analysis.congestion)} 1-ms bins")
    if coflows is not None:
        _print_collisions(coflows)


def _print_collisions(found: Collisions) -> None:
    print(
        f"coflow collisions: {len(found.collisions)} ({found.moments} saturated "
        f"ms), {found.out_of_order} served out of Hermod's order, "
        f"{found.urgent_bytes_waited} B of urgent coflows waited"
    )
    for c in found.collisions:
        names = ", ".join(f"{share.coflow.name} {share.bytes} B" for share in c.shares)
        order = "in order" if c.in_order else "OUT OF ORDER"
        print(
            f"  {c.start_ns} +{c.moments} ms  peak {c.peak_utilization:.2f}  "
            f"{names}; first {c.first.name}, Hermod first {c.urgent.name}: {order}"
        )
