"""RoCEv2-framed burst generator: collective-like on/off traffic with its ground-truth schedule.

Packets are UDP datagrams to port 4791 whose payload is an InfiniBand BTH (opcode,
destination QP, PSN) plus payload and ICRC, built once per QP and opcode with scapy's
RoCE layers and then sent from prebuilt bytes; only the PSN is rewritten per packet (the
ICRC is therefore stale: nothing on a veth checks it). Run it inside the sending
namespace of a :mod:`burstscope.testing.testbed`. It ships with the testbed for the same
reason (an
operator's own check against known bursts) and needs the ``capture`` extra (scapy);
nothing in the agent imports it.

Ground truth. tbf delays packets, so the time a burst leaves the sender's ``sendto`` is
not the time it is on the wire. Each burst records:

* ``start_ns``: just before the first packet is handed to the socket. The link was quiet
  (only background) and tbf's bucket is full, so the first bytes go out at once.
* ``end_ns``: when the socket's last byte left the tbf queue, measured by polling
  ``SIOCOUTQ`` (the socket's unsent bytes; an skb is released when tbf dequeues it to the
  veth) until it reads 0. This is the tbf-drained time, what the counters see.
* ``send_end_ns``: when the last ``sendto`` returned, for comparison.
* ``starved_ns``: how long the sender was away (descheduled, or its CPU taken) while
  the socket's queue ran empty mid-burst, so the wire idled; 0 when the queue never
  drained. The socket buffer covers ~8 ms of absence, so only a longer one shows here:
  it is the machine's disturbance, measured in the run, not the recorder's error.

Times are wall-clock ns computed as CLOCK_MONOTONIC plus an offset fixed at start, the
same clock a burstscope trace uses, so schedule and trace compare directly.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import random
import socket
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROCE_PORT = 4791
# Frame bytes around the UDP payload on a veth: Ethernet 14 + IPv4 20 + UDP 8. This is
# skb->len at the device, what both tbf and the netdev tx_bytes counter count.
FRAME_OVERHEAD = 14 + 20 + 8
PAYLOAD = 4096  # RoCE path MTU 4096
MESSAGE_PACKETS = 64  # one 256 KiB RDMA WRITE: FIRST, MIDDLE..., LAST
BURST_QPS = (0x000011, 0x000012, 0x000013)
BACKGROUND_QP = 0x000040
BURST_DSCP = 26  # AF31, a common RoCE traffic class
BACKGROUND_DSCP = 0
ECT0 = 0b10
SO_SNDBUFFORCE = 32  # include/uapi/asm-generic/socket.h; Python's socket lacks the name
SIOCOUTQ = 0x5411  # TIOCOUTQ: for UDP, sk_wmem_alloc (include/uapi/asm-generic/ioctls.h)
# The socket buffer is the sender's slack: tbf drains it at line rate while the Python
# loop is descheduled. 1 MiB (2 MiB of skb truesize) holds ~8 ms at 1 Gb/s, more than
# the stalls seen on a busy 2-core machine; it needs SO_SNDBUFFORCE past wmem_max.
SEND_BUFFER = 1024 * 1024
# A sendto that returns this long after the one before means the sender was away; only
# then is the queue checked (one ioctl), to learn whether the wire idled meanwhile.
AWAY_NS = 1_000_000

# RC opcodes (IBTA vol. 1, 9.2): the ones this generator sends.
RC_SEND_ONLY = 0x04
RC_RDMA_WRITE_FIRST = 0x06
RC_RDMA_WRITE_MIDDLE = 0x07
RC_RDMA_WRITE_LAST = 0x08


@dataclass(frozen=True, slots=True)
class PlannedBurst:
    offset_ns: int  # from the start of the run
    duration_ns: int  # at line rate
    qp: int


@dataclass(frozen=True, slots=True)
class Plan:
    """A seeded schedule: bursts of 2-50 ms every 50-500 ms, and a low background."""

    bursts: tuple[PlannedBurst, ...]
    duration_ns: int
    background_period_ns: int
    background_payload: int


def plan(
    seed: int,
    duration_seconds: float,
    lead_seconds: float = 0.3,
    burst_ms: tuple[float, float] = (2.0, 50.0),
    every_ms: tuple[float, float] = (50.0, 500.0),
    min_gap_ms: float = 30.0,
    background_period_ms: float = 1.0,
    background_payload: int = 1200,
) -> Plan:
    """Start-to-start intervals are drawn from ``every_ms``; a gap of ``min_gap_ms`` at least
    keeps consecutive bursts apart, so each is its own run of saturated milliseconds."""
    rng = random.Random(seed)
    total = int(duration_seconds * 1e9)
    t = int(lead_seconds * 1e9)
    bursts = []
    while True:
        duration = int(rng.uniform(*burst_ms) * 1e6)
        if t + duration > total - int(lead_seconds * 1e9):
            break
        bursts.append(PlannedBurst(t, duration, rng.choice(BURST_QPS)))
        interval = int(rng.uniform(*every_ms) * 1e6)
        t += max(interval, duration + int(min_gap_ms * 1e6))
    return Plan(tuple(bursts), total, int(background_period_ms * 1e6), background_payload)


def templates(
    qp: int, payload: int, source: str, destination: str, dscp: int
) -> dict[int, bytearray]:
    """UDP payloads (BTH + payload + ICRC) per opcode for one QP, built with scapy.

    Built under the IPv4/UDP headers the kernel will add, so the ICRC is right for PSN 0.
    """
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw

    # RETH (virtual address, R_Key, DMA length) opens an RDMA WRITE; scapy has no layer for it.
    reth = struct.pack("!QII", 0x7F0000000000, 0x1234, MESSAGE_PACKETS * payload)
    built = {}
    for opcode, extra in (
        (RC_RDMA_WRITE_FIRST, reth),
        (RC_RDMA_WRITE_MIDDLE, b""),
        (RC_RDMA_WRITE_LAST, b""),
        (RC_SEND_ONLY, b""),
    ):
        bth = BTH(opcode=opcode, dqpn=qp, psn=0, ackreq=opcode == RC_RDMA_WRITE_LAST)
        packet = (
            IP(src=source, dst=destination, tos=dscp << 2 | ECT0, flags="DF")
            / UDP(sport=_source_port(qp), dport=ROCE_PORT)
            / bth
            / Raw(extra + bytes(payload))
        )
        built[opcode] = bytearray(bytes(packet)[28:])  # after IPv4 20 + UDP 8
    return built


@dataclass(slots=True)
class _Flow:
    """One QP's socket and templates; the PSN runs on across messages."""

    sock: socket.socket
    templates: dict[int, bytearray]
    psn: int = 0
    in_message: int = 0  # packets sent of the current message

    def next_packet(self) -> bytearray:
        position = self.in_message
        if position == 0:
            opcode = RC_RDMA_WRITE_FIRST
        elif position == MESSAGE_PACKETS - 1:
            opcode = RC_RDMA_WRITE_LAST
        else:
            opcode = RC_RDMA_WRITE_MIDDLE
        self.in_message = (position + 1) % MESSAGE_PACKETS
        return self._stamp(self.templates[opcode])

    def _stamp(self, template: bytearray) -> bytearray:
        template[9:12] = self.psn.to_bytes(3, "big")  # BTH bytes 9-11: PSN
        self.psn = (self.psn + 1) & 0xFFFFFF
        return template

    def single(self) -> bytearray:
        return self._stamp(self.templates[RC_SEND_ONLY])


