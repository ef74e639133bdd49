"""The agent's threads named for ``top -H`` and ``ps -L``.

Python (before 3.14) names no OS thread: every thread of the agent shows the process's name,
so an operator cannot tell which one spends the CPU. Each of the agent's threads calls
``name_os_thread`` first: its Python name, ``burstscope-`` shortened to ``bs-``, within the
kernel's 15 characters (``comm``, prctl(2) PR_SET_NAME), through setproctitle's
``setthreadtitle``. ``bench/agent.py`` reads the collective labels' thread by this name.
"""

from __future__ import annotations

import threading

COMM_CHARACTERS = 15  # TASK_COMM_LEN 16, less the terminating NUL (include/linux/sched.h)


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
