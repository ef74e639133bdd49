"""An emulated sysfs tree of the simulated node, updated in place so the real sysfs path reads it.

The agent keeps its counter files open and re-reads them with ``os.pread(fd, 32, 0)``,
so a new value cannot be renamed into place (the reader would keep the old inode). Each
update is one ``pwrite`` of the whole decimal text at offset 0 of the open file. Counters
only grow, so the text never gets shorter and no stale tail can remain; the rare value
that does shrink (a 32-bit hw counter wrapping) is left-padded with spaces to the old
length, which ``int()`` accepts, instead of being truncated, which a reader could see
half done.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from burstscope.collector.discovery import DATA_COUNTER_OCTETS
from burstscope.collector.simulation.congestion import SATURATED, congestion_counters
from burstscope.collector.simulation.cursor import CounterCursor
from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import MS, SECOND
from burstscope.collector.threads import SignalSafeEvent

# counters/ files that stay at zero on a healthy port (IBA PortCounters).
_ERROR_COUNTERS = (
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
    "multicast_xmit_packets",
    "multicast_rcv_packets",
)
# hw_counters/ of an mlx5 RoCE port that this model keeps at zero.
_QUIET_HW_COUNTERS = (
    "rp_cnp_ignored",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "duplicate_request",
    "rx_icrc_encapsulated",
)
# RoCE with a 4096-byte MTU: packets are estimated from bytes.
_PACKET_BYTES = 4096


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@dataclass
class _File:
    fd: int
    length: int


class SysfsWriter:
    """Builds ``<root>/class/infiniband/mlx5_N/ports/1/...`` and keeps its counters current."""

    def __init__(self, root: Path, model: TrafficModel) -> None:
        self.root = root
        self.model = model
        self._cursor = CounterCursor(model)
        self._files: dict[tuple[int, str], _File] = {}
        count = len(model.ports)
        self._last_time: int | None = None
        self._last_bytes = [[0, 0] for _ in range(count)]
        self._saturated_ms = [[0.0, 0.0] for _ in range(count)]
        self.updates = 0

    def port_path(self, index: int) -> Path:
        port = self.model.ports[index]
        return self.root / "class" / "infiniband" / port.device / "ports" / str(port.port)

    def create(self) -> None:
        """Write the static files and every counter at model time zero, then keep them open."""
        for index, port in enumerate(self.model.ports):
            device = self.port_path(index).parent.parent
            write_text(device / "node_type", "1: CA")
            write_text(device / "hca_type", "MT4129")
            write_text(device / "fw_ver", "28.39.1002")
            write_text(device / "board_id", "MT_0000000838")
            path = self.port_path(index)
            write_text(path / "rate", port.rate_text)
            write_text(path / "state", "4: ACTIVE")
            write_text(path / "phys_state", "5: LinkUp")
            # RoCE: the ECN and CNP counters below only exist on Ethernet link layers.
            write_text(path / "link_layer", "Ethernet")
            write_text(path / "gid_attrs" / "ndevs" / "0", f"ens{index + 1}np0")
            write_text(path / "hw_counters" / "lifespan", "10")
            for name in _ERROR_COUNTERS:
                write_text(path / "counters" / name, "0")
            for name in _QUIET_HW_COUNTERS:
                write_text(path / "hw_counters" / name, "0")
            for relative in self._dynamic_names():
                target = path / relative
                write_text(target, "0")
                fd = os.open(target, os.O_WRONLY | os.O_CLOEXEC)
                self._files[(index, relative)] = _File(fd, 2)
        self.update_fast(0)
        self.update_slow(0)

    @staticmethod
    def _dynamic_names() -> tuple[str, ...]:
        return (
            "counters/port_xmit_data",
            "counters/port_rcv_data",
            "counters/port_xmit_packets",
            "counters/port_rcv_packets",
            "counters/unicast_xmit_packets",
            "counters/unicast_rcv_packets",
            "counters/port_xmit_wait",
            "hw_counters/np_cnp_sent",
            "hw_counters/rp_cnp_handled",
            "hw_counters/np_ecn_marked_roce_packets",
        )

    def set_rate(self, index: int, text: str) -> None:
        """A renegotiated link: the port's ``rate`` rewritten in place, as rate_show would now
        print it (drivers/infiniband/core/sysfs.c), e.g. "200 Gb/sec (4X HDR)"."""
        fd = os.open(self.port_path(index) / "rate", os.O_WRONLY | os.O_CLOEXEC)
        try:
            data = f"{text}\n".encode()
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)

    def _put(self, index: int, name: str, value: int) -> None:
        file = self._files[(index, name)]
        text = f"{value}\n"
        if len(text) < file.length:
            text = " " * (file.length - len(text)) + text
        os.pwrite(file.fd, text.encode(), 0)
        file.length = len(text)

    def update_fast(self, model_time_ns: int) -> None:
        """The data counters at ``model_time_ns``: what a 1 kHz reader must see move."""
        bytes_at = self._cursor.bytes_at
        previous = self._last_time
        for index, port in enumerate(self.model.ports):
            last = self._last_bytes[index]
            for direction, name in enumerate(("counters/port_xmit_data", "counters/port_rcv_data")):
                value = bytes_at(2 * index + direction, model_time_ns)
                # port_*_data count 4-octet words (collector.discovery.DATA_COUNTER_OCTETS).
                self._put(index, name, value // DATA_COUNTER_OCTETS)
                if previous is not None and model_time_ns > previous:
                    elapsed = model_time_ns - previous
                    utilization = (value - last[direction]) / (port.bytes_per_ns * elapsed)
                    if utilization >= SATURATED:
                        self._saturated_ms[index][direction] += elapsed / MS
                last[direction] = value
        self._last_time = model_time_ns
        self.updates += 1

    def update_slow(self, model_time_ns: int) -> None:
        """Packets, xmit_wait and the congestion counters, as a 1 Hz poller reads them."""
        bytes_at = self._cursor.bytes_at
        for index in range(len(self.model.ports)):
            xmit = bytes_at(2 * index, model_time_ns) // _PACKET_BYTES
            rcv = bytes_at(2 * index + 1, model_time_ns) // _PACKET_BYTES
            for name, value in (
                ("counters/port_xmit_packets", xmit),
                ("counters/unicast_xmit_packets", xmit),
                ("counters/port_rcv_packets", rcv),
                ("counters/unicast_rcv_packets", rcv),
            ):
                self._put(index, name, value)
            for name, value in congestion_counters(*self._saturated_ms[index]).items():
                directory = "counters" if name == "port_xmit_wait" else "hw_counters"
                self._put(index, f"{directory}/{name}", value)

    def run(
        self,
        duration_ns: int | None = None,
        interval_ns: int = MS,
        stop: SignalSafeEvent | None = None,
    ) -> int:
        """Update in real time (model zero = now) until ``duration_ns`` or ``stop``.

        Returns the number of ticks missed.
        """
        zero = time.monotonic_ns()
        next_tick = zero
        next_slow = zero + SECOND
        missed = 0
        while stop is None or not stop.is_set():
            now = time.monotonic_ns()
            if duration_ns is not None and now - zero >= duration_ns:
                break
            self.update_fast(now - zero)
            if now >= next_slow:
                self.update_slow(now - zero)
                next_slow += SECOND
            next_tick += interval_ns
            now = time.monotonic_ns()
            if now > next_tick:
                # Behind (a slow disk, a busy machine): skip to the next tick, count the loss.
                late = (now - next_tick) // interval_ns + 1
                missed += late
                next_tick += late * interval_ns
            time.sleep((next_tick - now) / 1e9)
        return missed

    def close(self) -> None:
        for file in self._files.values():
            os.close(file.fd)
        self._files.clear()
