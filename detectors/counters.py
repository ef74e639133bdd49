"""Counter arithmetic: 64-bit resets, narrow wraps and saturating PortCounters, in one place.

Modelled on psutil's ``wrap_numbers``: one function turns a sequence of raw counter
readings into per-interval increments and says, for each interval, whether the increment
is known. Everything that turns cumulative counters into deltas (the detectors, the slow
counter poller, the report) goes through :func:`counter_deltas`, the 1 ms analyzers' chunks
included: readings below 2**63 (every real one) take its exact int64 branch, which finds
the rare reset by index, and anything larger its modulo-2**64 branch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from burstscope.detectors.arrays import I64, U64, B


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
_INT64_MAX = (1 << 63) - 1
_INT64_MAX_AS_UINT64 = np.uint64(_INT64_MAX)


@dataclass(frozen=True, slots=True)
class Deltas:
    """Increments for the intervals ending at each reading."""

    delta: I64  # increment; 0 where not valid
    valid: B  # the increment is known
    reset: B  # the counter went backwards: re-baselined here
    saturated: B  # the reading is at all-ones (a lower bound only)

    @property
    def resets(self) -> int:
        return int(np.count_nonzero(self.reset))


def counter_deltas(
    previous: int | None,
    values: npt.ArrayLike,
    spec: CounterSpec = RESETTING_64,
    rebaseline: npt.ArrayLike | None = None,
    out: U64 | None = None,
) -> Deltas:
    """Increments for each reading in ``values`` relative to the one before it.

    ``previous`` is the reading before ``values[0]`` (``None`` at the start of a series:
    the first interval is then unknown). ``rebaseline[i]`` marks a reading taken right
    after the counter was (re)opened; the interval ending there is unknown, because the
    port may have vanished and returned with another counter. ``out``, at least as long
    as ``values``, receives the increments (``Deltas.delta`` is then a view of it), so a
    caller feeding many chunks reuses one array.
    """
    current = np.asarray(values, dtype=np.uint64)
    n = current.shape[0]
    raw = np.empty(n, dtype=np.uint64) if out is None else out[:n]
    if n:
        # uint64 subtraction wraps modulo 2**64 (arrays wrap without a warning).
        np.subtract(current[:1], np.array([previous or 0], dtype=np.uint64), out=raw[:1])
        np.subtract(current[1:], current[:-1], out=raw[1:])
    valid = np.ones(n, dtype=np.bool_)
    every = n == 0 or previous is not None  # every interval starts at a known reading
    if n and previous is None:
        valid[0] = False
    if rebaseline is not None:
        marks = np.asarray(rebaseline, dtype=np.bool_)
        if marks.any():
            valid &= ~marks
            every = False
    if spec.kind is not CounterKind.WRAPPING and _below_2_63(previous, current):
        return _exact_deltas(previous, current, raw.view(np.int64), spec, valid, every)
    return _modular_deltas(previous, current, raw, spec, valid)


def _below_2_63(previous: int | None, current: U64) -> bool:
    """Every reading below 2**63: differences of them are exact in int64."""
    if previous is not None and previous > _INT64_MAX:
        return False
    # Compared as numpy scalars: converting the maximum to an int costs as much again.
    return current.size == 0 or bool(current.max() <= _INT64_MAX_AS_UINT64)


def _exact_deltas(
    previous: int | None,
    current: U64,
    delta: I64,
    spec: CounterSpec,
    valid: B,
    every: bool,
) -> Deltas:
    """The rules of ``_modular_deltas`` for readings below 2**63, where an increment is
    exact, a negative one is a decrease (a reset) and no increase is implausible.

    The usual chunk of data counter readings: the few resets and stuck readings are found
    by index, not by comparing every reading with the one before.
    """
    n = current.shape[0]
    reset = np.zeros(n, dtype=np.bool_)
    saturated = np.zeros(n, dtype=np.bool_)
    unknown = not every
    went_back = np.flatnonzero(delta < 0)
    if went_back.size:
        reset[went_back] = valid[went_back]
        valid[went_back] = False
        unknown = True
    if spec.kind is CounterKind.SATURATING:
        top = np.uint64(spec.maximum)
        saturated = current == top
        at_top = np.flatnonzero(saturated)
        # Stuck at all-ones: the true increment is unknown, so none is invented.
        before = current[np.maximum(at_top - 1, 0)]
        if at_top.size and at_top[0] == 0:
            before[0] = 0 if previous is None else previous
        stuck = at_top[before == top]
        if stuck.size:
            valid[stuck] = False
            unknown = True
    if unknown:
        delta[~valid] = 0
    return Deltas(delta=delta, valid=valid, reset=reset, saturated=saturated)


def _modular_deltas(
    previous: int | None,
    current: U64,
    raw: U64,
    spec: CounterSpec,
    valid: B,
) -> Deltas:
    """Every rule, for readings of any size: increments are taken modulo 2**64."""
    n = current.shape[0]
    before = np.empty(n, dtype=np.uint64)
    if n:
        before[0] = 0 if previous is None else previous
        before[1:] = current[:-1]
    # Viewed as int64, a decrease of less than 2**63 is negative.
    signed = raw.view(np.int64)
    went_back = (current < before) & valid
    saturated = np.zeros(n, dtype=np.bool_)

    # A step of 2**63 or more in one interval is no traffic any link carries: a bad
    # reading (a driver printing garbage, a FUSE or test tree). Its interval is unknown;
    # as an int64 it would be a huge negative increment ("-0.0%" in a report).
    implausible = (current >= before) & (signed < 0) & valid
    if spec.kind is CounterKind.RESETTING:
        reset = went_back
        valid &= ~reset & ~implausible
    elif spec.kind is CounterKind.WRAPPING:
        # A wrap and a reset look alike on a narrow counter; a wrap is far more likely.
        reset = np.zeros(n, dtype=np.bool_)
        np.bitwise_and(raw, np.uint64(spec.maximum), out=raw)
    else:
        top = np.uint64(spec.maximum)
        saturated = current == top
        # Stuck at all-ones: the true increment is unknown, so none is invented.
        stuck = (before == top) & saturated
        reset = went_back
        valid &= ~reset & ~stuck & ~implausible
    signed[~valid] = 0
    return Deltas(delta=signed, valid=valid, reset=reset, saturated=saturated)


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
