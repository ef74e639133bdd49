"""Collectives joined to counter samples: each millisecond's classes, collisions, Hermod's order.

A *span* is a collective in flight on this host: from when its kernel started to when it
stopped, on the counters' clock (the same host's wall clock, a configured offset applied).
A sample (lo, hi] is *under* a span when they overlap (start < hi and end > lo), and its
*class set* is the OR of the class bits of the spans it is under. A sample under spans of two
or more of Hermod's types (EP, PP, DP) is a *collision* sample. These are detectors/coflows.py's
definitions (a moment, a collision, the urgent coflow, whether it went first) with classes of
collectives in place of mapped packets; TYPE_RANK is the one order.

What cannot be known from these records: the micro-batch and layer of a collective (NCCL and
c10d do not record them), so Hermod's key compares types only and EP against PP is a tie; and
what the next computation waited for (no record says when a kernel's result was consumed), so
"went first" is about which collective started moving data first, not about who waited.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from burstscope.detectors.arrays import I64
from burstscope.detectors.coflows import TYPE_RANK

U8 = npt.NDArray[np.uint8]

EP, PP, DP, OTHER = 1, 2, 4, 8  # class bits; OTHER: a collective that is none of Hermod's types
_BITS = {"EP": EP, "PP": PP, "DP": DP}
_NAMES = ((EP, "EP"), (PP, "PP"), (DP, "DP"), (OTHER, "other"))
HERMOD = EP | PP | DP
# The pairs of classes the collision table reports, in this order.
PAIRS: tuple[tuple[str, str], ...] = (("EP", "DP"), ("PP", "DP"), ("EP", "PP"))


def class_bit(kind: str | None) -> int:
    """The bit of a class ("EP", "PP", "DP"); OTHER for None or anything else."""
    return _BITS.get(kind or "", OTHER)


def class_names(mask: int) -> tuple[str, ...]:
    """The classes of a mask in a fixed order: 5 -> ("EP", "DP"); 8 -> ("other",)."""
    return tuple(name for bit, name in _NAMES if mask & bit)


def hermod_kinds(mask: int) -> int:
    """How many of Hermod's types a mask holds."""
    return bin(mask & HERMOD).count("1")


@dataclass(frozen=True, slots=True)
class CollectiveSpan:
    """One collective in flight on this host, classified."""

    start_ns: int  # kernel start on the counters' clock (Unix ns, offset applied)
    end_ns: int  # kernel stop, exclusive
    collective: str  # NCCL's canonical name (AllToAll, ReduceScatter, Send, ...) or the source's
    kind: str | None  # "EP", "PP", "DP"; None: none of them or not known
    rule: str  # the collective_classes rule that decided the kind
    communicator: str  # NCCL communicator id or process-group name (never a metric label)
    n_ranks: int | None
    nnodes: int | None
    message_bytes: int | None
    bus_bandwidth_gbs: float | None  # NCCL's busBw for this call, when the source gives it
    source: str  # "nccl-inspector" or "pytorch"

    @property
    def bit(self) -> int:
        return class_bit(self.kind)


def merged_intervals(starts: I64, ends: I64) -> tuple[I64, I64]:
    """The union of intervals as disjoint sorted intervals."""
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    # A new interval begins where a start lies past every earlier end.
    new = np.concatenate(([True], starts[1:] > ends[:-1]))
    first = np.flatnonzero(new)
    last = np.concatenate((first[1:] - 1, [starts.size - 1]))
    return starts[first], ends[last]


