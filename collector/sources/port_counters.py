"""The slow PortCounters of each port (link errors, discards, xmit_wait) and its state and rate.

On mlx5 every read here is a firmware command (PPCNT for PortCounters, PTYS for state and
rate: drivers/infiniband/hw/mlx5/mad.c, main.c), so these are read at <= 1 Hz, never in
the 1 ms sampler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from collector.discovery import InfiniBandPort, parse_rate, parse_state
from collector.sources.base import SlowReading
from collector.sources.slow_files import SlowFile, SlowFiles
from detectors.counters import CounterKind, CounterSpec


def _saturating(width_bits: int) -> CounterSpec:
    return CounterSpec(CounterKind.SATURATING, width_bits)


# IBA PortCounters widths (drivers/infiniband/core/sysfs.c PORT_PMA_ATTR). They stop at
# all-ones instead of wrapping (IBA 1.8 s16.1.3.5) until a PMA Set or
# OpenSM's PerfMgr clears them, which reads as a decrease: a reset.
PORT_COUNTER_SPECS: dict[str, CounterSpec] = {
    "symbol_error": _saturating(16),
    "link_error_recovery": _saturating(8),
    "link_downed": _saturating(8),
    "port_rcv_errors": _saturating(16),
    "port_rcv_remote_physical_errors": _saturating(16),
    "port_rcv_switch_relay_errors": _saturating(16),
    "port_xmit_discards": _saturating(16),
    "port_xmit_constraint_errors": _saturating(8),
    "port_rcv_constraint_errors": _saturating(8),
    "local_link_integrity_errors": _saturating(4),
    "excessive_buffer_overrun_errors": _saturating(4),
    "VL15_dropped": _saturating(16),
    # Ticks with data queued and nothing sent; the tick length varies by generation.
    "port_xmit_wait": _saturating(32),
}

# Gauges, re-read every poll: state follows the netdev carrier on RoCE and the rate
# changes after a renegotiation. Values: state and phys_state ids ("4: ACTIVE" -> 4).
GAUGE_FILES = {"state": "state", "phys_state": "phys_state", "rate_bytes_per_second": "rate"}


def _parse_gauge(name: str, text: str) -> int | None:
    if name == "rate_bytes_per_second":
        return parse_rate(text)
    state = parse_state(text)
    return state.id if state is not None else None


@dataclass
class PortCounterSource:
    """The PortCounters in PORT_COUNTER_SPECS that exist, plus state, phys_state and rate.

    Descriptors stay open and are re-read with os.pread(fd, n, 0), which re-runs the
    driver's show() (fs/kernfs/file.c). A file that fails (EINVAL when the PMA query
    fails, "N/A (no PMA)" on old kernels, ENODEV after unplug) is left out of that poll and
    counted in ``read_errors``; the others carry on. ENODEV/ENOENT close the descriptor and
    the file is reopened on the next poll.
    """

    ports: Sequence[InfiniBandPort]
    name: str = "port_slow"  # the exported source label, kept as operators know it
    _files: SlowFiles = field(default_factory=SlowFiles, init=False)

    @property
    def read_errors(self) -> int:
        return self._files.read_errors

    @property
    def last_error(self) -> str | None:
        return self._files.last_error

    def open(self) -> None:
        files = []
        for port in self.ports:
            counters = port.path / "counters"
            for counter, spec in PORT_COUNTER_SPECS.items():
                # Listed in the directory, not taken from discovery's readable list: a
                # file that fails now may work later, and its failures must be counted.
                if (counters / counter).exists():
                    files.append(
                        SlowFile(port.device, port.port, counter, counters / counter, spec)
                    )
            for gauge, filename in GAUGE_FILES.items():
                if (port.path / filename).exists():
                    files.append(
                        SlowFile(port.device, port.port, gauge, port.path / filename, None)
                    )
        self._files.open(files)

    def poll(self) -> list[SlowReading]:
        readings = []
        for index, file in enumerate(self._files.files):
            if file.counter is not None:
                value = self._files.read_integer(index)
            else:
                text = self._files.read(index)
                value = None if text is None else _parse_gauge(file.name, text)
                if text is not None and value is None:
                    self._files.fail(file, f"reads {text[:40]!r}")
            if value is not None:
                readings.append(SlowReading(file.device, file.port, file.name, value, file.counter))
        return readings

    def close(self) -> None:
        self._files.close()
