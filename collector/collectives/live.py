"""The running agent's collective labels: spans of the last seconds, per-class node totals.

Records arrive late. The Inspector writes a collective once it completed, at its dump
thread's next pass (``NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS``), and the tail sees
the write at its next poll. So nothing is labelled as it is measured: saturated samples and
closed bursts wait here until ``label_delay_ns`` has passed since they ended, and are then
labelled with the spans known by then (detectors/collective_join.ClassRuns: a sample's class
set is the OR of the classes of the spans overlapping it). A collective still running when
its sample is labelled, or dumped later than the delay, is missed: that sample counts as
``none``. The default, 3 s, covers a dump interval of up to 0.75 s, the tail's 2 s poll and
the pipeline's drain; a longer dump interval needs a longer delay (``[collectives]
label_delay``), and every burst event waits that long too.

Totals are per node and per class, never per communicator: a sample (and a burst's bytes)
counts once in each class it runs under, in ``none`` when no span covers it, and in a pair's
collision time when it runs under both classes of the pair. Hidden saturation is the
analyzer's own decision (a saturated sample inside a 15 s window whose mean stayed under
busy): each closed coarse window says whether it was quiet, and its labelled saturated time
goes to the hidden totals of its classes once both are known.

Memory is bounded: spans are kept as three integers each for ``horizon_ns`` (10 s, at most
twice that: SpanStore.forget) and forgotten after, samples and bursts for the label delay.
Spans of one class that overlap are merged before labelling (detectors/collective_join.
ClassRuns): the class sets that come out are the same, and the many ranks of one host that
record the same collective cost one run.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from burstscope.collector.collectives.join import INSPECTOR
from burstscope.collector.collectives.nccl_inspector import (
    MALFORMED,
    OVERSIZED,
    TRUNCATED,
    SpanKind,
    Spans,
)
from burstscope.collector.collectives.tail import OTHER_HOST, DumpDirectoryTail
from burstscope.collector.threads import name_os_thread
from burstscope.detectors.analyzer import Chunk
from burstscope.detectors.arrays import I64
from burstscope.detectors.collective_classes import (
    Classification,
    Communication,
    canonical_collective,
    classify_one,
    largest_group,
)
from burstscope.detectors.collective_join import (
    CLASS_TOTALS,
    DP,
    EP,
    OTHER,
    PAIRS,
    PP,
    ClassRuns,
    class_bit,
    class_names,
    class_totals,
    mask_sums,
    pair_totals,
)
from burstscope.detectors.config import Thresholds, scale_key

_LOG = logging.getLogger(__name__)
SECOND_NS = 1_000_000_000
DEFAULT_LABEL_DELAY_NS = 3 * SECOND_NS
# Spans are kept this long: labels settle 2 s after the fact, and a burst's tag needs the
# spans of its whole length (a burst longer than this loses its earliest collectives).
DEFAULT_HORIZON_NS = 10 * SECOND_NS
NONE = "none"  # no span covers the sample
CLASSES = CLASS_TOTALS  # ("EP", "PP", "DP", "other", NONE)
_CLASS_BITS = (EP, PP, DP, OTHER)
_BIT_OF = dict(zip(CLASSES, _CLASS_BITS, strict=False))
PAIR_NAMES = tuple(f"{a}-{b}" for a, b in PAIRS)
_EMPTY = np.empty(0, dtype=np.int64)
# What a record can be skipped for here, beyond the reader's skips: no time of its own (a
# plain dump, without NCCL_INSPECTOR_DUMP_VERBOSE=1), a stop before its start.
UNPLACED = "unplaced"
BAD_TIMES = "bad_span"
SKIP_KINDS = (MALFORMED, OVERSIZED, TRUNCATED, OTHER_HOST, UNPLACED, BAD_TIMES)
# How often the tail reads its files. Each poll has a cost of its own beside the records'
# (a thread that wakes from idle runs cold, a directory scan, a file opened, the records
# added to the store: 0.4 to 0.5 ms a poll in the running agent at 1,000 records a second,
# against 0.7 for reading those records): every 2 s. The label delay covers it.
POLL_SECONDS = 2.0
# How often the labels settle. Their totals are counters, scraped every 15 s, and a settle's
# cost is mostly its own: in the running agent, 0.73 ms to label a second's samples, 1.47 ms
# for five seconds' (docs/performance.md), so every 5 s costs 0.3 ms a second, not 0.73. A
# settle follows a poll, so at a 2 s poll the labels settle every third one: every 6 s.
SETTLE_SECONDS = 5.0
_INITIAL_SPANS = 4096
# Distinct communications kept for the largest-group inference; a job that builds
# communicators without end (a restart loop) starts the inference afresh past this.
_MAX_COMMUNICATIONS = 4096

_OFFSET = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)")
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": SECOND_NS}
MAX_OFFSET_NS = 3600 * SECOND_NS

Key = tuple[str | None, str, str]  # (kind, canonical collective, rule)
DirectionKey = tuple[str, int, str]  # (device, port, direction)


@dataclass(frozen=True, slots=True)
class CollectiveTag:
    """What a burst ran under: its classes, the collectives and the rules that classed them."""

    classes: tuple[str, ...] = ()
    collectives: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()

    def payload(self) -> dict[str, Any]:
        """The ``collectives`` field of a burst event: {} when no record covers the burst."""
        if not self.classes:
            return {}
        return {
            "classes": list(self.classes),
            "collectives": list(self.collectives),
            "rules": list(self.rules),
        }

    def union(self, other: CollectiveTag) -> CollectiveTag:
        """Both tags' entries, each once (a merged burst, a window's summary)."""
        mask = _mask_of(self.classes) | _mask_of(other.classes)
        return CollectiveTag(
            class_names(mask),
            tuple(dict.fromkeys((*self.collectives, *other.collectives))),
            tuple(dict.fromkeys((*self.rules, *other.rules))),
        )


def _mask_of(classes: Sequence[str]) -> int:
    return sum(_BIT_OF[name] for name in classes)


def parse_clock_offset(text: str) -> int:
    """A signed duration such as ``-250us``, ``1.5ms`` or ``0``, as nanoseconds; ValueError
    for anything else or beyond an hour (a clock that far off is not one to correct)."""
    if text.strip() == "0":
        return 0
    found = _OFFSET.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a duration such as 250us, -1.5ms or 0")
    offset = round(float(found.group(1)) * _UNIT_NS[found.group(2)])
    if abs(offset) > MAX_OFFSET_NS:
        raise ValueError(f"{text!r} is more than an hour")
    return offset


class SpanStore:
    """This host's spans of the last ``horizon_ns``: start, end and a key per record."""

    def __init__(
        self,
        mapping: Mapping[str, str] | None = None,
        offset_ns: int = 0,
        horizon_ns: int = DEFAULT_HORIZON_NS,
    ) -> None:
        self.mapping = dict(mapping) if mapping else None
        self.offset_ns = offset_ns
        self.horizon_ns = horizon_ns
        self.keys: list[Key] = []  # by key id
        self._key_ids: dict[Key, int] = {}
        self._classes: dict[tuple[Any, ...], int] = {}  # communication -> key id
        self._communications: dict[tuple[Any, ...], Communication] = {}
        self._largest: tuple[int, int | None] | None = None
        # Every span kept, sorted by start, in columns lo..hi of a buffer with room to grow:
        # a poll's spans go after them (they mostly start after those kept: only the new
        # ones are copied, and those kept that start after the earliest new one re-sorted);
        # a forget moves lo past the old ones, and the buffer is compacted when full. Every
        # write and every read of it holds the lock (readers copy the few columns they use).
        self._buffer = np.empty((3, _INITIAL_SPANS), dtype=np.int64)  # start, end, key id
        self._lo = self._hi = 0
        self._longest = 0  # the longest span kept (bounds how far back an overlap starts)
        self._forgotten_at = 0
        # (communicator id, collective) -> key id: the lookup of all but a record's first.
        self._by_identity: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self.placed = 0
        self.skipped: dict[str, int] = {UNPLACED: 0, BAD_TIMES: 0}

    def add(self, spans: Spans) -> None:
        """Records as spans (verbose ones; the others counted as skipped)."""
        start, stop, kind = spans.start_us, spans.stop_us, spans.kind  # 0: none
        placed = (start != 0) & (stop != 0) & (stop >= start)
        count = int(np.count_nonzero(placed))
        if count < len(spans):
            unplaced = int(np.count_nonzero((start == 0) & (stop == 0)))
            self.skipped[UNPLACED] += unplaced
            self.skipped[BAD_TIMES] += len(spans) - unplaced - count
            start, stop, kind = start[placed], stop[placed], kind[placed]
        if not count:
            return
        self.placed += count
        new = np.empty((3, count), dtype=np.int64)
        np.multiply(start, 1000, out=new[0])
        # A stop in the same microsecond as the start still covers it (join.py's rule).
        np.maximum(stop, start + 1, out=new[1])
        new[1] *= 1000
        new[:2] += self.offset_ns
        new[2] = self._key_ids_of(spans.kinds, kind)
        new = new[:, np.argsort(new[0], kind="stable")]
        with self._lock:
            self._room(count)
            kept = self._buffer[:, self._lo : self._hi]
            # Only those kept that start after the earliest new start can be out of order.
            first = self._lo + int(np.searchsorted(kept[0], int(new[0, 0]), side="right"))
            if first < self._hi:
                merged = np.concatenate((self._buffer[:, first : self._hi], new), axis=1)
                order = np.argsort(merged[0], kind="stable")
                self._buffer[:, first : self._hi + count] = merged[:, order]
            else:
                self._buffer[:, self._hi : self._hi + count] = new
            self._hi += count
            self._longest = max(self._longest, int((new[1] - new[0]).max()))

    def _room(self, count: int) -> None:
        """Room for ``count`` more after hi: the kept spans moved to the buffer's start, in
        a larger buffer if they fill half of it (under the lock)."""
        if self._hi + count <= self._buffer.shape[1]:
            return
        kept = self._hi - self._lo
        size = self._buffer.shape[1]
        while kept + count > size // 2:
            size *= 2
        target = self._buffer if size == self._buffer.shape[1] else np.empty((3, size), np.int64)
        target[:, :kept] = self._buffer[:, self._lo : self._hi]  # copy: may overlap in place
        self._buffer, self._lo, self._hi = target, 0, kept

    def kept(self) -> I64:
        """The spans kept (rows start, end, key id; sorted by start), a copy."""
        with self._lock:
            return self._buffer[:, self._lo : self._hi].copy()

    def forget(self, now_ns: int) -> None:
        """Drop the spans that ended more than the horizon ago (at most once a second)."""
        if now_ns - self._forgotten_at < SECOND_NS:
            return
        self._forgotten_at = now_ns
        oldest = now_ns - self.horizon_ns
        with self._lock:
            spans = self._buffer[:, self._lo : self._hi]
            if self._longest <= self.horizon_ns:
                # Sorted by start, so a span starting more than the longest before ``oldest``
                # ended before it: those are a prefix, one binary search (an ended span that
                # started later stays until its start is that old: memory for at most twice
                # the horizon).
                self._lo += int(np.searchsorted(spans[0], oldest - self._longest, side="left"))
            else:  # one very long span must not keep every other span as long
                keep = spans[:, spans[1] >= oldest]
                self._buffer[:, : keep.shape[1]] = keep
                self._lo, self._hi = 0, keep.shape[1]
            lengths = self._buffer[1, self._lo : self._hi] - self._buffer[0, self._lo : self._hi]
            self._longest = int(lengths.max()) if lengths.size else 0

    def _key_ids_of(self, kinds: Sequence[SpanKind], kind: I64) -> I64:
        """Each record's key id: a lookup per kind once every kind is classified."""
        found = [self._by_identity.get((k.communicator_id, k.collective), -1) for k in kinds]
        ids = np.array(found, dtype=np.int64)[kind]
        if not (ids < 0).any():
            return ids
        # A communication not seen yet: record by record, as a new largest group
        # reclassifies the records after it.
        one_by_one = []
        key_ids = self._by_identity
        for index in kind.tolist():
            record = kinds[index]
            key_id = key_ids.get((record.communicator_id, record.collective))
            one_by_one.append(self._key_id(record) if key_id is None else key_id)
        return np.array(one_by_one, dtype=np.int64)

    def _key_id(self, record: SpanKind) -> int:
        names = (record.communicator_name,) if record.communicator_name else ()
        communication = Communication(
            record.collective, record.communicator_id, names, record.n_ranks, record.nnodes
        )
        identity = (
            communication.collective,
            communication.communicator,
            communication.group_names,
            communication.n_ranks,
            communication.nnodes,
        )
        found = self._classes.get(identity)
        if found is not None:
            self._by_identity[(record.communicator_id, record.collective)] = found
            return found
        # The largest group is inferred over every communication seen so far; a new largest
        # one reclassifies what follows (classify's rule 3, taken over the live records).
        if len(self._communications) >= _MAX_COMMUNICATIONS:
            self._communications.clear()
        self._communications[identity] = communication
        largest = largest_group(self._communications.values())
        if largest != self._largest:
            self._largest = largest
            self._classes.clear()
            self._by_identity.clear()
        decided: Classification = classify_one(communication, self.mapping, largest)
        name = canonical_collective(record.collective) or record.collective
        key = (decided.kind, name, decided.rule)
        key_id = self._key_ids.get(key)
        if key_id is None:
            key_id = self._key_ids[key] = len(self.keys)
            self.keys.append(key)
        self._classes[identity] = key_id
        # A communicator's id and collective name stand for the whole identity from now on
        # (the same communicator does not change its size or name): one lookup per record.
        self._by_identity[(record.communicator_id, record.collective)] = key_id
        return key_id

    def _overlapping(self, lo_ns: int, hi_ns: int) -> tuple[I64, I64, I64]:
        with self._lock:
            spans = self._buffer[:, self._lo : self._hi]
            # Those overlapping start before hi and at most the longest span before lo: a
            # binary search each, then only those few are compared (a copy: the buffer is
            # written in place once the lock is released).
            first = int(np.searchsorted(spans[0], lo_ns - self._longest, side="left"))
            last = int(np.searchsorted(spans[0], hi_ns, side="left"))
            near = spans[:, first:last]
            starts, ends, ids = near[:, near[1] > lo_ns]
        return starts, ends, ids

    def runs(self, lo_ns: int, hi_ns: int) -> ClassRuns:
        """The spans overlapping (lo, hi] by class, merged: what samples are labelled with.

        Each class's union is what a SpanIndex of these spans (those of one key merged
        first) holds: a union of unions is the union.
        """
        starts, ends, ids = self._overlapping(lo_ns, hi_ns)
        bits = np.array([class_bit(kind) for kind, _, _ in self.keys], dtype=np.int64)
        return ClassRuns(starts, ends, bits[ids] if ids.size else _EMPTY)

    def tag(self, lo_ns: int, hi_ns: int) -> CollectiveTag:
        """The classes, collectives and rules of the spans overlapping (lo, hi]."""
        _, _, ids = self._overlapping(lo_ns, hi_ns)
        keys = [self.keys[i] for i in np.unique(ids).tolist()]
        keys.sort(key=lambda k: (class_bit(k[0]), k[1], k[2]))
        mask = 0
        for kind, _, _ in keys:
            mask |= class_bit(kind)
        return CollectiveTag(
            class_names(mask),
            tuple(dict.fromkeys(k[1] for k in keys)),
            tuple(dict.fromkeys(k[2] for k in keys)),
        )


