"""NCCL Inspector dumps and PyTorch traces parsed into records, and each collective's class.

Fixtures (tests/fixtures/collectives/, written from the formats' sources): inspector-plain.log
as NCCL 2.30's json.cc writes it (one compact object per line, with comm_name and a p2p_perf
Send), inspector-verbose.log indented as the plugin's README shows it (2.28 fields, with
event_trace); pytorch-trace.json as Kineto writes it. Goldens: pytest --update-golden.
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import logging
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstscope.collector.collectives.nccl_inspector import (
    MALFORMED,
    OVERSIZED,
    TRUNCATED,
    InspectorReader,
    InspectorRecord,
    KernelChannel,
    parse_record,
    same_host,
)
from burstscope.collector.collectives.pytorch_trace import (
    ABSOLUTE,
    BAD_EVENT,
    BASE_TIME,
    GIVEN,
    NO_COLLECTIVE,
    TraceError,
    parse_ranks,
    parse_trace,
    read_trace,
)
from burstscope.detectors import collective_classes as classes
from burstscope.detectors.coflows import TYPE_RANK
from tests.conftest import FIXTURES, compare_golden

HERE = FIXTURES / "collectives"
HOST = "gpu-node-07"


def _golden_text(value: object) -> str:
    return json.dumps(value, indent=1) + "\n"


def _read_whole(path: Path, **options: Any) -> tuple[list[InspectorRecord], InspectorReader]:
    reader = InspectorReader(path, **options)
    records = []
    while True:
        records += reader.read()
        if reader.caught_up:
            break
    reader.finish()
    return records, reader


def _summary(records: list[InspectorRecord], reader: InspectorReader) -> dict[str, Any]:
    return {
        "records": [dataclasses.asdict(r) for r in records],
        "parsed": reader.records,
        "other_host": reader.other_host,
        "skipped": dict(sorted(reader.skipped.items())),
    }


# -- NCCL Inspector -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["inspector-plain", "inspector-verbose"])
def test_inspector_dump_golden(name: str, update_golden: bool) -> None:
    records, reader = _read_whole(HERE / f"{name}.log", hostname=HOST)
    compare_golden(
        HERE / f"{name}.golden.json", _golden_text(_summary(records, reader)), update_golden
    )


def test_inspector_fixtures_hold_what_they_claim() -> None:
    """Each fixture has this host's records, another host's, a bad object and a cut tail."""
    for name, verbose in (("inspector-plain", False), ("inspector-verbose", True)):
        records, reader = _read_whole(HERE / f"{name}.log", hostname=HOST)
        assert reader.other_host == 1
        assert reader.skipped == Counter({MALFORMED: 1, TRUNCATED: 1})
        assert {r.hostname for r in records} == {HOST}
        assert all((r.kernel_channels is not None) == verbose for r in records)
        assert all((r.start_us is not None) == verbose for r in records)


def _split_read(text: bytes, cuts: list[int], read_bytes: int) -> dict[str, Any]:
    """Append the file in pieces cut at ``cuts``, reading after each append."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "dump.log"
        path.write_bytes(b"")
        reader = InspectorReader(path, hostname=HOST, read_bytes=read_bytes)
        records: list[InspectorRecord] = []
        bounds = [0, *sorted(set(cuts)), len(text)]
        for lo, hi in itertools.pairwise(bounds):
            with path.open("ab") as file:
                file.write(text[lo:hi])
            records += reader.read()
            while not reader.caught_up:
                records += reader.read()
        reader.finish()
        return _summary(records, reader)


@pytest.mark.parametrize("name", ["inspector-plain", "inspector-verbose"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_inspector_any_split_into_appends_gives_the_same_records(
    name: str, data: st.DataObject
) -> None:
    text = (HERE / f"{name}.log").read_bytes()
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=25), label="cuts")
    read_bytes = data.draw(st.sampled_from([1, 7, 64, 1000, 1 << 20]), label="read_bytes")
    records, reader = _read_whole(HERE / f"{name}.log", hostname=HOST)
    assert _split_read(text, cuts, read_bytes) == _summary(records, reader)


