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

Collectives. Each burst is one collective of one of Hermod's coflow types (the keys of
``detectors/coflows.py`` ``TYPE_RANK``), one QP per type: EP an AllToAll, PP a Send, DP a
ReduceScatter or AllGather (FSDP's pair, alternating). With ``--collision-share`` a share of
the bursts get a second one of another type that starts while the first is still on the
link (the two sockets' packets interleave in tbf's one queue), so collision milliseconds
exist: two types in flight at once. With ``--inspector-dir`` every burst is also written,
when it ends, as the record NCCL's Inspector plugin would write for it (see
:mod:`burstscope.testing.inspector_writer`), so a join of counters and records can be
checked against this schedule.
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

from burstscope.detectors.coflows import TYPE_RANK
from burstscope.testing.inspector_writer import (
    ALL_GATHER,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    SEND,
    InspectorWriter,
    Operation,
)

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
# A sendto that begins this long after the one before began means the sender was away (or
# blocked on a full buffer); only then is the queue checked (one ioctl), to learn whether
# the wire idled meanwhile.
AWAY_NS = 1_000_000

# RC opcodes (IBTA vol. 1, 9.2): the ones this generator sends.
RC_SEND_ONLY = 0x04
RC_RDMA_WRITE_FIRST = 0x06
RC_RDMA_WRITE_MIDDLE = 0x07
RC_RDMA_WRITE_LAST = 0x08

# One QP per coflow type, so two types in flight at once are two sockets whose drains are
# measured apart. The order of BURST_QPS keeps a seed's plan what it was before types.
KINDS = ("EP", "PP", "DP")
assert set(KINDS) == set(TYPE_RANK)
KIND_OF_QP = dict(zip(BURST_QPS, KINDS, strict=True))
QP_OF_KIND = {kind: qp for qp, kind in KIND_OF_QP.items()}
# The collectives DP bursts take turns as: FSDP gathers forward and scatters backward.
DATA_PARALLEL = (REDUCE_SCATTER, ALL_GATHER)


@dataclass(frozen=True, slots=True)
class PlannedBurst:
    offset_ns: int  # from the start of the run
    duration_ns: int  # at line rate
    qp: int
    collective: str = ALL_TO_ALL  # the Inspector's name for it; the type is the QP's

    @property
    def kind(self) -> str:
        return KIND_OF_QP[self.qp]


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
    collision_share: float = 0.0,
) -> Plan:
    """Start-to-start intervals are drawn from ``every_ms``; a gap of ``min_gap_ms`` at least
    keeps consecutive bursts apart, so each is its own run of saturated milliseconds.

    With ``collision_share``, that share of the bursts (drawn) get a partner of another type
    planned to start 40-95% into them: the pair is one run of saturated milliseconds with
    two types in flight at once. Without it the draws, and so a seed's plan, are as before.
    """
    rng = random.Random(seed)
    total = int(duration_seconds * 1e9)
    lead = int(lead_seconds * 1e9)
    t = lead
    bursts: list[PlannedBurst] = []
    data_parallel = 0

    def collective(kind: str) -> str:
        nonlocal data_parallel
        if kind == "EP":
            return ALL_TO_ALL
        if kind == "PP":
            return SEND
        data_parallel += 1
        return DATA_PARALLEL[(data_parallel - 1) % len(DATA_PARALLEL)]

    while True:
        duration = int(rng.uniform(*burst_ms) * 1e6)
        if t + duration > total - lead:
            break
        qp = rng.choice(BURST_QPS)
        bursts.append(PlannedBurst(t, duration, qp, collective(KIND_OF_QP[qp])))
        busy = duration  # at line rate, from t
        if collision_share > 0 and rng.random() < collision_share:
            second = int(rng.uniform(*burst_ms) * 1e6)
            if t + duration + second <= total - lead:
                kind = rng.choice([k for k in KINDS if k != KIND_OF_QP[qp]])
                offset = t + int(duration * rng.uniform(0.4, 0.95))
                bursts.append(PlannedBurst(offset, second, QP_OF_KIND[kind], collective(kind)))
                busy += second  # the pair shares the line: both are done by then
        interval = int(rng.uniform(*every_ms) * 1e6)
        t += max(interval, busy + int(min_gap_ms * 1e6))
    return Plan(tuple(bursts), total, int(background_period_ms * 1e6), background_payload)


def together(bursts: Sequence[PlannedBurst]) -> list[list[PlannedBurst]]:
    """The plan's bursts in groups sent together: each starts before the one before ends."""
    groups: list[list[PlannedBurst]] = []
    for burst in bursts:
        if groups and burst.offset_ns < groups[-1][-1].offset_ns + groups[-1][-1].duration_ns:
            groups[-1].append(burst)
        else:
            groups.append([burst])
    return groups


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


