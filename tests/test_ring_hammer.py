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
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path

import numpy as np
import pytest

from burstscope.collector.ring import Field, Ring
from burstscope.collector.sampler import Sampler, SamplerConfig
from burstscope.collector.sources import files
from burstscope.collector.sources.base import STATUS_OK, STATUS_REBASELINE, SampleRow
from burstscope.collector.sources.files import CounterFiles
from burstscope.testing.processes import DEADLINE_SECONDS, wait_until
from tests.test_tick import _Source

PORTS = 3
# Small, so the writer laps the readers often and the re-read of the head has work to do.
CAPACITY = 64
READERS = 2
# Each reader checks this many batches of rows while the writer runs; the writer stops then
# (or at MAX_ROWS). Bounded by reads, not rows: on a loaded machine a reader may get the CPU
# for only part of the writer's run, and a wrong writer or reader shows only while both run.
READS = 200
MAX_ROWS = 2_000_000
# How long the wrong writer leaves a published row unwritten: long beside a reader's copy
# (tens of microseconds), short beside a scheduler slice.
TORN_WINDOW_NS = 200_000
# The wrong variants are hammered until caught, at most this many times: each run on a
# loaded machine may give the readers the CPU only while the writer is between rows.
ATTEMPTS = 5


def _spin(nanoseconds: int) -> None:
    """Busy-wait: a sleep would hand the CPU back and could take a whole scheduler slice."""
    until = time.perf_counter_ns() + nanoseconds
    while time.perf_counter_ns() < until:
        pass


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


def _writer(name: str, mode: str, start: Barrier, stop: Event) -> None:
    """Write rows as fast as it can until ``stop`` (or MAX_ROWS). ``mode``: "write"
    (Ring.write, the Python tick), "in_place" (next_record and commit, the compiled tick's
    Python side), or "head_first": deliberately wrong, the head published before the row,
    which is then written one column at a time after a pause. Without the pause the row is
    unwritten for a few microseconds only, and on a loaded two-core machine the readers may
    never copy inside that window (CI saw 16,000 rows checked and none torn): the pause
    stands for the writer being descheduled right after its wrong publish."""
    ring = Ring.attach(name)
    row = SampleRow.for_ports(PORTS)
    start.wait(DEADLINE_SECONDS)
    try:
        for index in range(MAX_ROWS):
            if index & 255 == 0 and stop.is_set():
                break
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
                _spin(TORN_WINDOW_NS)
                ring.lateness_ns[slot] = lateness
                ring.timestamp_ns[slot] = row.timestamp_ns
                ring.xmit_bytes[slot] = row.xmit_bytes
                ring.rcv_bytes[slot] = row.rcv_bytes
                ring.read_ns[slot] = row.read_ns
                ring.status[slot] = row.status
    finally:
        ring.close()


def _reader(name: str, recheck: bool, start: Barrier, results: Connection) -> None:
    """Follow the ring for READS reads that return rows (or until the writer's last row);
    check every row received and send (rows checked, torn rows, rows lost, reads)."""
    ring = Ring.attach(name)
    if not recheck:  # deliberately wrong: no row dropped after the copy
        ring._recheck_head = lambda: -(1 << 62)
    checked = torn = lost = reads = 0
    cursor = 0
    start.wait(DEADLINE_SECONDS)
    deadline = time.monotonic() + DEADLINE_SECONDS
    try:
        while reads < READS and cursor < MAX_ROWS and time.monotonic() < deadline:
            # Every other read from row 0: the copy then starts at the slot the writer fills
            # next, so the re-read of the head after it has rows to drop.
            if reads % 2 == 0:
                cursor = 0
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
        results.send((checked, torn, lost, reads))
    finally:
        ring.close()


def _answered(receiver: Connection, reader: BaseProcess) -> bool:
    return receiver.poll() or not reader.is_alive()


@dataclass(frozen=True)
class Hammered:
    checked: list[int]  # rows each reader checked
    torn: list[int]  # rows each reader found wrong
    lost: list[int]  # rows each reader skipped: lapped, or passed over by a read from row 0
    reads: list[int]  # read_since calls that returned rows
    written: int  # rows the writer wrote