@dataclass(frozen=True, slots=True)
class CollectiveFigures:
    """The node's totals at one moment, for the exporter; every class and pair present."""

    saturated_seconds: dict[str, float]  # by class (CLASSES)
    hidden_saturated_seconds: dict[str, float]
    burst_bytes: dict[str, int]
    collision_saturated_seconds: dict[str, float]  # by pair (PAIR_NAMES)
    records: dict[str, int]  # by source
    skipped: dict[str, int]  # by kind
    files: int
    # CPU time the labels used: the tail's thread and the drain's keeping for them.
    cpu_seconds: float = 0.0


class _Direction:
    """One port direction's coarse windows: labelled saturated time, and whether quiet."""

    __slots__ = ("decisions", "last_ns", "number", "windows")

    def __init__(self, number: int) -> None:
        self.number = number  # its place among the directions, in the shared queues
        self.decisions: dict[int, bool] = {}  # closed coarse window end -> was it quiet
        self.windows: dict[int, list[int]] = {}  # end -> ns by class (CLASSES)
        self.last_ns: int | None = None


class CollectiveLabels:
    """Per-class totals of the saturated samples, hidden saturation and burst bytes.

    ``on_chunk`` runs in the pipeline thread (each port direction's drained chunk: it only
    keeps what will need a label); ``settle`` in the tail's thread labels what is old enough.
    """

    def __init__(self, store: SpanStore, label_delay_ns: int = DEFAULT_LABEL_DELAY_NS) -> None:
        self.store = store
        self.label_delay_ns = label_delay_ns
        self._lock = threading.Lock()
        self._directions: dict[DirectionKey, _Direction] = {}
        # Every direction's saturated samples (lo, hi], their direction's number, and closed
        # bursts (start, end, bytes), waiting for their labels.
        self._low: list[I64] = []
        self._high: list[I64] = []
        self._owner: list[I64] = []
        self._bursts: list[tuple[I64, I64, I64]] = []
        self._saturated = np.zeros(len(CLASSES), dtype=np.int64)
        self._hidden = np.zeros(len(CLASSES), dtype=np.int64)
        self._bytes = np.zeros(len(CLASSES), dtype=np.int64)
        self._collisions = np.zeros(len(PAIRS), dtype=np.int64)
        self._coarse_ns = Thresholds().coarse_window_ns
        self._keeping_ns = 0  # thread CPU time on_chunk took, in the pipeline's thread

    def on_chunk(self, key: DirectionKey, chunk: Chunk, thresholds: Thresholds) -> None:
        """Keep a drained chunk's saturated samples, closed bursts and quiet windows."""
        stamps = chunk.timestamp_ns
        if not stamps.size:
            return
        began = time.thread_time_ns()
        with self._lock:
            self._coarse_ns = thresholds.coarse_window_ns
            waiting = self._directions.get(key)
            if waiting is None:
                waiting = self._directions[key] = _Direction(len(self._directions))
            saturated = chunk.saturated
            if saturated.size:
                high = stamps[saturated]
                # A sample's interval starts where the one before it ended.
                before = stamps[np.maximum(saturated - 1, 0)]
                first = waiting.last_ns if waiting.last_ns is not None else int(high[0])
                self._low.append(np.where(saturated > 0, before, first))
                self._high.append(high)
                self._owner.append(np.full(high.size, waiting.number, dtype=np.int64))
            waiting.last_ns = int(stamps[-1])
            bursts = chunk.bursts
            if len(bursts.start_ns):
                self._bursts.append(
                    (bursts.start_ns.copy(), bursts.end_ns.copy(), bursts.bytes.copy())
                )
            windows = chunk.windows.get(scale_key(thresholds.coarse_window_ns))
            if windows is not None:
                quiet = (windows.utilization < thresholds.busy).tolist()
                waiting.decisions.update(zip(windows.end_ns.tolist(), quiet, strict=True))
            self._keeping_ns += time.thread_time_ns() - began

    def settle(self, now_ns: int) -> None:
        """Label every sample and burst that ended ``label_delay_ns`` before ``now_ns``.

        The waiting samples of every direction are one queue: a settle is a few array
        operations whatever the number of ports.
        """
        cutoff = now_ns - self.label_delay_ns
        with self._lock:
            low, high, owner = (
                np.concatenate(q) if q else _EMPTY for q in (self._low, self._high, self._owner)
            )
            bursts = _columns(self._bursts)
            self._low, self._high, self._owner, self._bursts = [], [], [], []
            directions = list(self._directions.values())
        ready = high <= cutoff
        done = bursts[1] <= cutoff
        firsts = [int(low[ready].min())] if ready.any() else []
        firsts += [int(bursts[0][done].min())] if done.any() else []
        index = self.store.runs(min(firsts), cutoff) if firsts else None
        with self._lock:
            if index is not None:
                self._label(directions, low[ready], high[ready], owner[ready], index)
                if done.any():
                    masks = index.masks(bursts[0][done], bursts[1][done])
                    self._bytes += class_totals(mask_sums(masks, bursts[2][done]))
            if not ready.all():  # before what on_chunk added meanwhile: time order
                self._low.insert(0, low[~ready])
                self._high.insert(0, high[~ready])
                self._owner.insert(0, owner[~ready])
            if not done.all():
                self._bursts.insert(0, (bursts[0][~done], bursts[1][~done], bursts[2][~done]))
            for waiting in directions:
                self._settle_windows(waiting, cutoff)
        self.store.forget(now_ns)

    def _label(
        self, directions: list[_Direction], lo: I64, hi: I64, owner: I64, index: ClassRuns
    ) -> None:
        """Ready samples of every direction, labelled: per class, per pair, per window."""
        if not lo.size:
            return
        masks = index.masks(lo, hi).astype(np.int64)
        held = hi - lo
        total = mask_sums(masks, held)
        self._saturated += class_totals(total)
        self._collisions += pair_totals(total)
        # By direction and coarse window, for the hidden totals once the window's mean is
        # known; a sample ending on a boundary belongs to the window that ends there.
        length = self._coarse_ns
        window = (hi - 1) // length + 1  # the window's end, in windows
        keys, place = np.unique(window * len(directions) + owner, return_inverse=True)
        sums = np.bincount(place * 16 + masks, weights=held, minlength=keys.size * 16)
        per_key = class_totals(sums.astype(np.int64).reshape(keys.size, 16))
        for key, row in zip(keys.tolist(), per_key.tolist(), strict=True):
            end, number = divmod(key, len(directions))
            windows = directions[number].windows
            held_before = windows.get(end * length)
            windows[end * length] = (
                row
                if held_before is None
                else [a + b for a, b in zip(held_before, row, strict=True)]
            )

    def _settle_windows(self, waiting: _Direction, cutoff: int) -> None:
        """Windows whose samples are all labelled and whose mean is known: quiet ones add
        their labelled saturated time to the hidden totals."""
        for end in [e for e in waiting.windows if e <= cutoff and e in waiting.decisions]:
            sums = waiting.windows.pop(end)
            if waiting.decisions[end]:
                self._hidden += sums
        # A window closes within a drain of its end: older ones are history.
        stale = cutoff - 4 * self._coarse_ns
        for held in (waiting.windows, waiting.decisions):
            for end in [e for e in held if e < stale]:
                del held[end]

    def tag(self, start_ns: int, end_ns: int) -> CollectiveTag:
        """The tag of a burst from ``start_ns`` to ``end_ns`` (call it once the delay passed)."""
        return self.store.tag(start_ns, end_ns)

    def figures(
        self, records: int, skipped: Mapping[str, int], files: int, thread_cpu_ns: int = 0
    ) -> CollectiveFigures:
        """The totals now; ``thread_cpu_ns``: the tail's thread's CPU time, to which the
        drain's keeping is added."""
        with self._lock:
            saturated, hidden = self._saturated.tolist(), self._hidden.tolist()
            burst_bytes, collisions = self._bytes.tolist(), self._collisions.tolist()
            cpu_ns = thread_cpu_ns + self._keeping_ns
        return CollectiveFigures(
            saturated_seconds={c: v / 1e9 for c, v in zip(CLASSES, saturated, strict=True)},
            hidden_saturated_seconds={c: v / 1e9 for c, v in zip(CLASSES, hidden, strict=True)},
            burst_bytes=dict(zip(CLASSES, burst_bytes, strict=True)),
            collision_saturated_seconds={
                p: v / 1e9 for p, v in zip(PAIR_NAMES, collisions, strict=True)
            },
            records={INSPECTOR: records},
            skipped=dict(skipped),
            files=files,
            cpu_seconds=cpu_ns / 1e9,
        )


