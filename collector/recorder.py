"""``record``: the sampler's ring, drained every 100 ms into a trace of closed Parquet pieces,
with the slow counters polled at about 1 Hz beside it.

It records through the agent's intake (collector.intake), without detectors or exporter:
every row states the line rate in force for it, as in a trace ``agent --record`` writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from burstscope.collector.intake import DRAIN_SECONDS, Intake, Record
from burstscope.collector.ring import Field
from burstscope.collector.sampler import Sampler, SamplerConfig, SamplerError, tuning_notes
from burstscope.collector.slow_poller import SlowPoller
from burstscope.collector.sources.base import CounterSource, SlowSource
from burstscope.collector.trace import PortColumns, SlowRow, TraceInfo, TraceWriter


@dataclass(frozen=True, slots=True)
class RecordSummary:
    rows: int
    slow_rows: int  # slow counter readings recorded beside the samples
    pieces: int
    ticks: int
    missed_ticks: int
    lost_rows: int  # rows the ring overwrote before they were drained (should be 0)
    missing_samples: int  # port readings that failed
    realtime: bool
    notes: tuple[str, ...]  # what the sampler asked for and was refused, and why
    cpu: int


def record(
    source: CounterSource,
    path: Path,
    duration_seconds: float | None,
    config: SamplerConfig,
    piece_seconds: float = 5.0,
    should_stop: Callable[[], bool] = lambda: False,
    slow_sources: Sequence[SlowSource] = (),
    slow_interval_seconds: float = 1.0,
    source_spec: str | None = None,
    on_sampling: Callable[[], None] = lambda: None,
) -> RecordSummary:
    """Sample ``source`` into ``path`` for ``duration_seconds`` (None: until should_stop()).

    ``slow_sources`` (errors, congestion, PFC) are polled at ``slow_interval_seconds`` in a
    thread of this process and recorded beside the samples. Whatever was sampled before a
    stop, a failure or an exception is flushed as a closed piece before returning or raising.
    The trace states ``source_spec`` (default: the source's name), the configured interval
    and this host. ``on_sampling`` is called once, when the first samples have arrived.
    """
    info = TraceInfo.here(config.interval_ns, source_spec or source.name)
    writer = TraceWriter(path, piece_seconds, info)
    sampler = Sampler(source, config)
    slow = SlowPoller(slow_sources, slow_interval_seconds, record=True) if slow_sources else None
    try:
        ring = sampler.start()
        intake = Intake(ring, source.ports, _appended_to(writer))
        sampling = False

        def drain() -> None:
            nonlocal sampling
            intake.take(slow)
            if not sampling and ring.get(Field.TICKS) > 0:
                sampling = True
                on_sampling()

        started = time.monotonic()
        if slow is not None:
            slow.start()
        try:
            while not should_stop():
                if duration_seconds is not None:
                    remaining = started + duration_seconds - time.monotonic()
                    if remaining <= 0:
                        break
                    time.sleep(min(DRAIN_SECONDS, remaining))
                else:
                    time.sleep(DRAIN_SECONDS)
                drain()
                if not sampler.alive:
                    raise SamplerError("the sampler process died")
        finally:
            if slow is not None:
                slow.stop(final_poll=True)
            sampler.stop()
            drain()
            writer.close()
        return RecordSummary(
            rows=writer.rows_written,
            slow_rows=writer.slow_rows_written,
            pieces=writer.pieces_written,
            ticks=ring.get(Field.TICKS),
            missed_ticks=ring.get(Field.MISSED_TICKS),
            lost_rows=intake.reader.lost_rows,
            missing_samples=intake.reader.missing_samples,
            realtime=bool(ring.get(Field.REALTIME)),
            notes=tuple(tuning_notes(ring, config)),
            cpu=ring.get(Field.CPU),
        )
    finally:
        sampler.close()


def _appended_to(writer: TraceWriter) -> Record:
    """The intake's rows into ``writer``; a failure raises, and ends the recording."""

    def append(columns: Sequence[PortColumns], slow: Sequence[SlowRow]) -> None:
        writer.append_slow(slow)
        writer.append(columns)

    return append
