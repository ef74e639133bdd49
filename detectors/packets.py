"""RoCEv2 packet statistics on decoded columns: per QP, per traffic class, congestion per 1 ms."""

# Peaks are over 1 ms bins aligned to multiples of 1 ms of the capture clock, like the
# detectors' windows. Bytes are wire lengths (the pcap record's original length), so a
# capture with a short snaplen still counts whole frames.

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from burstscope.detectors.arrays import I64, U8, B

BIN_NS = 1_000_000
ECN_CE = 3
CNP_OPCODE = 0x81  # RoCEv2 congestion notification packet (IBTA Annex A17)

# IBTA vol. 1 table 35, the same set scapy.contrib.roce knows (checked by the tests).
_TRANSPORTS = {"RC": 0x00, "UC": 0x20, "RD": 0x40, "UD": 0x60}
_OPERATIONS = {
    "SEND_FIRST": 0x00,
    "SEND_MIDDLE": 0x01,
    "SEND_LAST": 0x02,
    "SEND_LAST_WITH_IMMEDIATE": 0x03,
    "SEND_ONLY": 0x04,
    "SEND_ONLY_WITH_IMMEDIATE": 0x05,
    "RDMA_WRITE_FIRST": 0x06,
    "RDMA_WRITE_MIDDLE": 0x07,
    "RDMA_WRITE_LAST": 0x08,
    "RDMA_WRITE_LAST_WITH_IMMEDIATE": 0x09,
    "RDMA_WRITE_ONLY": 0x0A,
    "RDMA_WRITE_ONLY_WITH_IMMEDIATE": 0x0B,
    "RDMA_READ_REQUEST": 0x0C,
    "RDMA_READ_RESPONSE_FIRST": 0x0D,
    "RDMA_READ_RESPONSE_MIDDLE": 0x0E,
    "RDMA_READ_RESPONSE_LAST": 0x0F,
    "RDMA_READ_RESPONSE_ONLY": 0x10,
    "ACKNOWLEDGE": 0x11,
    "ATOMIC_ACKNOWLEDGE": 0x12,
    "COMPARE_SWAP": 0x13,
    "FETCH_ADD": 0x14,
}
_UC = tuple(list(_OPERATIONS)[:12])  # UC has sends and writes only
_UD = ("SEND_ONLY", "SEND_ONLY_WITH_IMMEDIATE")
OPCODE_NAMES: dict[int, str] = {
    _TRANSPORTS[t] + _OPERATIONS[op]: f"{t}_{op}"
    for t, ops in (("RC", tuple(_OPERATIONS)), ("UC", _UC), ("RD", tuple(_OPERATIONS)), ("UD", _UD))
    for op in ops
}
OPCODE_NAMES[CNP_OPCODE] = "CNP"


@dataclass(frozen=True, slots=True)
class FrameColumns:
    """Every captured frame, RoCE or not: the link's whole load."""

    timestamp_ns: I64
    wire_length: I64  # frame bytes on the wire


@dataclass(frozen=True, slots=True)
class PacketColumns:
    """Decoded RoCEv2 packets in capture order, one array element per packet."""

    timestamp_ns: I64
    wire_length: I64  # frame bytes on the wire
    destination: U8  # (n, 16): IPv6, or IPv4 mapped (::ffff:a.b.c.d)
    destination_qp: I64  # BTH DestQP
    dscp: U8
    ecn: U8  # 3 = CE
    opcode: U8  # BTH OpCode, a key of OPCODE_NAMES
    fecn: B
    becn: B

    def __len__(self) -> int:
        return int(self.timestamp_ns.size)


@dataclass(frozen=True, slots=True)
class QueuePair:
    destination: str  # the IPv4 or IPv6 address, as text (address_text)
    qp: int  # BTH DestQP


@dataclass(frozen=True, slots=True)
class TrafficClass:
    dscp: int


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One destination QP or one traffic class."""

    key: QueuePair | TrafficClass
    packets: int
    bytes: int
    peak_bytes_per_second_1ms: float
    opcodes: dict[str, int]
    cnp_packets: int
    ecn_ce_packets: int
    fecn_packets: int
    becn_packets: int


@dataclass(frozen=True, slots=True)
class CongestionBin:
    """A 1 ms bin that held a CE mark, a CNP, a FECN or a BECN."""

    start_ns: int
    ecn_ce_packets: int
    cnp_packets: int
    fecn_packets: int
    becn_packets: int


@dataclass(frozen=True, slots=True)
class Analysis:
    """A capture's RoCEv2 statistics."""

    records: int
    roce_packets: int
    roce_bytes: int
    bytes_total: int  # every record's wire bytes, RoCE or not
    first_ns: int | None
    last_ns: int | None
    skipped: dict[str, int]  # per reason, plus the file-level ones
    queue_pairs: tuple[GroupStats, ...]
    traffic_classes: tuple[GroupStats, ...]
    cnp_packets: int
    ecn_ce_packets: int
    fecn_packets: int
    becn_packets: int
    congestion: tuple[CongestionBin, ...]

    @property
    def duration_seconds(self) -> float | None:
        if self.first_ns is None or self.last_ns is None:
            return None
        return (self.last_ns - self.first_ns) / 1e9