def _record(sequence: int, host: str = HOST, **perf: Any) -> dict[str, Any]:
    return {
        "header": {"id": "0xabc", "rank": 0, "n_ranks": 2, "nnodes": 2},
        "metadata": {
            "inspector_output_format_version": "v4.0",
            "dump_timestamp_us": 1781012345000000 + sequence,
            "hostname": host,
            "pid": 7,
        },
        "coll_perf": {
            "coll": "AllReduce",
            "coll_sn": sequence,
            "coll_msg_size_bytes": 1 << 20,
            "coll_exec_time_us": 40,
            "coll_timing_source": "kernel_gpu",
            "coll_algobw_gbs": 26.2144,
            "coll_busbw_gbs": 26.2144,
            **perf,
        },
    }


def _line(sequence: int, **perf: Any) -> bytes:
    return json.dumps(_record(sequence, **perf), separators=(",", ":")).encode() + b"\n"


BAD_INPUTS = [
    # (what, file bytes, the reader's cap, sequence numbers kept, skipped kinds)
    ("not JSON", _line(1) + b'{"header":{"id":"0x1",}\n' + _line(2), None, [1, 2], [MALFORMED]),
    ("JSON but no record", _line(1) + b'{"a":1}\n' + _line(2), None, [1, 2], [MALFORMED]),
    (
        "a field of the wrong type",
        _line(1) + _line(2, coll_sn="2") + _line(3),
        None,
        [1, 3],
        [MALFORMED],
    ),
    (
        "comm_name written without its value",
        _line(1).replace(b'"id":"0xabc"', b'"id":"0xabc","comm_name":') + _line(2),
        None,
        [2],
        [MALFORMED],
    ),
    (
        "bytes between objects",
        _line(1) + b"\x00\xff garbage\n" + _line(2),
        None,
        [1, 2],
        [MALFORMED],
    ),
    (
        "not UTF-8 inside an object",
        _line(1).replace(b"AllReduce", b"\xff\xfe") + _line(2),
        None,
        [2],
        [MALFORMED],
    ),
    ("an object cut, then the next", _line(1)[:90] + b"\n" + _line(2), None, [2], [MALFORMED]),
    ("cut at the end", _line(1) + _line(2)[:120], None, [1], [TRUNCATED]),
    ("over the cap", _line(1) + _line(2, coll="x" * 5000) + _line(3), 2000, [1, 3], [OVERSIZED]),
    (
        "over the cap at the end",
        _line(1) + _line(2, coll="x" * 5000)[:3000],
        2000,
        [1],
        [OVERSIZED],
    ),
    ("both kinds of perf", _line(1)[:-2] + b',"p2p_perf":{}}\n' + _line(2), None, [2], [MALFORMED]),
]


