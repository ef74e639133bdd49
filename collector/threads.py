"""The agent's threads named for ``top -H`` and ``ps -L``.

Python (before 3.14) names no OS thread: every thread of the agent shows the process's name,
so an operator cannot tell which one spends the CPU. Each of the agent's threads calls
``name_os_thread`` first: its Python name, ``burstscope-`` shortened to ``bs-``, within the
kernel's 15 characters (``comm``, prctl(2) PR_SET_NAME), through setproctitle's
``setthreadtitle``. ``bench/agent.py`` reads the collective labels' thread by this name.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TypeVar

COMM_CHARACTERS = 15  # TASK_COMM_LEN 16, less the terminating NUL (include/linux/sched.h)

# A Python signal handler runs in the main thread, when it next executes bytecode. kill(2)
# gives a process's signal to any one of its threads that does not block it (signal(7),
# "Signal mask and pending signals"); when that is not the main thread, a main thread
# blocked in a lock with no timeout (queue.SimpleQueue.get(), threading.Event.wait()) is not
# woken (only the thread the signal interrupts gets EINTR), and the handler waits for
# whatever wakes it next: SIGTERM left the agent, with its HTTP, MQTT and jobs threads,
# running 60 s until the test aborted it. A wait in slices of this length returns to
# bytecode at least this often, so a handler runs within it (tests/test_signal_safe_event.py
# and tests/test_agent.py send the signal to one other thread alone with tgkill(2)).
SIGNAL_LATENCY_S = 0.25

T = TypeVar("T")


def get_interruptibly(wake: queue.SimpleQueue[T], timeout: float | None = None) -> T:
    """``wake.get(timeout=timeout)``, in slices of SIGNAL_LATENCY_S so that the main thread
    runs a signal's handler within one slice whichever thread the kernel gave it to.
    Raises queue.Empty once ``timeout`` seconds (None: no limit) have passed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = SIGNAL_LATENCY_S if deadline is None else deadline - time.monotonic()
        try:
            return wake.get(timeout=max(0.0, min(SIGNAL_LATENCY_S, left)))
        except queue.Empty:
            if deadline is not None and time.monotonic() >= deadline:
                raise


def os_thread_name(name: str) -> str:
    """The ``comm`` a thread called ``name`` gets."""
    if name.startswith("burstscope-"):
        name = "bs-" + name.removeprefix("burstscope-")
    return name[:COMM_CHARACTERS]


def name_os_thread() -> None:
    """Give the calling thread its Python name in the kernel (a convenience: never fails)."""
    try:
        from setproctitle import setthreadtitle
    except ImportError:
        return
    setthreadtitle(os_thread_name(threading.current_thread().name))


class SignalSafeEvent:
    """``threading.Event``'s ``set``, ``is_set`` and ``wait``, safe to set from a signal
    handler.

    A Python signal handler runs in the main thread between two bytecodes, and
    ``Event.set()`` takes the lock that the main thread may hold at that very moment inside
    ``Event.wait()`` (entering, or returning from a timed-out wait): the handler would then
    wait for itself for ever, and Ctrl-C or SIGTERM would hang the program. ``set`` here
    takes no lock: it sets a flag and puts into a ``queue.SimpleQueue``, whose ``put`` the
    standard library documents as reentrant; a ``wait`` blocked in its ``get`` runs the
    handlers (within SIGNAL_LATENCY_S when the kernel gave the signal to another thread).
    """

    def __init__(self) -> None:
        self._set = False
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()

    def set(self) -> None:
        self._set = True
        self._wake.put(None)

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """True once set, else False after ``timeout`` seconds (None: no limit)."""
        if self._set:
            return True
        try:
            get_interruptibly(self._wake, timeout)
        except queue.Empty:
            return self._set
        self._wake.put(None)  # every other waiter wakes too
        return True
