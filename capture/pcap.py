"""Classic pcap files as numpy columns: the record walk, and a writer for captures and tests.

Only the record walk is sequential (each record's length says where the next begins); it
is one tight loop over 16-byte headers. Everything after it, header fields included, is
numpy over the whole file.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from burstscope.detectors.arrays import I64, U8

# Magic numbers as read little-endian (tcpdump's pcap-savefile(5)).
_MAGIC = {
    0xA1B2C3D4: ("<", 1_000),  # microsecond timestamps, little-endian file
    0xD4C3B2A1: (">", 1_000),  # microsecond, big-endian
    0xA1B23C4D: ("<", 1),  # nanosecond, little-endian
    0x4D3CB2A1: (">", 1),  # nanosecond, big-endian
}
NANOSECOND_MAGIC = 0xA1B23C4D
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101  # bare IPv4/IPv6
LINKTYPE_LINUX_SLL = 113  # "any" device captures
SUPPORTED_LINKTYPES = (LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LINUX_SLL)
# A record longer than this is corrupt (libpcap's own bound for the largest snapshot is
# 256 KiB, MAXIMUM_SNAPLEN); nothing after it can be trusted to start a record.
MAX_RECORD = 262_144
GLOBAL_HEADER = 24
RECORD_HEADER = 16


class PcapError(Exception):
    """Not a pcap file we can read at all; the message names the file and the reason."""


@dataclass(frozen=True, slots=True)
class Records:
    """Every complete record of a pcap file, as columns over the file's bytes."""

    data: U8  # the whole file
    link_type: int
    timestamp_ns: I64
    frame_offset: I64  # where each frame's captured bytes start in ``data``
    captured_length: I64
    wire_length: I64  # original length on the wire: the bytes that count
    truncated_tail: bool  # the file ends inside a record (capture cut short)
    corrupt_records: int  # a record header that cannot be right ended the walk (0 or 1)
    trailing_bytes: int  # bytes after the last complete record, not decoded

    def __len__(self) -> int:
        return int(self.timestamp_ns.size)


def read_pcap(path: Path) -> Records:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PcapError(f"{str(path)!r}: cannot read: {exc.strerror}") from None
    return parse_pcap(raw, str(path))


def parse_pcap(raw: bytes, name: str = "pcap") -> Records:
    """Walk the records of a pcap held in memory; a bad global header raises PcapError."""
    if len(raw) < GLOBAL_HEADER:
        raise PcapError(f"{name!r}: {len(raw)} bytes is shorter than a pcap global header")
    (magic,) = struct.unpack_from("<I", raw, 0)
    if magic not in _MAGIC:
        if raw[:4] == b"\x0a\x0d\x0d\x0a":
            raise PcapError(f"{name!r}: pcapng is not supported; convert with editcap -F pcap")
        raise PcapError(f"{name!r}: not a pcap file (magic {magic:#010x})")
    order, tick_ns = _MAGIC[magic]
    major, _minor, _zone, _sigfigs, _snaplen, link_field = struct.unpack_from(
        order + "HHiIII", raw, 4
    )
    if major != 2:
        raise PcapError(f"{name!r}: pcap version {major} is not 2")
    link_type = link_field & 0x0FFFFFFF  # the upper bits carry FCS flags (pcap-savefile)
    if link_type not in SUPPORTED_LINKTYPES:
        raise PcapError(
            f"{name!r}: link type {link_type} is not supported (Ethernet, raw IP, Linux SLL)"
        )
    offsets, corrupt = _walk(raw, order)
    data = np.frombuffer(raw, dtype=np.uint8)
    starts = np.asarray(offsets[:-1], dtype=np.int64)
    header = _header_fields(data, starts, order)
    captured = header[:, 2]
    trailing = len(raw) - offsets[-1]  # the walk's last entry: where decoding stopped
    return Records(
        data=data,
        link_type=link_type,
        timestamp_ns=header[:, 0] * 1_000_000_000 + header[:, 1] * tick_ns,
        frame_offset=starts + RECORD_HEADER,
        captured_length=captured,
        wire_length=np.maximum(header[:, 3], captured),
        truncated_tail=trailing > 0 and not corrupt,
        corrupt_records=int(corrupt),
        trailing_bytes=trailing,
    )


def _walk(raw: bytes, order: str) -> tuple[list[int], bool]:
    """Offsets of every complete record, then the offset after the last; corrupt flag."""
    unpack = struct.Struct(order + "I").unpack_from
    size = len(raw)
    offsets: list[int] = []
    append = offsets.append
    offset = GLOBAL_HEADER
    last = size - RECORD_HEADER
    while offset <= last:
        (captured,) = unpack(raw, offset + 8)
        if captured > MAX_RECORD:
            append(offset)
            return offsets, True
        following = offset + RECORD_HEADER + captured
        if following > size:
            break
        append(offset)
        offset = following
    append(offset)
    return offsets, False


def _header_fields(data: U8, starts: I64, order: str) -> I64:
    """(seconds, fraction, captured length, wire length) per record, as int64 columns."""
    if starts.size == 0:
        return np.zeros((0, 4), dtype=np.int64)
    index = starts[:, None] + np.arange(RECORD_HEADER, dtype=np.int64)[None, :]
    fields = data[index].view(np.dtype(order + "u4"))
    out: I64 = fields.astype(np.int64)
    return out


class PcapWriter:
    """Writes a nanosecond pcap record by record (live capture --write, tests, bench)."""

    def __init__(
        self, stream: BinaryIO, link_type: int = LINKTYPE_ETHERNET, snaplen: int = MAX_RECORD
    ) -> None:
        self.stream = stream
        self.records = 0
        stream.write(struct.pack("<IHHiIII", NANOSECOND_MAGIC, 2, 4, 0, 0, snaplen, link_type))

    def write(self, timestamp_ns: int, frame: bytes, wire_length: int | None = None) -> None:
        seconds, nanoseconds = divmod(timestamp_ns, 1_000_000_000)
        length = len(frame) if wire_length is None else wire_length
        self.stream.write(struct.pack("<IIII", seconds, nanoseconds, len(frame), length))
        self.stream.write(frame)
        self.records += 1


def pcap_bytes(frames: Iterable[tuple[int, bytes]], link_type: int = LINKTYPE_ETHERNET) -> bytes:
    """A whole nanosecond pcap of (timestamp_ns, frame) pairs, in memory."""
    import io

    buffer = io.BytesIO()
    writer = PcapWriter(buffer, link_type)
    for timestamp_ns, frame in frames:
        writer.write(timestamp_ns, frame)
    return buffer.getvalue()