class ClassRuns:
    """Spans by class bit, each bit's merged into runs: a sample's class set at a look-up."""

    def __init__(self, starts: I64, ends: I64, bits: I64) -> None:
        """One span per place of ``starts``, ``ends`` and ``bits``; at most 8 distinct bits."""
        self.by_bit: dict[int, tuple[I64, I64]] = {}
        for bit in np.unique(bits).tolist():
            if not 0 < bit < 256:
                raise ValueError(f"bit {bit} does not fit a mask of 8 bits")
            chosen = bits == bit
            self.by_bit[bit] = merged_intervals(starts[chosen], ends[chosen])

    def masks(self, lo_ns: npt.ArrayLike, hi_ns: npt.ArrayLike) -> U8:
        """Per interval (lo, hi]: the OR of the class bits of the spans overlapping it."""
        lo = np.asarray(lo_ns, dtype=np.int64)
        hi = np.asarray(hi_ns, dtype=np.int64)
        out = np.zeros(lo.shape, dtype=np.uint8)
        for bit, (starts, ends) in self.by_bit.items():
            # The last merged interval starting before hi overlaps iff it ends after lo.
            index = np.searchsorted(starts, hi, side="left") - 1
            hit = (index >= 0) & (ends[np.maximum(index, 0)] > lo)
            out[hit] |= bit
        return out


class SpanIndex:
    """Spans by class, merged, for labelling many samples at once; and the spans themselves."""

    def __init__(self, spans: Sequence[CollectiveSpan], bits: Sequence[int] | None = None) -> None:
        """``bits``: one per span, in the order given, in place of each span's class bit (a
        bit per collective name, say); at most 8 distinct bits."""
        given = [s.bit for s in spans] if bits is None else list(bits)
        order = sorted(range(len(spans)), key=lambda i: (spans[i].start_ns, spans[i].end_ns))
        self.spans = [spans[i] for i in order]
        self._starts = np.array([s.start_ns for s in self.spans], dtype=np.int64)
        self._ends = np.array([s.end_ns for s in self.spans], dtype=np.int64)
        # The longest span bounds how far back a span overlapping a time can start.
        self._longest = int((self._ends - self._starts).max()) if self.spans else 0
        span_bits = np.array([given[i] for i in order], dtype=np.int64)
        self._runs = ClassRuns(self._starts, self._ends, span_bits)

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def latest_end_ns(self) -> int:
        return int(self._ends.max()) if self.spans else 0

    def masks(self, lo_ns: npt.ArrayLike, hi_ns: npt.ArrayLike) -> U8:
        """Per interval (lo, hi]: the OR of the class bits of the spans overlapping it."""
        return self._runs.masks(lo_ns, hi_ns)

    def collectives(self, lo_ns: int, hi_ns: int) -> list[CollectiveSpan]:
        """The spans overlapping (lo, hi], by start."""
        first = int(np.searchsorted(self._starts, lo_ns - self._longest, side="left"))
        last = int(np.searchsorted(self._starts, hi_ns, side="left"))
        return [self.spans[i] for i in range(first, last) if self._ends[i] > lo_ns]

    def started(self, kind_bit: int, time_ns: int) -> int | None:
        """When the run of ``kind_bit`` spans in flight at ``time_ns`` began (merged), or None."""
        found = self._runs.by_bit.get(kind_bit)
        if found is None:
            return None
        starts, ends = found
        index = int(np.searchsorted(starts, time_ns, side="right")) - 1
        if index < 0 or ends[index] <= time_ns:
            return None
        return int(starts[index])


def estimate_offset_ns(
    spans: Sequence[CollectiveSpan],
    onset_ns: I64,
) -> int | None:
    """The median lag from a collective's kernel start to the first burst onset inside it.

    ``onset_ns`` are burst onsets on the counters' clock (any port of the host), sorted. A
    span counts when a burst begins after its start and before its end. A clock offset
    between the records and the counters moves every lag alike, so the median is that offset
    plus the stack's launch-to-wire time and half a sample; a site that knows the latter two
    reads the residual clock offset from it (docs/collectives.md).
    """
    if not spans or onset_ns.size == 0:
        return None
    starts = np.array([s.start_ns for s in spans], dtype=np.int64)
    ends = np.array([s.end_ns for s in spans], dtype=np.int64)
    index = np.searchsorted(onset_ns, starts, side="left")
    inside = index < onset_ns.size
    lag = np.full(starts.shape, -1, dtype=np.int64)
    lag[inside] = onset_ns[index[inside]] - starts[inside]
    usable = inside & (lag >= 0) & (lag < np.maximum(ends - starts, 1))
    if not usable.any():
        return None
    return int(np.median(lag[usable]))