@pytest.mark.parametrize(
    ("text", "cap", "kept", "kinds"),
    [case[1:] for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
def test_inspector_bad_input_is_one_counted_logged_skip(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    text: bytes,
    cap: int | None,
    kept: list[int],
    kinds: list[str],
) -> None:
    path = tmp_path / "dump.log"
    path.write_bytes(text)
    options = {} if cap is None else {"max_object_bytes": cap}
    with caplog.at_level(logging.WARNING, "burstscope.collector.collectives"):
        records, reader = _read_whole(path, **options)
    assert [r.sequence_number for r in records] == kept
    assert reader.skipped == Counter(kinds)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == len(kinds)
    assert all(
        f"skipped a {kind} Inspector object" in w for kind, w in zip(kinds, warnings, strict=True)
    )


def test_inspector_repeated_skips_are_counted_and_logged_once_at_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "dump.log"
    path.write_bytes(b"".join(_line(n) + b'{"bad"\n' for n in range(5)) + _line(5))
    with caplog.at_level(logging.DEBUG, "burstscope.collector.collectives"):
        records, reader = _read_whole(path)
    assert len(records) == 6
    assert reader.skipped == Counter({MALFORMED: 5})
    levels = [r.levelno for r in caplog.records if "skipped" in r.getMessage()]
    assert levels == [logging.WARNING] + [logging.DEBUG] * 4


def test_inspector_reads_again_a_file_the_writer_truncated(tmp_path: Path) -> None:
    path = tmp_path / "dump.log"
    path.write_bytes(_line(1) + _line(2))
    reader = InspectorReader(path)
    assert [r.sequence_number for r in reader.read()] == [1, 2]
    path.write_bytes(_line(7))  # a new writer: fopen(..., "w")
    assert [r.sequence_number for r in reader.read()] == [7]
    with path.open("ab") as file:
        file.write(_line(8))
    assert [r.sequence_number for r in reader.read()] == [8]


def test_inspector_missing_file_is_no_records(tmp_path: Path) -> None:
    reader = InspectorReader(tmp_path / "not-yet.log")
    assert reader.read() == []
    assert reader.caught_up


def test_inspector_one_read_takes_at_most_read_bytes(tmp_path: Path) -> None:
    path = tmp_path / "dump.log"
    path.write_bytes(b"".join(_line(n) for n in range(10)))
    reader = InspectorReader(path, read_bytes=len(_line(0)) * 3)
    first = reader.read()
    assert len(first) == 3 and not reader.caught_up


def test_parse_record_reads_nan_zero_timestamps_and_point_to_point() -> None:
    document = _record(5, coll_algobw_gbs="nan", coll_busbw_gbs=float("nan"))
    document["coll_perf"]["event_trace_ts"] = {
        "coll_start_ts": 10,
        "coll_stop_ts": 0,
        "kernel_events": [
            {"channel_id": 0, "kernel_start_ts": 12, "kernel_stop_ts": 0, "kernel_record_ts": 0}
        ],
    }
    record = parse_record(document)
    assert (record.algorithm_bandwidth_gbs, record.bus_bandwidth_gbs) == (None, None)
    assert (record.start_us, record.stop_us) == (10, None)
    assert record.kernel_channels == (KernelChannel(0, 12, None, None),)
    p2p = _record(6)
    perf = p2p.pop("coll_perf")
    p2p["p2p_perf"] = {key.replace("coll", "p2p"): value for key, value in perf.items()}
    p2p["p2p_perf"] |= {"p2p": "Recv", "p2p_peer": 1}
    assert (parse_record(p2p).collective, parse_record(p2p).peer) == ("Recv", 1)
    assert parse_record(p2p).point_to_point


@pytest.mark.parametrize(
    ("written", "wanted", "same"),
    [
        ("gpu-node-07", "gpu-node-07", True),
        ("gpu-node-07.cluster.example", "gpu-node-07", True),
        ("gpu-node-07", "gpu-node-07.cluster.example", True),
        ("gpu-node-08", "gpu-node-07", False),
        ("gpu-node-070", "gpu-node-07", False),
    ],
)
def test_same_host(written: str, wanted: str, same: bool) -> None:
    assert same_host(written, wanted) is same


# -- PyTorch traces -------------------------------------------------------------------------


def test_pytorch_trace_golden(update_golden: bool) -> None:
    trace = read_trace(HERE / "pytorch-trace.json")
    compare_golden(
        HERE / "pytorch-trace.golden.json", _golden_text(dataclasses.asdict(trace)), update_golden
    )


def test_pytorch_trace_holds_what_the_fixture_claims() -> None:
    trace = read_trace(HERE / "pytorch-trace.json")
    assert trace.time_base == BASE_TIME
    assert [c.metadata.collective for c in trace.calls] == [
        "allreduce",
        "all_to_all",
        "send",
        "recv",
        "allreduce",
    ]
    assert [k.kernel for k in trace.kernels] == [
        "AllReduce",
        "SendRecv",
        "SendRecv",
        "SendRecv",
        "AllReduce",
    ]
    # Own args (Kineto 2024 on), else the op with the same External id, else nothing.
    assert [k.metadata.collective if k.metadata else None for k in trace.kernels] == [
        "allreduce",
        "all_to_all",
        "send",
        "recv",
        None,
    ]
    assert trace.skipped == {BAD_EVENT: 2, NO_COLLECTIVE: 1}
    # baseTimeNanoseconds 1775078550000000000 + ts 5933796001051.890 us, to the nanosecond.
    assert trace.kernels[0].start_unix_ns == 1781012346001051890
    assert trace.kernels[0].end_unix_ns == 1781012346001051890 + 1637204
    world = trace.calls[-1].metadata
    assert (world.group_ranks, world.group_size) == (None, 64)  # PyTorch cut the list


def _minimal_trace(ts: str, base: int | None) -> str:
    event = (
        '{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(x)", "pid": 0, '
        f'"tid": 7, "ts": {ts}, "dur": 2.5, "args": {{}}}}'
    )
    head = "" if base is None else f'"baseTimeNanoseconds": {base}, '
    return f'{{{head}"traceEvents": [{event}]}}'


def test_pytorch_trace_time_bases(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(_minimal_trace("1700000000123456.789", None))  # Kineto before April 2024
    trace = read_trace(path)
    assert (trace.time_base, trace.kernels[0].start_unix_ns) == (ABSOLUTE, 1700000000123456789)
    assert trace.kernels[0].end_unix_ns == 1700000000123459289
    path.write_text(_minimal_trace("12.001", None))  # relative, and no base in the file
    with pytest.raises(TraceError, match="base_unix_ns"):
        read_trace(path)
    trace = read_trace(path, base_unix_ns=1_000_000_000)
    assert (trace.time_base, trace.kernels[0].start_unix_ns) == (GIVEN, 1_000_012_001)
    packed = tmp_path / "trace.json.gz"
    packed.write_bytes(gzip.compress(_minimal_trace("12.001", 5).encode()))
    assert read_trace(packed).kernels[0].start_unix_ns == 12_006


def test_pytorch_trace_array_form() -> None:
    events = json.loads(_minimal_trace("1700000000123456.789", None))["traceEvents"]
    assert parse_trace(events).kernels[0].stream == 7


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"traceEvents": [', "not JSON"),
        (b'{"events": []}', "no traceEvents"),
        (b"x" * 200, "larger than"),
    ],
)
def test_pytorch_trace_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        read_trace(path, max_bytes=100)


@pytest.mark.parametrize(
    ("text", "ranks"),
    [
        ("[3, 11]", (3, 11)),
        ("[]", ()),
        ("[0, 1, 2, ..., 63]", None),
        ("0, 1", None),
    ],
)
def test_parse_ranks(text: str, ranks: tuple[int, ...] | None) -> None:
    assert parse_ranks(text) == ranks


# -- Classes ----------------------------------------------------------------------------------


def test_classes_are_coflows_types() -> None:
    assert {classes.name_kind(n) for n in ("ep", "pp", "dp")} == set(TYPE_RANK)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("mesh_ep", "EP"),
        ("mesh_pp", "PP"),
        ("mesh_dp", "DP"),
        ("mesh_dp_shard", "DP"),
        ("mesh_dp_shard_cp", "DP"),
        ("dp_shard_mod_ep", "DP"),
        ("EXPERT_MODEL_PARALLEL_GROUP", "EP"),
        ("EXPERT_DATA_PARALLEL_GROUP", "DP"),
        ("PIPELINE_MODEL_PARALLEL_GROUP", "PP"),
        ("DATA_PARALLEL_GROUP_WITH_CP", "DP"),
        ("TENSOR_MODEL_PARALLEL_GROUP", classes.OTHER),
        ("mesh_cp", classes.OTHER),
        ("EXPERT_TENSOR_PARALLEL_GROUP", None),
        ("EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP", None),
        ("pp_dp", None),
        ("DP Group 0", "DP"),
        ("ExpertParallel", "EP"),
        ("ep0", "EP"),
        ("default_pg", None),
        ("0", None),
        ("mesh_dim_1", None),
        ("metadata", None),
        ("deep", None),
        ("", None),
    ],
)
def test_name_kind(name: str, kind: str | None) -> None:
    assert classes.name_kind(name) == kind


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("AllReduce", "AllReduce"),
        ("allreduce_coalesced", "AllReduce"),
        ("_allgather_base", "AllGather"),
        ("all_gather_into_tensor_coalesced", "AllGather"),
        ("_reduce_scatter_base", "ReduceScatter"),
        ("all_to_all", "AllToAll"),
        ("alltoall_base", "AllToAll"),
        ("All2All", "AllToAll"),
        ("nccl:all_to_all", "AllToAll"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllReduce"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", "AllGather"),
        ("ncclDevKernel_SendRecv(x)", "SendRecv"),
        ("send", "Send"),
        ("Invalid", None),
        ("ncclDevKernel_Generic(x)", None),
        ("coalesced", None),
    ],
)
def test_canonical_collective(name: str, canonical: str | None) -> None:
    assert classes.canonical_collective(name) == canonical


