"""A report's jobs: a trace's saturated time and bursts grouped by the job that held each port.

The trace's side table (collector.jobs.spans) says which job held which port when. Each held
port's samples are fed to its analyzers in parts cut where its holders change, and the
analyzers' running totals after each part go to the jobs holding the port then: the
accounting the agent does per drain (collector.jobs.accounting), here exact to the sample.
Hidden saturation (a 15 s window's saturated time, when the window's mean is under busy)
goes to the jobs in proportion to the saturated time they had in the window: the agent,
which knows it only when the window closes, gives it to the jobs holding the port then.
A burst goes to the jobs holding its port when it
ended. A port two jobs hold (the NUMA rule) counts for both. Compute ports and storage ports
are added apart; the iteration period comes from the compute ports' bursts
(detectors.periodicity).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from burstscope.collector.jobs.model import COMPUTE, STORAGE, Job
from burstscope.collector.jobs.spans import JobSpan
from burstscope.detectors.analyzer import DirectionAnalyzer
from burstscope.detectors.bursts import Bursts
from burstscope.detectors.periodicity import Periodicity, iteration_period

PortKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RoleTotals:
    """A job's figures over its ports of one role, both directions, while it held them."""

    saturated_ns: int = 0
    hidden_saturated_ns: int = 0  # inside 15 s windows whose mean was under busy
    bursts: int = 0
    burst_bytes: int = 0


@dataclass(frozen=True, slots=True)
class JobReport:
    source: str  # the trace (PATH argument)
    job: Job
    start_ns: int  # its first holding's start
    end_ns: int | None  # its last holding's end; None: still running when the trace ended
    spans: tuple[JobSpan, ...]  # which ports it held when
    compute: RoleTotals
    storage: RoleTotals
    iteration: Periodicity | None  # from the compute ports' bursts; None: no period found

    def ports(self, role: str) -> list[str]:
        """The ports it held in ``role``, as device/port, each once, in order."""
        found = [f"{s.device}/{s.port}" for s in self.spans if s.role == role]
        return sorted(set(found), key=found.index)


class PortLedger:
    """One held port: the times its holders change, and what its analyzers' running totals
    (both directions) grew by in each stretch between them.

    Its samples are fed in parts that each lie in one stretch and one coarse window (cut
    where holders change and where windows end), so a part's saturated time belongs to its
    stretch. A window closes when the first sample ending at or after its end is fed (the
    analyzer's rule, detectors.scales), and its hidden saturation is all of its saturated
    time or none: it is shared among the stretches in proportion to the saturated time each
    had in the window, which is exact. A sample ending exactly on a window's end is a part
    of its own, so no part closes two windows unless a window holds that one sample.
    """

    def __init__(self, spans: Sequence[JobSpan], window_ns: int) -> None:
        self.spans = list(spans)
        self.window_ns = window_ns  # Thresholds.coarse_window_ns: windows end on its multiples
        times = {s.start_ns for s in self.spans}
        times |= {s.end_ns for s in self.spans if s.end_ns is not None}
        self.boundaries = sorted(times)
        self.saturated_ns = [0] * len(self.boundaries)  # per stretch
        self.hidden_saturated_ns = [0] * len(self.boundaries)
        self._last = (0, 0)
        # Open windows: by index, the saturated ns each stretch (-1: no holder) put in them.
        self._pending: dict[int, dict[int, int]] = {}

    def stretch(self, time_ns: int) -> int:
        """The stretch holding ``time_ns``; -1 before the first holder came."""
        return int(np.searchsorted(self.boundaries, time_ns, side="right")) - 1

    def holders(self, stretch: int) -> list[JobSpan]:
        if stretch < 0:
            return []
        start = self.boundaries[stretch]
        return [s for s in self.spans if s.holds(start)]

    def _window(self, time_ns: int) -> int:
        # A sample ending exactly on a window's end belongs to that window (the analyzer's).
        return (time_ns - 1) // self.window_ns

    def parts(self, stamps: npt.NDArray[np.int64], piece: slice) -> list[slice]:
        """``piece`` of ``stamps`` cut where the holders change and where windows end."""
        first, stop = piece.indices(stamps.size)[:2]
        if first >= stop:
            return []
        low, high = int(stamps[first]), int(stamps[stop - 1])
        edges = [b for b in self.boundaries if low < b <= high]
        for window in range(self._window(low), self._window(high) + 1):
            end = (window + 1) * self.window_ns
            edges += [end, end + 1]
        cuts = np.searchsorted(stamps[first:stop], sorted(set(edges)), "left") + first
        bounds = [first, *cuts.tolist(), stop]
        return [slice(a, b) for a, b in pairwise(bounds) if b > a]

    def record(
        self,
        first_ns: int,
        last_ns: int,
        analyzers: Iterable[DirectionAnalyzer],
        final: bool = False,
    ) -> None:
        """After a part whose samples end at ``first_ns`` .. ``last_ns`` was fed (``final``:
        after the analyzers finished): what the totals grew by goes to its stretch, and the
        hidden saturation of the windows it closed to theirs."""
        measured = list(analyzers)
        now = (
            sum(a.saturated_ns for a in measured),
            sum(a.hidden_saturated_ns for a in measured),
        )
        saturated, hidden = now[0] - self._last[0], now[1] - self._last[1]
        self._last = now
        if saturated:
            stretch = self.stretch(first_ns)
            if stretch >= 0:
                self.saturated_ns[stretch] += saturated
            shares = self._pending.setdefault(self._window(first_ns), {})
            shares[stretch] = shares.get(stretch, 0) + saturated
        closed = [k for k in self._pending if final or (k + 1) * self.window_ns <= last_ns]
        self._settle(hidden, closed)

    def _settle(self, hidden: int, closed: list[int]) -> None:
        shares: dict[int, int] = {}
        for window in closed:
            for stretch, value in self._pending.pop(window).items():
                shares[stretch] = shares.get(stretch, 0) + value
        total = sum(shares.values())
        if not hidden or not total:
            return
        for stretch, value in shares.items():
            if stretch >= 0:
                self.hidden_saturated_ns[stretch] += hidden * value // total


