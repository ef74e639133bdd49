"""The per-port rate policy for burst events: merge close bursts, summarise above a rate.

A saturated link can close hundreds of bursts a second; one MQTT message each would flood
the broker and every subscriber. The policy, per (device, port, direction):

1. **Merge.** A burst that starts less than ``merge_gap_ns`` after the previous one ended
   is folded into it: start of the first, end of the last, bytes summed, the higher peak,
   and the duration-weighted mean utilization of the parts (the gaps are not counted).
   ``merged`` says how many detector bursts the event stands for. A burst is held until
   ``merge_gap_ns + flush_delay_ns`` after its end (wall clock), because the pipeline
   hands bursts over up to a drain (100 ms) late. A merged burst names the jobs of the
   part that ends last: the table in force when it ended; and the collectives of all its
   parts (collector.collectives.live: bursts come to the policy once they are labelled).
2. **Budget.** Time is cut into windows of ``window_ns`` (1 s, or 1/rate when the rate is
   below 1 per second), by each event's end. The first ``limit`` events of a window are
   published as bursts; the rest are counted into one ``summary`` for that window
   (bursts, bytes, bytes and bursts per second, peak, first start and last end), published
   once the window is over, naming every job its bursts were under. So a port direction
   sends at most ``limit + 1`` messages per window, whatever the traffic.

``apply_policy`` is a pure function: state in, state and outgoing events out; "now" is
an argument, never a clock read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from burstscope.collector.mqtt.jobs import JobTag, union

if TYPE_CHECKING:
    from burstscope.collector.collectives.live import CollectiveTag

SECOND_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class BurstRecord:
    """One burst of one port direction (times are wall-clock ns)."""

    start_ns: int
    end_ns: int
    bytes: int
    peak_utilization: float
    mean_utilization: float
    merged: int = 1  # detector bursts this record stands for
    jobs: tuple[JobTag, ...] = ()  # the jobs holding the port when it ended
    # The collectives running during it; None: the agent tails no collective records.
    collectives: CollectiveTag | None = None

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True, slots=True)
class BurstSummary:
    """The bursts of one window beyond the budget, counted instead of sent one by one."""

    window_start_ns: int
    window_end_ns: int
    bursts: int  # detector bursts, merged ones counted individually
    bytes: int
    peak_utilization: float
    first_start_ns: int
    last_end_ns: int
    jobs: tuple[JobTag, ...] = ()  # every job the counted bursts were under
    collectives: CollectiveTag | None = None  # every collective they ran under

    @property
    def window_seconds(self) -> float:
        return (self.window_end_ns - self.window_start_ns) / 1e9

    @property
    def bursts_per_second(self) -> float:
        return self.bursts / self.window_seconds

    @property
    def bytes_per_second(self) -> float:
        return self.bytes / self.window_seconds


Outgoing = BurstRecord | BurstSummary


@dataclass(frozen=True, slots=True)
class RatePolicy:
    merge_gap_ns: int = 5_000_000
    max_events_per_second: float = 10.0
    flush_delay_ns: int = 250_000_000  # pipeline drain period plus slack

    def __post_init__(self) -> None:
        if self.merge_gap_ns < 0 or self.flush_delay_ns < 0:
            raise ValueError("merge gap and flush delay must not be negative")
        if not self.max_events_per_second > 0:
            raise ValueError("max_events_per_second must be positive")

    @property
    def window_ns(self) -> int:
        return max(SECOND_NS, math.ceil(SECOND_NS / self.max_events_per_second))

    @property
    def limit(self) -> int:
        """Burst events allowed per window."""
        return max(1, math.floor(self.max_events_per_second * self.window_ns / SECOND_NS))


@dataclass(frozen=True, slots=True)
class PolicyState:
    """Where one port direction stands: a burst waiting for merges, the current window."""

    pending: BurstRecord | None = None
    window: int | None = None  # index: end_ns // window_ns
    sent: int = 0  # burst events sent in the current window
    summary: BurstSummary | None = None  # what the current window held back so far


def merge(first: BurstRecord, second: BurstRecord) -> BurstRecord:
    first_ns, second_ns = first.duration_ns, second.duration_ns
    total_ns = first_ns + second_ns
    mean = (
        (first.mean_utilization * first_ns + second.mean_utilization * second_ns) / total_ns
        if total_ns > 0
        else max(first.mean_utilization, second.mean_utilization)
    )
    return BurstRecord(
        start_ns=first.start_ns,
        end_ns=max(first.end_ns, second.end_ns),
        bytes=first.bytes + second.bytes,
        peak_utilization=max(first.peak_utilization, second.peak_utilization),
        mean_utilization=mean,
        merged=first.merged + second.merged,
        jobs=second.jobs if second.end_ns >= first.end_ns else first.jobs,
        collectives=_collectives(first.collectives, second.collectives),
    )


def _collectives(first: CollectiveTag | None, second: CollectiveTag | None) -> CollectiveTag | None:
    if first is None or second is None:
        return first if second is None else second
    return first.union(second)


def _count(
    policy: RatePolicy, window: int, summary: BurstSummary | None, record: BurstRecord
) -> BurstSummary:
    if summary is None:
        return BurstSummary(
            window_start_ns=window * policy.window_ns,
            window_end_ns=(window + 1) * policy.window_ns,
            bursts=record.merged,
            bytes=record.bytes,
            peak_utilization=record.peak_utilization,
            first_start_ns=record.start_ns,
            last_end_ns=record.end_ns,
            jobs=record.jobs,
            collectives=record.collectives,
        )
    return replace(
        summary,
        bursts=summary.bursts + record.merged,
        bytes=summary.bytes + record.bytes,
        peak_utilization=max(summary.peak_utilization, record.peak_utilization),
        last_end_ns=max(summary.last_end_ns, record.end_ns),
        jobs=union(summary.jobs, record.jobs),
        collectives=_collectives(summary.collectives, record.collectives),
    )


def _admit(
    policy: RatePolicy, state: PolicyState, record: BurstRecord, out: list[Outgoing]
) -> PolicyState:
    window = record.end_ns // policy.window_ns
    if window != state.window:
        if state.summary is not None:
            out.append(state.summary)
        state = replace(state, window=window, sent=0, summary=None)
    if state.sent < policy.limit:
        out.append(record)
        return replace(state, sent=state.sent + 1)
    return replace(state, summary=_count(policy, window, state.summary, record))


def apply_policy(
    policy: RatePolicy, state: PolicyState, bursts: Sequence[BurstRecord], now_ns: int
) -> tuple[PolicyState, list[Outgoing]]:
    """Feed one port direction's newly closed bursts (time order); returns what to publish."""
    out: list[Outgoing] = []
    for burst in bursts:
        pending = state.pending
        if pending is not None and burst.start_ns - pending.end_ns < policy.merge_gap_ns:
            state = replace(state, pending=merge(pending, burst))
            continue
        if pending is not None:
            state = _admit(policy, replace(state, pending=None), pending, out)
        state = replace(state, pending=burst)
    hold_ns = policy.merge_gap_ns + policy.flush_delay_ns
    pending = state.pending
    if pending is not None and now_ns - pending.end_ns >= hold_ns:
        state = _admit(policy, replace(state, pending=None), pending, out)
    if (
        state.summary is not None
        and state.pending is None
        and now_ns >= state.summary.window_end_ns + hold_ns
    ):
        out.append(state.summary)
        state = replace(state, summary=None)
    return state, out


def flush(policy: RatePolicy, state: PolicyState) -> tuple[PolicyState, list[Outgoing]]:
    """Everything held back, now: on stop, nothing that was detected stays unsent."""
    out: list[Outgoing] = []
    if state.pending is not None:
        state = _admit(policy, replace(state, pending=None), state.pending, out)
    if state.summary is not None:
        out.append(state.summary)
        state = replace(state, summary=None)
    return state, out
