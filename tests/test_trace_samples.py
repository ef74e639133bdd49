"""A trace's samples come back as written, to the byte, whichever unit a port's counters
are stored in (4-octet words where every value is a multiple of 4, else bytes)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstscope.collector.trace import (
    PortColumns,
    SlowRow,
    TraceError,
    TraceWriter,
    read_samples,
    read_slow,
)
from burstscope.collector.trace.schema import FORMAT_VERSION, FORMAT_VERSION_KEY

counter = st.one_of(
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**62 - 1).map(lambda words: words * 4),  # counters/port_*_data
)
appends = st.lists(
    st.tuples(
        st.sampled_from([("mlx5_0", 1), ("mlx5_1", 1), ("efa_0", 1)]),
        st.lists(st.tuples(counter, counter), min_size=1, max_size=12),
    ),
    min_size=1,
    max_size=8,
)


def columns(device: str, port: int, at: int, values: list[tuple[int, int]]) -> PortColumns:
    count = len(values)
    return PortColumns(
        device,
        port,
        50_000_000_000,
        np.arange(at, at + count, dtype=np.int64) * 1_000_000,
        np.array([x for x, _ in values], dtype=np.uint64),
        np.array([r for _, r in values], dtype=np.uint64),
        np.full(count, 1_500, dtype=np.int64),
        np.zeros(count, dtype=np.bool_),
    )


@settings(max_examples=80, deadline=None)
@given(appends, st.booleans())
def test_counters_come_back_exact_in_either_unit(
    written: list[tuple[tuple[str, int], list[tuple[int, int]]]], one_piece: bool
) -> None:
    expected: dict[tuple[str, int], list[tuple[int, int]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        writer = TraceWriter(Path(scratch), piece_seconds=1e9 if one_piece else 0.0)
        at = 0
        for (device, port), values in written:
            writer.append([columns(device, port, at, values)])
            expected.setdefault((device, port), []).extend(values)
            at += len(values)
        writer.close()
        got: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for samples in read_samples(Path(scratch)):
            pairs = zip(samples.xmit_bytes.tolist(), samples.rcv_bytes.tolist(), strict=True)
            got.setdefault((samples.device, samples.port), []).extend(pairs)
        table = pq.read_table(scratch)
    assert got == expected
    # Words exactly where every value of an append divides by 4.
    units = table.column("unit_bytes").to_numpy()
    stored = table.column("xmit_units").to_numpy().astype(object) * units.astype(object)
    assert set(units.tolist()) <= {1, 4}
    assert sorted(stored.tolist()) == sorted(x for values in expected.values() for x, _ in values)


def test_data_counters_are_stored_in_words_and_byte_counters_in_bytes(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path)
    writer.append(
        [
            columns("mlx5_0", 1, 0, [(4 * 1000, 4 * 7), (4 * 2000, 4 * 9)]),
            columns("efa_0", 1, 0, [(1001, 8), (2003, 12)]),
        ]
    )
    writer.close()
    table = pq.read_table(tmp_path).to_pydict()
    rows = sorted(
        zip(
            table["device"],
            table["xmit_units"],
            table["rcv_units"],
            table["unit_bytes"],
            strict=True,
        )
    )
    assert rows == [
        ("efa_0", 1001, 8, 1),
        ("efa_0", 2003, 12, 1),
        ("mlx5_0", 1000, 7, 4),
        ("mlx5_0", 2000, 9, 4),
    ]


def _trace_with_slow(path: Path) -> None:
    path.mkdir(exist_ok=True)
    writer = TraceWriter(path)
    writer.append([columns("mlx5_0", 1, 0, [(4 * 1000, 4 * 7), (4 * 2000, 4 * 9)])])
    writer.append_slow([SlowRow(1_000_000, "mlx5_0", 1, "state", 4, None, True)])
    writer.close()


def test_every_piece_states_its_format_version(tmp_path: Path) -> None:
    """Samples and slow pieces alike: a reader need not guess the columns from their names."""
    _trace_with_slow(tmp_path)
    pieces = sorted(tmp_path.glob("part-*.parquet")) + sorted(tmp_path.glob("_slow/*.parquet"))
    assert len(pieces) == 2
    for piece in pieces:
        metadata = pq.read_schema(piece).metadata
        assert metadata[FORMAT_VERSION_KEY] == str(FORMAT_VERSION).encode(), piece


def _restamp(piece: Path, version: bytes) -> None:
    table = pq.read_table(piece)
    metadata = {**(table.schema.metadata or {}), FORMAT_VERSION_KEY: version}
    pq.write_table(table.replace_schema_metadata(metadata), piece)


@pytest.mark.parametrize("which", ["part-*.parquet", "_slow/*.parquet"])
def test_a_piece_of_an_unknown_format_version_is_refused(tmp_path: Path, which: str) -> None:
    trace = tmp_path / "trace"
    _trace_with_slow(trace)
    (piece,) = trace.glob(which)
    _restamp(piece, b"99")
    with pytest.raises(TraceError, match="format version '99'"):
        list(read_samples(trace))
        read_slow(trace)
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "report", str(trace)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result
    (line,) = result.stderr.strip().splitlines()
    assert "format version '99'" in line and piece.name in line


def test_a_piece_without_a_version_reads_by_its_columns(tmp_path: Path) -> None:
    """Traces written before the key existed still read."""
    _trace_with_slow(tmp_path)
    for piece in [*tmp_path.glob("part-*.parquet"), *tmp_path.glob("_slow/*.parquet")]:
        table = pq.read_table(piece)
        metadata = dict(table.schema.metadata or {})
        del metadata[FORMAT_VERSION_KEY]
        pq.write_table(table.replace_schema_metadata(metadata), piece)
    (samples,) = read_samples(tmp_path)
    assert samples.xmit_bytes.tolist() == [4000, 8000]
    assert [s.name for s in read_slow(tmp_path)] == ["state"]
