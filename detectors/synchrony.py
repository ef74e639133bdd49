"""Rail synchrony: how much of one port's burst time the other ports of the node burst too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from burstscope.detectors.arrays import I64


@dataclass(frozen=True, slots=True)
class Synchrony:
    """Pairwise overlap of burst time; collectives burst on every rail together."""

    labels: tuple[str, ...]
    # matrix[a][b]: share of a's burst time during which b is also in a burst (None when a
    # has no bursts); the diagonal is 1.
    matrix: tuple[tuple[float | None, ...], ...]

    @property
    def node(self) -> float | None:
        """Mean of the defined off-diagonal entries: 1 = every rail bursts together."""
        values = [
            value
            for a, row in enumerate(self.matrix)
            for b, value in enumerate(row)
            if a != b and value is not None
        ]
        return sum(values) / len(values) if values else None


def _covered_until(starts: I64, ends: I64, points: I64) -> I64:
    """Total burst time in (-inf, point] for each point; bursts are sorted and disjoint."""
    lengths = ends - starts
    before = np.concatenate(([0], np.cumsum(lengths)))
    index = np.searchsorted(starts, points, side="right")  # bursts starting at or before
    last = np.maximum(index - 1, 0)
    partial = np.clip(points - starts[last], 0, lengths[last]) if starts.size else 0
    return np.where(index > 0, before[np.maximum(index - 1, 0)] + partial, 0)


def overlap_ns(a_start: I64, a_end: I64, b_start: I64, b_end: I64) -> int:
    """Time during which both a and b are inside a burst."""
    if a_start.size == 0 or b_start.size == 0:
        return 0
    covered = _covered_until(b_start, b_end, a_end) - _covered_until(b_start, b_end, a_start)
    return int(covered.sum())


def synchrony(labels: Sequence[str], starts: Sequence[I64], ends: Sequence[I64]) -> Synchrony:
    """The matrix for one node from each port's bursts (start/end ns, time order)."""
    count = len(labels)
    rows: list[tuple[float | None, ...]] = []
    for a in range(count):
        total = int((ends[a] - starts[a]).sum())
        row: list[float | None] = []
        for b in range(count):
            if total == 0:
                row.append(None)
            elif a == b:
                row.append(1.0)
            else:
                row.append(overlap_ns(starts[a], ends[a], starts[b], ends[b]) / total)
        rows.append(tuple(row))
    return Synchrony(tuple(labels), tuple(rows))
