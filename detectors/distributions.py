"""Fixed-bin histograms: integer counts, so chunked and whole-series results are identical."""

from __future__ import annotations

import numpy as np

from burstscope.detectors.arrays import F64, I64

# 0.001-wide bins over [0, 1]: a quantile is reported as the upper edge of its bin, so it
# is exact to 0.1% of line rate, mergeable across chunks, ports and nodes, and the same
# whatever the chunking (sorting every sample would be neither bounded nor mergeable).
UTILIZATION_BINS = 1000

# Durations (burst length, inter-arrival) in ns: 100 log-spaced bins per decade from 1 ns
# to 1e14 ns (~28 h); quantiles are the bin's upper edge, within 2.3% of the true value.
DURATION_BINS_PER_DECADE = 100
DURATION_DECADES = 14
DURATION_BINS = DURATION_BINS_PER_DECADE * DURATION_DECADES + 1


def utilization_bins(utilization: F64) -> I64:
    """Counts per 0.001-wide bin of utilizations already clipped to [0, 1]."""
    index = (utilization * UTILIZATION_BINS).astype(np.intp)
    counts = np.bincount(index, minlength=UTILIZATION_BINS + 1).astype(np.int64, copy=False)
    # Exactly 1.0 belongs to the last bin, [0.999, 1.0]: folded after counting, which
    # spares a pass over the samples.
    counts[UTILIZATION_BINS - 1] += counts[UTILIZATION_BINS]
    return counts[:UTILIZATION_BINS]


def utilization_quantile(counts: I64 | tuple[int, ...], q: float) -> float | None:
    """Upper edge of the bin holding quantile ``q`` (None with no samples)."""
    index = _quantile_bin(counts, q)
    return None if index is None else (index + 1) / UTILIZATION_BINS


def _quantile_bin(counts: I64 | tuple[int, ...], q: float) -> int | None:
    """The bin holding quantile ``q`` of these counts (None when they are all zero)."""
    cumulative = np.cumsum(np.asarray(counts, dtype=np.int64))
    total = int(cumulative[-1]) if cumulative.size else 0
    if total == 0:
        return None
    rank = max(1, int(np.ceil(q * total)))
    return int(np.searchsorted(cumulative, rank, side="left"))


def duration_bins(durations_ns: I64) -> I64:
    """Counts per log-spaced bin; bin k holds (10**((k-1)/100), 10**(k/100)] ns."""
    if durations_ns.size == 0:
        return np.zeros(DURATION_BINS, dtype=np.int64)
    values = np.maximum(durations_ns, 1).astype(np.float64)
    np.log10(values, out=values)
    values *= DURATION_BINS_PER_DECADE
    np.ceil(values, out=values)
    index = values.astype(np.intp)
    # Two ufuncs rather than np.clip, whose Python wrapper costs more than the clipping.
    np.maximum(index, 0, out=index)
    np.minimum(index, DURATION_BINS - 1, out=index)
    return np.bincount(index, minlength=DURATION_BINS).astype(np.int64, copy=False)


def duration_quantile(counts: I64 | tuple[int, ...], q: float, maximum_ns: int) -> float | None:
    """Quantile in seconds: the upper edge of its bin, never above the exact maximum."""
    index = _quantile_bin(counts, q)
    if index is None:
        return None
    edge_ns = float(10.0 ** (index / DURATION_BINS_PER_DECADE))
    return min(edge_ns, float(maximum_ns)) / 1e9
