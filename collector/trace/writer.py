"""Writing a trace: closed Parquet pieces of samples and slow counters, renamed into place."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from burstscope.collector.trace.schema import (
    DIRECTORY_MODE,
    FORMAT_VERSION,
    FORMAT_VERSION_KEY,
    GAUGE,
    PIECE_MODE,
    PIECE_PREFIX,
    RCV_UNITS,
    SCHEMA,
    SLOW_DIRECTORY,
    SLOW_PREFIX,
    SLOW_SCHEMA,
    TIME_COLUMN,
    UNIT_BYTES,
    WORD_BYTES,
    XMIT_UNITS,
    PortColumns,
    SlowRow,
    TraceError,
    TraceInfo,
    stored_times,
)


def prepare_output(path: Path) -> None:
    """Create the trace directory, or fail with one clear reason before any sampling starts."""
    if path.exists() and not path.is_dir():
        raise TraceError(f"output {str(path)!r} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        raise TraceError(f"output {str(path)!r} already exists and is not empty")
    try:
        if not path.is_dir():
            # Missing parents too, like `mkdir -p`: `-o fleet/node-0` on a fresh directory.
            path.mkdir(parents=True)
            os.chmod(path, DIRECTORY_MODE)  # mkdir's mode is masked by the umask
        probe = path / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise TraceError(f"cannot write output {str(path)!r}: {exc.strerror}") from None


class TraceWriter:
    """Accumulates samples and closes a Parquet piece every ``piece_seconds`` of data."""

    def __init__(
        self, path: Path, piece_seconds: float = 5.0, info: TraceInfo | None = None
    ) -> None:
        self.path = path
        self.piece_ns = int(piece_seconds * 1e9)
        self.info = info or TraceInfo()
        self.rows_written = 0
        self.pieces_written = 0
        self.slow_rows_written = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_slow: list[SlowRow] = []
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

    def append_slow(self, rows: Sequence[SlowRow]) -> None:
        """Slow counter readings; they go out with the next sample piece."""
        self._pending_slow.extend(rows)

    def flush(self) -> None:
        """Close the current piece (if it holds anything): it is readable from now on.

        The slow rows go first, so a piece's samples never exist without its slow rows.
        """
        if not self._pending:
            return
        number = self.pieces_written
        self._flush_slow()
        table = _port_ordered(self._pending)
        self._write(table, f"{PIECE_PREFIX}{number:06d}.parquet", SAMPLE_ENCODING)
        self.rows_written += table.num_rows
        self.pieces_written += 1
        self._pending = []
        self._pending_start_ns = None

    def _flush_slow(self) -> None:
        if self._pending_slow:
            slow = _slow_table(self._pending_slow).sort_by([("timestamp_ns", "ascending")])
            directory = self.path / SLOW_DIRECTORY
            try:
                directory.mkdir(mode=DIRECTORY_MODE, exist_ok=True)
            except OSError as exc:
                raise TraceError(f"cannot write {str(directory)!r}: {exc.strerror}") from None
            self._write(slow, f"{SLOW_DIRECTORY}/{SLOW_PREFIX}{self.pieces_written:06d}.parquet")
            self.slow_rows_written += slow.num_rows
            self._pending_slow = []

    def _write(self, table: pa.Table, name: str, encoding: dict[str, Any] | None = None) -> None:
        final = self.path / name
        temporary = final.with_name(f".{final.name}.tmp")
        metadata = {FORMAT_VERSION_KEY: str(FORMAT_VERSION).encode(), **self.info.metadata()}
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
        try:
            pq.write_table(table, temporary, **(encoding or {"compression": "zstd"}))
            # Samples of a site's traffic are not for every local user, whatever the umask
            # of whoever started the run.
            os.chmod(temporary, PIECE_MODE)
            os.replace(temporary, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()  # a partial piece on a full disk holds space for nothing
            raise TraceError(f"cannot write {str(final)!r}: {exc.strerror or exc}") from None

    def discard_pending(self) -> int:
        """Drop what is not yet in a closed piece (after a failed write); the rows dropped."""
        rows = int(sum(batch.num_rows for batch in self._pending))
        self._pending = []
        self._pending_slow = []
        self._pending_start_ns = None
        return rows

    def close(self) -> None:
        self.flush()
        self._flush_slow()  # polls after the last sample: their own piece, same number


# How each sample column is stored. A piece holds each port's rows together in time order,
# so timestamps and cumulative counters step by small, similar amounts: delta encoding
# (Parquet DELTA_BINARY_PACKED) stores those steps in a few bits each; counters in 4-octet
# words where they are words (the schema's docstring), not to spend two bits a step on
# zeros. Device, port, unit, line rate and read duration (whole microseconds) take few
# distinct values: dictionary (RLE_DICTIONARY) indices. zstd on top: level 9 for the
# counters, whose bit-packed steps it still shrinks (3.5 to 3.3 bytes a row for the two in
# bytes, about 80 ns a row more writer CPU, well inside the writer's budget), the default
# elsewhere (higher gains nothing there).
# pyarrow, DuckDB, pandas, polars and Spark read all of these.
SAMPLE_ENCODING: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": {
        name: 9 if name in (XMIT_UNITS, RCV_UNITS) else 1 for name in SCHEMA.names
    },
    "use_dictionary": ["device", "port", UNIT_BYTES, "line_rate_bytes_per_second", "read_ns"],
    "column_encoding": {
        TIME_COLUMN: "DELTA_BINARY_PACKED",
        XMIT_UNITS: "DELTA_BINARY_PACKED",
        RCV_UNITS: "DELTA_BINARY_PACKED",
        "rebaseline": "RLE",
    },
}


def _port_ordered(batches: list[pa.RecordBatch]) -> pa.Table:
    """One port's rows after another (by device and port), each port's in time order."""
    by_port: dict[tuple[str, int], list[pa.RecordBatch]] = {}
    for batch in batches:  # each batch holds one port (see _batch)
        key = (str(batch.column(1).dictionary[0]), int(batch.column(2)[0].as_py()))
        by_port.setdefault(key, []).append(batch)
    ordered = [b for key in sorted(by_port) for b in by_port[key]]
    # Each batch brings its own one-name device dictionary; unified, the piece stores one
    # dictionary and RLE indices instead of falling back to plain strings, which took
    # readers 7 times as long to decode (0.5 s of a 1-hour report).
    table = pa.Table.from_batches(ordered, schema=SCHEMA).unify_dictionaries()
    in_order = all(
        bool(np.all(np.diff(np.concatenate([b.column(0).to_numpy() for b in group])) >= 0))
        for group in by_port.values()
    )
    if in_order:
        return table
    # Appends out of time order (not what the recorders do): sort the port's rows.
    keys = pa.table(
        {"device": table.column("device").cast(pa.string()), "port": table.column("port")}
    ).append_column(TIME_COLUMN, table.column(TIME_COLUMN))
    order = pc.sort_indices(
        keys,
        sort_keys=[("device", "ascending"), ("port", "ascending"), (TIME_COLUMN, "ascending")],
    )
    return table.take(order)


def _batch(port: PortColumns) -> pa.RecordBatch:
    count = len(port.timestamp_ns)
    stamps, reads = stored_times(port.timestamp_ns, port.read_ns)
    device = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(count, dtype=np.int32)), pa.array([port.device])
    )
    xmit = np.asarray(port.xmit_bytes, np.uint64)
    rcv = np.asarray(port.rcv_bytes, np.uint64)
    # Words where every value is a multiple of 4 (counters/port_*_data always are).
    in_words = not int(np.bitwise_or.reduce(xmit | rcv) & np.uint64(WORD_BYTES - 1))
    if in_words:
        xmit, rcv = xmit // np.uint64(WORD_BYTES), rcv // np.uint64(WORD_BYTES)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(stamps, type=pa.int64()),
            device,
            pa.array(np.full(count, port.port, dtype=np.int32)),
            pa.array(xmit, type=pa.uint64()),
            pa.array(rcv, type=pa.uint64()),
            pa.array(np.full(count, WORD_BYTES if in_words else 1, dtype=np.int8)),
            pa.array(reads, type=pa.int64()),
            pa.array(
                np.broadcast_to(np.asarray(port.line_rate_bytes_per_second, np.int64), (count,))
            ),
            pa.array(port.rebaseline, type=pa.bool_()),
        ],
        schema=SCHEMA,
    )


def _slow_table(rows: Sequence[SlowRow]) -> pa.Table:
    def dictionary(values: list[str], index: pa.DataType) -> pa.DictionaryArray:
        return (
            pa.array(values, type=pa.string())
            .dictionary_encode()
            .cast(pa.dictionary(index, pa.string()))
        )

    return pa.Table.from_arrays(
        [
            pa.array([r.timestamp_ns for r in rows], type=pa.int64()),
            dictionary([r.device for r in rows], pa.int32()),
            pa.array([r.port for r in rows], type=pa.int32()),
            dictionary([r.name for r in rows], pa.int32()),
            pa.array([r.value for r in rows], type=pa.uint64()),
            dictionary([GAUGE if r.spec is None else r.spec.kind.value for r in rows], pa.int8()),
            pa.array([0 if r.spec is None else r.spec.width_bits for r in rows], type=pa.int8()),
            pa.array([r.rebaseline for r in rows], type=pa.bool_()),
        ],
        schema=SLOW_SCHEMA,
    )


# --- Reading traces -------------------------------------------------------------------
# A trace is read piece by piece (Parquet) or block by block (CSV) and handed out as runs
# of one port's samples, so a report over hours of 1 kHz samples holds one piece at a time.
