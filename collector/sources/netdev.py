"""Kernel netdev byte counters: <root>/class/net/IF/statistics/{tx,rx}_bytes.

Right for a plain kernel interface (the veth testbed, a TCP/IP NIC). Wrong for RoCE: an
mlx5 netdev's statistics exclude RDMA traffic, so discovery never uses them for a port.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from burstscope.collector.discovery import DEFAULT_SYSFS_ROOT, read_attribute
from burstscope.collector.sources.base import (
    DATA_RATE_GAUGE,
    PortSpec,
    SlowReading,
    SlowSource,
    SourceError,
    SourceOptions,
)
from burstscope.collector.sources.ethtool import EthtoolSource
from burstscope.collector.sources.files import CounterFiles, FileCounterSource


def interface_line_rate(sysfs_root: str, interface: str) -> int | None:
    """Bytes per second from class/net/IF/speed (Mb/s); None where the kernel has no speed.

    Virtual interfaces (lo, some veth, tun) fail the read with EINVAL or report -1.
    """
    try:
        megabits = int(read_attribute(Path(sysfs_root) / "class" / "net" / interface / "speed"))
    except (OSError, ValueError):
        return None
    return megabits * 1_000_000 // 8 if megabits > 0 else None


@dataclass
class NetdevRateSource:
    """class/net/IF/speed re-read every poll, so a renegotiated link is divided right."""

    interfaces: tuple[str, ...]
    sysfs_root: str = DEFAULT_SYSFS_ROOT
    line_rates: dict[str, int] = field(default_factory=dict)  # the operator's, by interface
    name: str = "netdev_rate"

    def open(self) -> None:
        pass

    def poll(self) -> list[SlowReading]:
        readings = []
        for interface in self.interfaces:
            rate = interface_line_rate(self.sysfs_root, interface)
            if rate is not None:
                readings.append(SlowReading(interface, 1, "rate_bytes_per_second", rate, None))
            data = self.line_rates.get(interface, rate or 0)
            readings.append(SlowReading(interface, 1, DATA_RATE_GAUGE, data, None))
        return readings

    def close(self) -> None:
        pass


@dataclass
class NetdevSource(FileCounterSource):
    """The interfaces the user names; each is a port 1 of a "device" named after it."""

    interfaces: tuple[str, ...]
    sysfs_root: str = DEFAULT_SYSFS_ROOT
    line_rate_bytes_per_second: int | None = None  # --line-rate overrides speed
    line_rates: tuple[tuple[str, int], ...] = ()  # --line-rate-for IF=GBITS, over the rest
    ethtool: bool = True  # SourceOptions.ethtool: read each interface's ethtool statistics
    name: str = "netdev"
    ports: tuple[PortSpec, ...] = field(init=False)
    _files: tuple[CounterFiles, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not self.interfaces or any(not name for name in self.interfaces):
            raise SourceError("netdev source needs interface names: netdev:IF[,IF...]")
        root = Path(self.sysfs_root)
        if not root.is_dir():
            raise SourceError(f"sysfs root {str(root)!r} is not a directory")
        ports, files = [], []
        for interface in self.interfaces:
            statistics = root / "class" / "net" / interface / "statistics"
            if not (statistics / "tx_bytes").is_file():
                raise SourceError(f"unknown interface {interface!r}: no {statistics}/tx_bytes")
            rate = self._overrides().get(interface) or interface_line_rate(
                self.sysfs_root, interface
            )
            ports.append(PortSpec(interface, 1, rate or 0))
            files.append(
                CounterFiles(str(statistics / "tx_bytes"), str(statistics / "rx_bytes"), 1)
            )
        self.ports = tuple(ports)
        self._files = tuple(files)

    def _overrides(self) -> dict[str, int]:
        rates = dict(self.line_rates)
        if self.line_rate_bytes_per_second is not None:
            for interface in self.interfaces:
                rates.setdefault(interface, self.line_rate_bytes_per_second)
        return rates

    def slow_sources(self) -> list[SlowSource]:
        """The speed of each interface, and its ethtool statistics (PFC pause counters where
        the NIC has them)."""
        sources: list[SlowSource] = [
            NetdevRateSource(self.interfaces, self.sysfs_root, self._overrides())
        ]
        if self.ethtool:
            sources += [EthtoolSource(interface) for interface in self.interfaces]
        return sources


def from_spec(argument: str | None, options: SourceOptions) -> NetdevSource:
    interfaces = tuple((argument or "").split(","))
    return NetdevSource(
        interfaces,
        options.sysfs_root,
        options.line_rate_bytes_per_second,
        options.line_rates,
        options.ethtool,
    )