def test_rules_in_order_each_says_which_decided() -> None:
    mapping = {"0xAB": "EP", "mesh_odd": "PP", "tp_group": classes.OTHER}
    world = classes.Communication("AllReduce", "0x1", ("default_pg",), 16, 2)
    communications = [
        classes.Communication("AllReduce", "0xab", ("mesh_dp",), 8, 1),  # mapping wins
        classes.Communication("AllReduce", None, ("mesh_odd",), 8, 1),
        classes.Communication("AllReduce", None, ("tp_group",), 8, 1),
        classes.Communication("AllReduce", None, ("3", "mesh_dp"), 8, 1),  # name: description
        classes.Communication("all_to_all", None, ("mesh_tp",), 8, 1),  # the name wins
        classes.Communication("all_to_all", None, ("mesh_dp", "mesh_pp"), 8, 1),  # disagree
        classes.Communication("Send", "0x2", (), 2, 2),
        world,
        classes.Communication("ReduceScatter", "0x3", (), 16, 1),  # as many ranks, fewer nodes
        classes.Communication("AllGather", "0x4", (), 8, 2),
        classes.Communication("Broadcast", "0x1", (), 16, 2),
    ]
    assert classes.classify(communications, mapping) == (
        classes.Classification("EP", classes.MAPPING_COMMUNICATOR, "0xAB"),
        classes.Classification("PP", classes.MAPPING_GROUP, "mesh_odd"),
        classes.Classification(None, classes.MAPPING_GROUP, "tp_group"),
        classes.Classification("DP", classes.GROUP_NAME, "mesh_dp"),
        classes.Classification(None, classes.GROUP_NAME, "mesh_tp"),
        classes.Classification("EP", classes.INFERRED_ALL_TO_ALL, "AllToAll"),
        classes.Classification("PP", classes.INFERRED_SEND_RECV, "Send"),
        classes.Classification("DP", classes.INFERRED_LARGEST_GROUP, "AllReduce"),
        classes.Classification(None, classes.UNDECIDED, ""),
        classes.Classification(None, classes.UNDECIDED, ""),
        classes.Classification(None, classes.UNDECIDED, ""),
    )


