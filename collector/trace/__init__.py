"""The trace format: one row per sample and port, written as closed Parquet pieces.

schema.py (columns, names, TraceInfo), writer.py (TraceWriter), samples.py (read_samples,
also CSV), slow.py (read_slow) and jobs.py (the job side table's file; collector.jobs.spans
reads it as spans); import from here. Each name is imported from its module
when first asked for, so a process that only hands PortColumns or SlowRow around (the
sampler, an agent that does not record) never loads pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from burstscope.collector.trace.jobs import JOBS_FILE, read_states
    from burstscope.collector.trace.samples import PortSamples, read_info, read_samples, trace_files
    from burstscope.collector.trace.schema import (
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
    from burstscope.collector.trace.slow import SlowSeries, read_slow, slow_files
    from burstscope.collector.trace.writer import TraceWriter, prepare_output

_WHERE = {
    "DIRECTORY_MODE": "schema",
    "GAUGE": "schema",
    "JOBS_FILE": "jobs",
    "read_states": "jobs",
    "PIECE_MODE": "schema",
    "PIECE_PREFIX": "schema",
    "SLOW_DIRECTORY": "schema",
    "SLOW_PREFIX": "schema",
    "SCHEMA": "schema",
    "SLOW_SCHEMA": "schema",
    "PortColumns": "schema",
    "SlowRow": "schema",
    "TraceError": "schema",
    "TraceInfo": "schema",
    "PortSamples": "samples",
    "read_info": "samples",
    "read_samples": "samples",
    "trace_files": "samples",
    "SlowSeries": "slow",
    "read_slow": "slow",
    "slow_files": "slow",
    "TraceWriter": "writer",
    "prepare_output": "writer",
}

__all__ = [
    "DIRECTORY_MODE",
    "GAUGE",
    "JOBS_FILE",
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
    "read_states",
    "slow_files",
    "trace_files",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
