"""The vectorized RoCEv2 decoder: Ethernet/VLAN/IPv4/IPv6 + UDP 4791 + BTH, as numpy columns.

Every record gets exactly one outcome: decoded, or skipped for a counted reason. Fields
are gathered for all records at once; a position beyond a record's captured bytes is
clipped into the file (so the gather never fails) and the length checks, made before a
field is used, decide that record's outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from burstscope.capture.pcap import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, Records
from burstscope.detectors.arrays import I64, U8, B
from burstscope.detectors.packets import OPCODE_NAMES

ROCE_PORT = 4791  # IANA, RoCEv2 (IBTA Annex A17)
BTH_BYTES = 12
ICRC_BYTES = 4
UDP_BYTES = 8
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
VLAN_ETHERTYPES = (0x8100, 0x88A8, 0x9100)  # 802.1Q, 802.1ad and the old QinQ tag
FRAGMENT_BITS = 0x3FFF  # IPv4 MF flag and fragment offset

# The opcodes the statistics can name; any other is skipped as unknown_opcode.
_KNOWN = np.zeros(256, dtype=np.bool_)
_KNOWN[list(OPCODE_NAMES)] = True

# Why a record was not decoded; each record lands in exactly one (or is decoded).
SKIP_REASONS = (
    "short_frame",  # captured bytes end before a header does (snaplen or corruption)
    "not_ip",
    "bad_ip_header",  # wrong version nibble, IHL < 5, total length below the header
    "ip_fragment",
    "not_udp",
    "not_roce_port",  # UDP, destination port not 4791
    "bad_length",  # UDP length cannot hold BTH + ICRC, or exceeds the IP payload / frame
    "bad_bth_version",  # BTH transport header version is not 0
    "unknown_opcode",
)


@dataclass(frozen=True, slots=True)
class Decoded:
    """Decoded RoCEv2 packets in record order, and the counts of everything skipped."""

    record: I64  # index of the pcap record
    timestamp_ns: I64
    wire_length: I64  # frame bytes on the wire
    ip_version: U8  # 4 or 6
    dscp: U8
    ecn: U8  # 3 = CE
    destination: U8  # (n, 16): IPv6, or IPv4 mapped (::ffff:a.b.c.d)
    opcode: U8
    fecn: B
    becn: B
    dqpn: I64
    psn: I64
    skipped: dict[str, int]

    def __len__(self) -> int:
        return int(self.record.size)


class _Gather:
    """Byte fields at per-record positions, clipped so no gather leaves the file."""

    def __init__(self, data: U8) -> None:
        self.data = data
        self.last = max(int(data.size) - 1, 0)

    def u8(self, position: I64) -> I64:
        return self.data[np.minimum(position, self.last)].astype(np.int64)

    def u16(self, position: I64) -> I64:
        return self.u8(position) << 8 | self.u8(position + 1)

    def u24(self, position: I64) -> I64:
        return self.u8(position) << 16 | self.u16(position + 1)


class _Outcomes:
    """Each record's first failed check: 0 while still a candidate, else 1 + its reason's index."""

    def __init__(self, captured: I64) -> None:
        self.captured = captured
        self.reason = np.zeros(captured.size, dtype=np.int8)

    def skip(self, condition: B, name: str) -> None:
        # Only records no earlier check skipped: the first reason is the one counted.
        self.reason[(self.reason == 0) & condition] = SKIP_REASONS.index(name) + 1

    def need(self, header_end: I64) -> None:
        """Skip as short_frame what ends before ``header_end`` (relative to the frame start)."""
        self.skip(self.captured < header_end, "short_frame")

    def skipped(self) -> dict[str, int]:
        counts = np.bincount(self.reason, minlength=len(SKIP_REASONS) + 1)
        return {name: int(counts[i + 1]) for i, name in enumerate(SKIP_REASONS)}


def _link_layer(records: Records, get: _Gather, outcomes: _Outcomes) -> tuple[I64, I64]:
    """Each record's ethertype and where its IP header starts, past any VLAN tags."""
    n = len(records)
    frame = records.frame_offset
    if records.link_type == LINKTYPE_ETHERNET:
        outcomes.need(np.full(n, 14, np.int64))
        ethertype = get.u16(frame + 12)
        l3 = frame + 14
        for _ in range(2):  # one 802.1Q tag, or an 802.1ad outer plus an inner tag
            tagged = np.isin(ethertype, VLAN_ETHERTYPES)
            if not tagged.any():
                break
            outcomes.skip(tagged & (records.captured_length < l3 - frame + 4), "short_frame")
            ethertype = np.where(tagged, get.u16(l3 + 2), ethertype)
            l3 = np.where(tagged, l3 + 4, l3)
    elif records.link_type == LINKTYPE_LINUX_SLL:
        outcomes.need(np.full(n, 16, np.int64))
        ethertype = get.u16(frame + 14)
        l3 = frame + 16
    else:  # raw IP: the version nibble says which
        outcomes.need(np.full(n, 1, np.int64))
        version = get.u8(frame) >> 4
        ethertype = np.where(version == 6, ETHERTYPE_IPV6, ETHERTYPE_IPV4)
        l3 = frame.copy()
    return ethertype, l3


