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

from burstscope.collector.trace.schema import (
    BYTE_COLUMNS,
    EXACT_TIME_COLUMN,
    PIECE_PREFIX,
    RCV_UNITS,
    TIME_COLUMN,
    TIME_GRAIN_NS,
    UNIT_BYTES,
    UNIT_CHOICES,
    XMIT_UNITS,
    TraceError,
    TraceInfo,
    check_format_version,
)

# Besides one of the time columns: timestamp_us (traces since the compact encoding) or
# timestamp_ns (older traces, CSV); and one form of the counters: in units (traces since
# the units) or in bytes (older traces, CSV).
TIME_COLUMNS = (TIME_COLUMN, EXACT_TIME_COLUMN)
REQUIRED_COLUMNS = ("device", "port")
UNIT_COLUMNS = (XMIT_UNITS, RCV_UNITS, UNIT_BYTES)
OPTIONAL_COLUMNS = ("line_rate_bytes_per_second", "rebaseline", "read_ns")
_KNOWN = TIME_COLUMNS + REQUIRED_COLUMNS + UNIT_COLUMNS + BYTE_COLUMNS + OPTIONAL_COLUMNS
_CSV_TYPES = {
    TIME_COLUMN: pa.int64(),
    EXACT_TIME_COLUMN: pa.int64(),
    "device": pa.string(),
    "port": pa.int32(),
    XMIT_UNITS: pa.uint64(),
    RCV_UNITS: pa.uint64(),
    UNIT_BYTES: pa.int8(),
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
        metadata = pq.read_schema(first).metadata
    except (OSError, pa.ArrowException):
        return TraceInfo()  # read_samples names the problem with this file
    check_format_version(first, metadata)
    return TraceInfo.from_metadata(metadata)


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
    unknown = [n for n in names if n not in _KNOWN]
    if unknown:
        counters = f"({', '.join(UNIT_COLUMNS)}) or ({', '.join(BYTE_COLUMNS)})"
        expected = [" or ".join(TIME_COLUMNS), *REQUIRED_COLUMNS, counters, *OPTIONAL_COLUMNS]
        raise TraceError(
            f"{str(file)!r}: unknown column {unknown[0]!r} (expected {', '.join(expected)})"
        )
    times = [n for n in TIME_COLUMNS if n in names]
    if not times:
        raise TraceError(
            f"{str(file)!r}: missing column {TIME_COLUMN!r} ({EXACT_TIME_COLUMN!r} in older traces)"
        )
    if len(times) > 1:
        raise TraceError(
            f"{str(file)!r}: both {TIME_COLUMN!r} and {EXACT_TIME_COLUMN!r}: one time column only"
        )
    in_units = [n for n in UNIT_COLUMNS if n in names]
    in_bytes = [n for n in BYTE_COLUMNS if n in names]
    if in_units and in_bytes:
        raise TraceError(
            f"{str(file)!r}: both {in_units[0]!r} and {in_bytes[0]!r}: counters in units "
            f"({', '.join(UNIT_COLUMNS)}) or in bytes ({', '.join(BYTE_COLUMNS)}), not both"
        )
    if not in_units and not in_bytes:
        raise TraceError(
            f"{str(file)!r}: missing column {XMIT_UNITS!r} ({BYTE_COLUMNS[0]!r} in CSV and "
            "older traces)"
        )
    needed = (*REQUIRED_COLUMNS, *(UNIT_COLUMNS if in_units else BYTE_COLUMNS))
    missing = [n for n in needed if n not in names]
    if missing:
        raise TraceError(f"{str(file)!r}: missing column {missing[0]!r}")


def _parquet_batches(file: Path) -> Iterator[pa.RecordBatch]:
    try:
        reader = pq.ParquetFile(file)
    except pa.ArrowException as exc:
        raise TraceError(
            f"{str(file)!r}: not a readable Parquet file (truncated?): {exc}"
        ) from None
    check_format_version(file, reader.schema_arrow.metadata)
    names = reader.schema_arrow.names
    _check_columns(file, names)
    # read_ns (the sampler's read durations) is for diagnostics, not analysis: not decoded.
    wanted = [name for name in names if name != "read_ns"]
    yield from reader.iter_batches(batch_size=1 << 20, columns=wanted)


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
    counters = UNIT_COLUMNS if XMIT_UNITS in names else BYTE_COLUMNS
    for name in (_time_column(names), *REQUIRED_COLUMNS, *counters):
        if batch.column(name).null_count:
            raise TraceError(f"{str(file)!r}: empty value in column {name!r}")
    device = batch.column("device")
    if not pa.types.is_dictionary(device.type):
        device = device.dictionary_encode()
    device_names = [str(d) for d in device.dictionary.to_pylist()]
    device_code = device.indices.to_numpy(zero_copy_only=False)
    port = batch.column("port").to_numpy(zero_copy_only=False)
    # Where the (device, port) key changes, compared in the columns' own integers: a
    # 64-bit key per row would be three fresh arrays of the batch's length.
    changes = device_code[1:] != device_code[:-1]
    changes |= port[1:] != port[:-1]
    starts = np.flatnonzero(changes)
    starts += 1
    starts = np.concatenate(([0], starts))
    run_key = _port_key(device_code[starts], port[starts])
    if bool((run_key[1:] > run_key[:-1]).all()):
        # Pieces written since the compact encoding hold each port's rows together, in
        # key order: each run is one port, and no sort is needed.
        codes, numbers = device_code[starts].tolist(), port[starts].tolist()
        ports = [(device_names[c], int(p)) for c, p in zip(codes, numbers, strict=True)]
        yield from _runs(file, batch, ports, starts, latest)
        return
    # Otherwise a stable sort, so each port's rows keep their order in the file.
    key = _port_key(device_code, port)
    order = np.argsort(key, kind="stable")
    key_sorted = key[order]
    starts = np.flatnonzero(np.diff(key_sorted, prepend=key_sorted[0] - 1))
    first_rows = order[starts]
    codes, numbers = device_code[first_rows].tolist(), port[first_rows].tolist()
    ports = [(device_names[c], int(p)) for c, p in zip(codes, numbers, strict=True)]
    yield from _runs(file, batch.take(pa.array(order)), ports, starts, latest)


def _time_column(names: Sequence[str]) -> str:
    """The batch's time column (_check_columns made sure it has exactly one)."""
    return TIME_COLUMN if TIME_COLUMN in names else EXACT_TIME_COLUMN


def _port_key(device_code: npt.NDArray[Any], port: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """One int64 per row that sorts as (device code, port)."""
    key: npt.NDArray[np.int64] = device_code.astype(np.int64) << 32 | (
        port.astype(np.int64) & 0xFFFFFFFF
    )
    return key


def _runs(
    file: Path,
    batch: pa.RecordBatch,
    ports: list[tuple[str, int]],
    starts: npt.NDArray[np.intp],
    latest: dict[tuple[str, int], int],
) -> Iterator[PortSamples]:
    """The samples of each run of rows, one port's (device, port) each, in a batch whose
    ports do not interleave."""
    names = batch.schema.names
    time_column = _time_column(names)

    def column(name: str, dtype: type[np.generic]) -> npt.NDArray[Any]:
        return np.asarray(batch.column(name).to_numpy(zero_copy_only=False), dtype=dtype)

    timestamp = column(time_column, np.int64)
    if time_column == TIME_COLUMN:
        timestamp = timestamp * TIME_GRAIN_NS  # readers get nanoseconds from every trace
    if XMIT_UNITS in names:
        xmit, rcv = _counter_bytes(
            file,
            column(XMIT_UNITS, np.uint64),
            column(RCV_UNITS, np.uint64),
            column(UNIT_BYTES, np.int8),  # as stored: no 8-byte copy a row
        )
    else:
        xmit, rcv = column("xmit_bytes", np.uint64), column("rcv_bytes", np.uint64)
    rate = (
        column("line_rate_bytes_per_second", np.int64)
        if "line_rate_bytes_per_second" in names
        else None
    )
    rebaseline = column("rebaseline", np.bool_) if "rebaseline" in names else None
    # One pass over the batch for timestamps going backwards inside a run; the run that
    # holds one is found only when there is one.
    backwards = timestamp[1:] < timestamp[:-1]
    backwards[starts[1:] - 1] = False  # a new port starts: its first time may be earlier
    suspect = bool(backwards.any())
    stops = np.append(starts[1:], timestamp.size)
    for first, stop, (name, number) in zip(starts.tolist(), stops.tolist(), ports, strict=True):
        stamps = timestamp[first:stop]
        previous = latest.get((name, number))
        if (suspect and bool((np.diff(stamps) < 0).any())) or (
            previous is not None and int(stamps[0]) < previous
        ):
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


def _counter_bytes(
    file: Path,
    xmit: npt.NDArray[np.uint64],
    rcv: npt.NDArray[np.uint64],
    unit: npt.NDArray[np.int8],
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """Counters stored in units, in bytes; a unit the writers never use, or a value whose
    bytes would not fit 64 bits, is a damaged file, not a count."""
    smallest, largest = (int(unit.min()), int(unit.max())) if unit.size else (1, 1)
    if smallest == largest and smallest in UNIT_CHOICES:
        scale: np.uint64 | npt.NDArray[np.uint64] = np.uint64(smallest)  # the usual piece
    else:
        wrong = ~np.isin(unit, UNIT_CHOICES)
        if wrong.any():
            raise TraceError(
                f"{str(file)!r}: {UNIT_BYTES!r} is {int(unit[wrong][0])} "
                f"(expected {' or '.join(map(str, UNIT_CHOICES))})"
            )
        scale = unit.astype(np.uint64)
    limit = np.uint64(np.iinfo(np.uint64).max // largest)
    for name, units in ((XMIT_UNITS, xmit), (RCV_UNITS, rcv)):
        scaled = units if smallest == largest else units[unit > 1]
        if largest > 1 and scaled.size and scaled.max() > limit:
            raise TraceError(f"{str(file)!r}: {name!r} too large for 64-bit bytes")
    return xmit * scale, rcv * scale


# --- Reading slow counters ------------------------------------------------------------
