"""The trace format: one row per sample and port, written as closed Parquet pieces.

A trace is a directory of ``part-NNNNNN.parquet`` files (an Arrow/Parquet dataset that
pyarrow, pandas, DuckDB and Spark read as one table), with the slow counters polled beside
the samples in ``_slow/slow-NNNNNN.parquet``. Each piece is written to a hidden
temporary name and renamed into place once its footer is on disk, so a crash or a kill
loses at most the piece being filled (<= ``piece_seconds`` of samples) and every earlier
piece stays readable. Every piece carries :class:`TraceInfo` (configured interval, source,
host) in its Parquet key-value metadata, so a trace describes itself.

Samples keep the precision the measurement has, no more. A sample's counters are latched at
an unknown moment of the port's read window (``read_ns`` long; the simulated sampler takes
1 to 3 us for a port's two sysfs reads), so the window's midpoint tells the time to within
half the window, not to the nanosecond. The samples store it as ``timestamp_us``, rounded to
the nearest microsecond (at most 0.5 us off: within half of any read of 1 us or more), and
``read_ns`` rounded up to a whole microsecond (still in nanoseconds; rounded up, so a stated
window always holds the true one): the counters were read between ``timestamp_us -
read_ns / 2000 - 0.5`` and ``timestamp_us + read_ns / 2000 + 0.5`` microseconds. A source
read in under a microsecond (``sim`` from memory: 40 to 300 ns) is known better than the
trace keeps it; the bounds still hold. Counters stay exact. In the
simulated fleet the nanoseconds below those bounds (sampler wake-up and read-time jitter)
took 2.6 of 6.9 bytes a row (1.3 each for the two columns). Traces written before this
(``timestamp_ns``, exact ``read_ns``) still read, and readers get nanoseconds either way.

Counters are stored as the kernel counts them. ``counters/port_xmit_data`` and
``port_rcv_data`` count 4-octet words (IBA PortXmitData "divided by 4"; the kernel prints the
PMA's value as is: drivers/infiniband/core/sysfs.c show_pma_counter), so their byte figures
are always multiples of 4, and Parquet's delta encoding would spend two bits on every step
for nothing (bit-packed, where zstd cannot find them: 0.2 of 1.7 bytes a row per counter in
the simulated fleet). The samples store ``xmit_units`` and ``rcv_units`` with ``unit_bytes``:
4 where every value of a port's rows in an append is a multiple of 4 (every port read through
``counters/``), else 1 (byte counters: efa, bnxt_re, irdma, netdev). Bytes are
``xmit_units * unit_bytes``, exactly; readers hand out bytes. Traces written before this
(``xmit_bytes``, ``rcv_bytes``) and CSV traces still read.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from burstscope.detectors.counters import CounterSpec

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa

    SCHEMA: pa.Schema
    SLOW_SCHEMA: pa.Schema

PIECE_PREFIX = "part-"
# The samples' time column, and the one of traces written before it (exact nanoseconds).
TIME_COLUMN = "timestamp_us"
EXACT_TIME_COLUMN = "timestamp_ns"
# The grain of the stored sample times and read durations (see the module docstring).
TIME_GRAIN_NS = 1_000
# The samples' counters: units of UNIT_BYTES each (see the module docstring), and the byte
# columns of CSV traces and of traces written before the units.
XMIT_UNITS = "xmit_units"
RCV_UNITS = "rcv_units"
UNIT_BYTES = "unit_bytes"
BYTE_COLUMNS = ("xmit_bytes", "rcv_bytes")
# The units a writer picks: 4-octet words where every value is a multiple of 4, else bytes.
WORD_BYTES = 4
UNIT_CHOICES = (WORD_BYTES, 1)
# The slow counters (errors, congestion, PFC, state, rate) polled at about 1 Hz beside the
# samples: one row per counter and poll, in ``_slow/slow-NNNNNN.parquet`` pieces closed
# together with the sample piece of the same number. The leading underscore keeps them out
# of the samples when pyarrow, pandas or Spark read the trace directory as one table.
SLOW_DIRECTORY = "_slow"
SLOW_PREFIX = "slow-"


def __getattr__(name: str) -> Any:
    """SCHEMA and SLOW_SCHEMA, built on first use: the records below need no pyarrow, so the
    sampler process and an agent that does not record never load it (tens of MB each)."""
    if name not in ("SCHEMA", "SLOW_SCHEMA"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    schemas = _schemas()
    globals().update(schemas)
    return schemas[name]


def _schemas() -> dict[str, Any]:
    import pyarrow as pa

    schema = pa.schema(
        [
            # Wall-clock us of the read midpoint, rounded to the nearest: CLOCK_MONOTONIC plus
            # an offset fixed at start, so differences between rows are monotonic differences.
            pa.field(TIME_COLUMN, pa.int64(), nullable=False),
            pa.field("device", pa.dictionary(pa.int32(), pa.string()), nullable=False),
            pa.field("port", pa.int32(), nullable=False),
            # The cumulative counters in units of unit_bytes: bytes = units * unit_bytes.
            pa.field(XMIT_UNITS, pa.uint64(), nullable=False),
            pa.field(RCV_UNITS, pa.uint64(), nullable=False),
            pa.field(UNIT_BYTES, pa.int8(), nullable=False),  # 4 (octets of a word) or 1
            # How long the port's reads took, rounded up to a whole us (in ns).
            pa.field("read_ns", pa.int64(), nullable=False),
            pa.field("line_rate_bytes_per_second", pa.int64(), nullable=False),  # 0 = unknown
            # True on the first sample after a counter was (re)opened: no delta into it.
            pa.field("rebaseline", pa.bool_(), nullable=False),
        ]
    )
    slow_schema = pa.schema(
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
    return {"SCHEMA": schema, "SLOW_SCHEMA": slow_schema}


GAUGE = "gauge"
# Pieces and trace directories: owner and group only (the unit's UMask=0027, by hand too).
PIECE_MODE = 0o640
DIRECTORY_MODE = 0o750
# The version of this format, in every piece's key-value metadata (samples and slow), so a
# reader knows the columns without guessing from their names. 1: timestamp_ns, xmit_bytes
# and rcv_bytes (pieces without the key are read by their column names, as version 1 was
# written before the key existed); 2: timestamp_us, xmit_units, rcv_units and unit_bytes.
# A reader refuses a version it does not know: a newer burstscope wrote it.
FORMAT_VERSION = 2
KNOWN_FORMAT_VERSIONS = (1, 2)
FORMAT_VERSION_KEY = b"burstscope.format_version"
# Keys of the Parquet key-value metadata (file footer) that describe the trace.
_INFO_KEYS = {
    "interval_ns": b"burstscope.interval_ns",
    "source": b"burstscope.source",
    "host": b"burstscope.host",
    "clock_offset_ns": b"burstscope.clock_offset_ns",
}


@dataclass(frozen=True, slots=True)
class TraceInfo:
    """What a trace says about itself; None where it does not say (older traces, CSV)."""

    interval_ns: int | None = None  # the configured sampling interval, not a measured one
    source: str | None = None  # the source SPEC as given: sysfs, netdev:eth0, sim:moe
    host: str | None = None  # the node that sampled it
    # The node clock's offset from the fleet's reference (PTP: what ptp4l/phc2sys report) as
    # the agent knew it; None when it did not say. Cross-node synchrony needs it << 1 ms.
    clock_offset_ns: int | None = None

    @classmethod
    def here(cls, interval_ns: int, source: str) -> TraceInfo:
        """A trace sampled on this machine."""
        return cls(interval_ns, source, socket.gethostname())

    def metadata(self) -> dict[bytes, bytes]:
        """As Parquet key-value metadata: only what is known."""
        values = {
            "interval_ns": self.interval_ns,
            "source": self.source,
            "host": self.host,
            "clock_offset_ns": self.clock_offset_ns,
        }
        return {_INFO_KEYS[k]: str(v).encode() for k, v in values.items() if v is not None}

    @classmethod
    def from_metadata(cls, metadata: dict[bytes, bytes] | None) -> TraceInfo:
        """Read back; a value that does not parse counts as not said."""
        found = {k: (metadata or {}).get(key) for k, key in _INFO_KEYS.items()}
        text = {k: v.decode("utf-8", errors="replace") for k, v in found.items() if v}
        interval = text.get("interval_ns", "")
        offset = text.get("clock_offset_ns", "")
        return cls(
            int(interval) if interval.isdigit() and int(interval) > 0 else None,
            text.get("source"),
            text.get("host"),
            int(offset) if offset.lstrip("-").isdigit() else None,
        )


class TraceError(Exception):
    """A trace cannot be written or read; the message names the path and the problem."""


def check_format_version(file: object, metadata: dict[bytes, bytes] | None) -> int | None:
    """The piece's format version (None: written before versions); TraceError if unknown."""
    raw = (metadata or {}).get(FORMAT_VERSION_KEY)
    if raw is None:
        return None
    text = raw.decode("utf-8", errors="replace")
    if not text.isdigit() or int(text) not in KNOWN_FORMAT_VERSIONS:
        known = ", ".join(str(v) for v in KNOWN_FORMAT_VERSIONS)
        raise TraceError(
            f"{str(file)!r}: trace format version {text!r} is not one this burstscope reads "
            f"({known}); read it with the burstscope that wrote it, or a newer one"
        )
    return int(text)


@dataclass(frozen=True, slots=True)
class PortColumns:
    """Samples of one port in column form, ready to append."""

    device: str
    port: int
    line_rate_bytes_per_second: int | npt.NDArray[np.int64]  # one for all rows, or per row
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


def stored_times(
    timestamp_ns: npt.NDArray[np.int64], read_ns: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The sample times as a trace keeps them: the midpoint to the nearest microsecond, the
    read duration rounded up to a whole microsecond (the module docstring says why). The
    agent's pipeline applies it too, so live detection sees what a recording stores."""
    import numpy as np  # here: this module is loaded by commands that need no numpy

    half = TIME_GRAIN_NS // 2
    stamps = (np.asarray(timestamp_ns, np.int64) + half) // TIME_GRAIN_NS
    reads = -(-np.asarray(read_ns, np.int64) // TIME_GRAIN_NS) * TIME_GRAIN_NS
    return stamps, reads
