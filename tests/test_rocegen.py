"""The traffic generator's background cadence: a late sender never sends a backlog."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from burstscope.testing.rocegen import next_slot


@given(
    slot=st.integers(0, 10**15),
    period=st.integers(1, 10**9),
    late=st.integers(-(10**10), 10**10),
)
def test_next_slot_is_the_first_on_the_cadence_after_now(slot: int, period: int, late: int) -> None:
    now = slot + late
    following = next_slot(slot, period, now)
    if now < slot:
        assert following == slot  # not due yet: the slot stays
        return
    assert following > now
    assert following - now <= period  # one slot after now: nothing missed is sent later
    assert (following - slot) % period == 0  # on the original cadence


def test_a_sender_back_from_70_ms_away_sends_one_packet_not_70() -> None:
    period = 1_000_000
    slot = 5 * period
    now = slot + 70 * period + 300_000  # descheduled 70.3 ms past its slot
    following = next_slot(slot, period, now)
    assert following == slot + 71 * period
    # An on-time sender simply moves to the next slot.
    assert next_slot(slot, period, slot) == slot + period
