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

from collector.trace.schema import (
    GAUGE,
    SLOW_DIRECTORY,
    SLOW_PREFIX,
    SLOW_SCHEMA,
    TraceError,
)
from detectors.counters import CounterKind, CounterSpec

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
    # ParquetFile.read in this thread: a piece is ~2,000 rows, and read_table's dataset
    # machinery and thread pool cost twice the decoding at that size.
    try:
        piece = pq.ParquetFile(file)
        names = piece.schema_arrow.names  # built anew on each access
        missing = [n for n in SLOW_COLUMNS if n not in names]
        if missing:
            raise TraceError(f"{str(file)!r}: missing column {missing[0]!r}")
        table = piece.read(columns=list(SLOW_COLUMNS), use_threads=False)
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(
            f"{str(file)!r}: not a readable Parquet file (truncated?): {exc}"
        ) from None
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
