"""Per-QP and per-traffic-class statistics of decoded RoCEv2 packets, and congestion over time.

Peaks are over 1 ms bins aligned to multiples of 1 ms of the capture clock, like the
detectors' windows. Bytes are wire lengths (the pcap record's original length), so a
capture with a short snaplen still counts whole frames.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from collector.capture.decode import CNP_OPCODE, OPCODE_NAMES, Decoded
from collector.capture.pcap import Records

I64 = npt.NDArray[np.int64]
BIN_NS = 1_000_000
ECN_CE = 3


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One destination QP or one traffic class."""

    key: dict[str, Any]  # {"destination": "10.0.0.2", "qp": 17} or {"dscp": 26}
    packets: int
    bytes: int
    peak_bytes_per_second_1ms: float
    opcodes: dict[str, int]
    cnp_packets: int
    ecn_ce_packets: int
    fecn_packets: int
    becn_packets: int

    def to_json(self) -> dict[str, Any]:
        return {
            **self.key,
            "packets": self.packets,
            "bytes": self.bytes,
            "peak_bytes_per_second_1ms": self.peak_bytes_per_second_1ms,
            "opcodes": self.opcodes,
            "cnp_packets": self.cnp_packets,
            "ecn_ce_packets": self.ecn_ce_packets,
            "fecn_packets": self.fecn_packets,
            "becn_packets": self.becn_packets,
        }


@dataclass(frozen=True, slots=True)
class Analysis:
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
    congestion: tuple[dict[str, int], ...]  # 1 ms bins holding CE, CNP, FECN or BECN

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "roce_packets": self.roce_packets,
            "roce_bytes": self.roce_bytes,
            "bytes_total": self.bytes_total,
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "duration_seconds": (
                None
                if self.first_ns is None or self.last_ns is None
                else (self.last_ns - self.first_ns) / 1e9
            ),
            "cnp_packets": self.cnp_packets,
            "ecn_ce_packets": self.ecn_ce_packets,
            "fecn_packets": self.fecn_packets,
            "becn_packets": self.becn_packets,
            "skipped": self.skipped,
            "queue_pairs": [g.to_json() for g in self.queue_pairs],
            "traffic_classes": [g.to_json() for g in self.traffic_classes],
            "congestion_1ms": list(self.congestion),
        }


def address_text(raw: bytes) -> str:
    address = ipaddress.IPv6Address(raw)
    mapped = address.ipv4_mapped
    return str(mapped if mapped is not None else address)


def analyze_capture(records: Records, decoded: Decoded) -> Analysis:
    skipped = dict(decoded.skipped)
    skipped["truncated_records"] = int(records.truncated_tail)
    skipped["corrupt_records"] = records.corrupt_records
    cnp = decoded.opcode == CNP_OPCODE
    ce = decoded.ecn == ECN_CE

    # Group keys: destination (16 bytes) and QP packed into one structured row each.
    qp_rows = np.zeros(len(decoded), dtype=[("address", "V16"), ("qp", "<i8")])
    qp_rows["address"] = decoded.destination.view("V16").reshape(-1)
    qp_rows["qp"] = decoded.dqpn
    queue_pairs = _groups(decoded, qp_rows, cnp, ce, _qp_key)
    traffic_classes = _groups(
        decoded, decoded.dscp.astype(np.int64), cnp, ce, lambda v: {"dscp": int(v)}
    )
    return Analysis(
        records=len(records),
        roce_packets=len(decoded),
        roce_bytes=int(decoded.wire_length.sum()),
        bytes_total=int(records.wire_length.sum()),
        first_ns=int(records.timestamp_ns.min()) if len(records) else None,
        last_ns=int(records.timestamp_ns.max()) if len(records) else None,
        skipped=skipped,
        queue_pairs=queue_pairs,
        traffic_classes=traffic_classes,
        cnp_packets=int(cnp.sum()),
        ecn_ce_packets=int(ce.sum()),
        fecn_packets=int(decoded.fecn.sum()),
        becn_packets=int(decoded.becn.sum()),
        congestion=_congestion(decoded, cnp, ce),
    )


def _qp_key(value: Any) -> dict[str, Any]:
    return {"destination": address_text(bytes(value["address"])), "qp": int(value["qp"])}


def _groups(
    decoded: Decoded,
    keys: npt.NDArray[Any],
    cnp: npt.NDArray[np.bool_],
    ce: npt.NDArray[np.bool_],
    describe: Any,
) -> tuple[GroupStats, ...]:
    if len(decoded) == 0:
        return ()
    unique, group = np.unique(keys, return_inverse=True)
    group = group.reshape(-1)
    count = int(unique.size)
    wire = decoded.wire_length
    packets = np.bincount(group, minlength=count)
    sizes = np.bincount(group, weights=wire, minlength=count)
    peaks = _peak_per_group(group, decoded.timestamp_ns, wire, count)
    # Opcode mix: one bincount over (group, opcode) pairs.
    mix = np.bincount(group * 256 + decoded.opcode, minlength=count * 256).reshape(count, 256)
    flags = [
        np.bincount(group, weights=f, minlength=count)
        for f in (cnp, ce, decoded.fecn, decoded.becn)
    ]
    out = []
    for g in range(count):
        present = np.flatnonzero(mix[g])
        out.append(
            GroupStats(
                key=describe(unique[g]),
                packets=int(packets[g]),
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


def _congestion(
    decoded: Decoded, cnp: npt.NDArray[np.bool_], ce: npt.NDArray[np.bool_]
) -> tuple[dict[str, int], ...]:
    marked = cnp | ce | decoded.fecn | decoded.becn
    if not marked.any():
        return ()
    bins = decoded.timestamp_ns[marked] // BIN_NS
    unique, inverse = np.unique(bins, return_inverse=True)
    inverse = inverse.reshape(-1)
    columns = {
        name: np.bincount(inverse, weights=flag[marked], minlength=unique.size).astype(np.int64)
        for name, flag in (
            ("ecn_ce_packets", ce),
            ("cnp_packets", cnp),
            ("fecn_packets", decoded.fecn),
            ("becn_packets", decoded.becn),
        )
    }
    return tuple(
        {"start_ns": int(b) * BIN_NS, **{name: int(v[i]) for name, v in columns.items()}}
        for i, b in enumerate(unique.tolist())
    )