def address_text(raw: bytes) -> str:
    address = ipaddress.IPv6Address(raw)
    mapped = address.ipv4_mapped
    return str(mapped if mapped is not None else address)


def analyze_packets(
    frames: FrameColumns, packets: PacketColumns, skipped: dict[str, int]
) -> Analysis:
    """Statistics of ``packets``; ``frames`` are all records, ``skipped`` is passed through."""
    cnp = packets.opcode == CNP_OPCODE
    ce = packets.ecn == ECN_CE

    # Group keys: destination (16 bytes) and QP packed into one structured row each.
    qp_rows = np.zeros(len(packets), dtype=[("address", "V16"), ("qp", "<i8")])
    qp_rows["address"] = packets.destination.view("V16").reshape(-1)
    qp_rows["qp"] = packets.destination_qp
    queue_pairs = _groups(packets, qp_rows, cnp, ce, _qp_key)
    traffic_classes = _groups(
        packets, packets.dscp.astype(np.int64), cnp, ce, lambda v: TrafficClass(int(v))
    )
    count = int(frames.timestamp_ns.size)
    return Analysis(
        records=count,
        roce_packets=len(packets),
        roce_bytes=int(packets.wire_length.sum()),
        bytes_total=int(frames.wire_length.sum()),
        first_ns=int(frames.timestamp_ns.min()) if count else None,
        last_ns=int(frames.timestamp_ns.max()) if count else None,
        skipped=skipped,
        queue_pairs=queue_pairs,
        traffic_classes=traffic_classes,
        cnp_packets=int(cnp.sum()),
        ecn_ce_packets=int(ce.sum()),
        fecn_packets=int(packets.fecn.sum()),
        becn_packets=int(packets.becn.sum()),
        congestion=_congestion(packets, cnp, ce),
    )


def _qp_key(value: Any) -> QueuePair:
    return QueuePair(address_text(bytes(value["address"])), int(value["qp"]))


def _groups(
    packets: PacketColumns,
    keys: npt.NDArray[Any],
    cnp: B,
    ce: B,
    describe: Callable[[Any], QueuePair | TrafficClass],
) -> tuple[GroupStats, ...]:
    if len(packets) == 0:
        return ()
    unique, group = np.unique(keys, return_inverse=True)
    group = group.reshape(-1)
    count = int(unique.size)
    wire = packets.wire_length
    counts = np.bincount(group, minlength=count)
    sizes = np.bincount(group, weights=wire, minlength=count)
    peaks = _peak_per_group(group, packets.timestamp_ns, wire, count)
    # Opcode mix: one bincount over (group, opcode) pairs.
    mix = np.bincount(group * 256 + packets.opcode, minlength=count * 256).reshape(count, 256)
    flags = [
        np.bincount(group, weights=f, minlength=count)
        for f in (cnp, ce, packets.fecn, packets.becn)
    ]
    out = []
    for g in range(count):
        present = np.flatnonzero(mix[g])
        out.append(
            GroupStats(
                key=describe(unique[g]),
                packets=int(counts[g]),
                bytes=int(sizes[g]),
                peak_bytes_per_second_1ms=float(peaks[g]) * (1e9 / BIN_NS),
                opcodes={OPCODE_NAMES[int(o)]: int(mix[g, o]) for o in present},
                cnp_packets=int(flags[0][g]),
                ecn_ce_packets=int(flags[1][g]),
                fecn_packets=int(flags[2][g]),
                becn_packets=int(flags[3][g]),
            )
        )
    return tuple(out)


def _peak_per_group(group: I64, timestamp_ns: I64, wire: I64, count: int) -> I64:
    """The largest 1 ms bin of bytes per group."""
    bins = timestamp_ns // BIN_NS
    pair = group.astype(np.int64) * (int(bins.max() - bins.min()) + 1) + (bins - bins.min())
    pairs, inverse = np.unique(pair, return_inverse=True)
    sums = np.bincount(inverse.reshape(-1), weights=wire, minlength=pairs.size).astype(np.int64)
    owner = pairs // (int(bins.max() - bins.min()) + 1)
    peaks = np.zeros(count, dtype=np.int64)
    np.maximum.at(peaks, owner, sums)
    return peaks


def _congestion(packets: PacketColumns, cnp: B, ce: B) -> tuple[CongestionBin, ...]:
    marked = cnp | ce | packets.fecn | packets.becn
    if not marked.any():
        return ()
    bins = packets.timestamp_ns[marked] // BIN_NS
    unique, inverse = np.unique(bins, return_inverse=True)
    inverse = inverse.reshape(-1)
    ce_counts, cnp_counts, fecn_counts, becn_counts = (
        np.bincount(inverse, weights=flag[marked], minlength=unique.size).astype(np.int64)
        for flag in (ce, cnp, packets.fecn, packets.becn)
    )
    return tuple(
        CongestionBin(
            start_ns=int(b) * BIN_NS,
            ecn_ce_packets=int(ce_counts[i]),
            cnp_packets=int(cnp_counts[i]),
            fecn_packets=int(fecn_counts[i]),
            becn_packets=int(becn_counts[i]),
        )
        for i, b in enumerate(unique.tolist())
    )