def next_slot(slot_ns: int, period_ns: int, now_ns: int) -> int:
    """The first background slot after ``now_ns`` on the cadence of ``slot_ns``.

    A sender descheduled for 70 ms must not send the 70 packets it missed back to back on
    return: at 1.2 kB each that is 89 kB in one millisecond, a burst of 70% of 1 Gb/s that
    the schedule never planned (seen in CI: a "false burst" that was the generator's own).
    The missed slots are skipped; ``background_bytes`` counts only what was sent.
    """
    if now_ns < slot_ns:
        return slot_ns
    return slot_ns + ((now_ns - slot_ns) // period_ns + 1) * period_ns


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
    kind: str = ""  # EP, PP or DP: the QP's coflow type
    collective: str = ""  # as the Inspector names it


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
        """Burst bytes over burst wire time, as a share of the shaped line rate.

        Wire time is the union of the bursts' spans: two in flight at once share the line.
        """
        busy = 0
        reach = None
        for burst in sorted(self.bursts, key=lambda b: b.start_ns):
            start = burst.start_ns if reach is None else max(burst.start_ns, reach)
            busy += max(burst.end_ns - start, 0)
            reach = burst.end_ns if reach is None else max(reach, burst.end_ns)
        if busy <= 0:
            return None
        return sum(b.bytes for b in self.bursts) / (busy / 1e9) / self.line_rate_bytes_per_second

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["achieved_share"] = self.achieved_share
        data["clock"] = "wall ns: CLOCK_MONOTONIC + offset_ns fixed at start (trace clock)"
        return data


@dataclass(slots=True)
class _Sending:
    """One burst of a group on its way: its flow, what it must send, what it did."""

    planned: PlannedBurst
    flow: _Flow
    target: int  # frame bytes at line rate for the planned duration
    start: int
    sent: int = 0
    packets: int = 0
    starved: int = 0
    send_end: int = 0


def run(
    source: str,
    destination: str,
    schedule: Plan,
    line_rate_bytes_per_second: int,
    records: InspectorWriter | None = None,
) -> GroundTruth:
    """Send the schedule from ``source`` to ``destination``; returns what actually happened.

    With ``records``, each burst is also written there as an Inspector record when it ends.
    """
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
                next_background = next_slot(next_background, schedule.background_period_ns, now)
                continue
            time.sleep(max(min(next_background, deadline) - now, 0) / 1e9)

    def finish(burst: _Sending, end: int) -> None:
        planned = burst.planned
        done = BurstTruth(
            planned.qp,
            begin + planned.offset_ns + offset,
            burst.start + offset,
            burst.send_end + offset,
            end + offset,
            burst.sent,
            burst.packets,
            burst.starved,
            planned.kind,
            planned.collective,
        )
        truth.bursts.append(done)
        if records is not None:
            records.write(
                Operation(
                    done.kind,
                    done.collective,
                    done.start_ns,
                    done.send_end_ns,
                    done.end_ns,
                    done.bytes,
                )
            )

    def start(planned: PlannedBurst) -> _Sending:
        target = planned.duration_ns * line_rate_bytes_per_second // 1_000_000_000
        return _Sending(planned, flows[planned.qp], target, clock())

    for group in together(schedule.bursts):
        idle_until(begin + group[0].offset_ns)
        waiting = group[1:]
        sending = [start(group[0])]
        draining: list[_Sending] = []  # all handed to the socket, not all on the wire yet
        last = sending[0].start
        while sending:
            # The next burst of the group starts at its time, or (below) at once when the one
            # before has handed over its last packet: either way that one is still queued,
            # and from then on the two take turns, a packet each.
            if waiting and clock() >= begin + waiting[0].offset_ns:
                sending.append(start(waiting.pop(0)))
            for burst in sending:
                flow = burst.flow
                packet = flow.next_packet()
                away = clock() - last
                in_flight = sending + draining
                if away > AWAY_NS and all(_unsent(b.flow.sock) == 0 for b in in_flight):
                    for each in in_flight:  # everything queued went out while away
                        each.starved += away
                # Away counts from before the previous sendto: most of the sender's time is
                # spent inside it (tbf's enqueue, the veth, the peer's receive in softirq),
                # so that is where it is most often descheduled. Time blocked there on a full
                # socket buffer is not starvation, and the check above tells them apart: a
                # sender woken from a full buffer finds half of it still queued.
                last = clock()
                flow.sock.sendto(packet, address)
                burst.sent += first_frame if packet[0] == RC_RDMA_WRITE_FIRST else frame
                burst.packets += 1
            for burst in [b for b in sending if b.sent >= b.target]:
                burst.send_end = clock()
                sending.remove(burst)
                draining.append(burst)
            for burst in [b for b in draining if _unsent(b.flow.sock) == 0]:
                draining.remove(burst)
                finish(burst, clock())
            if not sending and waiting:
                sending.append(start(waiting.pop(0)))
        while draining:
            for burst in [b for b in draining if _unsent(b.flow.sock) == 0]:
                draining.remove(burst)
                finish(burst, clock())
            if draining:
                time.sleep(20e-6)
        # The background would have run during the burst; restart its cadence after.
        next_background = max(next_background, clock())
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
    parser.add_argument(
        "--collision-share",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="share of bursts (0-1) joined by one of another type while still on the link",
    )
    parser.add_argument(
        "--inspector-dir",
        type=Path,
        metavar="DIR",
        help="also write each burst as a verbose NCCL Inspector record, to DIR/<host>-pid<pid>.log",
    )
    parser.add_argument("--truth", required=True, metavar="FILE", help="ground truth JSON")
    args = parser.parse_args(argv)
    if not 0.0 <= args.collision_share <= 1.0:
        # One line and status 2, as burstscope's own commands answer a bad value.
        print(
            f"rocegen: error: --collision-share {args.collision_share} is not in 0-1",
            file=sys.stderr,
        )
        return 2
    schedule = plan(
        args.seed,
        args.duration,
        burst_ms=tuple(args.burst_ms),
        every_ms=tuple(args.every_ms),
        collision_share=args.collision_share,
    )
    try:
        records = None if args.inspector_dir is None else InspectorWriter(args.inspector_dir)
    except OSError as error:
        print(f"rocegen: error: --inspector-dir: {error}", file=sys.stderr)
        return 2
    if args.realtime_priority:
        # Best effort: a sender descheduled by other load leaves the "NIC" idle mid-burst.
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(args.realtime_priority))
    try:
        truth = run(
            args.source, args.destination, schedule, args.line_rate * 1_000_000 // 8, records
        )
    finally:
        if records is not None:
            records.close()
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
