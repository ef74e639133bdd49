"""Per-job totals: each drain's saturated time and burst bytes, added to the jobs holding the port.

The pipeline calls ``JobAccounts.add`` once per drain with every port's cumulative figures
(both directions summed) and the job table in force; the increments since the previous drain
go to the jobs holding that port as a compute port then. A job's start and end are so
resolved to one drain (1 s in the agent). Hidden saturation is known only when its 15 s
wall-clock window closes, so it reaches the jobs holding the port at that moment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from burstscope.collector.jobs.model import COMPUTE, JobFigures, JobTable

# (device, port, saturated ns, hidden saturated ns, burst bytes): cumulative, both directions.
PortTotals = tuple[str, int, int, int, int]


@dataclass(slots=True)
class _Running:
    saturated_ns: int = 0
    hidden_saturated_ns: int = 0
    burst_bytes: int = 0


class JobAccounts:
    """Running jobs' totals on this node; an ended job's totals go with it (its series too)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], tuple[int, int, int]] = {}
        self._running: dict[str, _Running] = {}

    def add(self, table: JobTable, ports: Iterable[PortTotals]) -> None:
        running = {job.job_id: self._running.get(job.job_id) or _Running() for job in table.jobs}
        for device, port, saturated, hidden, burst_bytes in ports:
            now = (saturated, hidden, burst_bytes)
            last = self._last.get((device, port), (0, 0, 0))
            self._last[(device, port)] = now
            # A total that went down belongs to a new analyzer (a reload, a new rate): its
            # whole value is new since the previous drain.
            steps = [
                value - old if value >= old else value for value, old in zip(now, last, strict=True)
            ]
            if not any(steps):
                continue
            for holding in table.holdings:
                if (holding.device, holding.port) != (device, port) or holding.role != COMPUTE:
                    continue
                totals = running.get(holding.job_id)
                if totals is None:
                    continue
                totals.saturated_ns += steps[0]
                totals.hidden_saturated_ns += steps[1]
                totals.burst_bytes += steps[2]
        self._running = running

    def figures(self) -> dict[str, JobFigures]:
        return {
            job_id: JobFigures(
                totals.saturated_ns / 1e9, totals.hidden_saturated_ns / 1e9, totals.burst_bytes
            )
            for job_id, totals in self._running.items()
        }
