"""The ring under load from other processes: a writer at full speed, readers checking every row.

Every column of row i is derived from i (the check below), so a reader that is handed a row
the writer had not finished, or had begun to overwrite, finds it. A hammer that only ever
passes shows nothing, so the same hammer is run against a writer that publishes the head
before it writes the row, and against a reader that skips the re-read of the head after its
copy: it must catch both. x86-64 never reorders stores with stores, so these wrong variants
tear rows through their program order, which is what a weak memory model could do to a
writer or reader without the ring's release and acquire (collector/ring.py).
"""

from __future__ import annotations

import functools
import multiprocessing
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Barrier

import numpy as np
import pytest

from burstscope.collector.ring import Field, Ring
from burstscope.collector.sources.base import SampleRow
from burstscope.testing.processes import DEADLINE_SECONDS, wait_until

PORTS = 3
# Small, so the writer laps the readers often and the re-read of the head has work to do.
CAPACITY = 64
READERS = 2


def _expected(rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """Row i's columns: (lateness, timestamp, xmit, rcv, read_ns, status), [len(rows), PORTS]."""
    grid = rows[:, None] * PORTS + np.arange(PORTS)[None, :]
    return (
        rows * 3 + 1,
        grid,
        (grid * 7 + 5).astype(np.uint64),
        (grid * 11 + 2).astype(np.uint64),
        grid + 13,
        (grid % 251).astype(np.uint8),
    )


def _row(index: int, row: SampleRow) -> int:
    """Fill ``row`` with row ``index``'s values; returns its lateness."""
    for port in range(PORTS):
        cell = index * PORTS + port
        row.timestamp_ns[port] = cell
        row.xmit_bytes[port] = cell * 7 + 5
        row.rcv_bytes[port] = cell * 11 + 2
        row.read_ns[port] = cell + 13
        row.status[port] = cell % 251
    return index * 3 + 1


def _writer(name: str, rows: int, mode: str, start: Barrier) -> None:
    """Write ``rows`` rows as fast as it can. ``mode``: "write" (Ring.write, the Python
    tick), "in_place" (next_record and commit, the compiled tick's Python side), or
    "head_first": deliberately wrong, the head published before the row, which is then
    written one column at a time."""
    ring = Ring.attach(name)
    row = SampleRow.for_ports(PORTS)
    start.wait(DEADLINE_SECONDS)
    try:
        for index in range(rows):
            lateness = _row(index, row)
            if mode == "write":
                ring.write(row, lateness)
            elif mode == "in_place":
                offset = ring.next_record()
                slot = (offset - ring.records_offset) // ring.record_bytes
                ring.timestamp_ns[slot] = row.timestamp_ns
                ring.xmit_bytes[slot] = row.xmit_bytes
                ring.rcv_bytes[slot] = row.rcv_bytes
                ring.read_ns[slot] = row.read_ns
                ring.status[slot] = row.status
                ring.commit(offset, lateness)
            else:
                slot = index % ring.capacity
                ring.header[Field.HEAD] = index + 1  # published: the row is not written yet
                ring.lateness_ns[slot] = lateness
                ring.timestamp_ns[slot] = row.timestamp_ns
                ring.xmit_bytes[slot] = row.xmit_bytes
                ring.rcv_bytes[slot] = row.rcv_bytes
                ring.read_ns[slot] = row.read_ns
                ring.status[slot] = row.status
    finally:
        ring.close()


def _reader(name: str, rows: int, recheck: bool, start: Barrier, results: Connection) -> None:
    """Follow the ring until row ``rows`` has been published; check every row received and
    send (rows checked, torn rows, rows lost, reads that returned rows, whether it finished)."""
    ring = Ring.attach(name)
    if not recheck:  # deliberately wrong: no row dropped after the copy
        ring._recheck_head = lambda: -(1 << 62)
    checked = torn = lost = reads = 0
    cursor = 0
    start.wait(DEADLINE_SECONDS)
    deadline = time.monotonic() + DEADLINE_SECONDS
    try:
        while cursor < rows and time.monotonic() < deadline:
            before = cursor
            cursor, got = ring.read_since(cursor)
            if not len(got):
                continue
            reads += 1
            lost += got.lost_rows
            if got.first_row != before + got.lost_rows:  # rows out of sequence: all suspect
                torn += len(got)
            numbers = np.arange(got.first_row, got.first_row + len(got), dtype=np.int64)
            actual = (
                got.lateness_ns,
                got.timestamp_ns,
                got.xmit_bytes,
                got.rcv_bytes,
                got.read_ns,
                got.status,
            )
            good = np.ones(len(got), dtype=bool)
            for have, want in zip(actual, _expected(numbers), strict=True):
                same = have == want
                good &= same if same.ndim == 1 else same.all(axis=1)
            checked += len(got)
            torn += int(np.count_nonzero(~good))
        results.send((checked, torn, lost, reads, cursor >= rows))
    finally:
        ring.close()


def _answered(receiver: Connection, reader: BaseProcess) -> bool:
    return receiver.poll() or not reader.is_alive()


@dataclass(frozen=True)
class Hammered:
    checked: list[int]  # rows each reader checked
    torn: list[int]  # rows each reader found wrong
    lost: list[int]  # rows each reader was lapped past
    reads: list[int]  # read_since calls that returned rows


def hammer(rows: int, mode: str = "write", recheck: bool = True) -> Hammered:
    """One writer and READERS readers, each in its own process, over a new ring."""
    context = multiprocessing.get_context("spawn")  # as the agent starts its sampler
    ring = Ring.create(PORTS, CAPACITY)
    start = context.Barrier(1 + READERS)
    pipes = [context.Pipe(duplex=False) for _ in range(READERS)]
    processes = [context.Process(target=_writer, args=(ring.name, rows, mode, start))]
    processes += [
        context.Process(target=_reader, args=(ring.name, rows, recheck, start, sender))
        for _, sender in pipes
    ]
    try:
        for process in processes:
            process.start()
        outcomes = []
        for (receiver, _), reader in zip(pipes, processes[1:], strict=True):
            assert wait_until(functools.partial(_answered, receiver, reader), 2 * DEADLINE_SECONDS)
            assert receiver.poll(), f"{reader.name} sent nothing (exit status {reader.exitcode})"
            outcomes.append(receiver.recv())
        for process in processes:
            process.join(DEADLINE_SECONDS)
            assert process.exitcode == 0, f"{process.name} exited with {process.exitcode}"
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
        ring.close()
    assert all(done for *_, done in outcomes), f"a reader did not reach row {rows}: {outcomes}"
    checked, torn, lost, reads, _ = (list(column) for column in zip(*outcomes, strict=True))
    return Hammered(checked, torn, lost, reads)


@pytest.mark.parametrize("mode", ["write", "in_place"])
def test_readers_never_get_a_torn_row(mode: str) -> None:
    result = hammer(50_000, mode)
    assert result.torn == [0] * READERS, result
    # Each reader followed the writer (many reads with rows), not one copy at the end.
    assert min(result.reads) > 1, result


def test_the_hammer_catches_a_writer_that_publishes_before_writing() -> None:
    result = hammer(20_000, "head_first")
    assert sum(result.torn) > 0, result


def test_the_hammer_catches_a_reader_that_keeps_rows_overwritten_during_its_copy() -> None:
    result = hammer(50_000, "write", recheck=False)
    assert sum(result.torn) > 0, result
