"""Reading a trace's slow counters back as one time series per counter and port."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from burstscope.collector.trace.schema import (
    GAUGE,
    SLOW_DIRECTORY,
    SLOW_PREFIX,
    SLOW_SCHEMA,
    TraceError,
    check_format_version,
)
from burstscope.detectors.counters import CounterKind, CounterSpec

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
    files = slow_files(path)
    parts: dict[str, list[npt.NDArray[Any]]] = {}
    words: dict[str, dict[str, int]] = {"device": {}, "name": {}, "kind": {}}
    table = _all_pieces(files)
    # All pieces at once (or each piece, when one needs a closer look) go to numpy, their
    # strings to codes shared by the whole trace, so an hour of 9 ports (~1 M rows) needs
    # one sort.
    for piece in [table] if table is not None else (_slow_piece(f) for f in files):
        _add_piece(piece, words, parts)
    del table  # in numpy now: the Arrow copy need not outlive the sort below
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


def _add_piece(
    piece: pa.Table, words: dict[str, dict[str, int]], parts: dict[str, list[npt.NDArray[Any]]]
) -> None:
    """One checked table's columns appended to ``parts``, its strings as codes in ``words``."""
    piece = piece.unify_dictionaries().combine_chunks()
    if not piece.num_rows:
        return
    for column, lookup in words.items():
        array = piece.column(column).chunk(0)
        codes = np.array(
            [lookup.setdefault(str(w), len(lookup)) for w in array.dictionary.to_pylist()],
            dtype=np.int32,
        )
        indices = array.indices.to_numpy(zero_copy_only=False)
        parts.setdefault(column, []).append(codes[indices])
    for column in ("timestamp_ns", "port", "value", "width_bits", "rebaseline"):
        parts.setdefault(column, []).append(np.array(piece.column(column).to_numpy()))


def _all_pieces(files: list[Path]) -> pa.Table | None:
    """Every slow piece in one table, checked once, in SLOW_SCHEMA; None when some piece
    is unreadable, differs in its columns or fails a check: the pieces are then read one by
    one, so that the error names the file (a piece is ~2,000 rows, and checking each on its
    own cost as much as decoding it)."""
    if not files:
        return None
    try:
        tables = [_read_piece(file) for file in files]
        table = pa.concat_tables(tables)
        return _checked(table)
    except (pa.ArrowException, OSError, ValueError, TraceError):
        return None


def _read_piece(file: Path) -> pa.Table:
    """The slow columns of one piece, unchecked. ParquetFile.read in this thread: at ~2,000
    rows, read_table's dataset machinery and thread pool cost twice the decoding."""
    piece = pq.ParquetFile(file)
    schema = piece.schema_arrow  # built anew on each access
    check_format_version(file, schema.metadata)
    names = schema.names
    missing = [n for n in SLOW_COLUMNS if n not in names]
    if missing:
        raise TraceError(f"{str(file)!r}: missing column {missing[0]!r}")
    return piece.read(columns=list(SLOW_COLUMNS), use_threads=False)


def _slow_piece(file: Path) -> pa.Table:
    """One slow piece, checked, in SLOW_SCHEMA."""
    try:
        table = _read_piece(file)
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(
            f"{str(file)!r}: not a readable Parquet file (truncated?): {exc}"
        ) from None
    try:
        return _checked(table)
    except TraceError as exc:
        raise TraceError(f"{str(file)!r}: {exc}") from None


def _checked(table: pa.Table) -> pa.Table:
    """The slow columns in SLOW_SCHEMA; TraceError (without the file) on a problem."""
    for name in SLOW_COLUMNS:
        if table.column(name).null_count:
            raise TraceError(f"empty value in column {name!r}")
    columns = []
    for field in SLOW_SCHEMA:  # one column at a time, so a failure names its column
        try:
            columns.append(table.column(field.name).cast(field.type))
        except (pa.ArrowException, ValueError) as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TraceError(f"column {field.name!r}: {reason}") from None
    table = pa.Table.from_arrays(columns, schema=SLOW_SCHEMA)
    known = {kind.value for kind in CounterKind} | {GAUGE}
    kinds = table.column("kind").cast(pa.string())
    for kind in pc.unique(kinds):
        if kind.as_py() not in known:
            raise TraceError(f"unknown counter kind {kind.as_py()!r}")
    widths = table.column("width_bits")
    counters = pc.not_equal(kinds, GAUGE)
    bad = pc.filter(widths, counters)
    if len(bad) and not 1 <= pc.min(bad).as_py() <= pc.max(bad).as_py() <= 64:
        raise TraceError("a counter width outside 1..64 bits")
    return table
