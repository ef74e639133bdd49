"""The trace format: one row per sample and port, written as closed Parquet pieces.

A trace is a directory of ``part-NNNNNN.parquet`` files (an Arrow/Parquet dataset that
pyarrow, pandas, DuckDB and Spark read as one table). Each piece is written to a hidden
temporary name and renamed into place once its footer is on disk, so a crash or a kill
loses at most the piece being filled (<= ``piece_seconds`` of samples) and every earlier
piece stays readable.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        # Wall-clock ns of the read midpoint: CLOCK_MONOTONIC plus an offset fixed at start,
        # so differences between rows are exact monotonic differences.
        pa.field("timestamp_ns", pa.int64(), nullable=False),
        pa.field("device", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("port", pa.int32(), nullable=False),
        pa.field("xmit_bytes", pa.uint64(), nullable=False),  # cumulative, already x4
        pa.field("rcv_bytes", pa.uint64(), nullable=False),
        pa.field("read_ns", pa.int64(), nullable=False),  # duration of the port's reads
        pa.field("line_rate_bytes_per_second", pa.int64(), nullable=False),  # 0 = unknown
        # True on the first sample after a counter was (re)opened: no delta into it.
        pa.field("rebaseline", pa.bool_(), nullable=False),
    ]
)
COLUMNS = tuple(SCHEMA.names)
PIECE_PREFIX = "part-"


class TraceError(Exception):
    """A trace cannot be written or read; the message names the path and the problem."""


@dataclass(frozen=True, slots=True)
class PortColumns:
    """Samples of one port in column form, ready to append."""

    device: str
    port: int
    line_rate_bytes_per_second: int
    timestamp_ns: npt.NDArray[np.int64]
    xmit_bytes: npt.NDArray[np.uint64]
    rcv_bytes: npt.NDArray[np.uint64]
    read_ns: npt.NDArray[np.int64]
    rebaseline: npt.NDArray[np.bool_]


def prepare_output(path: Path) -> None:
    """Create the trace directory, or fail with one clear reason before any sampling starts."""
    if path.exists() and not path.is_dir():
        raise TraceError(f"output {str(path)!r} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        raise TraceError(f"output {str(path)!r} already exists and is not empty")
    try:
        path.mkdir(parents=False, exist_ok=True)
        probe = path / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise TraceError(f"cannot write output {str(path)!r}: {exc.strerror}") from None


class TraceWriter:
    """Accumulates samples and closes a Parquet piece every ``piece_seconds`` of data."""

    def __init__(self, path: Path, piece_seconds: float = 5.0) -> None:
        self.path = path
        self.piece_ns = int(piece_seconds * 1e9)
        self.rows_written = 0
        self.pieces_written = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_start_ns: int | None = None
        self._latest_ns: int | None = None

    def append(self, ports: Sequence[PortColumns]) -> None:
        batches = [_batch(p) for p in ports if len(p.timestamp_ns)]
        if not batches:
            return
        first = min(int(p.timestamp_ns[0]) for p in ports if len(p.timestamp_ns))
        last = max(int(p.timestamp_ns[-1]) for p in ports if len(p.timestamp_ns))
        if self._pending_start_ns is None:
            self._pending_start_ns = first
        self._latest_ns = last if self._latest_ns is None else max(self._latest_ns, last)
        self._pending.extend(batches)
        if self._latest_ns - self._pending_start_ns >= self.piece_ns:
            self.flush()

    def flush(self) -> None:
        """Close the current piece (if it holds anything): it is readable from now on."""
        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending, schema=SCHEMA).sort_by(
            [("timestamp_ns", "ascending")]
        )
        name = f"{PIECE_PREFIX}{self.pieces_written:06d}.parquet"
        temporary = self.path / f".{name}.tmp"
        try:
            pq.write_table(table, temporary, compression="zstd")
            os.replace(temporary, self.path / name)
        except OSError as exc:
            raise TraceError(f"cannot write {str(self.path / name)!r}: {exc.strerror}") from None
        self.rows_written += table.num_rows
        self.pieces_written += 1
        self._pending = []
        self._pending_start_ns = None

    def close(self) -> None:
        self.flush()


def _batch(port: PortColumns) -> pa.RecordBatch:
    count = len(port.timestamp_ns)
    device = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(count, dtype=np.int32)), pa.array([port.device])
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array(port.timestamp_ns, type=pa.int64()),
            device,
            pa.array(np.full(count, port.port, dtype=np.int32)),
            pa.array(port.xmit_bytes, type=pa.uint64()),
            pa.array(port.rcv_bytes, type=pa.uint64()),
            pa.array(port.read_ns, type=pa.int64()),
            pa.array(np.full(count, port.line_rate_bytes_per_second, dtype=np.int64)),
            pa.array(port.rebaseline, type=pa.bool_()),
        ],
        schema=SCHEMA,
    )
