"""The ring's head goes through the compiled module's ordered accesses, every time.

On x86-64 no test can show what a plain numpy store or load of the head would do on a weak
memory model, so these check the part that can regress silently: that every publish and
every read of the head uses ring_publish_head, ring_acquire_head and ring_recheck_head
(collector/ring.py says why those are enough), and that those read and write the word asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from burstscope.collector import ring as ring_module
from burstscope.collector.ring import Field, Ring
from burstscope.collector.sources.base import SampleRow

try:
    from burstscope.collector.sources import _tick as tick
except ImportError:  # built without a C compiler
    tick = None  # type: ignore[assignment]
compiled = pytest.mark.skipif(tick is None, reason="built without the compiled module")


class _Recording:
    """The compiled module's head functions, each call noted as (name, value or None)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int | None]] = []

    def ring_publish_head(self, buffer: Any, index: int, value: int) -> None:
        assert index == Field.HEAD
        self.calls.append(("publish", value))
        tick.ring_publish_head(buffer, index, value)

    def ring_acquire_head(self, buffer: Any, index: int) -> int:
        assert index == Field.HEAD
        self.calls.append(("acquire", None))
        return int(tick.ring_acquire_head(buffer, index))

    def ring_recheck_head(self, buffer: Any, index: int) -> int:
        assert index == Field.HEAD
        self.calls.append(("recheck", None))
        return int(tick.ring_recheck_head(buffer, index))


@compiled
def test_every_publish_and_read_of_the_head_is_ordered(monkeypatch: pytest.MonkeyPatch) -> None:
    recording = _Recording()
    monkeypatch.setattr(ring_module, "_tick", recording)
    ring = Ring.create(2, 8)
    try:
        row = SampleRow.for_ports(2)
        ring.write(row, 5)  # the Python tick
        offset = ring.next_record()
        ring.commit(offset, 6)  # the compiled tick's Python side
        cursor, rows = ring.read_since(0)
    finally:
        ring.close()
    assert recording.calls == [
        ("publish", 1),
        ("publish", 2),
        ("acquire", None),
        ("recheck", None),
    ]
    assert (cursor, rows.lateness_ns.tolist()) == (2, [5, 6])


@compiled
def test_the_head_functions_read_and_write_the_word_asked() -> None:
    ring = Ring.create(1, 8)
    try:
        tick.ring_publish_head(ring.buffer, Field.HEAD, 41)
        assert ring.header[Field.HEAD] == 41
        ring.header[Field.HEAD] = 42
        assert tick.ring_acquire_head(ring.buffer, Field.HEAD) == 42
        assert tick.ring_recheck_head(ring.buffer, Field.HEAD) == 42
        assert tick.ring_acquire_head(ring.buffer, Field.CAPACITY) == 8
    finally:
        ring.close()


@compiled
@pytest.mark.parametrize(
    ("buffer", "index", "error"),
    [
        (bytearray(512), 64, ValueError),  # past the header
        (bytearray(512), -1, ValueError),
        (bytearray(256), 0, ValueError),  # too small to be a ring header
        (bytes(512), 0, BufferError),  # read-only
    ],
)
def test_the_head_functions_refuse_what_is_not_a_header_word(
    buffer: Any, index: int, error: type[Exception]
) -> None:
    calls: list[Callable[[], object]] = [
        lambda: tick.ring_publish_head(buffer, index, 1),
        lambda: tick.ring_acquire_head(buffer, index),
        lambda: tick.ring_recheck_head(buffer, index),
    ]
    for call in calls:
        with pytest.raises(error):
            call()


def test_without_the_compiled_module_the_ring_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ring_module, "_tick", None)
    ring = Ring.create(1, 4)
    try:
        row = SampleRow.for_ports(1)
        for lateness in range(6):  # laps the 4 slots
            ring.write(row, lateness)
        cursor, rows = ring.read_since(0)
    finally:
        ring.close()
    # Slot 6 % 4 is the one the writer would fill next, so 3 rows are whole.
    assert (cursor, rows.first_row, rows.lost_rows) == (6, 3, 3)
    assert rows.lateness_ns.tolist() == [3, 4, 5]
