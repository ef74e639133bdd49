"""The agent's reader of Inspector dumps: its fast paths give what the general parser gives.

The running agent reads compact lines in one call (the compiled ``_spans`` reader where it is
built, msgspec where not) and falls back to the general path (each object cut at its start
and judged by parse_span) for anything else. Generated records -- right and wrong, in any
member order, compact or indented, with lines cut or blank between them -- appended in any
pieces must give the same spans, the same counts and the same skips on every path. And the
span store, given a poll's records as columns, keeps what it keeps given them one by one.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from burstscope.collector.collectives import nccl_inspector
from burstscope.collector.collectives.live import SpanStore
from burstscope.collector.collectives.nccl_inspector import (
    SpanKind,
    SpanReader,
    SpanRecord,
    Spans,
    _columns_of,
    compiled_reader_built,
    compiled_spans,
)
from burstscope.testing.inspector_writer import (
    ALL_TO_ALL,
    REDUCE_SCATTER,
    InspectorWriter,
    Operation,
)

HOST = "gpu-node-07"
COMPILED = compiled_reader_built()
_spans = nccl_inspector._spans


class GeneralReader(SpanReader):
    """Every read through the general path: objects cut at their starts, parse_span each."""

    def read(self) -> Spans:
        return Spans.of(self._feed(self._take()))


def _anything() -> st.SearchStrategy[Any]:
    """A JSON value of any kind, where a field holds something else than it should."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False),
        st.text(max_size=4),
        st.just([]),
        st.just({}),
    )


