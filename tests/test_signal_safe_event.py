"""SignalSafeEvent: set from a signal handler at any moment without hanging the program."""

from __future__ import annotations

import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from burstscope.collector.threads import SignalSafeEvent
from burstscope.testing.processes import (
    TGKILL_SYSCALL,
    main_thread_asleep,
    signal_thread,
    wait_until,
)


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


# The main thread waits with no timeout (an untimed queue.SimpleQueue.get, or the event's wait)
# while a second thread idles; SIGTERM's handler wakes the wait.
WAIT_WITHOUT_TIMEOUT = """
import queue, signal, sys, threading
from burstscope.collector.threads import SignalSafeEvent

event, wake, idle = SignalSafeEvent(), queue.SimpleQueue(), threading.Event()
signal.signal(signal.SIGTERM, lambda signum, frame: (event.set(), wake.put(signum)))
worker = threading.Thread(target=idle.wait)
worker.start()
print(worker.native_id, flush=True)
event.wait() if sys.argv[1] == "safe" else wake.get()
idle.set()
print("woke", flush=True)
"""


@pytest.mark.skipif(
    platform.machine() not in TGKILL_SYSCALL, reason="tgkill's number is known for x86_64, arm64"
)
@pytest.mark.parametrize("kind", ["SimpleQueue", "safe"])
def test_a_signal_another_thread_takes_wakes_an_untimed_wait(kind: str) -> None:
    """kill(2) may hand the signal to any thread; sent to the idle one alone (tgkill), an
    untimed SimpleQueue.get in the main thread sleeps on (the agent's hang on SIGTERM), and
    the event's wait wakes within its slice."""
    run = [sys.executable, "-c", WAIT_WITHOUT_TIMEOUT, kind]
    process = subprocess.Popen(run, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        worker = int(process.stdout.readline())
        # Asleep after the print: in the wait (the only place left to sleep in).
        assert wait_until(lambda: main_thread_asleep(process.pid))
        signal_thread(process.pid, worker, signal.SIGTERM)
        if kind == "SimpleQueue":
            with pytest.raises(subprocess.TimeoutExpired):
                process.wait(5)
            return
        assert process.wait(60) == 0
        assert process.stdout.read() == "woke\n"
    finally:
        process.kill()
        process.wait()