def _source_port(qp: int) -> int:
    # RoCEv2 puts flow entropy in the UDP source port: one port per QP.
    return 49152 + qp


def _socket(source: str, dscp: int, qp: int) -> socket.socket:
    # Not connected: nothing listens on 4791 at the receiver, and a connected UDP socket
    # would turn the ICMP port-unreachable replies into send errors.
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, SEND_BUFFER)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2 | ECT0)
    sock.bind((source, _source_port(qp)))
    return sock


def _unsent(sock: socket.socket) -> int:
    result: int = struct.unpack("i", fcntl.ioctl(sock.fileno(), SIOCOUTQ, b"\0\0\0\0"))[0]
    return result


def _wall_offset_ns() -> int:
    before = time.monotonic_ns()
    wall = time.time_ns()
    after = time.monotonic_ns()
    return wall - (before + after) // 2


@dataclass
class BurstTruth:
    qp: int
    planned_start_ns: int
    start_ns: int
    send_end_ns: int
    end_ns: int
    bytes: int
    packets: int
    starved_ns: int = 0  # sender away with the queue drained: the wire idled mid-burst


@dataclass
class GroundTruth:
    line_rate_bytes_per_second: int
    offset_ns: int  # wall minus monotonic, fixed at start
    start_ns: int
    end_ns: int = 0
    bytes_total: int = 0  # every frame sent, bursts and background
    background_bytes: int = 0
    background_payload: int = 0  # UDP payload bytes of each background packet
    bursts: list[BurstTruth] = field(default_factory=list)

    @property
    def achieved_share(self) -> float | None:
        """Burst bytes over burst wire time, as a share of the shaped line rate."""
        seconds = sum(b.end_ns - b.start_ns for b in self.bursts) / 1e9
        if seconds <= 0:
            return None
        return sum(b.bytes for b in self.bursts) / seconds / self.line_rate_bytes_per_second

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["achieved_share"] = self.achieved_share
        data["clock"] = "wall ns: CLOCK_MONOTONIC + offset_ns fixed at start (trace clock)"
        return data


