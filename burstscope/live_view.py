"""The live terminal loop shared by ``top`` and ``demo``: keys, signals, refresh."""

from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from burstscope.agent import AgentSettings
from burstscope.arguments import PLAIN_EVERY_SECONDS
from burstscope.attribution import JobSettingsError, build_watcher
from burstscope.collector.pipeline import Pipeline
from burstscope.collector.sampler import SamplerError
from burstscope.collector.snapshot import Snapshot
from burstscope.collector.threads import SignalSafeEvent
from burstscope.errors import UsageError
from burstscope.invocation import stop_on_signals
from burstscope.top_view import plain_lines, table

REFRESH_PER_SECOND = 4  # reads comfortably and costs little


@contextlib.contextmanager
def keypresses(stream: TextIO) -> Iterator[Callable[[float], str]]:
    """Single keys from a terminal without Enter; elsewhere, just a timed wait."""
    if not stream.isatty():

        def wait(timeout: float) -> str:
            time.sleep(timeout)
            return ""

        yield wait
        return
    fd = stream.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)  # ISIG stays on: Ctrl-C still raises SIGINT

    def read(timeout: float) -> str:
        ready, _, _ = select.select([fd], [], [], timeout)
        return os.read(fd, 1).decode(errors="ignore") if ready else ""

    try:
        yield read
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def watch(
    snapshot: Callable[[], Snapshot],
    stop: SignalSafeEvent,
    duration_seconds: float | None = None,
    title: str = "burstscope top",
    console: Console | None = None,
    every_seconds: float = PLAIN_EVERY_SECONDS,
) -> None:
    """Show the view until q, Ctrl-C (sets ``stop``), or the duration runs out."""
    deadline = None if duration_seconds is None else time.monotonic() + duration_seconds

    def running() -> bool:
        return not stop.is_set() and (deadline is None or time.monotonic() < deadline)

    if not sys.stdout.isatty():
        every_ns = round(every_seconds * 1e9)
        while running():
            stop.wait(
                every_seconds
                if deadline is None
                else min(every_seconds, max(deadline - time.monotonic(), 0))
            )
            print("\n".join(plain_lines(snapshot(), every_ns)), flush=True)
        return
    console = console or Console()
    refresh_ns = 1_000_000_000 // REFRESH_PER_SECOND

    def view() -> Table:
        return table(
            snapshot(), title, console.width, now_window_ns=refresh_ns, height=console.height
        )

    with (
        keypresses(sys.stdin) as key,
        Live(view(), console=console, refresh_per_second=REFRESH_PER_SECOND) as live,
    ):
        while running():
            if key(1 / REFRESH_PER_SECOND) in ("q", "Q"):
                break
            live.update(view())


def watch_source(
    settings: AgentSettings,
    duration_seconds: float | None,
    every_seconds: float = PLAIN_EVERY_SECONDS,
) -> None:
    """Sample the settings' source in a pipeline of its own and show it (no server)."""
    pipeline = Pipeline(
        settings.source,
        settings.sampler,
        settings.thresholds,
        settings.source.slow_sources(),
        settings.slow_interval_seconds,
    )
    # The job holding each port, as the agent shows it (collector.jobs).
    try:
        jobs = build_watcher(settings.jobs, settings.source.ports, settings.sysfs_root)
    except JobSettingsError as exc:
        raise UsageError(str(exc)) from None
    if jobs is not None:
        pipeline.jobs = jobs.table
    stop = stop_on_signals()
    try:
        pipeline.start()
    except SamplerError as exc:
        if jobs is not None:
            jobs.stop()
        raise UsageError(f"sampler failed to start: {exc}") from None
    if jobs is not None:
        jobs.start()
    try:
        watch(pipeline.snapshot, stop, duration_seconds, every_seconds=every_seconds)
    finally:
        if jobs is not None:
            jobs.stop()
        pipeline.close()