def test_mapping_values_are_checked() -> None:
    with pytest.raises(ValueError, match="TP"):
        classes.classify([], {"mesh_tp": "TP"})


def test_classes_of_the_fixtures() -> None:
    trace = read_trace(HERE / "pytorch-trace.json")
    calls = [
        classes.Communication(
            c.metadata.collective,
            None,
            tuple(n for n in (c.metadata.group_description, c.metadata.group_name) if n),
            c.metadata.group_size,
        )
        for c in trace.calls
    ]
    assert [(k.kind, k.rule) for k in classes.classify(calls)] == [
        ("DP", classes.GROUP_NAME),
        ("EP", classes.GROUP_NAME),
        ("PP", classes.GROUP_NAME),
        ("PP", classes.GROUP_NAME),
        ("DP", classes.INFERRED_LARGEST_GROUP),  # default_pg: the world, 64 ranks
    ]
    records, _ = _read_whole(HERE / "inspector-plain.log", hostname=HOST)
    dumped = [
        classes.Communication(
            r.collective,
            r.communicator_id,
            (r.communicator_name,) if r.communicator_name else (),
            r.n_ranks,
            r.nnodes,
        )
        for r in records
    ]
    assert [(k.kind, k.rule) for k in classes.classify(dumped)] == [
        ("DP", classes.INFERRED_LARGEST_GROUP),
        ("DP", classes.GROUP_NAME),
        ("PP", classes.INFERRED_SEND_RECV),
        ("DP", classes.INFERRED_LARGEST_GROUP),
    ]