def hammer(mode: str = "write", recheck: bool = True) -> Hammered:
    """One writer and READERS readers, each in its own process, over a new ring."""
    context = multiprocessing.get_context("spawn")  # as the agent starts its sampler
    ring = Ring.create(PORTS, CAPACITY)
    start, stop = context.Barrier(1 + READERS), context.Event()
    pipes = [context.Pipe(duplex=False) for _ in range(READERS)]
    processes = [context.Process(target=_writer, args=(ring.name, mode, start, stop))]
    processes += [
        context.Process(target=_reader, args=(ring.name, recheck, start, sender))
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
        stop.set()
        for process in processes:
            process.join(DEADLINE_SECONDS)
            assert process.exitcode == 0, f"{process.name} exited with {process.exitcode}"
        written = ring.get(Field.HEAD)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
        ring.close()
    checked, torn, lost, reads = (list(column) for column in zip(*outcomes, strict=True))
    return Hammered(checked, torn, lost, reads, written)


@pytest.mark.parametrize("mode", ["write", "in_place"])
def test_readers_never_get_a_torn_row(mode: str) -> None:
    result = hammer(mode)
    assert result.torn == [0] * READERS, result
    # Each reader made its reads while the writer was still writing.
    assert result.reads == [READS] * READERS and result.written < MAX_ROWS, result


def _caught(mode: str, recheck: bool) -> list[Hammered]:
    """Hammer a wrong writer or reader until a reader finds a torn row (or ATTEMPTS runs)."""
    results: list[Hammered] = []
    while len(results) < ATTEMPTS and not (results and sum(results[-1].torn)):
        results.append(hammer(mode, recheck))
    return results


def test_the_hammer_catches_a_writer_that_publishes_before_writing() -> None:
    results = _caught("head_first", recheck=True)
    assert sum(results[-1].torn) > 0, results


def test_the_hammer_catches_a_reader_that_keeps_rows_overwritten_during_its_copy() -> None:
    results = _caught("write", recheck=False)
    assert sum(results[-1].torn) > 0, results


@pytest.mark.skipif(not files.compiled_tick_available(), reason="built without the compiled tick")
def test_rows_the_compiled_loop_publishes_are_whole(tmp_path: Path) -> None:
    """The sampler process ticking in C (run_ticks) as fast as its reads go, and this process
    checking each row: every port's constant counters, timestamps rising along the row and
    from row to row (a stale or half-overwritten row breaks one or the other)."""
    counters = []
    for port in range(PORTS):
        names = []
        for direction, value in (("xmit", port * 1000 + 1), ("rcv", port * 1000 + 2)):
            path = tmp_path / f"{port}_{direction}"
            path.write_text(f"{value}\n")
            names.append(str(path))
        counters.append(CounterFiles(names[0], names[1], 1))
    xmit = np.arange(PORTS, dtype=np.uint64) * 1000 + 1
    # Not real time, not pinned: a 20 us tick on a shared machine must not starve it.
    config = SamplerConfig(interval_ns=20_000, realtime_priority=None, cpu=-1, ring_seconds=0)
    sampler = Sampler(_Source(tuple(counters)), config)
    ring = sampler.start()
    checked = torn = reads = 0
    cursor, last_stamp = 0, -1
    try:
        assert wait_until(lambda: ring.get(Field.COMPILED_TICK) == 1)
        deadline = time.monotonic() + DEADLINE_SECONDS
        while checked < 100_000 and time.monotonic() < deadline:
            # Every other read from row 0: the copy then starts at the slot the writer fills
            # next, so the re-read of the head after it has rows to drop.
            if reads % 2 == 0:
                cursor, last_stamp = 0, -1
            cursor, got = ring.read_since(cursor)
            if not len(got):
                continue
            reads += 1
            stamps = got.timestamp_ns
            good = (got.xmit_bytes == xmit).all(axis=1) & (got.rcv_bytes == xmit + 1).all(axis=1)
            good &= np.isin(got.status, (STATUS_OK, STATUS_REBASELINE)).all(axis=1)
            good &= (np.diff(stamps, axis=1) >= 0).all(axis=1)
            good &= np.diff(stamps[:, 0], prepend=last_stamp) > 0
            last_stamp = int(stamps[-1, 0])
            checked += len(got)
            torn += int(np.count_nonzero(~good))
    finally:
        sampler.close()
    assert checked >= 100_000, f"{checked} rows in {DEADLINE_SECONDS} s"
    assert torn == 0, f"{torn} of {checked} rows torn"
