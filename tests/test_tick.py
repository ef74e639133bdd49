"""The file sources' two ticks, compiled and pure Python, give the same readings.

The compiled core (collector/sources/_tick.c) settles the ports it can and leaves the rest
to the Python path, so each case below is read both ways into a ring and compared field by
field (timestamps and durations differ by nature; their relation is checked instead).
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from burstscope.collector.ring import Field, Ring
from burstscope.collector.sampler import Sampler, SamplerConfig, ticking_for
from burstscope.collector.sources import files
from burstscope.collector.sources.base import (
    BAD_REASONS,
    STATUS_MISSING,
    STATUS_OK,
    STATUS_REBASELINE,
    PortSpec,
    SampleRow,
    SlowSource,
    bad_errno_status,
    bad_status,
    usable,
)
from burstscope.collector.sources.files import CounterFiles, PairedFileReader

BUILT = files.compiled_tick_available()
compiled = pytest.mark.skipif(not BUILT, reason="built without the compiled tick")
Reading = tuple[int, int, int]  # xmit bytes, rcv bytes (-1 when missing), status

# (xmit text, rcv text) per port: what sysfs prints, the emulated tree's space padding,
# text int() reads but a plain-decimal parser does not, values no counter holds, failures.
CASES = [
    ("123\n", "456\n"),
    ("   42\n", "7\n"),
    ("18446744073709551615\n", "0\n"),  # all-ones: too large in bytes for the C path
    ("+5\n", "1_000\n"),  # int() reads both; C leaves them to Python
    ("N/A (no PMA)\n", "1\n"),
    ("", "1\n"),
    ("0\n", "0\n"),
    (None, "1\n"),  # no file: the open fails
]


def _files(tmp_path: Path) -> tuple[CounterFiles, ...]:
    out = []
    for index, (xmit, rcv) in enumerate(CASES):
        paths = []
        for name, text in (("xmit", xmit), ("rcv", rcv)):
            path = tmp_path / f"{index}_{name}"
            if text is not None:
                path.write_text(text)
            paths.append(str(path))
        out.append(CounterFiles(paths[0], paths[1], 4 if index % 2 else 1))
    return tuple(out)


def _rows_both_ways(
    tmp_path: Path, ticks: int
) -> tuple[list[tuple[Reading, ...]], list[tuple[Reading, ...]]]:
    """Per tick, per port (xmit, rcv, status) read by the Python path and the compiled one."""
    counters = _files(tmp_path)
    results: list[list[tuple[Reading, ...]]] = []
    for use_compiled in (False, True):
        reader = PairedFileReader(counters)
        ring = Ring.create(len(counters), 64)
        try:
            reader.open()
            read_record = reader.record_reader(ring.buffer, ring.layout)
            row = SampleRow.for_ports(len(counters))
            seen: list[tuple[Reading, ...]] = []
            for _ in range(ticks):
                if use_compiled:
                    assert read_record is not None
                    offset = ring.next_record()
                    read_record(offset)
                    ring.commit(offset, 0)
                else:
                    reader.read_into(row)
                    ring.write(row, 0)
            _, rows = ring.read_since(0)
            for tick in range(ticks):
                status = rows.status[tick].tolist()
                seen.append(
                    tuple(
                        (
                            int(rows.xmit_bytes[tick, p]) if usable(status[p]) else -1,
                            int(rows.rcv_bytes[tick, p]) if usable(status[p]) else -1,
                            status[p],
                        )
                        for p in range(len(counters))
                    )
                )
                durations = rows.read_ns[tick]
                assert (durations[[usable(s) for s in status]] >= 0).all()
        finally:
            reader.close()
            ring.close()
        results.append(seen)
    return results[0], results[1]


@compiled
def test_compiled_and_python_ticks_read_the_same(tmp_path: Path) -> None:
    python, compiled_rows = _rows_both_ways(tmp_path, ticks=3)
    assert compiled_rows == python
    first, second = python[0], python[1]
    # The cases behave as the Python rules say, whichever path read them.
    assert first[0] == (123, 456, STATUS_REBASELINE)  # odd ports count 4-octet words
    assert second[0] == (123, 456, STATUS_OK)
    assert second[1] == (4 * 42, 4 * 7, STATUS_OK)
    assert second[3] == (4 * 5, 4 * 1000, STATUS_OK)
    # Refused with the file and the reason: text, nothing at all; a file that is not there.
    assert first[4][2] == bad_status(0, BAD_REASONS.index("not_a_number"))
    assert first[5][2] == bad_status(0, BAD_REASONS.index("not_a_number"))
    assert first[7][2] == STATUS_MISSING


@compiled
def test_compiled_tick_keeps_a_bad_file_to_its_port(tmp_path: Path) -> None:
    counters = _files(tmp_path)[:2]
    reader = PairedFileReader(counters)
    ring = Ring.create(len(counters), 64)
    try:
        reader.open()
        read_record = reader.record_reader(ring.buffer, ring.layout)
        assert read_record is not None
        for _ in range(2):  # past the rebaseline
            offset = ring.next_record()
            read_record(offset)
            ring.commit(offset, 0)
        Path(counters[0].xmit_path).write_text("N/A (no PMA)\n")
        offset = ring.next_record()
        read_record(offset)
        ring.commit(offset, 7)
        _, rows = ring.read_since(0)
    finally:
        reader.close()
        ring.close()
    assert rows.status[-1].tolist() == [bad_status(0, BAD_REASONS.index("not_a_number")), STATUS_OK]
    assert rows.rcv_bytes[-1, 1] == 4 * 7  # port 1: "7", in 4-octet words
    assert rows.lateness_ns[-1] == 7


def test_pure_python_switch_and_fallback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    counters = _files(tmp_path)[:1]
    reader = PairedFileReader(counters)
    ring = Ring.create(1, 64)
    try:
        reader.open()
        monkeypatch.setenv(files.PURE_PYTHON_ENV, "1")
        assert reader.record_reader(ring.buffer, ring.layout) is None
        monkeypatch.delenv(files.PURE_PYTHON_ENV)
        monkeypatch.setattr(files, "_tick", None)  # as when built without a compiler
        assert reader.record_reader(ring.buffer, ring.layout) is None
    finally:
        reader.close()
        ring.close()


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_sampler_process_runs_the_tick_it_says(
    path: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if path == "compiled" and not BUILT:
        pytest.skip("built without the compiled tick")
    if path == "python":
        monkeypatch.setenv(files.PURE_PYTHON_ENV, "1")  # the spawned sampler inherits it
    counters = _files(tmp_path)[:2]
    with Sampler(_Source(counters), SamplerConfig(interval_ns=1_000_000)) as ring:
        while ring.get(Field.TICKS) < 50:
            pass
        assert ring.get(Field.COMPILED_TICK) == (path == "compiled")
        _, rows = ring.read_since(0)
    assert (rows.status[5:] == STATUS_OK).all()
    assert (rows.rcv_bytes[5:, 1] == 4 * 7).all()


def test_sources_without_records_tick_in_python() -> None:
    class Constant:
        name = "constant"
        ports = ()

        def read_into(self, row: SampleRow) -> None:
            pass

    ring = Ring.create(0, 64)
    try:
        ticking = ticking_for(Constant(), ring, 1_000_000)  # type: ignore[arg-type]
        ticking.tick(5)
        assert not ticking.compiled
        assert ring.read_since(0)[1].lateness_ns.tolist() == [5]
    finally:
        ring.close()


class _Source(files.FileCounterSource):
    """A file source over given files (the real ones find theirs in sysfs)."""

    name = "files"

    def __init__(self, counters: tuple[CounterFiles, ...]) -> None:
        self._files = counters
        self.ports = tuple(PortSpec(f"port{i}", 1, 0) for i in range(len(counters)))

    def slow_sources(self) -> list[SlowSource]:
        return []


@pytest.mark.parametrize("spin_ns", [0, 1_000_000], ids=["sleeping", "never-sleeping"])
@pytest.mark.parametrize("path", ["compiled", "python"])
def test_sigterm_stops_either_loop_cleanly(
    path: str, spin_ns: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The compiled loop runs in C: a signal that interrupts its sleep, and one that comes
    while it reads or spins (a spin as long as the interval never sleeps), runs the handler."""
    import os
    import signal
    import time

    from burstscope.collector.ring import SamplerState

    if path == "compiled" and not BUILT:
        pytest.skip("built without the compiled tick")
    if path == "python":
        monkeypatch.setenv(files.PURE_PYTHON_ENV, "1")
    config = SamplerConfig(interval_ns=1_000_000, spin_ns=spin_ns)
    sampler = Sampler(_Source(_files(tmp_path)[:2]), config)
    ring = sampler.start()
    try:
        while ring.get(Field.TICKS) < 20:
            time.sleep(0.01)
        os.kill(ring.get(Field.PID), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while sampler.alive and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not sampler.alive
        assert ring.get(Field.STATE) == SamplerState.STOPPED
        ticks = ring.get(Field.TICKS)
        assert ring.read_since(0)[0] == ticks  # every tick counted was committed
    finally:
        sampler.close()


@compiled
def test_ports_with_extra_files_take_the_python_path(tmp_path: Path) -> None:
    """irdma sums two files per direction: the compiled tick leaves such a port to Python."""
    paths = {}
    for name, text in (("x", "10\n"), ("x6", "5\n"), ("r", "7\n"), ("r6", "1\n")):
        paths[name] = tmp_path / name
        paths[name].write_text(text)
    counters = (
        CounterFiles(
            str(paths["x"]),
            str(paths["r"]),
            1,
            extra_xmit=(str(paths["x6"]),),
            extra_rcv=(str(paths["r6"]),),
        ),
    )
    reader = PairedFileReader(counters)
    ring = Ring.create(1, 64)
    try:
        reader.open()
        read_record = reader.record_reader(ring.buffer, ring.layout)
        assert read_record is not None
        for _ in range(2):
            offset = ring.next_record()
            read_record(offset)
            ring.commit(offset, 0)
        _, rows = ring.read_since(0)
    finally:
        reader.close()
        ring.close()
    assert rows.status.tolist() == [[STATUS_REBASELINE], [STATUS_OK]]
    assert rows.xmit_bytes[:, 0].tolist() == [15, 15]
    assert rows.rcv_bytes[:, 0].tolist() == [8, 8]


@pytest.mark.parametrize(
    ("xmit", "rcv", "counter", "reason"),
    [
        ("-1\n", "7\n", 0, "negative"),
        ("10\n", f"{2**62}\n", 1, "out_of_range"),  # x4 is past 64 bits of bytes
        ("N/A (no PMA)\n", "7\n", 0, "not_a_number"),
        ("10\n", "text\n", 1, "not_a_number"),
    ],
)
def test_the_fast_loop_and_the_special_path_refuse_a_reading_alike(
    tmp_path: Path, xmit: str, rcv: str, counter: int, reason: str
) -> None:
    """A plain port (read_into's loop) and one with a minimum read interval
    (_read_special) apply the same fault rules: the status names the file and why."""
    (tmp_path / "x").write_text(xmit)
    (tmp_path / "r").write_text(rcv)
    plain = CounterFiles(str(tmp_path / "x"), str(tmp_path / "r"), 4)
    special = CounterFiles(plain.xmit_path, plain.rcv_path, 4, min_read_interval_ns=1)
    row = _read_once(plain, special)
    expected = bad_status(counter, BAD_REASONS.index(reason))
    assert row.status == [expected, expected]


def test_a_failed_read_names_its_errno_on_both_python_paths(tmp_path: Path) -> None:
    (tmp_path / "r").write_text("7\n")
    (tmp_path / "x").mkdir()  # opens, but pread fails with EISDIR
    plain = CounterFiles(str(tmp_path / "x"), str(tmp_path / "r"), 4)
    special = CounterFiles(plain.xmit_path, plain.rcv_path, 4, extra_rcv=(plain.rcv_path,))
    row = _read_once(plain, special)
    expected = bad_errno_status(0, errno.EISDIR)
    assert row.status == [expected, expected]


def _read_once(*ports: CounterFiles) -> SampleRow:
    """One pure-Python tick of a reader over ``ports``."""
    reader = PairedFileReader(ports)
    row = SampleRow.for_ports(len(ports))
    reader.open()
    try:
        reader.read_into(row)
    finally:
        reader.close()
    return row
