"""The restart rules: a backoff that doubles to a cap, starts over after a healthy run, and
gives up after too many failures in the window (the processes themselves: test_faults.py)."""

from __future__ import annotations

from burstscope.collector.supervisor import (
    FIRST_RESTART_SECONDS,
    HEALTHY_SECONDS,
    MAX_RESTART_SECONDS,
    MAX_RESTARTS,
    RESTART_WINDOW_SECONDS,
    _Watch,
)


def test_the_backoff_doubles_up_to_its_cap_and_starts_over_after_a_healthy_run() -> None:
    watch = _Watch("sampler")
    waits = []
    now = 0.0
    # Failures far enough apart never to be too many within the window, each sooner after
    # the restart than a healthy run: the backoff keeps growing.
    spacing = (RESTART_WINDOW_SECONDS / MAX_RESTARTS + HEALTHY_SECONDS) / 2
    assert RESTART_WINDOW_SECONDS / MAX_RESTARTS < spacing < HEALTHY_SECONDS
    for _ in range(12):
        now += spacing
        assert watch.failed(now)
        assert watch.restart_at is not None
        waits.append(watch.restart_at - now)
        watch.healthy_since = now  # restarted at once, for the arithmetic's sake
    expected = [min(FIRST_RESTART_SECONDS * 2**n, MAX_RESTART_SECONDS) for n in range(12)]
    assert waits == expected
    watch.healthy_since = now
    assert watch.failed(now + HEALTHY_SECONDS)
    assert watch.restart_at == now + HEALTHY_SECONDS + FIRST_RESTART_SECONDS


def test_too_many_failures_within_the_window_give_up() -> None:
    watch = _Watch("slow_poller")
    assert all(watch.failed(float(t)) for t in range(MAX_RESTARTS))
    assert not watch.failed(float(MAX_RESTARTS))
    # Failures that have left the window no longer count.
    spread = _Watch("sampler")
    times = [n * RESTART_WINDOW_SECONDS / MAX_RESTARTS for n in range(3 * MAX_RESTARTS)]
    assert all(spread.failed(t) for t in times)