# -- tables -------------------------------------------------------------------------------

# The classes a sample's time is summed under: each of the four, and "none" (under no span).
CLASS_TOTALS = ("EP", "PP", "DP", "other", "none")
# Per class set (a mask, 0-15) x CLASS_TOTALS: 1 where the set holds the class (for "none":
# where the set is empty); and x PAIRS: 1 where the set holds both classes of the pair.
_IN_CLASS = np.array(
    [[1 if m & bit else 0 for bit, _ in _NAMES] + [1 if m == 0 else 0] for m in range(16)],
    dtype=np.int64,
)
_IN_PAIR = np.array(
    [
        [1 if m & (_BITS[a] | _BITS[b]) == _BITS[a] | _BITS[b] else 0 for a, b in PAIRS]
        for m in range(16)
    ],
    dtype=np.int64,
)


def mask_sums(masks: npt.NDArray[np.integer], amounts: I64) -> I64:
    """Per class set (16 of them): the summed amounts of the samples with that set (exact:
    float64 holds integers to 2**53)."""
    if not masks.size:
        return np.zeros(16, dtype=np.int64)
    return np.bincount(masks, weights=amounts, minlength=16).astype(np.int64)


def class_totals(per_mask: I64) -> I64:
    """Sums per class set (``mask_sums``, or rows of them) as sums per CLASS_TOTALS: a sample
    under two classes counts in both."""
    result: I64 = per_mask @ _IN_CLASS
    return result


def pair_totals(per_mask: I64) -> I64:
    """Sums per class set as sums per PAIRS: the time under both classes of each pair."""
    result: I64 = per_mask @ _IN_PAIR
    return result


@dataclass(slots=True)
class MaskTotals:
    """What samples of one class set carried: time, bytes, saturation, bursts, the peak."""

    samples: int = 0
    duration_ns: int = 0
    bytes: int = 0
    burst_ns: int = 0  # inside a burst
    saturated_ns: int = 0  # at or above the saturated share
    hidden_saturated_ns: int = 0  # saturated, inside a 15 s window whose mean was under busy
    peak_bytes_per_second: float = 0.0

    def add(self, other: MaskTotals) -> None:
        self.samples += other.samples
        self.duration_ns += other.duration_ns
        self.bytes += other.bytes
        self.burst_ns += other.burst_ns
        self.saturated_ns += other.saturated_ns
        self.hidden_saturated_ns += other.hidden_saturated_ns
        self.peak_bytes_per_second = max(self.peak_bytes_per_second, other.peak_bytes_per_second)


class MaskLedger:
    """Per class set (a mask value), the totals of the samples labelled with it."""

    def __init__(self) -> None:
        self.by_mask: dict[int, MaskTotals] = {}

    def add(
        self,
        masks: U8,
        duration_ns: I64,
        sent: I64,
        in_burst: npt.NDArray[np.bool_],
        saturated: npt.NDArray[np.bool_],
        hidden: npt.NDArray[np.bool_],
    ) -> None:
        """One run of samples: their masks, durations, bytes and flags, all the same length."""
        if masks.size == 0:
            return
        rate = np.divide(sent, duration_ns / 1e9, out=np.zeros(sent.shape), where=duration_ns > 0)
        for value in np.unique(masks).tolist():
            chosen = masks == value
            held = duration_ns[chosen]
            totals = self.by_mask.setdefault(int(value), MaskTotals())
            totals.add(
                MaskTotals(
                    samples=int(chosen.sum()),
                    duration_ns=int(held.sum()),
                    bytes=int(sent[chosen].sum()),
                    burst_ns=int(held[in_burst[chosen]].sum()),
                    saturated_ns=int(held[saturated[chosen]].sum()),
                    hidden_saturated_ns=int(held[hidden[chosen]].sum()),
                    peak_bytes_per_second=float(rate[chosen].max()),
                )
            )

    def merge(self, other: MaskLedger) -> None:
        for value, totals in other.by_mask.items():
            self.by_mask.setdefault(value, MaskTotals()).add(totals)

    def total(self, wanted: int) -> MaskTotals:
        """Over every class set holding all of ``wanted``'s bits (0: every sample)."""
        out = MaskTotals()
        for value, totals in self.by_mask.items():
            if value & wanted == wanted:
                out.add(totals)
        return out


