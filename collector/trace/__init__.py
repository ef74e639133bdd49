"""The trace format: one row per sample and port, written as closed Parquet pieces.

schema.py (columns, names, TraceInfo), writer.py (TraceWriter), samples.py (read_samples,
also CSV) and slow.py (read_slow); import from here.
"""

from collector.trace.samples import PortSamples, read_info, read_samples, trace_files
from collector.trace.schema import (
    DIRECTORY_MODE,
    GAUGE,
    PIECE_MODE,
    PIECE_PREFIX,
    SCHEMA,
    SLOW_DIRECTORY,
    SLOW_PREFIX,
    SLOW_SCHEMA,
    PortColumns,
    SlowRow,
    TraceError,
    TraceInfo,
)
from collector.trace.slow import SlowSeries, read_slow, slow_files
from collector.trace.writer import TraceWriter, prepare_output

__all__ = [
    "DIRECTORY_MODE",
    "GAUGE",
    "PIECE_MODE",
    "PIECE_PREFIX",
    "SCHEMA",
    "SLOW_DIRECTORY",
    "SLOW_PREFIX",
    "SLOW_SCHEMA",
    "PortColumns",
    "PortSamples",
    "SlowRow",
    "SlowSeries",
    "TraceError",
    "TraceInfo",
    "TraceWriter",
    "prepare_output",
    "read_info",
    "read_samples",
    "read_slow",
    "slow_files",
    "trace_files",
]
