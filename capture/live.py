"""Live capture from an AF_PACKET socket into an in-memory pcap (kernel receive timestamps).

Needs CAP_NET_RAW. Frames are cut to ``snaplen`` bytes (headers are all the decoder
reads) while the record keeps the wire length, so byte counts stay whole.
"""

from __future__ import annotations

import io
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from burstscope.capture.pcap import LINKTYPE_ETHERNET, PcapWriter

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6  # struct tpacket_stats {tp_packets, tp_drops} (linux/if_packet.h)
SO_TIMESTAMPNS = 35  # SCM_TIMESTAMPNS: struct timespec per packet
SO_RCVBUFFORCE = 33
RECEIVE_BUFFER = 32 * 1024 * 1024
DEFAULT_SNAPLEN = 256


class LiveCaptureError(Exception):
    """Capture cannot start: the message is one line naming the reason."""


@dataclass(frozen=True, slots=True)
class LiveCapture:
    pcap: bytes
    packets: int
    kernel_drops: int  # dropped by the socket (PACKET_STATISTICS tp_drops)


def capture(
    interface: str,
    duration_seconds: float,
    snaplen: int = DEFAULT_SNAPLEN,
    on_ready: Callable[[], None] = lambda: None,
    should_stop: Callable[[], bool] = lambda: False,
) -> LiveCapture:
    """Capture for ``duration_seconds`` or until ``should_stop()``; ``on_ready`` is called
    once the socket receives."""
    try:
        sock = _packet_socket()
    except PermissionError:
        raise LiveCaptureError(
            f"capturing on {interface} needs CAP_NET_RAW (run as root or grant the capability)"
        ) from None
    try:
        try:
            sock.bind((interface, 0))
        except OSError as exc:
            raise LiveCaptureError(f"cannot capture on {interface!r}: {exc.strerror}") from None
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        _statistics(sock)  # reading resets the kernel's counts: start from zero
        on_ready()
        out = io.BytesIO()
        writer = PcapWriter(out, LINKTYPE_ETHERNET, snaplen)
        buffer = bytearray(snaplen)
        view = memoryview(buffer)
        ancillary = socket.CMSG_SPACE(16)
        deadline = time.monotonic() + duration_seconds
        stopping = False
        while True:
            # Asked to stop: what the kernel already queued on the socket was captured too,
            # so read it without waiting, then stop at the first empty read.
            stopping = stopping or should_stop()
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not stopping:
                break
            sock.settimeout(0.0 if stopping else min(remaining, 0.1))
            try:
                # MSG_TRUNC: a packet socket returns the frame's real length.
                length, cmsgs, _, _ = sock.recvmsg_into([view], ancillary, socket.MSG_TRUNC)
            except (TimeoutError, BlockingIOError):
                if stopping:
                    break
                continue
            stamp = None
            for level, kind, data in cmsgs:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                    seconds, nanoseconds = struct.unpack("qq", data[:16])
                    stamp = seconds * 1_000_000_000 + nanoseconds
            writer.write(
                time.time_ns() if stamp is None else stamp,
                bytes(view[: min(length, snaplen)]),
                length,
            )
        _, drops = _statistics(sock)
        return LiveCapture(out.getvalue(), writer.records, drops)
    finally:
        sock.close()


def _packet_socket() -> socket.socket:
    return socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))


def _statistics(sock: socket.socket) -> tuple[int, int]:
    packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return int(packets), int(drops)