# -- collisions and two priorities ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CollisionRun:
    """Consecutive saturated collision samples of one port direction with the same class set."""

    start_ns: int
    end_ns: int
    mask: int
    saturated_ns: int
    urgent: str | None  # the class first in Hermod's order; None: a tie (EP with PP)
    first: str | None  # the class whose collective started moving data first; None: unknown
    in_order: bool | None  # the urgent class went first; None when there is no urgent one


def collision_runs(
    lo_ns: I64,
    hi_ns: I64,
    masks: U8,
    saturated: npt.NDArray[np.bool_],
    index: SpanIndex,
    position: I64 | None = None,
) -> list[CollisionRun]:
    """The runs of saturated samples under two or more of Hermod's types, in time order.

    ``position``: each sample's place in its series, when these are not all of them (a run
    breaks where positions are not consecutive); by default the samples are consecutive.
    """
    hermod = masks & HERMOD
    colliding = saturated & (np.array([hermod_kinds(int(m)) for m in range(16)])[hermod] >= 2)
    runs: list[CollisionRun] = []
    chosen = np.flatnonzero(colliding)
    if chosen.size == 0:
        return runs
    # A run breaks where samples are not consecutive or the class set changes.
    place = chosen if position is None else np.asarray(position)[chosen]
    breaks = np.flatnonzero((np.diff(place) != 1) | (np.diff(hermod[chosen]) != 0)) + 1
    for group in np.split(chosen, breaks):
        mask = int(hermod[group[0]])
        start, end = int(lo_ns[group[0]]), int(hi_ns[group[-1]])
        runs.append(_run(start, end, mask, int((hi_ns[group] - lo_ns[group]).sum()), index))
    return runs


def urgent_class(mask: int) -> str | None:
    """The class Hermod's key serves first among a mask's; None when the first rank ties."""
    kinds = [k for k in class_names(mask & HERMOD)]
    best = min(TYPE_RANK[k] for k in kinds)
    firsts = [k for k in kinds if TYPE_RANK[k] == best]
    return firsts[0] if len(firsts) == 1 else None


def _run(start: int, end: int, mask: int, saturated_ns: int, index: SpanIndex) -> CollisionRun:
    urgent = urgent_class(mask)
    # Each class's merged run of spans in flight at the collision's first sample: the one
    # that began earliest went first.
    began = {}
    for name in class_names(mask & HERMOD):
        when = index.started(_BITS[name], end - 1)
        if when is not None:
            began[name] = when
    first = min(began, key=lambda k: (began[k], TYPE_RANK[k])) if began else None
    in_order = (
        None
        if urgent is None or first is None
        else first == urgent or (TYPE_RANK[first] == TYPE_RANK[urgent])
    )
    return CollisionRun(start, end, mask, saturated_ns, urgent, first, in_order)


