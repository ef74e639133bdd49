"""LiveDirection: the trailing peak read from the newest slot back, and reader copies."""

from __future__ import annotations

from collections import deque

from hypothesis import given
from hypothesis import strategies as st

from burstscope.collector.exporter import PEAK_WINDOWS
from burstscope.detectors.live import SLOT_NS, LiveDirection


@given(
    st.lists(st.tuples(st.integers(0, 3), st.floats(0, 1)), max_size=700),
    st.integers(0, 80_000_000_000),
    st.integers(1, 70_000_000_000),
)
def test_peak_is_the_highest_slot_overlapping_the_window(
    steps: list[tuple[int, float]], now_ns: int, window_ns: int
) -> None:
    live = LiveDirection()
    start = 0
    for gap, value in steps:  # slots in time order, as _add_slots keeps them
        start += (gap + 1) * SLOT_NS
        live.slots.append((start, value))
    inside = [peak for begin, peak in live.slots if begin + SLOT_NS > now_ns - window_ns]
    assert live.peak(window_ns, now_ns) == (max(inside) if inside else None)


@given(
    st.lists(st.tuples(st.integers(0, 3), st.floats(0, 1)), max_size=900),
    st.integers(0, 100_000_000_000),
)
def test_the_longest_exported_window_is_the_highest_of_every_window(
    steps: list[tuple[int, float]], now_ns: int
) -> None:
    """What lets the rules and panels read the longest window alone (dashboards.rules
    PEAK_WINDOW): every window ends at the same newest sample, so the longest holds the
    others, and its peak is theirs when they have one."""
    live = LiveDirection()
    start = 0
    for gap, value in steps:
        start += (gap + 1) * SLOT_NS
        live.slots.append((start, value))
    peaks = [live.peak(length, now_ns) for _, length in PEAK_WINDOWS]
    longest = live.peak(max(length for _, length in PEAK_WINDOWS), now_ns)
    present = [peak for peak in peaks if peak is not None]
    assert longest == (max(present) if present else None)


def test_copy_shares_nothing_a_later_update_changes() -> None:
    live = LiveDirection(samples=3, slots=deque([(0, 0.5)]), seconds=deque([(1, 0.2, 5)]))
    live.utilization_buckets[0] = 7
    copy = live.copy()
    live.slots.append((SLOT_NS, 0.9))
    live.seconds.clear()
    live.utilization_buckets[0] = 8
    live.samples = 4
    assert list(copy.slots) == [(0, 0.5)]
    assert list(copy.seconds) == [(1, 0.2, 5)]
    assert copy.utilization_buckets[0] == 7
    assert copy.samples == 3