class _Records:
    """Strategies for Inspector records: all right (``wrong`` false: what the plugin writes,
    members in any order), or each field wrong now and then, any member left out."""

    def __init__(self, wrong: bool) -> None:
        self.wrong = wrong

    def often(self, value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        """The right kind of value; when wrong, one in six anything else."""
        return st.one_of(*[value] * 5, _anything()) if self.wrong else value

    def time(self) -> st.SearchStrategy[int]:
        times = [st.just(0), st.integers(1_781_012_345_000_000, 1_781_012_346_000_000)]
        if self.wrong:  # past 18 digits, the C reader's limit: left to Python
            times.append(st.integers(-(10**19), 10**19))
        else:
            times.append(st.integers(-(10**18) + 1, 10**18 - 1))
        return self.often(st.one_of(*times))

    def name(self) -> st.SearchStrategy[str]:
        names = st.sampled_from(["0x3b8e5f0a91c2d711", "0x2c", "unknown", "", "mesh_dp", "a b"])
        if self.wrong:  # escapes, quotes, control and non-ASCII characters
            return self.often(st.one_of(names, st.text(max_size=6)))
        return names

    @st.composite
    def members(
        draw: st.DrawFn,
        self: _Records,
        fields: dict[str, st.SearchStrategy[Any]],
        optional: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """An object of ``fields`` in any order, an unknown member at times; the ``optional``
        ones left out at times, any one when wrong."""
        names = draw(st.permutations(list(fields)))
        kept = [
            n
            for n in names
            if not (self.wrong or n in optional) or draw(st.integers(0, 9 if self.wrong else 2))
        ]
        out = {name: draw(fields[name]) for name in kept}
        if draw(st.integers(0, 4)) == 0:
            member = draw(st.sampled_from(["git_rev", "pid", "extra", "p2p_start_ts"]))
            out[member] = draw(_anything())
        return out

    @st.composite
    def record(draw: st.DrawFn, self: _Records) -> dict[str, Any]:
        """A verbose or plain record."""
        prefix = draw(st.sampled_from(["coll", "p2p"]))
        kernel = self.members(
            {
                "channel_id": st.integers(0, 63),
                "kernel_start_ts": self.time(),
                "kernel_stop_ts": self.time(),
                "kernel_record_ts": self.time(),
            },
            ("channel_id", "kernel_record_ts"),
        )
        trace = self.members(
            {
                f"{prefix}_start_ts": self.time(),
                f"{prefix}_stop_ts": self.time(),
                "kernel_events": self.often(st.lists(kernel, max_size=3)),
            }
        )
        collectives = st.sampled_from([ALL_TO_ALL, REDUCE_SCATTER, "Send", "AllReduce"])
        perf = self.members(
            {
                prefix: self.often(collectives),
                f"{prefix}_sn": st.integers(0, 9),
                f"{prefix}_busbw_gbs": st.one_of(st.floats(allow_nan=False), st.just("nan")),
                "event_trace_sn": st.just({"kernel_events": [{"channel_id": 0}]}),
                "event_trace_ts": st.one_of(st.none(), trace, trace),
            },
            (f"{prefix}_sn", f"{prefix}_busbw_gbs", "event_trace_sn", "event_trace_ts"),
        )
        header = self.members(
            {
                "id": self.name(),
                "comm_name": st.one_of(st.none(), self.name()),
                "rank": self.often(st.integers(0, 15)),
                "n_ranks": self.often(st.sampled_from([2, 8, 16, -0])),
                "nnodes": self.often(st.integers(1, 4)),
            },
            ("comm_name",),
        )
        metadata = self.members(
            {
                "inspector_output_format_version": self.often(st.sampled_from(["v4.0", "v5"])),
                "hostname": self.often(st.sampled_from([HOST, f"{HOST}.cluster", "gpu-b"])),
                "dump_timestamp_us": self.time(),
            },
            ("dump_timestamp_us",),
        )
        top = draw(
            self.members(
                {
                    "header": self.often(header),
                    "metadata": self.often(metadata),
                    f"{prefix}_perf": self.often(perf),
                }
            )
        )
        if self.wrong and draw(st.integers(0, 9)) == 0:  # both: a record parse_span refuses
            top["coll_perf" if prefix == "p2p" else "p2p_perf"] = draw(perf)
        return top


@st.composite
def _dump(draw: st.DrawFn) -> bytes:
    """A dump file: records as the plugin writes them or, half the time, not quite."""
    wrong = draw(st.booleans())
    parts = []
    for document in draw(st.lists(_Records(wrong).record(), min_size=1, max_size=8)):
        style = draw(st.integers(0, 9)) if wrong else 9
        if style == 0:  # indented, as the plugin's README shows them
            text = json.dumps(document, indent=2) + "\n"
        elif style == 1:  # UTF-8 rather than escapes
            text = json.dumps(document, separators=(",", ":"), ensure_ascii=False) + "\n"
        else:
            text = json.dumps(document, separators=(",", ":")) + "\n"
        line = text.encode()
        damage = draw(st.integers(0, 14)) if wrong else None
        if damage == 0:  # cut by a writer that died
            line = line[: draw(st.integers(0, len(line)))] + b"\n"
        elif damage == 1:
            line = b"\n" + line  # a blank line before it
        elif damage == 2:
            line = line.replace(b":", b": ", 1)  # whitespace the plugin does not write
        parts.append(line)
    if draw(st.booleans()):  # the last one cut: still being written, or truncated at finish
        parts[-1] = parts[-1][: draw(st.integers(0, len(parts[-1])))]
    return b"".join(parts)


def _read(make: Callable[..., SpanReader], text: bytes, cuts: list[int], cap: int) -> Any:
    """Append ``text`` in pieces cut at ``cuts``, reading after each: what was read, counts."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "dump.log"
        path.write_bytes(b"")
        reader = make(path, hostname=HOST, max_object_bytes=cap)
        records: list[SpanRecord] = []
        for lo, hi in itertools.pairwise([0, *sorted(set(cuts)), len(text)]):
            with path.open("ab") as file:
                file.write(text[lo:hi])
            records += reader.read().records()
            while not reader.caught_up:
                records += reader.read().records()
        reader.finish()
        return records, reader.records, reader.other_host, dict(sorted(reader.skipped.items()))


@pytest.mark.parametrize("path", ["compiled", "msgspec"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_agents_reader_reads_as_the_general_parser(path: str, data: st.DataObject) -> None:
    """The same spans, counts and skips as parse_span on each object, however the file grew."""
    if path == "compiled" and not COMPILED:
        pytest.skip("the compiled reader is not built (no C compiler at install)")
    text = data.draw(_dump(), label="text")
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=6), label="cuts")
    cap = data.draw(st.sampled_from([300, 1000, 256 * 1024]), label="cap")
    # The compiled reader takes the file a chunk at a time: lines cut across chunks too.
    chunk = data.draw(st.sampled_from([1, 7, 64, 500, 64 * 1024]), label="chunk")
    with pytest.MonkeyPatch.context() as patch:
        if path == "msgspec":
            patch.setattr(nccl_inspector, "_spans", None)
        patch.setattr(nccl_inspector, "READ_CHUNK", chunk)
        fast = _read(SpanReader, text, cuts, cap)
    assert fast == _read(GeneralReader, text, [], cap)


def _plugin_lines(directory: Path, count: int, dp_every: int) -> tuple[str, Path]:
    """``count`` records as the test kit writes them (json.cc's layout), 1 ms apart, every
    ``dp_every``-th a DP ReduceScatter and the others EP AllToAll: the writer's host, the file."""
    writer = InspectorWriter(directory)
    start = 1_781_012_346_000_000_000
    for index in range(count):
        kind, name = ("EP", ALL_TO_ALL) if index % dp_every else ("DP", REDUCE_SCATTER)
        begin = start + index * 1_000_000
        writer.write(Operation(kind, name, begin, begin, begin + 500_000, 1 << 20))
    writer.close()
    return writer.hostname, writer.path


@pytest.mark.skipif(not COMPILED, reason="the compiled reader is not built")
def test_the_compiled_reader_takes_the_lines_the_plugin_writes(tmp_path: Path) -> None:
    """The test kit's lines (json.cc's layout) are read in C, not left to the slower paths."""
    host, path = _plugin_lines(tmp_path, 3, dp_every=2)
    text = path.read_bytes()
    spans = compiled_spans(text, len(text), 256 * 1024)
    assert spans is not None
    dp = SpanKind(host, "v4.0", "0x3b8e5f0a91c2d713", None, 16, 4, REDUCE_SCATTER)
    ep = SpanKind(host, "v4.0", "0x3b8e5f0a91c2d711", None, 8, 2, ALL_TO_ALL)
    assert spans.records() == [
        SpanRecord(*dp, 1_781_012_346_000_000, 1_781_012_346_000_500),
        SpanRecord(*ep, 1_781_012_346_001_000, 1_781_012_346_001_500),
        SpanRecord(*dp, 1_781_012_346_002_000, 1_781_012_346_002_500),
    ]


@pytest.mark.skipif(not COMPILED, reason="the compiled reader is not built")
@pytest.mark.parametrize("chunk", [1, 7, 333, 64 * 1024])
def test_the_compiled_reader_reads_a_file_a_chunk_at_a_time(tmp_path: Path, chunk: int) -> None:
    """The lines after the pending bytes, cut across chunks anywhere, read in C: what the
    whole text read at once gives, up to the last newline. (A decline would still read
    right, by the slower paths: so this asserts it reads, not only what it reads.)"""
    _, path = _plugin_lines(tmp_path, 6, dp_every=3)
    text = path.read_bytes()
    lines = text.splitlines(keepends=True)
    whole = compiled_spans(text, len(text), 256 * 1024)
    assert whole is not None
    pending = len(lines[0]) // 2  # read before, held: the first line's start
    until = len(text) - len(lines[-1]) // 2  # the last line not all written yet
    with path.open("rb") as file:
        found = _spans.scan_file(
            file.fileno(), pending, until - pending, text[:pending], 256 * 1024, chunk
        )
        # A line longer than the cap, anywhere: the slower paths judge it.
        assert _spans.scan_file(file.fileno(), 0, len(text), b"", len(lines[2]) - 1, chunk) is None
    assert found is not None
    kinds, columns, consumed = found
    assert consumed == len(text) - len(lines[-1])
    assert _columns_of(kinds, columns).records() == whole.records()[:-1]


def _kinds() -> st.SearchStrategy[SpanKind]:
    return st.builds(
        SpanKind,
        st.just(HOST),
        st.just("v4.0"),
        st.sampled_from(["0xa", "0xb", "0xc", "0xd"]),
        st.sampled_from([None, "mesh_dp", "mesh_ep"]),
        st.sampled_from([2, 8, 16, 32]),
        st.sampled_from([1, 2, 4]),
        st.sampled_from([ALL_TO_ALL, REDUCE_SCATTER, "Send", "AllReduce"]),
    )


def _spans_of(store: SpanStore) -> list[tuple[int, int, tuple[str | None, str, str]]]:
    starts, ends, ids = store._overlapping(-(2**62), 2**62)
    spans = zip(starts.tolist(), ends.tolist(), [store.keys[i] for i in ids.tolist()], strict=True)
    # A key's kind is None while undecided, and no str sorts against None: None first.
    return sorted(spans, key=lambda s: (s[0], s[1], [(p is not None, p or "") for p in s[2]]))


_TIMES = st.one_of(st.none(), st.integers(-5, 10_000))


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(
        st.builds(
            lambda kind, start, stop: SpanRecord._make((*kind, start, stop)),
            _kinds(),
            _TIMES,
            _TIMES,
        ),
        max_size=40,
    ),
    polls=st.lists(st.integers(1, 40), max_size=5),
)
# Two spans at the same times, one of them undecided (no kind: None in its key), as a full
# run beside two CPU hogs found: the comparison must order them.
@example(
    records=[
        SpanRecord._make((HOST, "v4.0", "0xa", None, 2, nodes, collective, 1, 1))
        for nodes, collective in ((2, "AllReduce"), (1, REDUCE_SCATTER))
    ],
    polls=[],
)
def test_the_store_keeps_a_polls_columns_as_it_keeps_records_one_by_one(
    records: list[SpanRecord], polls: list[int]
) -> None:
    """A new largest group reclassifies the records after it, within a poll too: the same
    spans, keys and skips whether the records come as polls of columns or one at a time."""
    whole, single = SpanStore(), SpanStore()
    bounds = sorted({0, len(records), *(p for p in polls if p < len(records))})
    for lo, hi in itertools.pairwise(bounds):
        whole.add(Spans.of(records[lo:hi]))
    for record in records:
        single.add(Spans.of([record]))
    assert (whole.placed, whole.skipped) == (single.placed, single.skipped)
    assert _spans_of(whole) == _spans_of(single)


@pytest.mark.parametrize("path", ["compiled", "msgspec"])
def test_a_whole_last_object_without_its_newline_is_read_as_the_general_parser_reads_it(
    path: str,
) -> None:
    """Found by the property test above: the fast paths kept an object after the last
    newline for later, and at the end called it truncated, where the general parser reads
    a whole object newline or not."""
    if path == "compiled" and not COMPILED:
        pytest.skip("the compiled reader is not built (no C compiler at install)")
    writer_line = (
        b'{"header":{"id":"0x1","rank":0,"n_ranks":2,"nnodes":1},"metadata":'
        b'{"inspector_output_format_version":"v4.0","hostname":"' + HOST.encode() + b'"},'
        b'"coll_perf":{"coll":"AllReduce"}}'
    )
    text = writer_line + b"\n" + writer_line  # the second without its newline
    with pytest.MonkeyPatch.context() as patch:
        if path == "msgspec":
            patch.setattr(nccl_inspector, "_spans", None)
        fast = _read(SpanReader, text, [], 300)
    assert fast == _read(GeneralReader, text, [], 300)
    assert fast[1] == 2 and fast[3] == {}
