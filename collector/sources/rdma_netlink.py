"""RoCE hw counters through RDMA netlink: one RDMA_NLDEV_CMD_STAT_GET per port returns them all.

Preferred over sysfs hw_counters: the request calls the driver's get_hw_stats directly,
bypassing the lifespan cache, with every counter in one reply and no admin permission
(drivers/infiniband/core/nldev.c stat_get_doit_default_counter; `rdma statistic show`).
Encoding and decoding are pure functions over bytes; the socket is a thin shell around them.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from burstscope.collector.sources.base import SlowReading, SourceError
from burstscope.collector.sources.hw_counters import hw_counter_spec

# include/uapi/linux/netlink.h
NETLINK_RDMA = 20
NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_ACK = 0x04
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLMSG_ERROR = 0x2
NLMSG_DONE = 0x3
NLA_F_NESTED = 0x8000
NLA_F_NET_BYTEORDER = 0x4000
NLA_TYPE_MASK = ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER) & 0xFFFF

# include/uapi/rdma/rdma_netlink.h. RDMA_NL_NLDEV is the 5th client; message type is
# RDMA_NL_GET_TYPE(client, op) = (client << 10) + op. No genetlink header: attributes
# start right after struct nlmsghdr.
RDMA_NL_NLDEV = 5
RDMA_NLDEV_CMD_GET = 1  # enum rdma_nldev_command, "can dump"
RDMA_NLDEV_CMD_STAT_GET = 17
# enum rdma_nldev_attr ("don't change the order ... this is ABI!")
RDMA_NLDEV_ATTR_PAD = 0  # = RDMA_NLDEV_ATTR_UNSPEC; aligns u64 payloads (nla_put_u64_64bit)
RDMA_NLDEV_ATTR_DEV_INDEX = 1  # u32
RDMA_NLDEV_ATTR_DEV_NAME = 2  # string
RDMA_NLDEV_ATTR_PORT_INDEX = 3  # u32; for CMD_GET: the number of ports
RDMA_NLDEV_ATTR_STAT_HWCOUNTERS = 80  # nested table
RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY = 81  # nested table
RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME = 82  # string
RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE = 83  # u64

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_NLATTR = struct.Struct("=HH")  # len, type
_NLMSGERR = struct.Struct("=i")  # error, then the offending header
_RECV_BYTES = 1 << 16


def rdma_message_type(op: int) -> int:
    return (RDMA_NL_NLDEV << 10) + op


class NetlinkError(OSError):
    """An NLMSG_ERROR reply with a non-zero error code."""


@dataclass(frozen=True, slots=True)
class NetlinkMessage:
    type: int
    flags: int
    seq: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class RdmaDevice:
    index: int  # RDMA_NLDEV_ATTR_DEV_INDEX
    name: str  # RDMA_NLDEV_ATTR_DEV_NAME
    port_count: int  # RDMA_NLDEV_ATTR_PORT_INDEX in a CMD_GET reply


@dataclass(frozen=True, slots=True)
class PortStatistics:
    device_index: int
    device: str
    port: int
    counters: dict[str, int]  # STAT_HWCOUNTERS, in the kernel's order


def _align(length: int) -> int:
    return (length + 3) & ~3


def encode_attribute(kind: int, payload: bytes) -> bytes:
    """One struct nlattr with its payload, padded to 4 bytes (NLA_ALIGN)."""
    length = _NLATTR.size + len(payload)
    return _NLATTR.pack(length, kind) + payload + bytes(_align(length) - length)


def encode_u32(kind: int, value: int) -> bytes:
    return encode_attribute(kind, struct.pack("=I", value))


def encode_message(kind: int, flags: int, seq: int, payload: bytes = b"") -> bytes:
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(payload), kind, flags, seq, 0) + payload


def encode_device_dump(seq: int) -> bytes:
    """RDMA_NLDEV_CMD_GET with NLM_F_DUMP: one reply per device (`rdma dev show`)."""
    return encode_message(rdma_message_type(RDMA_NLDEV_CMD_GET), NLM_F_REQUEST | NLM_F_DUMP, seq)


def encode_stat_get(seq: int, device_index: int, port: int) -> bytes:
    """RDMA_NLDEV_CMD_STAT_GET for one port; without STAT_RES it returns the hw counters."""
    attributes = encode_u32(RDMA_NLDEV_ATTR_DEV_INDEX, device_index) + encode_u32(
        RDMA_NLDEV_ATTR_PORT_INDEX, port
    )
    return encode_message(
        rdma_message_type(RDMA_NLDEV_CMD_STAT_GET), NLM_F_REQUEST | NLM_F_ACK, seq, attributes
    )


def decode_messages(data: bytes) -> Iterator[NetlinkMessage]:
    """The netlink messages in one datagram; raises NetlinkError for an error reply."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, flags, seq, _ = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > len(data):
            raise ValueError(f"truncated netlink message at offset {offset}")
        payload = bytes(data[offset + _NLMSGHDR.size : offset + length])
        if kind == NLMSG_ERROR:
            (code,) = _NLMSGERR.unpack_from(payload)
            if code != 0:
                raise NetlinkError(-code, f"RDMA netlink: {errno.errorcode.get(-code, code)}")
        yield NetlinkMessage(kind, flags, seq, payload)
        offset += _align(length)


