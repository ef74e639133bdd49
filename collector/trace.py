"""The trace format: one row per sample and port, written as closed Parquet pieces.

A trace is a directory of ``part-NNNNNN.parquet`` files (an Arrow/Parquet dataset that
pyarrow, pandas, DuckDB and Spark read as one table), with the slow counters polled beside
the samples in ``_slow/slow-NNNNNN.parquet``. Each piece is written to a hidden
temporary name and renamed into place once its footer is on disk, so a crash or a kill
loses at most the piece being filled (<= ``piece_seconds`` of samples) and every earlier
piece stays readable. Every piece carries :class:`TraceInfo` (configured interval, source,
host) in its Parquet key-value metadata, so a trace describes itself.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from detectors.counters import CounterKind, CounterSpec

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
PIECE_PREFIX = "part-"
# The slow counters (errors, congestion, PFC, state, rate) polled at about 1 Hz beside the
# samples: one row per counter and poll, in ``_slow/slow-NNNNNN.parquet`` pieces closed
# together with the sample piece of the same number. The leading underscore keeps them out
# of the samples when pyarrow, pandas or Spark read the trace directory as one table.
SLOW_DIRECTORY = "_slow"
SLOW_PREFIX = "slow-"
SLOW_SCHEMA = pa.schema(
    [
        pa.field("timestamp_ns", pa.int64(), nullable=False),  # wall clock, poll midpoint
        pa.field("device", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("port", pa.int32(), nullable=False),
        pa.field("name", pa.dictionary(pa.int32(), pa.string()), nullable=False),  # kernel's
        pa.field("value", pa.uint64(), nullable=False),
        # How the counter ends its range: resetting, wrapping, saturating; "gauge" for
        # state and rate, which are not counters.
        pa.field("kind", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("width_bits", pa.int8(), nullable=False),
        # True on the first poll after the source was (re)opened: no increment into it.
        pa.field("rebaseline", pa.bool_(), nullable=False),
    ]
)
GAUGE = "gauge"
# Keys of the Parquet key-value metadata (file footer) that describe the trace.
_INFO_KEYS = {
    "interval_ns": b"burstscope.interval_ns",
    "source": b"burstscope.source",
    "host": b"burstscope.host",
}


@dataclass(frozen=True, slots=True)
class TraceInfo:
    """What a trace says about itself; None where it does not say (older traces, CSV)."""

    interval_ns: int | None = None  # the configured sampling interval, not a measured one
    source: str | None = None  # the source SPEC as given: sysfs, netdev:eth0, sim:moe
    host: str | None = None  # the node that sampled it

    @classmethod
    def here(cls, interval_ns: int, source: str) -> TraceInfo:
        """A trace sampled on this machine."""
        return cls(interval_ns, source, socket.gethostname())

    def metadata(self) -> dict[bytes, bytes]:
        """As Parquet key-value metadata: only what is known."""
        values = {"interval_ns": self.interval_ns, "source": self.source, "host": self.host}
        return {_INFO_KEYS[k]: str(v).encode() for k, v in values.items() if v is not None}

    @classmethod
    def from_metadata(cls, metadata: dict[bytes, bytes] | None) -> TraceInfo:
        """Read back; a value that does not parse counts as not said."""
        found = {k: (metadata or {}).get(key) for k, key in _INFO_KEYS.items()}
        text = {k: v.decode("utf-8", errors="replace") for k, v in found.items() if v}
        interval = text.get("interval_ns", "")
        return cls(
            int(interval) if interval.isdigit() and int(interval) > 0 else None,
            text.get("source"),
            text.get("host"),
        )


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


@dataclass(frozen=True, slots=True)
class SlowRow:
    """One slow counter or gauge of one port at one poll, as recorded."""

    timestamp_ns: int  # wall clock
    device: str
    port: int
    name: str
    value: int
    spec: CounterSpec | None  # None: a gauge
    rebaseline: bool


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
        table = pa.Table.from_batches(self._pending, schema=SCHEMA).sort_by(
            [("timestamp_ns", "ascending")]
        )
        self._write(table, f"{PIECE_PREFIX}{number:06d}.parquet")
        self.rows_written += table.num_rows
        self.pieces_written += 1
        self._pending = []
        self._pending_start_ns = None

    def _flush_slow(self) -> None:
        if self._pending_slow:
            slow = _slow_table(self._pending_slow).sort_by([("timestamp_ns", "ascending")])
            directory = self.path / SLOW_DIRECTORY
            try:
                directory.mkdir(exist_ok=True)
            except OSError as exc:
                raise TraceError(f"cannot write {str(directory)!r}: {exc.strerror}") from None
            self._write(slow, f"{SLOW_DIRECTORY}/{SLOW_PREFIX}{self.pieces_written:06d}.parquet")
            self.slow_rows_written += slow.num_rows
            self._pending_slow = []

    def _write(self, table: pa.Table, name: str) -> None:
        final = self.path / name
        temporary = final.with_name(f".{final.name}.tmp")
        metadata = self.info.metadata()
        if metadata:
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
        try:
            pq.write_table(table, temporary, compression="zstd")
            os.replace(temporary, final)
        except OSError as exc:
            raise TraceError(f"cannot write {str(final)!r}: {exc.strerror}") from None

    def close(self) -> None:
        self.flush()
        self._flush_slow()  # polls after the last sample: their own piece, same number


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

REQUIRED_COLUMNS = ("timestamp_ns", "device", "port", "xmit_bytes", "rcv_bytes")
OPTIONAL_COLUMNS = ("line_rate_bytes_per_second", "rebaseline", "read_ns")
_CSV_TYPES = {
    "timestamp_ns": pa.int64(),
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
    unknown = [n for n in names if n not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        raise TraceError(
            f"{str(file)!r}: unknown column {unknown[0]!r} "
            f"(expected {', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)})"
        )
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
    for name in REQUIRED_COLUMNS:
        if batch.column(name).null_count:
            raise TraceError(f"{str(file)!r}: empty value in column {name!r}")
    device = batch.column("device")
    if not pa.types.is_dictionary(device.type):
        device = device.dictionary_encode()
    device_names = [str(d) for d in device.dictionary.to_pylist()]
    device_code = device.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    port = batch.column("port").to_numpy(zero_copy_only=False).astype(np.int64)
    key = device_code << 32 | (port & 0xFFFFFFFF)
    # Stable, so each port's rows keep their order in the file.
    order = np.argsort(key, kind="stable")
    key_sorted = key[order]
    starts = np.flatnonzero(np.diff(key_sorted, prepend=key_sorted[0] - 1))
    stops = np.append(starts[1:], key_sorted.size)

    def column(name: str, dtype: type[np.generic]) -> npt.NDArray[Any]:
        return np.asarray(batch.column(name).to_numpy(zero_copy_only=False), dtype=dtype)[order]

    timestamp = column("timestamp_ns", np.int64)
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
        number = int(port[order[first]])
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

SLOW_COLUMNS = tuple(SLOW_SCHEMA.names)


@dataclass(frozen=True, slots=True)
class SlowSeries:
    """Every recorded reading of one slow counter or gauge of one port, in time order."""

    device: str
    port: int
    name: str
    spec: CounterSpec | None  # None: a gauge
    timestamp_ns: npt.NDArray[np.int64]
    value: npt.NDArray[np.uint64]
    rebaseline: npt.NDArray[np.bool_]


def slow_files(path: Path) -> list[Path]:
    """A recorded trace directory's slow counter pieces; none for files and CSV."""
    if not path.is_dir():
        return []
    return sorted((path / SLOW_DIRECTORY).glob(f"{SLOW_PREFIX}*.parquet"))