# A mapping of Hermod's types into two lossless priorities: the high set (the rest is low).
TWO_PRIORITY_MAPPINGS: tuple[frozenset[str], ...] = (
    frozenset({"EP", "PP"}),
    frozenset({"EP"}),
    frozenset({"PP"}),
    frozenset({"DP"}),
    frozenset({"EP", "DP"}),
    frozenset({"PP", "DP"}),
)
ORDERED, UNRESOLVED, INVERTED, INDIFFERENT = "ordered", "unresolved", "inverted", "indifferent"


def judge(mapping: frozenset[str], mask: int) -> str:
    """What two priorities with ``mapping`` high do to a collision of ``mask``'s classes.

    ORDERED: every class Hermod's key serves first is high and every other is low.
    INVERTED: a class the key serves later is high while one it serves first is low.
    UNRESOLVED: otherwise (a first and a later class share a priority and share the link).
    INDIFFERENT: the key serves every class present alike (EP with PP, micro-batch unknown).
    """
    kinds = class_names(mask & HERMOD)
    best = min(TYPE_RANK[k] for k in kinds)
    first = {k for k in kinds if TYPE_RANK[k] == best}
    later = set(kinds) - first
    if not later:
        return INDIFFERENT
    if any(k in mapping for k in later) and any(k not in mapping for k in first):
        return INVERTED
    if first <= mapping and not (later & mapping):
        return ORDERED
    return UNRESOLVED


def mapping_name(mapping: frozenset[str]) -> str:
    high = sorted(mapping, key=lambda k: (TYPE_RANK[k], k))
    low = sorted(set(TYPE_RANK) - mapping, key=lambda k: (TYPE_RANK[k], k))
    return "{" + ",".join(high) + "} high / {" + ",".join(low) + "} low"


@dataclass(frozen=True, slots=True)
class PairRow:
    """One pair of classes: saturated time under both, and its share of saturated time."""

    pair: tuple[str, str]
    saturated_ns: int
    share_of_saturated: float | None
    runs: int
    in_order: int
    out_of_order: int
    ties: int


@dataclass(frozen=True, slots=True)
class MappingRow:
    """One two-priority mapping: saturated collision time by what it does to the key's order."""

    mapping: frozenset[str]
    ordered_ns: int
    unresolved_ns: int
    inverted_ns: int
    indifferent_ns: int

    @property
    def name(self) -> str:
        return mapping_name(self.mapping)


def pair_rows(runs: Sequence[CollisionRun], saturated_ns: int) -> list[PairRow]:
    """Per pair of classes: the collision runs holding both, their time and Hermod's order."""
    rows = []
    for pair in PAIRS:
        bits = _BITS[pair[0]] | _BITS[pair[1]]
        chosen = [r for r in runs if r.mask & bits == bits]
        time = sum(r.saturated_ns for r in chosen)
        rows.append(
            PairRow(
                pair=pair,
                saturated_ns=time,
                share_of_saturated=time / saturated_ns if saturated_ns else None,
                runs=len(chosen),
                in_order=sum(r.in_order is True for r in chosen),
                out_of_order=sum(r.in_order is False for r in chosen),
                ties=sum(r.in_order is None for r in chosen),
            )
        )
    return rows


def mapping_rows(runs: Sequence[CollisionRun]) -> list[MappingRow]:
    """Per two-priority mapping: how much collision time it orders as Hermod's key wants."""
    rows = []
    for mapping in TWO_PRIORITY_MAPPINGS:
        spent = dict.fromkeys((ORDERED, UNRESOLVED, INVERTED, INDIFFERENT), 0)
        for run in runs:
            spent[judge(mapping, run.mask)] += run.saturated_ns
        rows.append(
            MappingRow(
                mapping, spent[ORDERED], spent[UNRESOLVED], spent[INVERTED], spent[INDIFFERENT]
            )
        )
    return rows


def all_masks() -> list[int]:
    """Every class set, in a fixed order (for tables that list them)."""
    return [
        sum(bits)
        for size in range(1, len(_NAMES) + 1)
        for bits in itertools.combinations([b for b, _ in _NAMES], size)
    ]