def ledgers(spans: Sequence[JobSpan], window_ns: int) -> dict[PortKey, PortLedger]:
    by_port: dict[PortKey, list[JobSpan]] = {}
    for span in spans:
        by_port.setdefault((span.device, span.port), []).append(span)
    return {key: PortLedger(held, window_ns) for key, held in by_port.items()}


@dataclass(slots=True)
class _Sums:
    saturated_ns: int = 0
    hidden_saturated_ns: int = 0
    bursts: int = 0
    burst_bytes: int = 0

    def totals(self) -> RoleTotals:
        return RoleTotals(
            self.saturated_ns, self.hidden_saturated_ns, self.bursts, self.burst_bytes
        )


def job_reports(
    source: str,
    spans: Sequence[JobSpan],
    held: dict[PortKey, PortLedger],
    bursts: dict[PortKey, tuple[Bursts, Bursts]],
    trace_ns: tuple[int, int] | None,
) -> tuple[JobReport, ...]:
    """Per job (by id): its ports, compute and storage figures, and iteration period.
    ``trace_ns``: the first and last sample of the trace; None when it has none."""
    sums: dict[tuple[str, str], _Sums] = {}
    onsets: dict[str, list[Bursts]] = {}
    for key, ledger in held.items():
        for stretch in range(len(ledger.boundaries)):
            for span in ledger.holders(stretch):
                role = sums.setdefault((span.job.job_id, span.role), _Sums())
                role.saturated_ns += ledger.saturated_ns[stretch]
                role.hidden_saturated_ns += ledger.hidden_saturated_ns[stretch]
        for direction in bursts.get(key, ()):
            if not len(direction):
                continue
            stretches = np.searchsorted(ledger.boundaries, direction.end_ns, side="right") - 1
            for stretch in np.unique(stretches).tolist():
                chosen = stretches == stretch
                for span in ledger.holders(int(stretch)):
                    role = sums.setdefault((span.job.job_id, span.role), _Sums())
                    role.bursts += int(chosen.sum())
                    role.burst_bytes += int(direction.bytes[chosen].sum())
                    if span.role == COMPUTE:
                        onsets.setdefault(span.job.job_id, []).append(_select(direction, chosen))
    reports = []
    by_job: dict[str, list[JobSpan]] = {}
    for span in spans:
        by_job.setdefault(span.job.job_id, []).append(span)
    for job_id in sorted(by_job):
        held_spans = by_job[job_id]
        start = min(s.start_ns for s in held_spans)
        ends = [s.end_ns for s in held_spans]
        end = None if None in ends else max(e for e in ends if e is not None)
        reports.append(
            JobReport(
                source=source,
                job=held_spans[-1].job,  # as the table last stated it
                start_ns=start,
                end_ns=end,
                spans=tuple(held_spans),
                compute=sums.get((job_id, COMPUTE), _Sums()).totals(),
                storage=sums.get((job_id, STORAGE), _Sums()).totals(),
                iteration=_period(onsets.get(job_id, []), start, end, trace_ns),
            )
        )
    return tuple(reports)


def _select(bursts: Bursts, chosen: np.ndarray) -> Bursts:
    return Bursts(
        bursts.start_ns[chosen],
        bursts.end_ns[chosen],
        bursts.bytes[chosen],
        bursts.peak_utilization[chosen],
        bursts.mean_utilization[chosen],
    )


def _period(
    parts: list[Bursts], start: int, end: int | None, trace_ns: tuple[int, int] | None
) -> Periodicity | None:
    """The period over the part of the job the trace saw."""
    if not parts or trace_ns is None:
        return None
    begin = max(start, trace_ns[0])
    finish = min(end if end is not None else trace_ns[1], trace_ns[1])
    joined = Bursts.concatenate(parts)
    return iteration_period(joined.start_ns, joined.end_ns, joined.bytes, begin, finish)