def read_slow(path: Path) -> list[SlowSeries]:
    """The slow counters recorded beside the samples at ``path``, one series per counter,
    sorted by device, port and name, each in time order (a poll taken just before a live
    reload may land in the next piece).

    Raises :class:`TraceError` naming the file for unreadable pieces, missing or mistyped
    columns, empty values and unknown counter kinds.
    """
    # Each piece goes to numpy at once, its strings to codes shared by the whole trace, so
    # an hour of 9 ports (~1 M rows) peaks at ~110 bytes a row and needs one sort.
    words: dict[str, dict[str, int]] = {"device": {}, "name": {}, "kind": {}}
    parts: dict[str, list[npt.NDArray[Any]]] = {}
    for file in slow_files(path):
        table = _slow_piece(file).combine_chunks()
        if not table.num_rows:
            continue
        for column, lookup in words.items():
            array = table.column(column).chunk(0)
            codes = np.array(
                [lookup.setdefault(str(w), len(lookup)) for w in array.dictionary.to_pylist()],
                dtype=np.int32,
            )
            indices = array.indices.to_numpy(zero_copy_only=False)
            parts.setdefault(column, []).append(codes[indices])
        for column in ("timestamp_ns", "port", "value", "width_bits", "rebaseline"):
            parts.setdefault(column, []).append(np.array(table.column(column).to_numpy()))
    if not parts:
        return []
    joined = {column: np.concatenate(parts.pop(column)) for column in list(parts)}
    device_names, names, kinds = (list(words[c]) for c in ("device", "name", "kind"))
    device_code, name_code, kind_code = (joined[c] for c in ("device", "name", "kind"))
    stamps, ports = joined["timestamp_ns"], joined["port"]
    # Series in (device, port, name) order, each in time order: ranks make codes sort as
    # their strings do, and lexsort's last key is its first.
    device_rank = np.argsort(np.argsort(device_names))[device_code]
    name_rank = np.argsort(np.argsort(names))[name_code]
    order = np.lexsort((stamps, name_rank, ports, device_rank))
    del device_rank, name_rank
    changes = np.zeros(order.size, dtype=np.bool_)
    changes[0] = True
    for codes in (device_code, ports, name_code):
        ordered = codes[order]
        changes[1:] |= ordered[1:] != ordered[:-1]
    starts = np.flatnonzero(changes)
    stops = np.append(starts[1:], order.size)
    values = joined.pop("value")[order]
    rebaseline = joined.pop("rebaseline")[order]
    widths = joined["width_bits"]
    stamps = stamps[order]
    series = []
    for first, stop in zip(starts.tolist(), stops.tolist(), strict=True):
        row = int(order[first])
        kind = kinds[kind_code[row]]
        spec = None if kind == GAUGE else CounterSpec(CounterKind(kind), int(widths[row]))
        series.append(
            SlowSeries(
                device_names[device_code[row]],
                int(ports[row]),
                names[name_code[row]],
                spec,
                stamps[first:stop],
                values[first:stop],
                rebaseline[first:stop],
            )
        )
    return series


