"""Reading a trace's samples (Parquet pieces or CSV) per port, in blocks."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from collector.trace.schema import (
    EXACT_TIME_COLUMN,
    PIECE_PREFIX,
    TIME_COLUMN,
    TIME_GRAIN_NS,
    TraceError,
    TraceInfo,
)

# Besides one of the time columns: timestamp_us (traces since the compact encoding) or
# timestamp_ns (older traces, CSV).
TIME_COLUMNS = (TIME_COLUMN, EXACT_TIME_COLUMN)
REQUIRED_COLUMNS = ("device", "port", "xmit_bytes", "rcv_bytes")
OPTIONAL_COLUMNS = ("line_rate_bytes_per_second", "rebaseline", "read_ns")
_CSV_TYPES = {
    TIME_COLUMN: pa.int64(),
    EXACT_TIME_COLUMN: pa.int64(),
    "device": pa.string(),
    "port": pa.int32(),
    "xmit_bytes": pa.uint64(),
    "rcv_bytes": pa.uint64(),
    "line_rate_bytes_per_second": pa.int64(),
    "rebaseline": pa.bool_(),
    "read_ns": pa.int64(),
}
_PARQUET_MAGIC = b"PAR1"


@dataclass(frozen=True, slots=True)
class PortSamples:
    """Consecutive samples of one port from one piece of a trace, in time order."""

    source: Path  # the file they came from, for messages
    device: str
    port: int
    timestamp_ns: npt.NDArray[np.int64]
    xmit_bytes: npt.NDArray[np.uint64]  # cumulative bytes
    rcv_bytes: npt.NDArray[np.uint64]
    line_rate_bytes_per_second: npt.NDArray[np.int64] | None  # None: column absent
    rebaseline: npt.NDArray[np.bool_] | None


def trace_files(path: Path) -> list[Path]:
    """The files of a trace: a directory's ``part-*.parquet`` pieces in order, or the file."""
    if not path.exists():
        raise TraceError(f"{str(path)!r}: no such file or directory")
    if path.is_dir():
        pieces = sorted(path.glob(f"{PIECE_PREFIX}*.parquet"))
        if not pieces:
            raise TraceError(f"{str(path)!r}: directory holds no {PIECE_PREFIX}*.parquet pieces")
        return pieces
    return [path]


def read_info(path: Path) -> TraceInfo:
    """What the trace at ``path`` says about itself, from its first Parquet piece's footer.

    CSV files and traces written before the metadata existed say nothing (all None).
    """
    first = trace_files(path)[0]
    try:
        with first.open("rb") as handle:
            if handle.read(4) != _PARQUET_MAGIC:
                return TraceInfo()
        return TraceInfo.from_metadata(pq.read_schema(first).metadata)
    except (OSError, pa.ArrowException):
        return TraceInfo()  # read_samples names the problem with this file


def read_samples(path: Path, block_bytes: int = 1 << 24) -> Iterator[PortSamples]:
    """Every sample of the trace at ``path`` (Parquet directory or file, or CSV), in pieces.

    Raises :class:`TraceError` naming the file for missing or unknown columns, values that
    do not parse, timestamps going backwards within a port, and empty or truncated files.
    """
    latest: dict[tuple[str, int], int] = {}
    rows = 0
    for file in trace_files(path):
        for batch in _batches(file, block_bytes):
            rows += batch.num_rows
            yield from _split_ports(file, batch, latest)
    if rows == 0:
        raise TraceError(f"{str(path)!r}: no samples (empty trace)")


def _batches(file: Path, block_bytes: int) -> Iterator[pa.RecordBatch]:
    try:
        with file.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise TraceError(f"{str(file)!r}: cannot read: {exc.strerror}") from None
    if not magic:
        raise TraceError(f"{str(file)!r}: empty file")
    try:
        if magic == _PARQUET_MAGIC:
            yield from _parquet_batches(file)
        else:
            yield from _csv_batches(file, block_bytes)
    except pa.ArrowException as exc:
        # pyarrow's messages can span lines (a CSV row is quoted in them): keep the first.
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TraceError(f"{str(file)!r}: {reason}") from None


