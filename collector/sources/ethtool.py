"""Driver statistics (PFC pause, per-priority and PHY bytes) through the SIOCETHTOOL ioctl.

No ethtool binary and no privileges: ETHTOOL_GSSET_INFO, ETHTOOL_GSTRINGS and
ETHTOOL_GSTATS are allowed without CAP_NET_ADMIN (net/ethtool/ioctl.c, dev_ethtool). The
netlink ETHTOOL_MSG_STATS_GET is no substitute: it returns only the standard groups and
"is not a re-implementation of ETHTOOL_GSTATS" (Documentation/networking/ethtool-netlink.rst).
Modelled on DataDog integrations-core network/datadog_checks/network/ethtool.py.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import re
import socket
import struct
from dataclasses import dataclass, field

from burstscope.collector.sources.base import SlowReading, SourceError
from burstscope.detectors.counters import RESETTING_64

# include/uapi/linux/sockios.h and include/uapi/linux/ethtool.h
SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS = 0x0000001B
ETHTOOL_GSTATS = 0x0000001D
ETHTOOL_GSSET_INFO = 0x00000037
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16

# struct ethtool_sset_info {u32 cmd; u32 reserved; u64 sset_mask; u32 data[]}
_SSET_INFO = struct.Struct("=IIQ")
# struct ethtool_gstrings {u32 cmd; u32 string_set; u32 len; u8 data[]}
_GSTRINGS = struct.Struct("=III")
# struct ethtool_stats {u32 cmd; u32 n_stats; u64 data[]}
_GSTATS = struct.Struct("=II")
# struct ifreq: char ifr_name[IFNAMSIZ] then a union whose largest member (struct ifmap)
# makes it 24 bytes on LP64; ifr_data is the pointer at the start of the union.
_IFREQ = struct.Struct(f"@{IFNAMSIZ}sP{40 - IFNAMSIZ - struct.calcsize('P')}x")
# Kernels before the 2025 fix (net/ethtool/ioctl.c "avoid overflowing userspace buffer")
# write the driver's *current* count, which can grow between GSSET_INFO and GSTATS
# (mlx5 adds per-channel stats when channels are added): leave room so that cannot overrun.
_HEADROOM = 256

# PFC and whole-wire counters an operator needs beside the RDMA data counters (mlx5
# counters.rst): per-priority pause/duration/bytes, PHY bytes, pause frames, PHY discards.
DEFAULT_STAT_PATTERN = (
    r"(rx|tx)_prio\d+_(pause|pause_duration|bytes)"
    r"|(rx|tx)_bytes_phy|(rx|tx)_pause_ctrl_phy|rx_discards_phy"
)
# What the PFC watchdog polls at 10 Hz (collector.pfc_watchdog): pause frames and durations
# per priority, nothing else. GSTATS still makes the driver update every stat it has (mlx5:
# mlx5e_ethtool_get_ethtool_stats, en_ethtool.c, runs mlx5e_stats_update under the state
# lock, each counter group's update a firmware query), but only these are decoded and kept.
# No cheaper path gives them: ETHTOOL_MSG_PAUSE_GET's statistics (net/ethtool/pause.c,
# ETHTOOL_A_PAUSE_STAT_{TX,RX}_FRAMES) count IEEE 802.3x global pause frames only: no
# priority, no duration; DCB's IEEE_GET PFC (mlx5e_dcbnl_ieee_getpfc, en_dcbnl.c) returns
# per-priority frames from the driver's cached stats, no duration. Neither can tell a
# stuck lossless priority apart.
PAUSE_STAT_PATTERN = r"(rx|tx)_prio\d+_pause(_duration)?"
# Stats that are values, not counters (veth_get_ethtool_stats, drivers/net/veth.c).
_GAUGES = frozenset({"peer_ifindex"})


def _address(buffer: bytearray) -> tuple[ctypes.Array[ctypes.c_char], int]:
    view = (ctypes.c_char * len(buffer)).from_buffer(buffer)
    return view, ctypes.addressof(view)


def encode_ifreq(interface: str, data_address: int) -> bytes:
    """A struct ifreq naming the interface, ifr_data pointing at the ethtool command."""
    name = interface.encode()
    if not name or len(name) >= IFNAMSIZ or b"\0" in name or b"/" in name:
        raise SourceError(f"invalid interface name {interface!r}")
    return _IFREQ.pack(name, data_address)


def encode_sset_info_request() -> bytearray:
    """ETHTOOL_GSSET_INFO asking for the size of the ETH_SS_STATS string set."""
    return bytearray(_SSET_INFO.pack(ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_STATS) + bytes(4))


def decode_sset_info(buffer: bytes | bytearray) -> int:
    """The number of stats; the kernel clears the mask bit of sets the driver lacks."""
    _, _, mask = _SSET_INFO.unpack_from(buffer)
    if not mask & (1 << ETH_SS_STATS):
        return 0
    (count,) = struct.unpack_from("=I", buffer, _SSET_INFO.size)
    return int(count)


def encode_gstrings_request(count: int) -> bytearray:
    buffer = bytearray(_GSTRINGS.size + (count + _HEADROOM) * ETH_GSTRING_LEN)
    _GSTRINGS.pack_into(buffer, 0, ETHTOOL_GSTRINGS, ETH_SS_STATS, count)
    return buffer


def decode_gstrings(buffer: bytes | bytearray) -> list[str]:
    """The names, each a NUL-padded 32-byte field."""
    _, _, count = _GSTRINGS.unpack_from(buffer)
    names = []
    for index in range(count):
        start = _GSTRINGS.size + index * ETH_GSTRING_LEN
        raw = bytes(buffer[start : start + ETH_GSTRING_LEN])
        names.append(raw.partition(b"\0")[0].decode("ascii", "replace"))
    return names


def encode_gstats_request(count: int) -> bytearray:
    # n_stats is our expected count: fixed kernels answer 0 when it no longer matches.
    buffer = bytearray(_GSTATS.size + (count + _HEADROOM) * 8)
    _GSTATS.pack_into(buffer, 0, ETHTOOL_GSTATS, count)
    return buffer


def decode_gstats(buffer: bytes | bytearray) -> list[int]:
    _, count = _GSTATS.unpack_from(buffer)
    return list(struct.unpack_from(f"={count}Q", buffer, _GSTATS.size))


class EthtoolStats:
    """ETHTOOL_GSTRINGS/GSTATS for one interface on one AF_INET datagram socket."""

    def __init__(self, interface: str) -> None:
        encode_ifreq(interface, 0)  # validate the name before touching the kernel
        self.interface = interface
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 0)

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> EthtoolStats:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _ioctl(self, buffer: bytearray) -> None:
        view, address = _address(buffer)
        try:
            fcntl.ioctl(self._socket.fileno(), SIOCETHTOOL, encode_ifreq(self.interface, address))
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                raise SourceError(f"unknown interface {self.interface!r}") from None
            raise
        finally:
            del view  # the buffer cannot be resized while a ctypes view exports it

    def names(self) -> list[str]:
        info = encode_sset_info_request()
        try:
            self._ioctl(info)
        except OSError as exc:
            # No get_sset_count at all (lo, dummy): the interface simply has no stats.
            if exc.errno == errno.EOPNOTSUPP:
                return []
            raise
        count = decode_sset_info(info)
        if count == 0:
            return []
        strings = encode_gstrings_request(count)
        self._ioctl(strings)
        return decode_gstrings(strings)

    def values(self, count: int) -> list[int]:
        """The current values; fewer or more than ``count`` when the set changed meanwhile."""
        stats = encode_gstats_request(count)
        self._ioctl(stats)
        return decode_gstats(stats)


@dataclass
class EthtoolSource:
    """The filtered GSTATS counters of one interface, as a SlowSource.

    Readings are labelled with ``device`` (default: the interface name) and ``port`` (1),
    the same convention as the netdev source. Every call runs the driver's full stats
    update (mlx5e_stats_update, many firmware commands), hence <= 1 Hz.
    """

    interface: str
    pattern: str | None = DEFAULT_STAT_PATTERN  # None: every stat the driver exports
    device: str | None = None
    port: int = 1
    name: str = ""  # default: "ethtool:<interface>", unique per interface
    _stats: EthtoolStats | None = field(default=None, init=False, repr=False)
    _names: list[str] = field(default_factory=list, init=False, repr=False)
    _wanted: list[int] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self.name = self.name or f"ethtool:{self.interface}"
        self._regex = re.compile(self.pattern) if self.pattern is not None else None

    @property
    def stat_names(self) -> tuple[str, ...]:
        """The names this source reports (after open())."""
        return tuple(self._names[i] for i in self._wanted)

    def _load_names(self) -> None:
        assert self._stats is not None
        self._names = self._stats.names()
        regex = self._regex
        self._wanted = [i for i, n in enumerate(self._names) if regex is None or regex.fullmatch(n)]

    def open(self) -> None:
        self.close()
        self._stats = EthtoolStats(self.interface)
        try:
            self._load_names()
        except BaseException:
            self.close()
            raise

    def poll(self) -> list[SlowReading]:
        assert self._stats is not None, "open() first"
        if not self._wanted:
            return []
        values = self._stats.values(len(self._names))
        if len(values) != len(self._names):
            # The driver's set changed (channels added or removed): names first, then retry.
            self._load_names()
            values = self._stats.values(len(self._names))
            if len(values) != len(self._names):
                raise OSError(errno.EAGAIN, "ethtool stats set changed twice during a poll")
        device = self.device or self.interface
        readings = []
        for index in self._wanted:
            stat = self._names[index]
            spec = None if stat in _GAUGES else RESETTING_64
            readings.append(SlowReading(device, self.port, stat, values[index], spec))
        return readings

    def pause_counters(self) -> EthtoolSource:
        """The per-priority pause counters alone, for the PFC watchdog's fast poll."""
        return EthtoolSource(
            self.interface,
            PAUSE_STAT_PATTERN,
            self.device,
            self.port,
            name=f"pfc-watchdog:{self.interface}",
        )

    def close(self) -> None:
        if self._stats is not None:
            self._stats.close()
            self._stats = None
