"""NCCL Inspector dump directories tailed: files appear, vanish and belong to other hosts.

The records are the test kit's (burstscope.testing.inspector_writer: verbose, compact, one a
line, as the plugin writes them); the directories are temporary and change under the tail
between two polls, as a training job and whoever cleans up change them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from burstscope.collector.collectives.nccl_inspector import MALFORMED, TRUNCATED
from burstscope.collector.collectives.tail import OTHER_HOST, DumpDirectoryTail
from burstscope.testing.inspector_writer import ALL_TO_ALL, InspectorWriter, Operation

HOST = "gpu-node-07"
SECOND_NS = 1_000_000_000


def record(writer: InspectorWriter, index: int, host: str = HOST) -> str:
    """One record's line, as ``host`` would write it."""
    start = 1_781_012_346 * SECOND_NS + index * 1_000_000
    line = writer.record(Operation("EP", ALL_TO_ALL, start, start, start + 500_000, 1 << 20))
    line["metadata"]["hostname"] = host
    return json.dumps(line, separators=(",", ":")) + "\n"


@pytest.fixture
def writer(tmp_path: Path) -> InspectorWriter:
    """Only its record(): the files are written by the tests, under names they choose."""
    made = InspectorWriter(tmp_path / "writer")
    made.close()
    return made


def write(path: Path, *lines: str) -> None:
    with path.open("a") as file:
        file.write("".join(lines))


def test_files_of_this_host_are_tailed_as_they_appear_and_grow(
    tmp_path: Path, writer: InspectorWriter
) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    tail = DumpDirectoryTail([dumps], HOST)
    assert tail.poll().records() == [] and tail.files == 0
    write(dumps / f"{HOST}-pid11.log", record(writer, 0), record(writer, 1))
    # The short name matches a fully qualified one (gethostname differs between systems).
    write(dumps / f"{HOST}.cluster.example-pid12.log", record(writer, 2))
    write(dumps / "other-node-pid13.log", record(writer, 3, "other-node"))  # not read at all
    write(dumps / f"{HOST}-pid14.txt", record(writer, 4))  # not a dump file's name
    (dumps / f"{HOST}-pid15.log").mkdir()  # nor a directory
    assert len(tail.poll()) == 3 and tail.files == 2
    write(dumps / f"{HOST}-pid11.log", record(writer, 5))
    (grown,) = tail.poll().records()
    assert grown.start_us == (1_781_012_346 * SECOND_NS + 5_000_000) // 1000
    assert tail.records == 4
    assert sum(tail.skipped.values()) == 0


def test_a_directory_whose_time_has_not_moved_is_not_listed_again(
    tmp_path: Path, writer: InspectorWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files appear and vanish with the directory's modification time, which moves with
    them: an old, unchanged time means the same files, a changed one a new listing."""
    import os

    from burstscope.collector.collectives import tail as tail_module

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    write(dumps / f"{HOST}-pid11.log", record(writer, 0))
    os.utime(dumps, ns=(10 * SECOND_NS, 10 * SECOND_NS))  # an old time: trusted
    tail = DumpDirectoryTail([dumps], HOST)
    assert len(tail.poll()) == 1 and tail.files == 1
    listings = []
    listed = tail_module.DumpDirectoryTail._list
    monkeypatch.setattr(
        tail_module.DumpDirectoryTail,
        "_list",
        lambda self, directory: listings.append(directory) or listed(self, directory),
    )
    write(dumps / f"{HOST}-pid11.log", record(writer, 1))  # a file growing is not a change
    assert len(tail.poll()) == 1 and listings == []
    write(dumps / f"{HOST}-pid12.log", record(writer, 2))
    os.utime(dumps, ns=(20 * SECOND_NS, 20 * SECOND_NS))  # as old, but moved
    assert len(tail.poll()) == 1 and tail.files == 2 and listings == [dumps]
    (dumps / f"{HOST}-pid11.log").unlink()  # a recent time: listed at every poll
    assert tail.poll().records() == [] and tail.files == 1
    assert tail.poll().records() == [] and listings == [dumps, dumps, dumps]


def test_another_hosts_record_in_a_file_named_for_this_one_is_counted_not_kept(
    tmp_path: Path, writer: InspectorWriter
) -> None:
    write(tmp_path / f"{HOST}-pid11.log", record(writer, 0, "other-node"), record(writer, 1))
    tail = DumpDirectoryTail([tmp_path], HOST)
    assert len(tail.poll()) == 1
    assert tail.skipped[OTHER_HOST] == 1


def test_a_file_that_vanishes_is_dropped_and_its_skips_kept(
    tmp_path: Path, writer: InspectorWriter, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / f"{HOST}-pid11.log"
    write(path, "garbage\n", record(writer, 0))
    tail = DumpDirectoryTail([tmp_path], HOST)
    with caplog.at_level(logging.INFO):
        assert len(tail.poll()) == 1
        assert tail.skipped[MALFORMED] == 1
        path.unlink()
        assert tail.poll().records() == [] and tail.files == 0
    assert tail.skipped[MALFORMED] == 1
    assert any("is gone" in m for m in caplog.messages)
    # A new process reusing the name is a new file, read from its start.
    write(path, record(writer, 1))
    assert len(tail.poll()) == 1 and tail.files == 1


def test_a_directory_made_after_the_start_is_found(
    tmp_path: Path, writer: InspectorWriter, caplog: pytest.LogCaptureFixture
) -> None:
    later = tmp_path / "later"
    tail = DumpDirectoryTail([later, tmp_path / "never"], HOST)
    with caplog.at_level(logging.INFO):
        assert tail.poll().records() == []
        assert tail.poll().records() == []
        later.mkdir()
        write(later / f"{HOST}-pid11.log", record(writer, 0))
        assert len(tail.poll()) == 1
    said = [m for m in caplog.messages if "does not exist" in m]
    assert len(said) == 2, said  # once per directory, not once per poll


def test_files_beyond_the_bound_are_not_read_and_said_once(
    tmp_path: Path, writer: InspectorWriter, caplog: pytest.LogCaptureFixture
) -> None:
    for pid in range(3):
        write(tmp_path / f"{HOST}-pid{pid}.log", record(writer, pid))
    tail = DumpDirectoryTail([tmp_path], HOST, max_files=2)
    with caplog.at_level(logging.WARNING):
        assert len(tail.poll()) == 2
        assert len(tail.poll()) == 0
    assert tail.files == 2
    assert len([m for m in caplog.messages if "not read" in m]) == 1


def test_a_poll_reads_a_bounded_amount_of_each_file(
    tmp_path: Path, writer: InspectorWriter
) -> None:
    lines = [record(writer, index) for index in range(40)]
    write(tmp_path / f"{HOST}-pid11.log", *lines)
    tail = DumpDirectoryTail([tmp_path], HOST, poll_bytes=5 * len(lines[0]))
    counts: list[int] = []
    while len(counts) < 20 and (taken := len(tail.poll())):
        counts.append(taken)
    assert sum(counts) == 40 and max(counts) <= 6 and len(counts) >= 7


def test_a_record_cut_short_is_one_skip_when_the_next_begins(
    tmp_path: Path, writer: InspectorWriter
) -> None:
    path = tmp_path / f"{HOST}-pid11.log"
    whole = record(writer, 0)
    write(path, whole[: len(whole) // 2])
    tail = DumpDirectoryTail([tmp_path], HOST)
    assert tail.poll().records() == []  # it may still be being written
    write(path, "\n", record(writer, 1))
    assert len(tail.poll()) == 1
    assert tail.skipped[MALFORMED] == 1 and tail.skipped[TRUNCATED] == 0
