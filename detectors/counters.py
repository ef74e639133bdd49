"""Counter arithmetic: 64-bit resets, narrow wraps and saturating PortCounters, in one place.

Modelled on psutil's ``wrap_numbers``: one function turns a sequence of raw counter
readings into per-interval increments and says, for each interval, whether the increment
is known. Everything that turns cumulative counters into deltas (the detectors, the slow
counter poller, the report) goes through :func:`counter_deltas`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


class CounterKind(enum.Enum):
    """How a counter behaves at the end of its range."""

    # 64-bit data counters (counters/port_xmit_data, netdev statistics): they never wrap in
    # practice, so a decrease means the counter was reset (driver reload, device reset,
    # perfquery -R, OpenSM PerfMgr). The interval across a reset is unknown.
    RESETTING = "resetting"
    # mlx5 Q counters in hw_counters are 32-bit and wrap (DPDK commit c5193a0bbef8).
    WRAPPING = "wrapping"
    # IBA PortCounters "instead of overflowing, shall stop at all ones" (IBA 1.8 s16.1.3.5).
    SATURATING = "saturating"


@dataclass(frozen=True, slots=True)
class CounterSpec:
    kind: CounterKind
    width_bits: int = 64

    @property
    def maximum(self) -> int:
        return (1 << self.width_bits) - 1


RESETTING_64 = CounterSpec(CounterKind.RESETTING, 64)
WRAPPING_32 = CounterSpec(CounterKind.WRAPPING, 32)


@dataclass(frozen=True, slots=True)
class Deltas:
    """Increments for the intervals ending at each reading."""

    delta: npt.NDArray[np.int64]  # increment; 0 where not valid
    valid: npt.NDArray[np.bool_]  # the increment is known
    reset: npt.NDArray[np.bool_]  # the counter went backwards: re-baselined here
    saturated: npt.NDArray[np.bool_]  # the reading is at all-ones (a lower bound only)

    @property
    def resets(self) -> int:
        return int(np.count_nonzero(self.reset))


def counter_deltas(
    previous: int | None,
    values: npt.ArrayLike,
    spec: CounterSpec = RESETTING_64,
    rebaseline: npt.ArrayLike | None = None,
) -> Deltas:
    """Increments for each reading in ``values`` relative to the one before it.

    ``previous`` is the reading before ``values[0]`` (``None`` at the start of a series:
    the first interval is then unknown). ``rebaseline[i]`` marks a reading taken right
    after the counter was (re)opened; the interval ending there is unknown, because the
    port may have vanished and returned with another counter.
    """
    current = np.asarray(values, dtype=np.uint64)
    n = current.shape[0]
    before = np.empty(n, dtype=np.uint64)
    if n:
        before[0] = 0 if previous is None else previous
        before[1:] = current[:-1]
    valid = np.ones(n, dtype=np.bool_)
    if n and previous is None:
        valid[0] = False
    if rebaseline is not None:
        valid &= ~np.asarray(rebaseline, dtype=np.bool_)

    # uint64 subtraction wraps modulo 2**64; viewed as int64 a decrease is negative.
    raw = (current - before).view(np.int64)
    went_back = (current < before) & valid
    saturated = np.zeros(n, dtype=np.bool_)

    # A step of 2**63 or more in one interval is no traffic any link carries: a bad
    # reading (a driver printing garbage, a FUSE or test tree). Its interval is unknown;
    # as an int64 it would be a huge negative increment ("-0.0%" in a report).
    implausible = (current >= before) & (raw < 0) & valid
    if spec.kind is CounterKind.RESETTING:
        reset = went_back
        valid &= ~reset & ~implausible
        delta = raw
    elif spec.kind is CounterKind.WRAPPING:
        # A wrap and a reset look alike on a narrow counter; a wrap is far more likely.
        reset = np.zeros(n, dtype=np.bool_)
        mask = np.uint64(spec.maximum)
        delta = ((current - before) & mask).view(np.int64)
    else:
        top = np.uint64(spec.maximum)
        saturated = current == top
        # Stuck at all-ones: the true increment is unknown, so none is invented.
        stuck = (before == top) & saturated
        reset = went_back
        valid &= ~reset & ~stuck & ~implausible
        delta = raw
    delta = np.where(valid, delta, 0).astype(np.int64, copy=False)
    return Deltas(delta=delta, valid=valid, reset=reset, saturated=saturated)


class CounterTracker:
    """The same arithmetic for one counter read one value at a time (slow counters)."""

    def __init__(self, spec: CounterSpec = RESETTING_64) -> None:
        self.spec = spec
        self.previous: int | None = None
        self.resets = 0
        self.saturated = False

    def update(self, value: int, rebaseline: bool = False) -> int | None:
        """Feed one reading; returns the increment since the last one, or None if unknown."""
        deltas = counter_deltas(self.previous, [value], self.spec, [rebaseline])
        self.previous = value
        self.resets += deltas.resets
        self.saturated = bool(deltas.saturated[0])
        return int(deltas.delta[0]) if deltas.valid[0] else None
