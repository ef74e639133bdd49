"""The model read one value at a time at rising times, in plain Python: the real-time hot path."""

from __future__ import annotations

from collector.simulation.model import Block, TrafficModel
from collector.simulation.workload import CHANNELS


class CounterCursor:
    """Cumulative bytes of any channel at non-decreasing times, amortised O(1) per read.

    A numpy call costs about a microsecond even on one element; a 1 ms sampler reading 18
    counters wants less. Each channel keeps its place (block and segment) and walks forward.
    Blocks every channel has left are forgotten, and new ones are generated one iteration
    (about a second of traffic) at a time, so memory stays bounded over any run length.
    """

    def __init__(self, model: TrafficModel) -> None:
        self.model = model
        first = model.block_at(model.earliest_ns)
        self._block: list[Block] = [first] * CHANNELS
        self._segment = [0] * CHANNELS

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
        block = self._block[channel]
        if block.start_ns <= time_ns:
            while time_ns >= block.end_ns:
                block = self.model.block_after(block)
        else:
            block = self.model.block_at(time_ns)
        self._block[channel] = block
        self._segment[channel] = 0
        oldest = min(b.start_ns for b in self._block)
        self.model.forget_before(oldest)
        return block
