"""The slow PortCounters of each port (link errors, discards, xmit_wait) and its state and rate.

On mlx5 every read here is a firmware command (PPCNT for PortCounters, PTYS for state and
rate: drivers/infiniband/hw/mlx5/mad.c, main.c), so these are read at <= 1 Hz, never in
the 1 ms sampler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from burstscope.collector.discovery import (
    PORT_COUNTER_WIDTHS,
    InfiniBandPort,
    parse_link_rate,
    parse_state,
)
from burstscope.collector.sources.base import DATA_RATE_GAUGE, SlowReading
from burstscope.collector.sources.slow_files import SlowFile, SlowFiles
from burstscope.detectors.counters import CounterKind, CounterSpec


def _saturating(width_bits: int) -> CounterSpec:
    return CounterSpec(CounterKind.SATURATING, width_bits)


# IBA PortCounters: they stop at all-ones instead of wrapping (IBA 1.8 s16.1.3.5) until a
# PMA Set or OpenSM's PerfMgr clears them, which reads as a decrease: a reset. Widths from
# drivers/infiniband/core/sysfs.c PORT_PMA_ATTR (collector.discovery.PORT_COUNTER_WIDTHS).
PORT_COUNTER_SPECS: dict[str, CounterSpec] = {
    name: _saturating(width) for name, width in PORT_COUNTER_WIDTHS.items()
}

# Gauges, re-read every poll: state follows the netdev carrier on RoCE and the rate
# changes after a renegotiation. Values: state and phys_state ids ("4: ACTIVE" -> 4).
GAUGE_FILES = {"state": "state", "phys_state": "phys_state", "rate_bytes_per_second": "rate"}


def _parse_state(text: str) -> int | None:
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
    # The operator's data rate by device ([source.line_rates]): reported instead of the file's.
    line_rates: dict[str, int] = field(default_factory=dict)
    _files: SlowFiles = field(default_factory=SlowFiles, init=False)
    _link_layers: dict[tuple[str, int], str] = field(default_factory=dict, init=False)

    @property
    def read_errors(self) -> int:
        return self._files.read_errors

    @property
    def last_error(self) -> str | None:
        return self._files.last_error

    def open(self) -> None:
        files = []
        self._link_layers = {(p.device, p.port): p.link_layer for p in self.ports}
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
        data_rates: dict[tuple[str, int], int] = {}
        for index, file in enumerate(self._files.files):
            if file.counter is not None:
                value = self._files.read_integer(index)
            elif file.name == "rate_bytes_per_second":
                value = self._rate(index, file, data_rates)
            else:
                text = self._files.read(index)
                value = None if text is None else _parse_state(text)
                if text is not None and value is None:
                    self._files.fail(file, f"reads {text[:40]!r}")
            if value is not None:
                readings.append(SlowReading(file.device, file.port, file.name, value, file.counter))
        for port in self.ports:
            key = (port.device, port.port)
            # The operator's rate wins; an unusable rate file reads 0: rate unknown now.
            rate = self.line_rates.get(port.device, data_rates.get(key, 0))
            readings.append(SlowReading(port.device, port.port, DATA_RATE_GAUGE, rate, None))
        return readings

    def _rate(
        self, index: int, file: SlowFile, data_rates: dict[tuple[str, int], int]
    ) -> int | None:
        # EINVAL (unknown width, rate_show in drivers/infiniband/core/sysfs.c) is counted by
        # SlowFiles.read; a zero or unparsable text is counted here; the port carries on.
        text = self._files.read(index)
        if text is None:
            return None
        key = (file.device, file.port)
        found = parse_link_rate(text, self._link_layers.get(key, "Unknown"))
        if found is None:
            self._files.fail(file, f"reads {text[:40]!r}, no usable line rate")
            return None
        data_rates[key] = found.data_bytes_per_second
        return found.bytes_per_second

    def close(self) -> None:
        self._files.close()
