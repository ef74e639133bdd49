"""The line rate in force, row by row: a block of samples cut where the rate changes.

Utilization is bytes per second over the rate in force for that sample. A renegotiated link
(a new ``rate`` file, drivers/infiniband/core/sysfs.c rate_show) changes the rate between
two samples, so the detectors, which hold one rate at a time, are fed the rows of each rate
in turn and told the new rate between them. The agent (live) and the report (offline) cut
their blocks with the same function, so both divide every interval by the same rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class RateRun:
    """Consecutive rows of a block that share one line rate."""

    rows: slice  # start and stop within the block, never empty
    rate: int  # bytes per second in force for these rows


def rate_runs(rates: npt.NDArray[np.int64], in_force: int) -> list[RateRun]:
    """The block's rows as runs of one rate each, in order; none for an empty block.

    ``rates`` holds each row's rate; a row stating 0 (the rate was unknown when it was
    sampled) keeps the rate in force before it, and ``in_force`` is that rate before the
    block's first row. A run's rate differs from the previous run's, and the first run's
    rate equals ``in_force`` when the block starts without a new rate.
    """
    size = rates.size
    if size == 0:
        return []
    low, high = int(rates.min()), int(rates.max())
    if low == high:  # the usual block: one rate throughout
        return [RateRun(slice(0, size), in_force if low <= 0 else low)]
    # Each row's rate, the unknown ones filled forward from the last known one.
    last_known = np.where(rates > 0, np.arange(size), -1)
    np.maximum.accumulate(last_known, out=last_known)
    effective = np.where(last_known >= 0, rates[np.maximum(last_known, 0)], in_force)
    bounds = [0, *(np.flatnonzero(np.diff(effective)) + 1).tolist(), size]
    return [RateRun(slice(start, stop), int(effective[start])) for start, stop in pairwise(bounds)]
