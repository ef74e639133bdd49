"""How the user started this program, so printed hints can be pasted back as they are."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from types import FrameType

from burstscope.collector.threads import SignalSafeEvent


def command() -> str:
    """``burstscope`` when that is on PATH and is this program; otherwise its full path, or
    ``python -m burstscope`` as it was run (a fresh shell has no activated virtualenv)."""
    script = os.path.abspath(sys.argv[0])
    on_path = shutil.which("burstscope")
    if on_path is not None and os.path.abspath(on_path) == script:
        return "burstscope"
    if os.path.basename(script) == "burstscope" and os.access(script, os.X_OK):
        return script
    return f"{sys.executable} -m burstscope"


def plot_available() -> bool:
    """Whether ``report --plot`` can run: matplotlib is the optional ``plot`` extra."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def stop_on_signals() -> SignalSafeEvent:
    """An event set by SIGINT or SIGTERM: long-running commands end cleanly and report."""
    stop = SignalSafeEvent()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    return stop
