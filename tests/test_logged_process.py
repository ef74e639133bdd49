"""The helper every agent test stops its process with: a hang fails with the stacks."""

from __future__ import annotations

import os
import sys

import pytest

from burstscope.testing.processes import LoggedProcess, wait_until

# Ignores SIGTERM, then waits in a function whose name the stack dump must show.
HANGS = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def waiting_for_ever():
    print("up", file=sys.stderr, flush=True)
    time.sleep(600)
waiting_for_ever()
"""


def test_a_process_that_does_not_stop_fails_with_every_threads_stack() -> None:
    run = LoggedProcess(
        [sys.executable, "-c", HANGS], env={**os.environ, "PYTHONFAULTHANDLER": "1"}
    )
    assert wait_until(lambda: "up" in run.lines)
    with pytest.raises(AssertionError) as failure:
        run.stop(timeout=1)
    message = str(failure.value)
    assert message.startswith("still running 1 s after <Signals.SIGTERM: 15>; log:")
    assert "in waiting_for_ever" in message
    assert run.process.poll() is not None