def run(
    source: str, destination: str, schedule: Plan, line_rate_bytes_per_second: int
) -> GroundTruth:
    """Send the schedule from ``source`` to ``destination``; returns what actually happened."""
    flows = {
        qp: _Flow(
            _socket(source, BURST_DSCP, qp),
            templates(qp, PAYLOAD, source, destination, BURST_DSCP),
        )
        for qp in BURST_QPS
    }
    background = _Flow(
        _socket(source, BACKGROUND_DSCP, BACKGROUND_QP),
        templates(BACKGROUND_QP, schedule.background_payload, source, destination, BACKGROUND_DSCP),
    )
    address = (destination, ROCE_PORT)
    frame = FRAME_OVERHEAD + len(flows[BURST_QPS[0]].templates[RC_RDMA_WRITE_MIDDLE])
    first_frame = FRAME_OVERHEAD + len(flows[BURST_QPS[0]].templates[RC_RDMA_WRITE_FIRST])
    background_frame = FRAME_OVERHEAD + len(background.templates[RC_SEND_ONLY])
    offset = _wall_offset_ns()
    clock = time.monotonic_ns
    begin = clock()
    truth = GroundTruth(line_rate_bytes_per_second, offset, begin + offset)
    truth.background_payload = len(background.templates[RC_SEND_ONLY])
    next_background = begin

    def idle_until(deadline: int) -> None:
        # Background packets on their cadence until the deadline; sleeps in between.
        nonlocal next_background
        while True:
            now = clock()
            if now >= deadline:
                return
            if now >= next_background:
                background.sock.sendto(background.single(), address)
                truth.background_bytes += background_frame
                next_background += schedule.background_period_ns
                continue
            time.sleep(max(min(next_background, deadline) - now, 0) / 1e9)

    for planned in schedule.bursts:
        target = planned.duration_ns * line_rate_bytes_per_second // 1_000_000_000
        idle_until(begin + planned.offset_ns)
        flow = flows[planned.qp]
        send = flow.sock.sendto
        sent = packets = starved = 0
        start = last = clock()
        while sent < target:
            packet = flow.next_packet()
            away = clock() - last
            if away > AWAY_NS and _unsent(flow.sock) == 0:
                starved += away  # everything queued went out while the sender was away
            send(packet, address)
            last = clock()
            sent += first_frame if packet[0] == RC_RDMA_WRITE_FIRST else frame
            packets += 1
        send_end = clock()
        while _unsent(flow.sock):
            time.sleep(20e-6)
        end = clock()
        truth.bursts.append(
            BurstTruth(
                planned.qp,
                begin + planned.offset_ns + offset,
                start + offset,
                send_end + offset,
                end + offset,
                sent,
                packets,
                starved,
            )
        )
        # The background would have run during the burst; restart its cadence after.
        next_background = max(next_background, end)
    idle_until(begin + schedule.duration_ns)
    truth.end_ns = clock() + offset
    truth.bytes_total = truth.background_bytes + sum(b.bytes for b in truth.bursts)
    for flow in [*flows.values(), background]:
        flow.sock.close()
    return truth


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m burstscope.testing.rocegen", description=__doc__
    )
    parser.add_argument("--source", required=True, help="this end's IPv4 address (testbed /30)")
    parser.add_argument("--destination", required=True, help="the peer's IPv4 address")
    parser.add_argument("--duration", type=float, default=15.0, metavar="SECONDS")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--line-rate", type=int, default=1000, metavar="MBITS")
    parser.add_argument("--burst-ms", type=float, nargs=2, default=(2.0, 50.0))
    parser.add_argument("--every-ms", type=float, nargs=2, default=(50.0, 500.0))
    parser.add_argument(
        "--realtime-priority",
        type=int,
        default=5,
        metavar="N",
        help="SCHED_FIFO priority when permitted, below the sampler's 10 (0: don't)",
    )
    parser.add_argument("--truth", required=True, metavar="FILE", help="ground truth JSON")
    args = parser.parse_args(argv)
    schedule = plan(
        args.seed, args.duration, burst_ms=tuple(args.burst_ms), every_ms=tuple(args.every_ms)
    )
    if args.realtime_priority:
        # Best effort: a sender descheduled by other load leaves the "NIC" idle mid-burst.
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(args.realtime_priority))
    truth = run(args.source, args.destination, schedule, args.line_rate * 1_000_000 // 8)
    Path(args.truth).write_text(json.dumps(truth.to_json(), indent=1))
    share = truth.achieved_share
    print(
        f"sent {len(truth.bursts)} bursts, {truth.bytes_total} bytes; burst rate "
        f"{'n/a' if share is None else f'{share:.3f}'} of line rate",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
