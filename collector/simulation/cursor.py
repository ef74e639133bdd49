"""The model read one value at a time at rising times, in plain Python: the real-time hot path."""

from __future__ import annotations

import contextlib
import os
import threading

from burstscope.collector.simulation.model import Block, TrafficModel
from burstscope.collector.simulation.workload import CHANNELS


class CounterCursor:
    """Cumulative bytes of any channel at non-decreasing times, amortised O(1) per read.

    A numpy call costs about a microsecond even on one element; a 1 ms sampler reading 18
    counters wants less. Each channel keeps its place (block and segment) and walks forward.
    Blocks every channel has left are forgotten, so memory stays bounded over any run length.

    New blocks (one iteration, about three seconds of traffic) take about 1 ms to generate,
    and up to 2.6 ms with their per-channel lists: in a 1 ms tick that is a missed tick
    every few seconds. With ``ahead`` a thread generates the block after the furthest one
    in use as soon as every channel has entered a new block, so a tick finds it ready. The
    model is deterministic per block index, so when a block is generated never changes its
    values.
    """

    def __init__(self, model: TrafficModel, ahead: bool = False) -> None:
        self.model = model
        first = model.block_at(model.earliest_ns)
        self._block: list[Block] = [first] * CHANNELS
        self._segment = [0] * CHANNELS
        # Held while the model's blocks change: by a tick moving a channel on (rarely, and
        # then it finds the block ready) or by the thread generating ahead.
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        if ahead:
            self._thread = threading.Thread(
                target=self._generate_ahead, name="sim-ahead", daemon=True
            )
            self._thread.start()
            self._wanted.set()

    def close(self) -> None:
        """Stop generating ahead (the thread ends within one block's generation)."""
        self._closed = True
        self._wanted.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def bytes_at(self, channel: int, time_ns: int) -> int:
        """Cumulative bytes of ``channel`` (2 * port + direction) at model time ``time_ns``."""
        block = self._block[channel]
        if time_ns >= block.end_ns or time_ns < block.start_ns:
            block = self._move(channel, time_ns)
        starts, rates, bases = block.lists(channel)
        index = self._segment[channel]
        if time_ns < starts[index]:
            index = 0  # time went backwards inside the block: rescan from its start
        last = len(starts) - 1
        while index < last and starts[index + 1] <= time_ns:
            index += 1
        self._segment[channel] = index
        # The same float multiply and floor as TrafficModel.counters_at: identical integers.
        return bases[index] + int(rates[index] * (time_ns - starts[index]))

    def _move(self, channel: int, time_ns: int) -> Block:
        with self._lock:
            block = self._block[channel]
            if block.start_ns <= time_ns:
                while time_ns >= block.end_ns:
                    block = self.model.block_after(block)
            else:
                block = self.model.block_at(time_ns)
            self._block[channel] = block
            self._segment[channel] = 0
            oldest = min(b.start_ns for b in self._block)
            held_from = self.model.earliest_ns
            self.model.forget_before(oldest)
            # Every channel has left a block: generate the next one now. Not at the first
            # channel's move, since the others cross the same boundary in the same tick and
            # would wait here for the generation.
            every_channel_moved = self.model.earliest_ns != held_from
        if self._thread is not None and every_channel_moved:
            self._wanted.set()
        return block

    def _generate_ahead(self) -> None:
        # The sampler process may run at SCHED_FIFO on one CPU: this thread must not share
        # that priority, or the tick would wait for it to finish a block. On Linux
        # sched_setscheduler(0, ...) changes the calling thread only.
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._closed:
                return
            with self._lock:
                furthest = max(self._block, key=lambda b: b.end_ns)
                following = self.model.block_after(furthest)
                for channel in range(CHANNELS):
                    following.lists(channel)  # the tick's scalar path reads these