def _columns(parts: list[tuple[I64, I64, I64]]) -> tuple[I64, I64, I64]:
    if not parts:
        return _EMPTY, _EMPTY, _EMPTY
    start, end, size = (np.concatenate(column) for column in zip(*parts, strict=True))
    return start, end, size


class CollectiveTail:
    """The thread that tails the dump directories, keeps their spans and settles the labels.

    It reads once a poll (a second), so a record is kept within a poll of its dump, and
    settles once every ``settle_seconds``.
    """

    def __init__(
        self,
        tail: DumpDirectoryTail,
        store: SpanStore,
        labels: CollectiveLabels,
        poll_seconds: float = POLL_SECONDS,
        settle_seconds: float = SETTLE_SECONDS,
    ) -> None:
        self.tail = tail
        self.store = store
        self.labels = labels
        self.poll_seconds = poll_seconds
        self.settle_seconds = settle_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._settled_at = time.monotonic()
        self._cpu_ns = 0  # the thread's CPU time as of its last poll (read once it ended)

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="burstscope-collectives", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        self.tail.close()

    def _run(self) -> None:
        name_os_thread()
        while not self._stop.wait(self.poll_seconds):
            try:
                self.store.add(self.tail.poll())
                if time.monotonic() - self._settled_at >= self.settle_seconds:
                    self._settled_at = time.monotonic()
                    self.labels.settle(time.time_ns())
            except Exception:  # a bug here must not end the labels for the run
                _LOG.exception("collective labels: a poll failed")
            self._cpu_ns = time.thread_time_ns()

    def figures(self) -> CollectiveFigures:
        skipped = dict.fromkeys(SKIP_KINDS, 0)
        for kind, count in (*self.tail.skipped.items(), *self.store.skipped.items()):
            skipped[kind] = skipped.get(kind, 0) + count
        return self.labels.figures(self.tail.records, skipped, self.tail.files, self._thread_cpu())

    def _thread_cpu(self) -> int:
        """The thread's CPU time now, read from its clock (POSIX thread CPU-time clocks)."""
        thread = self._thread
        if thread is not None and thread.ident is not None:
            try:
                return time.clock_gettime_ns(time.pthread_getcpuclockid(thread.ident))
            except OSError:  # it ended meanwhile
                pass
        return self._cpu_ns