def _check_columns(file: Path, names: Sequence[str]) -> None:
    unknown = [n for n in names if n not in TIME_COLUMNS + REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        expected = [" or ".join(TIME_COLUMNS), *REQUIRED_COLUMNS, *OPTIONAL_COLUMNS]
        raise TraceError(
            f"{str(file)!r}: unknown column {unknown[0]!r} (expected {', '.join(expected)})"
        )
    times = [n for n in TIME_COLUMNS if n in names]
    if len(times) != 1:
        problem = "both columns" if times else "missing column"
        raise TraceError(f"{str(file)!r}: {problem} {' or '.join(map(repr, TIME_COLUMNS))}")
    missing = [n for n in REQUIRED_COLUMNS if n not in names]
    if missing:
        raise TraceError(f"{str(file)!r}: missing column {missing[0]!r}")


def _parquet_batches(file: Path) -> Iterator[pa.RecordBatch]:
    try:
        reader = pq.ParquetFile(file)
    except pa.ArrowException as exc:
        raise TraceError(
            f"{str(file)!r}: not a readable Parquet file (truncated?): {exc}"
        ) from None
    _check_columns(file, reader.schema_arrow.names)
    yield from reader.iter_batches(batch_size=1 << 20)


def _csv_batches(file: Path, block_bytes: int) -> Iterator[pa.RecordBatch]:
    import pyarrow.csv as pacsv

    with file.open("rb") as handle:
        header = handle.readline().decode("utf-8", errors="replace").strip()
    names = [name.strip() for name in header.split(",")]
    _check_columns(file, names)
    try:
        reader = pacsv.open_csv(
            file,
            read_options=pacsv.ReadOptions(block_size=block_bytes),
            convert_options=pacsv.ConvertOptions(column_types=_CSV_TYPES),
        )
        yield from reader
    except pa.ArrowInvalid as exc:
        # pyarrow numbers columns ("In CSV column #0: ..."); name them instead.
        reason = str(exc).strip().splitlines()[0]
        reason = re.sub(
            r"In CSV column #(\d+)",
            lambda m: (
                f"column {names[int(m.group(1))]!r}" if int(m.group(1)) < len(names) else m.group(0)
            ),
            reason,
        )
        raise TraceError(f"{str(file)!r}: {reason}") from None


def _split_ports(
    file: Path, batch: pa.RecordBatch, latest: dict[tuple[str, int], int]
) -> Iterator[PortSamples]:
    if batch.num_rows == 0:
        return
    names = batch.schema.names
    time_column = TIME_COLUMN if TIME_COLUMN in names else EXACT_TIME_COLUMN
    for name in (time_column, *REQUIRED_COLUMNS):
        if batch.column(name).null_count:
            raise TraceError(f"{str(file)!r}: empty value in column {name!r}")
    device = batch.column("device")
    if not pa.types.is_dictionary(device.type):
        device = device.dictionary_encode()
    device_names = [str(d) for d in device.dictionary.to_pylist()]
    device_code = device.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    port = batch.column("port").to_numpy(zero_copy_only=False).astype(np.int64)
    key = device_code << 32 | (port & 0xFFFFFFFF)
    # Pieces written since the compact encoding hold each port's rows together: no sort.
    # Otherwise a stable sort, so each port's rows keep their order in the file.
    order = None if bool((key[1:] >= key[:-1]).all()) else np.argsort(key, kind="stable")
    key_sorted = key if order is None else key[order]
    starts = np.flatnonzero(np.diff(key_sorted, prepend=key_sorted[0] - 1))
    stops = np.append(starts[1:], key_sorted.size)

    def column(name: str, dtype: type[np.generic]) -> npt.NDArray[Any]:
        values = np.asarray(batch.column(name).to_numpy(zero_copy_only=False), dtype=dtype)
        return values if order is None else values[order]

    timestamp = column(time_column, np.int64)
    if time_column == TIME_COLUMN:
        timestamp = timestamp * TIME_GRAIN_NS  # readers get nanoseconds from every trace
    xmit = column("xmit_bytes", np.uint64)
    rcv = column("rcv_bytes", np.uint64)
    rate = (
        column("line_rate_bytes_per_second", np.int64)
        if "line_rate_bytes_per_second" in names
        else None
    )
    rebaseline = column("rebaseline", np.bool_) if "rebaseline" in names else None
    for first, stop in zip(starts.tolist(), stops.tolist(), strict=True):
        code = int(key_sorted[first])
        name = device_names[code >> 32]
        number = int(port[first if order is None else order[first]])
        stamps = timestamp[first:stop]
        previous = latest.get((name, number))
        backwards = np.diff(stamps) < 0
        if backwards.any() or (previous is not None and int(stamps[0]) < previous):
            raise TraceError(f"{str(file)!r}: timestamps go backwards for {name} port {number}")
        latest[(name, number)] = int(stamps[-1])
        yield PortSamples(
            source=file,
            device=name,
            port=number,
            timestamp_ns=stamps,
            xmit_bytes=xmit[first:stop],
            rcv_bytes=rcv[first:stop],
            line_rate_bytes_per_second=None if rate is None else rate[first:stop],
            rebaseline=None if rebaseline is None else rebaseline[first:stop],
        )


# --- Reading slow counters ------------------------------------------------------------
