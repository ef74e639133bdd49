"""Glue from pcap records and decoded RoCEv2 columns to detectors.packets' statistics."""

from __future__ import annotations

from burstscope.capture.decode import Decoded
from burstscope.capture.pcap import Records
from burstscope.detectors.packets import Analysis, FrameColumns, PacketColumns, analyze_packets


def frame_columns(records: Records) -> FrameColumns:
    """Every record, RoCE or not (the arrays are shared, not copied)."""
    return FrameColumns(timestamp_ns=records.timestamp_ns, wire_length=records.wire_length)


def packet_columns(decoded: Decoded) -> PacketColumns:
    """The decoded fields the statistics use (the arrays are shared, not copied)."""
    return PacketColumns(
        timestamp_ns=decoded.timestamp_ns,
        wire_length=decoded.wire_length,
        destination=decoded.destination,
        destination_qp=decoded.dqpn,
        dscp=decoded.dscp,
        ecn=decoded.ecn,
        opcode=decoded.opcode,
        fecn=decoded.fecn,
        becn=decoded.becn,
    )


def analyze_capture(records: Records, decoded: Decoded) -> Analysis:
    skipped = dict(decoded.skipped)
    # File-level outcomes the decoder never saw: the pcap walk stopped before them.
    skipped["truncated_records"] = int(records.truncated_tail)
    skipped["corrupt_records"] = records.corrupt_records
    return analyze_packets(frame_columns(records), packet_columns(decoded), skipped)