def decode_attributes(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type without the NESTED/BYTEORDER flags, payload) for each struct nlattr."""
    offset = 0
    while offset + _NLATTR.size <= len(data):
        length, kind = _NLATTR.unpack_from(data, offset)
        if length < _NLATTR.size or offset + length > len(data):
            raise ValueError(f"truncated netlink attribute at offset {offset}")
        yield kind & NLA_TYPE_MASK, bytes(data[offset + _NLATTR.size : offset + length])
        offset += _align(length)


def _u32(payload: bytes) -> int:
    return int(struct.unpack_from("=I", payload)[0])


def _string(payload: bytes) -> str:
    return payload.partition(b"\0")[0].decode("ascii", "replace")


def decode_device(payload: bytes) -> RdmaDevice:
    index, name, ports = -1, "", 0
    for kind, value in decode_attributes(payload):
        if kind == RDMA_NLDEV_ATTR_DEV_INDEX:
            index = _u32(value)
        elif kind == RDMA_NLDEV_ATTR_DEV_NAME:
            name = _string(value)
        elif kind == RDMA_NLDEV_ATTR_PORT_INDEX:
            ports = _u32(value)
    if index < 0 or not name:
        raise ValueError("RDMA_NLDEV_CMD_GET reply without DEV_INDEX or DEV_NAME")
    return RdmaDevice(index, name, ports)


def _decode_hwcounters(table: bytes) -> dict[str, int]:
    counters: dict[str, int] = {}
    for kind, entry in decode_attributes(table):
        if kind != RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY:
            continue
        name, value = None, None
        for field_kind, payload in decode_attributes(entry):
            if field_kind == RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME:
                name = _string(payload)
            elif field_kind == RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE:
                value = int(struct.unpack_from("=Q", payload)[0])
            # RDMA_NLDEV_ATTR_PAD (0) and newer fields (HWCOUNTER_INDEX) are ignored.
        if name is not None and value is not None:
            counters[name] = value
    return counters


def decode_stat_reply(payload: bytes) -> PortStatistics:
    """A STAT_GET reply: fill_nldev_handle (DEV_INDEX, DEV_NAME), PORT_INDEX, STAT_HWCOUNTERS."""
    index, name, port = -1, "", -1
    counters: dict[str, int] = {}
    for kind, value in decode_attributes(payload):
        if kind == RDMA_NLDEV_ATTR_DEV_INDEX:
            index = _u32(value)
        elif kind == RDMA_NLDEV_ATTR_DEV_NAME:
            name = _string(value)
        elif kind == RDMA_NLDEV_ATTR_PORT_INDEX:
            port = _u32(value)
        elif kind == RDMA_NLDEV_ATTR_STAT_HWCOUNTERS:
            counters = _decode_hwcounters(value)
    if index < 0 or port < 0:
        raise ValueError("RDMA_NLDEV_CMD_STAT_GET reply without DEV_INDEX or PORT_INDEX")
    return PortStatistics(index, name, port, counters)


class RdmaNetlink:
    """A NETLINK_RDMA socket; request() sends one message and collects its replies."""

    def __init__(self) -> None:
        # EPROTONOSUPPORT when the kernel has no RDMA netlink (ib_core not loaded).
        self._socket = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_RDMA)
        self._socket.settimeout(2.0)
        self._socket.bind((0, 0))
        self._seq = 0

    def close(self) -> None:
        self._socket.close()

    def next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF
        return self._seq

    def exchange(self, message: bytes, seq: int) -> list[NetlinkMessage]:
        """Send; return the replies with this seq up to NLMSG_DONE (a dump) or the ACK.

        Requests carry NLM_F_ACK or NLM_F_DUMP, so every exchange has a definite end:
        rdma_nl_rcv_skb acks after the reply (drivers/infiniband/core/netlink.c).
        """
        self._socket.send(message)
        replies: list[NetlinkMessage] = []
        while True:
            for reply in decode_messages(self._socket.recv(_RECV_BYTES)):
                if reply.seq != seq:
                    continue  # a late answer to an earlier, timed-out request
                if reply.type in (NLMSG_DONE, NLMSG_ERROR):
                    return replies  # an NLMSG_ERROR that gets here has error 0: the ACK
                replies.append(reply)

    def devices(self) -> list[RdmaDevice]:
        seq = self.next_seq()
        return [decode_device(r.payload) for r in self.exchange(encode_device_dump(seq), seq)]

    def port_statistics(self, device_index: int, port: int) -> PortStatistics:
        seq = self.next_seq()
        replies = self.exchange(encode_stat_get(seq, device_index, port), seq)
        if not replies:
            raise OSError(errno.ENODATA, f"no STAT_GET reply for device {device_index} port {port}")
        return decode_stat_reply(replies[0].payload)


def probe(devices: Sequence[str]) -> str | None:
    """Why RDMA netlink cannot serve these devices, or None when it can."""
    try:
        link = RdmaNetlink()
    except OSError as exc:
        code = errno.errorcode.get(exc.errno or 0, "error")
        return f"cannot open a NETLINK_RDMA socket ({code}: {exc.strerror})"
    try:
        known = {device.name for device in link.devices()}
    except OSError as exc:
        return f"RDMA_NLDEV_CMD_GET failed ({exc})"
    finally:
        link.close()
    missing = sorted(set(devices) - known)
    if missing:
        return f"RDMA netlink does not list {', '.join(missing)}"
    return None


@dataclass
class RdmaNetlinkSource:
    """The hw counters of the given (device, port) pairs, one STAT_GET each per poll."""

    ports: Sequence[tuple[str, int]]
    name: str = "rdma_netlink"
    _link: RdmaNetlink | None = field(default=None, init=False, repr=False)
    _index: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    def open(self) -> None:
        self.close()
        self._link = RdmaNetlink()
        try:
            self._index = {d.name: d.index for d in self._link.devices()}
        except BaseException:
            self.close()
            raise
        missing = sorted({device for device, _ in self.ports} - set(self._index))
        if missing:
            self.close()
            raise SourceError(f"RDMA netlink does not list {', '.join(missing)}")

    def poll(self) -> list[SlowReading]:
        assert self._link is not None, "open() first"
        readings = []
        for device, port in self.ports:
            statistics = self._link.port_statistics(self._index[device], port)
            for name, value in statistics.counters.items():
                readings.append(SlowReading(device, port, name, value, hw_counter_spec(name)))
        return readings

    def close(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None
