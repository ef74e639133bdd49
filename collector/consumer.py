"""Reading the ring in the consumer process: the new samples of each port, as columns."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from collector.ring import Field, Ring
from collector.sources.base import STATUS_MISSING, STATUS_REBASELINE, PortSpec
from collector.trace import PortColumns


class RingReader:
    """Follows the ring from where it last stopped; counts rows it was too slow to see."""

    def __init__(self, ring: Ring, ports: tuple[PortSpec, ...]) -> None:
        self.ring = ring
        self.ports = ports
        self.cursor = 0
        self.lost_rows = 0
        self.missing_by_port = [0] * len(ports)

    @property
    def missing_samples(self) -> int:
        return sum(self.missing_by_port)

    @property
    def wall_offset_ns(self) -> int:
        return self.ring.get(Field.WALL_OFFSET_NS)

    def poll(self) -> list[PortColumns]:
        """Samples since the last poll, per port, wall-clock stamped; failed reads left out."""
        return self.poll_with_timing()[0]

    def poll_with_timing(
        self,
    ) -> tuple[list[PortColumns], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """As poll(), plus each tick's lateness and every successful read's duration (ns)."""
        self.cursor, rows = self.ring.read_since(self.cursor)
        self.lost_rows += rows.lost_rows
        offset = self.wall_offset_ns
        columns = []
        for index, spec in enumerate(self.ports):
            status = rows.status[:, index]
            present = status != STATUS_MISSING
            self.missing_by_port[index] += int(present.size - np.count_nonzero(present))
            columns.append(
                PortColumns(
                    device=spec.device,
                    port=spec.port,
                    line_rate_bytes_per_second=spec.line_rate_bytes_per_second,
                    timestamp_ns=rows.timestamp_ns[present, index] + offset,
                    xmit_bytes=rows.xmit_bytes[present, index],
                    rcv_bytes=rows.rcv_bytes[present, index],
                    read_ns=rows.read_ns[present, index],
                    rebaseline=status[present] == STATUS_REBASELINE,
                )
            )
        read_ns = rows.read_ns[rows.status != STATUS_MISSING]
        return columns, rows.lateness_ns, read_ns
