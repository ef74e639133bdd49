"""Every RDMA port's bytes: counters/port_{xmit,rcv}_data (x4 octets) or, for drivers without a
PMA (efa, bnxt_re, irdma), their byte counters in hw_counters/ at the lifespan's resolution."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from burstscope.collector.discovery import (
    DEFAULT_SYSFS_ROOT,
    DeviceInfo,
    Discovery,
    DiscoveryError,
    InfiniBandPort,
    discover,
    filter_summary,
)
from burstscope.collector.sources.base import (
    PortSpec,
    SlowSource,
    SourceError,
    SourceOptions,
    UnsampledPort,
)
from burstscope.collector.sources.ethtool import EthtoolSource
from burstscope.collector.sources.files import CounterFiles, FileCounterSource
from burstscope.collector.sources.hw_counters import HwCountersSysfsSource
from burstscope.collector.sources.port_counters import PortCounterSource
from burstscope.collector.sources.rdma_netlink import RdmaNetlinkSource
from burstscope.collector.sources.rdma_netlink import probe as netlink_probe

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
    line_rates: tuple[tuple[str, int], ...] = ()  # the operator's data rates, by device
    line_rate_bytes_per_second: int | None = None  # --line-rate: every other device's
    ethtool: bool = True  # SourceOptions.ethtool: read each netdev's ethtool statistics
    name: str = "infiniband"
    discovery: Discovery = field(init=False)
    ports: tuple[PortSpec, ...] = field(init=False)
    unsampled: tuple[UnsampledPort, ...] = field(init=False)
    notes: tuple[str, ...] = field(init=False)
    devices: tuple[DeviceInfo, ...] = field(init=False)
    _files: tuple[CounterFiles, ...] = field(init=False)

    def __post_init__(self) -> None:
        try:
            self.discovery = discover(self.sysfs_root, self.include, self.exclude)
        except DiscoveryError as exc:
            raise SourceError(str(exc)) from None
        filtered = filter_summary(self.discovery, self.include, self.exclude)
        self.notes = () if filtered is None else (f"port filter: {filtered}",)
        if not self.discovery.ports:
            where = Path(self.sysfs_root) / "class" / "infiniband"
            why = "; ".join(
                f"{p.device}/{p.port}: {p.not_sampled}" for p in self.discovery.unsampled
            )
            raise SourceError(
                f"no InfiniBand or RoCE port with readable byte counters under {where}"
                + (f" ({why})" if why else "")
                + (f"; {filtered}" if filtered else "")
            )
        rates = dict(self.line_rates)
        if self.line_rate_bytes_per_second is not None:
            for port in (*self.discovery.ports, *self.discovery.unsampled):
                rates.setdefault(port.device, self.line_rate_bytes_per_second)
            self.line_rates = tuple(sorted(rates.items()))
        self.ports = tuple(
            PortSpec(
                p.device,
                p.port,
                rates.get(p.device, p.data_rate_bytes_per_second or 0),
                p.byte_files.min_read_interval_ns if p.byte_files else 0,
                p.rate_problem or "",
            )
            for p in self.discovery.ports
        )
        self.unsampled = tuple(
            UnsampledPort(
                p.device, p.port, p.not_sampled or "not sampled", p.not_sampled_reason or "other"
            )
            for p in self.discovery.unsampled
        )
        self._files = tuple(_counter_files(p) for p in self.discovery.ports)
        self.devices = self.discovery.devices

    def slow_sources(
        self, probe: Callable[[Sequence[str]], str | None] = netlink_probe
    ) -> list[SlowSource]:
        """PortCounters, state and rate of every port; hw counters (RDMA netlink, else sysfs)
        of the Ethernet ports, including those without counters/; ethtool of each netdev."""
        ports = self.discovery.ports
        # Unsampled ports too: their state, phys_state and rate are exported all the same.
        sources: list[SlowSource] = [
            PortCounterSource((*ports, *self.discovery.unsampled), line_rates=dict(self.line_rates))
        ]
        roce = [p for p in ports if p.link_layer == "Ethernet" and p.hw_counters]
        seen = {(p.device, p.port) for p in roce}
        roce += [p for p in self.discovery.hw_counter_only if (p.device, p.port) not in seen]
        if roce:
            sources.append(choose_hw_counter_source(roce, probe))
        if self.ethtool:
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


def _counter_files(port: InfiniBandPort) -> CounterFiles:
    transmit, receive = port.byte_paths()
    files = port.byte_files
    assert files is not None
    return CounterFiles(
        transmit[0],
        receive[0],
        files.bytes_per_unit,
        transmit[1:],
        receive[1:],
        files.min_read_interval_ns,
    )


def from_spec(argument: str | None, options: SourceOptions) -> InfiniBandSource:
    if argument:
        raise SourceError(f"the sysfs source takes no argument (got {argument!r})")
    return InfiniBandSource(
        options.sysfs_root,
        options.include,
        options.exclude,
        options.line_rates,
        options.line_rate_bytes_per_second,
        options.ethtool,
    )
