"""RoCE hw counters from sysfs ports/N/hw_counters/*: the fallback when RDMA netlink is absent.

Each file read may be a firmware query: the core caches values for ``lifespan`` (10 ms by
default), but on mlx5 only the first file stamps the cache, so most per-file reads hit
firmware (drivers/infiniband/core/sysfs.c update_hw_stats). Hence
<= 1 Hz, and RDMA netlink (one request per port) is preferred where the kernel has it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from burstscope.collector.discovery import LIFESPAN, InfiniBandPort
from burstscope.collector.sources.base import SlowReading
from burstscope.collector.sources.slow_files import SlowFile, SlowFiles
from burstscope.detectors.counters import RESETTING_64, WRAPPING_32, CounterSpec

# How each hw counter ends its range (drivers/infiniband/hw/mlx5/counters.c). mlx5 Q
# counters are 32-bit per counter set and wrap at 2**32 (DPDK commit c5193a0bbef8 "net/mlx5:
# fix imissed counter overflow"). Congestion counters come from QUERY_CONG_STATISTICS and
# PPCNT and are 64-bit: a decrease there means a reset. rxe shares a few names
# (duplicate_request) with 64-bit values; at <= 1 Hz their increments are far below 2**32,
# so reading them modulo 2**32 changes nothing but a reset.
_MLX5_Q_COUNTERS = (
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "rx_dct_connect",
    "out_of_buffer",
    "out_of_sequence",
    "duplicate_request",
    "rnr_nak_retry_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "resp_local_length_error",
    "resp_cqe_error",
    "req_cqe_error",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "resp_cqe_flush_error",
    "req_cqe_flush_error",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
)
_MLX5_64_BIT = (
    # QUERY_CONG_STATISTICS (native port; summed in LAG)
    "np_cnp_sent",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "np_ecn_marked_roce_packets",
    # PPCNT
    "rx_icrc_encapsulated",
    # optional flow counters (netlink only, after `rdma statistic set ... optional-counters`)
    "cc_rx_ce_pkts",
    "cc_rx_cnp_pkts",
    "cc_tx_cnp_pkts",
    "rdma_tx_packets",
    "rdma_tx_bytes",
    "rdma_rx_packets",
    "rdma_rx_bytes",
)
HW_COUNTER_SPECS: dict[str, CounterSpec] = {
    **dict.fromkeys(_MLX5_Q_COUNTERS, WRAPPING_32),
    **dict.fromkeys(_MLX5_64_BIT, RESETTING_64),
}


def hw_counter_spec(name: str) -> CounterSpec:
    """The arithmetic for a hw counter; unknown names are treated as 64-bit.

    rxe keeps atomic64 values, irdma and bnxt_re accumulate into 64-bit software counters:
    64-bit RESETTING is right for them, and for anything else it is the safe default, since
    a decrease re-baselines instead of inventing an increment.
    """
    return HW_COUNTER_SPECS.get(name, RESETTING_64)


@dataclass
class HwCountersSysfsSource:
    """Every ports/N/hw_counters/* file (except lifespan) of the given ports, pread at 0.

    A file that fails (EINVAL from a driver whose query failed, ENODEV after hot unplug) is
    left out of that poll and counted in ``read_errors``; the other files carry on. A file
    that fails with ENODEV or ENOENT is reopened on the next poll.
    """

    ports: Sequence[InfiniBandPort]
    name: str = "hw_counters"
    _files: SlowFiles = field(default_factory=SlowFiles, init=False)
    _listing_errors: int = field(default=0, init=False)
    _listing_error: str | None = field(default=None, init=False)

    @property
    def read_errors(self) -> int:
        return self._files.read_errors + self._listing_errors

    @property
    def last_error(self) -> str | None:
        return self._files.last_error or self._listing_error

    def open(self) -> None:
        files = []
        for port in self.ports:
            directory = port.path / "hw_counters"
            try:
                names = sorted(p.name for p in directory.iterdir() if p.name != LIFESPAN)
            except OSError as exc:
                self._listing_errors += 1
                self._listing_error = f"{port.device}/{port.port}: {directory}: {exc.strerror}"
                continue
            files += [
                SlowFile(port.device, port.port, name, directory / name, hw_counter_spec(name))
                for name in names
            ]
        self._files.open(files)

    def poll(self) -> list[SlowReading]:
        readings = []
        for index, file in enumerate(self._files.files):
            value = self._files.read_integer(index)
            if value is not None:
                readings.append(SlowReading(file.device, file.port, file.name, value, file.counter))
        return readings

    def close(self) -> None:
        self._files.close()
