"""A training process's NCCL Inspector dump, paced: known collectives at a chosen record rate.

The agent's tail (collector.collectives.tail) is tested and benchmarked against a directory
that grows as a job's does: every ``period_s`` (the plugin's dump interval) the records of
the collectives that completed in it are appended, each written by
:class:`burstscope.testing.inspector_writer.InspectorWriter` (a verbose record, compact, one
line, flushed), with kernel times on the wall clock, the clock the agent's samples are on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from burstscope.testing.inspector_writer import (
    ALL_TO_ALL,
    REDUCE_SCATTER,
    SEND,
    InspectorWriter,
    Operation,
)

# The collective each type's records name: what the readers infer the type from.
COLLECTIVES = {"EP": ALL_TO_ALL, "PP": SEND, "DP": REDUCE_SCATTER}
MESSAGE_BYTES = 1 << 20

# (from_ns, to_ns] -> the types ("EP", "PP", "DP") whose collectives ran through all of it.
Schedule = Callable[[int, int], list[str]]


class PacedWriter:
    """Every ``period_s``, the records of the collectives ``schedule`` names for the period
    just ended, ``records_per_second`` of them in all: each type's share cut into as many
    back-to-back calls, which together cover the period."""

    def __init__(
        self,
        directory: Path,
        schedule: Schedule,
        records_per_second: float = 10.0,
        period_s: float = 0.1,
    ) -> None:
        self.writer = InspectorWriter(directory)
        self.schedule = schedule
        self.records_per_second = records_per_second
        self.period_s = period_s
        self._stop = threading.Event()

    @property
    def path(self) -> Path:
        return self.writer.path

    @property
    def written(self) -> int:
        return self.writer.written

    def dump(self, from_ns: int, to_ns: int) -> None:
        kinds = self.schedule(from_ns, to_ns)
        if not kinds:
            return
        wanted = self.records_per_second * (to_ns - from_ns) / 1e9
        calls = max(1, round(wanted / len(kinds)))
        step = (to_ns - from_ns) // calls
        for kind in kinds:
            for call in range(calls):
                start = from_ns + call * step
                end = to_ns if call == calls - 1 else start + step
                self.writer.write(
                    Operation(kind, COLLECTIVES[kind], start, start, end, MESSAGE_BYTES)
                )

    def run(self) -> None:
        last = time.time_ns()
        while not self._stop.wait(self.period_s):
            now = time.time_ns()
            self.dump(last, now)
            last = now

    @contextmanager
    def running(self) -> Iterator[PacedWriter]:
        """The writer's thread for the block; the file stays (closed) afterwards."""
        thread = threading.Thread(target=self.run, name="inspector-dump", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(5)
            self.writer.close()