@pytest.mark.parametrize("name", ["inspector-plain", "inspector-verbose"])
def test_the_agents_lean_reader_gives_each_records_span_fields(name: str) -> None:
    """SpanReader (the agent's) and InspectorReader (the report's) on the same file: the
    same records, skips and spans (the earliest kernel start, the latest stop)."""
    from burstscope.collector.collectives.join import kernel_span_us
    from burstscope.collector.collectives.nccl_inspector import SpanReader

    records, whole = _read_whole(HERE / f"{name}.log", hostname=HOST)
    lean_reader = SpanReader(HERE / f"{name}.log", hostname=HOST)
    lean = []
    while True:
        lean.extend(lean_reader.read().records())
        if lean_reader.caught_up:
            break
    lean_reader.finish()
    assert lean_reader.skipped == whole.skipped
    assert len(lean) == len(records) > 0
    for full, span in zip(records, lean, strict=True):
        times = kernel_span_us(full) if full.kernel_channels is not None else None
        assert (span.start_us, span.stop_us) == (times or (None, None))
        assert (span.hostname, span.communicator_id, span.communicator_name) == (
            full.hostname,
            full.communicator_id,
            full.communicator_name,
        )
        assert (span.n_ranks, span.nnodes, span.collective) == (
            full.n_ranks,
            full.nnodes,
            full.collective,
        )


@pytest.mark.parametrize(
    ("text", "cap", "kept", "kinds"),
    [case[1:] for case in BAD_INPUTS if case[0] != "a field of the wrong type"],
    ids=[case[0] for case in BAD_INPUTS if case[0] != "a field of the wrong type"],
)
def test_the_agents_lean_reader_skips_bad_input_alike(
    tmp_path: Path, text: bytes, cap: int | None, kept: list[int], kinds: list[str]
) -> None:
    from burstscope.collector.collectives.nccl_inspector import SpanReader

    path = tmp_path / "dump.log"
    path.write_bytes(text)
    reader = SpanReader(path) if cap is None else SpanReader(path, max_object_bytes=cap)
    found = []
    while True:
        found.extend(reader.read().records())
        if reader.caught_up:
            break
    reader.finish()
    assert len(found) == len(kept)
    assert reader.skipped == Counter(kinds)


def _span_split_read(text: bytes, cuts: list[int], read_bytes: int) -> tuple[Any, ...]:
    """The agent's reader, the file appended in pieces cut at ``cuts``."""
    from burstscope.collector.collectives.nccl_inspector import SpanReader

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "dump.log"
        path.write_bytes(b"")
        reader = SpanReader(path, hostname=HOST, read_bytes=read_bytes)
        records = []
        for lo, hi in itertools.pairwise([0, *sorted(set(cuts)), len(text)]):
            with path.open("ab") as file:
                file.write(text[lo:hi])
            records += reader.read().records()
            while not reader.caught_up:
                records += reader.read().records()
        reader.finish()
        return records, reader.records, reader.other_host, dict(sorted(reader.skipped.items()))


BAD_TEXT = b"".join(case[1] for case in BAD_INPUTS if case[2] is None)


@pytest.mark.parametrize("name", ["inspector-plain", "inspector-verbose", "bad"])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_agents_reader_gives_the_same_spans_however_the_file_grew(
    name: str, data: st.DataObject
) -> None:
    """Its one-call decoding of whole lines and the general path agree: any appends, any
    read size, the same spans and counts as reading the file at once."""
    text = BAD_TEXT if name == "bad" else (HERE / f"{name}.log").read_bytes()
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=25), label="cuts")
    read_bytes = data.draw(st.sampled_from([1, 7, 64, 1000, 1 << 20]), label="read_bytes")
    assert _span_split_read(text, cuts, read_bytes) == _span_split_read(text, [], 1 << 20)
