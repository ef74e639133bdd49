"""SignalSafeEvent: set from a signal handler at any moment without hanging the program."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from burstscope.collector.threads import SignalSafeEvent


@pytest.fixture
def on_usr1() -> Iterator[list[SignalSafeEvent]]:
    """SIGUSR1 sets every event in the list."""
    events: list[SignalSafeEvent] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        for event in events:
            event.set()

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        yield events
    finally:
        signal.signal(signal.SIGUSR1, previous)


# For n = 1, 2, ...: a signal raised at the n-th line the main thread runs inside the event's
# wait (and the Python it calls), with a handler that sets the event. Some of those lines
# run while threading.Event's wait holds its lock, and its set() takes the same lock.
SIGNAL_AT_EACH_LINE = """
import signal, sys, threading
from burstscope.collector.threads import SignalSafeEvent

kind = {"threading": threading.Event, "safe": SignalSafeEvent}[sys.argv[1]]
for n in range(1, 25):
    event, lines, raised = kind(), [0], [False]
    signal.signal(signal.SIGUSR1, lambda signum, frame: event.set())

    def on_line(frame, what, arg):
        if what == "line":
            lines[0] += 1
            if lines[0] == n:
                raised[0] = True
                signal.raise_signal(signal.SIGUSR1)  # runs the handler before returning
        return on_line

    sys.settrace(lambda frame, what, arg: on_line)
    woke = event.wait(0.05)
    sys.settrace(None)
    if woke != raised[0]:
        sys.exit(f"line {n}: raised {raised[0]}, woke {woke}")
print("every line", flush=True)
"""


@pytest.mark.parametrize("kind", ["threading", "safe"])
def test_a_handler_sets_it_between_any_two_lines_of_its_wait(kind: str) -> None:
    """threading.Event hangs here for ever (the reason this class exists); this one wakes."""
    run = [sys.executable, "-c", SIGNAL_AT_EACH_LINE, kind]
    if kind == "threading":
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run(run, capture_output=True, timeout=5, check=False)
        return
    done = subprocess.run(run, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "every line\n", "")


def test_a_signal_wakes_a_blocked_wait_at_once(on_usr1: list[SignalSafeEvent]) -> None:
    event = SignalSafeEvent()
    on_usr1.append(event)
    main = threading.get_ident()
    timer = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGUSR1))
    started = time.monotonic()
    timer.start()
    try:
        assert event.wait(60)
    finally:
        timer.cancel()
    assert time.monotonic() - started < 30  # woken by the handler, not the timeout


def test_every_waiting_thread_wakes_and_a_timeout_says_false() -> None:
    event = SignalSafeEvent()
    assert event.wait(0.01) is False
    woke: list[bool] = []
    waiters = [threading.Thread(target=lambda: woke.append(event.wait(60))) for _ in range(3)]
    for waiter in waiters:
        waiter.start()
    event.set()
    for waiter in waiters:
        waiter.join(30)
    assert woke == [True, True, True]
