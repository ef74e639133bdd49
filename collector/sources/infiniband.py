"""The InfiniBand/RoCE data counters: counters/port_xmit_data and port_rcv_data, x4 octets."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from collector.discovery import DATA_COUNTER_OCTETS, Discovery, DiscoveryError, discover
from collector.sources import SourceOptions
from collector.sources.base import PortSpec, SourceError
from collector.sources.files import CounterFiles, FileCounterSource


@dataclass
class InfiniBandSource(FileCounterSource):
    """Every discovered port (IB or RoCE alike) through the PMA data counters.

    RoCE ports are read here too, never through their netdev: the netdev statistics of
    an mlx5 interface exclude RDMA traffic (mlx5e_get_stats, en_main.c).
    """

    sysfs_root: str = "/sys"
    include: re.Pattern[str] | None = None
    exclude: re.Pattern[str] | None = None
    name: str = "infiniband"
    discovery: Discovery = field(init=False)
    ports: tuple[PortSpec, ...] = field(init=False)
    _files: tuple[CounterFiles, ...] = field(init=False)

    def __post_init__(self) -> None:
        try:
            self.discovery = discover(self.sysfs_root, self.include, self.exclude)
        except DiscoveryError as exc:
            raise SourceError(str(exc)) from None
        if not self.discovery.ports:
            where = Path(self.sysfs_root) / "class" / "infiniband"
            raise SourceError(f"no InfiniBand or RoCE port with readable counters under {where}")
        self.ports = tuple(
            PortSpec(p.device, p.port, p.rate_bytes_per_second or 0) for p in self.discovery.ports
        )
        self._files = tuple(
            CounterFiles(
                str(p.counter_path("port_xmit_data")),
                str(p.counter_path("port_rcv_data")),
                DATA_COUNTER_OCTETS,
            )
            for p in self.discovery.ports
        )


def from_spec(argument: str | None, options: SourceOptions) -> InfiniBandSource:
    if argument:
        raise SourceError(f"the sysfs source takes no argument (got {argument!r})")
    return InfiniBandSource(options.sysfs_root, options.include, options.exclude)