def _slow_piece(file: Path) -> pa.Table:
    """One slow piece, checked, in SLOW_SCHEMA."""
    try:
        table = pq.read_table(file)
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(
            f"{str(file)!r}: not a readable Parquet file (truncated?): {exc}"
        ) from None
    missing = [n for n in SLOW_COLUMNS if n not in table.schema.names]
    if missing:
        raise TraceError(f"{str(file)!r}: missing column {missing[0]!r}")
    table = table.select(list(SLOW_COLUMNS))
    for name in SLOW_COLUMNS:
        if table.column(name).null_count:
            raise TraceError(f"{str(file)!r}: empty value in column {name!r}")
    columns = []
    for field in SLOW_SCHEMA:  # one column at a time, so a failure names its column
        try:
            columns.append(table.column(field.name).cast(field.type))
        except (pa.ArrowException, ValueError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TraceError(f"{str(file)!r}: column {field.name!r}: {reason}") from None
    table = pa.Table.from_arrays(columns, schema=SLOW_SCHEMA)
    known = {kind.value for kind in CounterKind} | {GAUGE}
    for kind in pc.unique(table.column("kind").combine_chunks().dictionary_decode()):
        if kind.as_py() not in known:
            raise TraceError(f"{str(file)!r}: unknown counter kind {kind.as_py()!r}")
    widths = table.column("width_bits")
    counters = pc.not_equal(table.column("kind").cast(pa.string()), GAUGE)
    bad = pc.filter(widths, counters)
    if len(bad) and not 1 <= pc.min(bad).as_py() <= pc.max(bad).as_py() <= 64:
        raise TraceError(f"{str(file)!r}: a counter width outside 1..64 bits")
    return table