def decode(records: Records) -> Decoded:
    """Every record decoded as RoCEv2, or skipped for the first check it fails."""
    get = _Gather(records.data)
    frame = records.frame_offset
    outcomes = _Outcomes(records.captured_length)
    skip, need = outcomes.skip, outcomes.need
    ethertype, l3 = _link_layer(records, get, outcomes)
    ipv4 = ethertype == ETHERTYPE_IPV4
    ipv6 = ethertype == ETHERTYPE_IPV6
    skip(~(ipv4 | ipv6), "not_ip")
    l3_offset = l3 - frame
    need(l3_offset + np.where(ipv6, 40, 20))

    first = get.u8(l3)
    second = get.u8(l3 + 1)
    skip((first >> 4) != np.where(ipv6, 6, 4), "bad_ip_header")
    header = np.where(ipv6, 40, (first & 0x0F) * 4)
    total = np.where(ipv6, 40 + get.u16(l3 + 4), get.u16(l3 + 2))
    skip(ipv4 & ((header < 20) | (total < header)), "bad_ip_header")
    skip(ipv4 & ((get.u16(l3 + 6) & FRAGMENT_BITS) != 0), "ip_fragment")
    protocol = np.where(ipv6, get.u8(l3 + 6), get.u8(l3 + 9))
    traffic_class = np.where(ipv6, (first & 0x0F) << 4 | second >> 4, second)
    skip(protocol != 17, "not_udp")

    l4 = l3 + header
    need(l4 - frame + UDP_BYTES)
    skip(get.u16(l4 + 2) != ROCE_PORT, "not_roce_port")
    udp_length = get.u16(l4 + 4)
    skip(
        (udp_length < UDP_BYTES + BTH_BYTES + ICRC_BYTES)
        | (udp_length > total - header)
        | (l3_offset + total > records.wire_length),
        "bad_length",
    )
    bth = l4 + UDP_BYTES
    need(bth - frame + BTH_BYTES)
    skip((get.u8(bth + 1) & 0x0F) != 0, "bad_bth_version")
    opcode = get.u8(bth)
    skip(~_KNOWN[opcode], "unknown_opcode")

    keep = np.flatnonzero(outcomes.reason == 0)
    bth = bth[keep]
    flags = get.u8(bth + 4)
    tclass = traffic_class[keep]
    return Decoded(
        record=keep.astype(np.int64),
        timestamp_ns=records.timestamp_ns[keep],
        wire_length=records.wire_length[keep],
        ip_version=np.where(ipv6[keep], 6, 4).astype(np.uint8),
        dscp=(tclass >> 2).astype(np.uint8),
        ecn=(tclass & 3).astype(np.uint8),
        destination=_destinations(records.data, l3[keep], ipv6[keep]),
        opcode=opcode[keep].astype(np.uint8),
        fecn=(flags & 0x80) != 0,
        becn=(flags & 0x40) != 0,
        dqpn=get.u24(bth + 5),
        psn=get.u24(bth + 9),
        skipped=outcomes.skipped(),
    )


def _destinations(data: U8, l3: I64, ipv6: B) -> U8:
    """16-byte destination addresses; IPv4 as ::ffff:a.b.c.d so one key serves both."""
    out = np.zeros((l3.size, 16), dtype=np.uint8)
    if l3.size == 0:
        return out
    last = max(int(data.size) - 1, 0)
    v6 = np.flatnonzero(ipv6)
    if v6.size:
        out[v6] = data[np.minimum(l3[v6, None] + 24 + np.arange(16), last)]
    v4 = np.flatnonzero(~ipv6)
    if v4.size:
        out[v4, 10:12] = 0xFF
        out[v4, 12:] = data[np.minimum(l3[v4, None] + 16 + np.arange(4), last)]
    return out
