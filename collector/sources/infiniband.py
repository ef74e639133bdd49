"""The InfiniBand/RoCE data counters: counters/port_xmit_data and port_rcv_data, x4 octets."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from collector.discovery import (
    DATA_COUNTER_OCTETS,
    DEFAULT_SYSFS_ROOT,
    Discovery,
    DiscoveryError,
    InfiniBandPort,
    discover,
)
from collector.sources.base import PortSpec, SlowSource, SourceError, SourceOptions
from collector.sources.ethtool import EthtoolSource
from collector.sources.files import CounterFiles, FileCounterSource
from collector.sources.hw_counters import HwCountersSysfsSource
from collector.sources.port_counters import PortCounterSource
from collector.sources.rdma_netlink import RdmaNetlinkSource
from collector.sources.rdma_netlink import probe as netlink_probe

_LOG = logging.getLogger(__name__)


@dataclass
class InfiniBandSource(FileCounterSource):
    """Every discovered port (IB or RoCE alike) through the PMA data counters.

    RoCE ports are read here too, never through their netdev: the netdev statistics of
    an mlx5 interface exclude RDMA traffic (mlx5e_get_stats, en_main.c).
    """

    sysfs_root: str = DEFAULT_SYSFS_ROOT
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

    def slow_sources(
        self,
        with_ethtool: bool = True,
        probe: Callable[[Sequence[str]], str | None] = netlink_probe,
    ) -> list[SlowSource]:
        """PortCounters, state and rate of every port; hw counters (RDMA netlink, else sysfs)
        of the Ethernet ports, including those without counters/; ethtool of each netdev."""
        ports = self.discovery.ports
        sources: list[SlowSource] = [PortCounterSource(ports)]
        roce = [p for p in ports if p.link_layer == "Ethernet" and p.hw_counters]
        roce += self.discovery.hw_counter_only
        if roce:
            sources.append(choose_hw_counter_source(roce, probe))
        if with_ethtool:
            # Labelled with the RDMA port that owns the netdev, so PFC counters sit beside
            # that port's bursts in the exporter and on the dashboards.
            sources.extend(
                EthtoolSource(p.netdev, device=p.device, port=p.port) for p in ports if p.netdev
            )
        return sources


def choose_hw_counter_source(
    ports: Sequence[InfiniBandPort],
    probe: Callable[[Sequence[str]], str | None] = netlink_probe,
    logger: logging.Logger = _LOG,
) -> SlowSource:
    """RDMA netlink where the kernel offers it, sysfs hw_counters otherwise, said in one line."""
    reason = probe(sorted({port.device for port in ports}))
    if reason is None:
        return RdmaNetlinkSource([(port.device, port.port) for port in ports])
    logger.info("hw counters from sysfs hw_counters/ instead of RDMA netlink: %s", reason)
    return HwCountersSysfsSource(ports)


def from_spec(argument: str | None, options: SourceOptions) -> InfiniBandSource:
    if argument:
        raise SourceError(f"the sysfs source takes no argument (got {argument!r})")
    return InfiniBandSource(options.sysfs_root, options.include, options.exclude)
