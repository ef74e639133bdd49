"""A burstscope trace as Chrome trace events: 1 ms utilization, bursts and congestion.

The format is Google's "Trace Event Format" document (docs.google.com/document/d/
1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU), its "JSON Object Format": an object whose
``traceEvents`` list holds the events, each with ``ph`` (its phase), ``ts`` in microseconds,
``pid`` and ``tid``. Three phases are written here:

- ``"C"`` counter events, one track per ``name`` within a process, a series per key of
  ``args``: a value holds until the counter's next event. Per port and direction the share
  of line rate (0 to 1, four decimals) over each 1 ms (the samples themselves at a 1 ms
  interval or coarser, the detectors' aligned 1 ms windows when sampled finer); per port and
  congestion counter (PFC pauses, ECN marks, CNPs, xmit_wait) its increments per second
  between two 1 Hz readings. An event is written only where the value changes (the value
  holds anyway), and an interval the counters cannot measure (the first sample, a reset, a
  gap) reads 0.
- ``"X"`` complete events (``ts`` and ``dur``): one per burst the detectors found, on a
  thread of its own per port and direction, its bytes, peak and mean utilization in args.
- ``"M"`` metadata events: ``process_name`` ("burstscope <host>") and ``thread_name``.

Times are Unix nanoseconds less a base, written as "microseconds.nanoseconds" (Kineto's own
form since pytorch/kineto#910), so that no nanosecond is lost to a float.

The samples go through the same detectors as ``burstscope report`` (analyzer, bursts, line
rate runs, counter deltas); nothing is kept but each port's analyzers, and events are
yielded as they are found, so memory does not grow with the trace.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from burstscope.collector.trace import (
    PortSamples,
    SlowSeries,
    TraceError,
    TraceInfo,
    read_info,
    read_samples,
    read_slow,
)
from burstscope.detectors.analyzer import Chunk, DirectionAnalyzer
from burstscope.detectors.config import (
    DIRECTIONS,
    NS_PER_SECOND,
    Thresholds,
    nominal_interval_ns,
    scale_key,
)
from burstscope.detectors.congestion import is_congestion
from burstscope.detectors.counters import counter_deltas
from burstscope.detectors.line_rate import rate_runs
from burstscope.errors import UsageError
from burstscope.kineto_merge import MergeTarget

MILLISECOND_NS = 1_000_000
# Utilization written to 1e-4 of line rate: finer than any counter's read jitter at 1 ms.
UTILIZATION_STEPS = 10_000
# Samples a port needs before its interval is judged from them (a trace without one).
INTERVAL_PROBE = 64
UNBOUNDED = 2**63 - 1  # a window without an end
CATEGORY = "burstscope"  # the "cat" of the slices: a reader's filter for our events


@dataclass(frozen=True, slots=True)
class Window:
    """Which part of the trace to write: [start, start + duration) of the trace's time,
    ``start_ns`` counted from its first sample; None: from the start, or to the end."""

    start_ns: int | None = None
    duration_ns: int | None = None
    # Or absolute Unix nanoseconds (another trace's extent); the offsets above win.
    unix_range: tuple[int, int] | None = None

    def bounds(self, first_ns: int) -> tuple[int, int]:
        """[lo, hi) in Unix nanoseconds, once the trace's first sample is known."""
        if self.start_ns is None and self.duration_ns is None and self.unix_range is not None:
            return self.unix_range
        lo = first_ns + (self.start_ns or 0)
        hi = lo + self.duration_ns if self.duration_ns is not None else UNBOUNDED
        return lo, hi


@dataclass(slots=True)
class Tally:
    """What was written, for the command's one line."""

    counter_events: int = 0
    bursts: int = 0
    congestion_events: int = 0
    ports: int = 0
    first_ns: int | None = None  # the trace's first sample
    lo_ns: int = 0  # the window written, Unix ns
    hi_ns: int = 0
    info: TraceInfo = field(default_factory=TraceInfo)


def export(
    trace: Path,
    out: Path,
    merge: MergeTarget | None = None,
    window: Window | None = None,
    include: re.Pattern[str] | None = None,
    line_rate: int | None = None,
) -> Tally:
    """Write the trace's events to ``out``: a trace of their own, or ``merge`` with them.

    Merged, they take the other trace's time base and a pid it does not use, and cover its
    extent unless ``window`` says otherwise. Written to a temporary file beside ``out`` and
    renamed, so a failure leaves no half-written trace.
    """
    if merge is not None and window is None and merge.extent_ns is not None:
        window = Window(unix_range=merge.extent_ns)
    exporter = Exporter(
        trace,
        pid=1 if merge is None else merge.free_pid,
        base_ns=None if merge is None else merge.base_ns,
        window=window or Window(),
        include=include,
        line_rate=line_rate,
    )
    events = exporter.events()
    partial = out.with_name(f".{out.name}.partial")
    try:
        with partial.open("w", encoding="utf-8") as file:
            if merge is None:
                _write_own(file, exporter, events)
            else:
                merge.write(file, _with_process(exporter, events))
        if exporter.tally.ports == 0:
            raise UsageError(f"{str(trace)!r}: no device matches --include")
        os.replace(partial, out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise UsageError(f"cannot write {str(out)!r}: {exc.strerror or exc}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return exporter.tally


def _with_process(exporter: Exporter, events: Iterator[str]) -> Iterator[str]:
    yield metadata_event("process_name", exporter.pid, 0, exporter.process_name())
    yield from events


def _write_own(file: Any, exporter: Exporter, events: Iterator[str]) -> None:
    """The JSON Object Format with Kineto's ``baseTimeNanoseconds`` (our ts are relative
    to it, as Kineto's are): a PyTorch trace reader takes our trace on the same terms."""
    file.write('{"traceEvents":[\n')
    file.write(metadata_event("process_name", exporter.pid, 0, exporter.process_name()))
    for event in events:
        file.write(",\n")
        file.write(event)
    tally = exporter.tally
    other = {
        "source": tally.info.source,
        "host": tally.info.host,
        "interval_ns": tally.info.interval_ns,
        "window_unix_ns": [tally.lo_ns, tally.hi_ns if tally.hi_ns < UNBOUNDED else None],
    }
    file.write(
        f'\n],"displayTimeUnit":"ms","baseTimeNanoseconds":{exporter.base_ns or 0},'
        f'"otherData":{{"burstscope":{json.dumps(other, separators=(",", ":"))}}}}}\n'
    )


def microseconds(unix_ns: int, base_ns: int) -> str:
    """``ts`` for a Unix time: microseconds after ``base_ns``, three decimals for the ns."""
    relative = unix_ns - base_ns
    sign = "-" if relative < 0 else ""
    whole, fraction = divmod(abs(relative), 1000)
    return f"{sign}{whole}.{fraction:03d}"


def metadata_event(name: str, pid: int, tid: int, value: str) -> str:
    """A ``process_name`` or ``thread_name`` event."""
    return json.dumps(
        {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {"name": value}},
        separators=(",", ":"),
    )


class _Port:
    """One port's two directions through the detectors, and the events they yield."""

    def __init__(
        self, device: str, port: int, tids: tuple[int, int], interval_ns: int | None
    ) -> None:
        self.label = f"{device}/{port}"
        self.tids = tids
        self.interval_ns = interval_ns
        self.pending: list[PortSamples] = []
        self.analyzers: tuple[DirectionAnalyzer, DirectionAnalyzer] | None = None
        self.rate = 0
        self.windowed = False  # 1 ms windows of finer samples, rather than the samples
        self.previous_end: int | None = None  # the last sample's time: the next one's start
        self.last_value: list[int | None] = [None, None]  # in UTILIZATION_STEPS, per direction
        self.names = tuple(json.dumps(f"{self.label} {d}") for d in DIRECTIONS)


class Exporter:
    """Events from one trace: ``events()`` yields them as JSON texts, ``tally`` counts them."""

    def __init__(
        self,
        path: Path,
        pid: int,
        base_ns: int | None,
        window: Window,
        include: re.Pattern[str] | None = None,
        line_rate: int | None = None,
        thresholds: Thresholds | None = None,
    ) -> None:
        self.path = path
        self.pid = pid
        self.base_ns = base_ns  # None: the first sample's second (a trace of its own)
        self.window = window
        self.include = include
        self.line_rate = line_rate
        self.thresholds = thresholds or Thresholds()
        try:
            self.tally = Tally(info=read_info(path))
        except TraceError as exc:
            raise UsageError(str(exc)) from None
        self._ports: dict[tuple[str, int], _Port] = {}
        self._lo = 0
        self._hi = 0

    @property
    def base(self) -> int:
        assert self.base_ns is not None, "the base is known from the first sample on"
        return self.base_ns

    def events(self) -> Iterator[str]:
        """Every event, metadata first for each port as it appears."""
        try:
            for samples in self._samples():
                yield from self._add(samples)
            for port in self._ports.values():
                yield from self._finish(port)
            slow = read_slow(self.path) if self.tally.first_ns is not None else []
        except TraceError as exc:
            raise UsageError(str(exc)) from None
        for series in slow:
            yield from self._congestion(series)

    def process_name(self) -> str:
        return f"burstscope {self.tally.info.host or self.path.name}"

    def _samples(self) -> Iterator[PortSamples]:
        for samples in read_samples(self.path):
            if samples.timestamp_ns.size == 0:
                continue
            if self.include is None or self.include.search(samples.device):
                yield samples

    def _add(self, samples: PortSamples) -> Iterator[str]:
        if self.tally.first_ns is None:
            first = int(samples.timestamp_ns[0])
            self.tally.first_ns = first
            if self.base_ns is None:
                self.base_ns = first - first % NS_PER_SECOND
            self._lo, self._hi = self.window.bounds(first)
            self.tally.lo_ns, self.tally.hi_ns = self._lo, self._hi
        key = (samples.device, samples.port)
        port = self._ports.get(key)
        if port is None:
            tids = (2 * len(self._ports) + 1, 2 * len(self._ports) + 2)
            port = self._ports[key] = _Port(*key, tids, self.tally.info.interval_ns)
            self.tally.ports += 1
            for tid, direction in zip(tids, DIRECTIONS, strict=True):
                yield metadata_event("thread_name", self.pid, tid, f"{port.label} {direction}")
        if port.analyzers is None:
            port.pending.append(samples)
            if sum(p.timestamp_ns.size for p in port.pending) >= INTERVAL_PROBE:
                yield from self._start(port, final=False)
            return
        yield from self._feed(port, samples)

    def _rate(self, samples: PortSamples) -> int | None:
        if self.line_rate is not None:
            return self.line_rate
        rates = samples.line_rate_bytes_per_second
        if rates is None:
            raise UsageError(
                f"{str(samples.source)!r}: no line_rate_bytes_per_second column; "
                "pass --line-rate GBITS"
            )
        known = rates[rates > 0]
        return int(known[0]) if known.size else None

    def _start(self, port: _Port, final: bool) -> Iterator[str]:
        rate = next((r for r in map(self._rate, port.pending) if r is not None), None)
        if rate is None:
            if not final:
                return
            raise UsageError(
                f"{str(self.path)!r}: line rate unknown (0) for {port.label}; "
                "pass --line-rate GBITS"
            )
        stamps = np.concatenate([p.timestamp_ns for p in port.pending])
        if port.interval_ns is None:
            if np.count_nonzero(np.diff(stamps) > 0) == 0:
                raise UsageError(
                    f"{str(self.path)!r}: {port.label} needs at least two samples with "
                    "increasing timestamps"
                )
            port.interval_ns = nominal_interval_ns(stamps)
        port.rate = rate
        port.analyzers = (
            DirectionAnalyzer(rate, self.thresholds, port.interval_ns, keep_bursts=False),
            DirectionAnalyzer(rate, self.thresholds, port.interval_ns, keep_bursts=False),
        )
        # Finer than 1 ms, the analyzer closes 1 ms windows (Thresholds.window_scales).
        port.windowed = MILLISECOND_NS in self.thresholds.window_scales(port.interval_ns)
        pending, port.pending = port.pending, []
        for samples in pending:
            yield from self._feed(port, samples)

    def _feed(self, port: _Port, samples: PortSamples) -> Iterator[str]:
        """Each run of one line rate through both directions (a renegotiated link applies
        from the row that carries its rate, as in the report)."""
        assert port.analyzers is not None
        rates = samples.line_rate_bytes_per_second
        if self.line_rate is not None or rates is None:
            runs = [slice(0, samples.timestamp_ns.size)]
        else:
            runs = []
            for run in rate_runs(rates, port.rate):
                if run.rate > 0 and run.rate != port.rate:
                    port.rate = run.rate
                    for analyzer in port.analyzers:
                        analyzer.set_line_rate(run.rate)
                runs.append(run.rows)
        for rows in runs:
            stamps = samples.timestamp_ns[rows]
            marks = None if samples.rebaseline is None else samples.rebaseline[rows]
            chunks = (
                port.analyzers[0].feed(stamps, samples.xmit_bytes[rows], marks),
                port.analyzers[1].feed(stamps, samples.rcv_bytes[rows], marks),
            )
            starts = np.empty_like(stamps)
            starts[1:] = stamps[:-1]
            starts[0] = (
                int(stamps[0]) - (port.interval_ns or 0)
                if port.previous_end is None
                else port.previous_end
            )
            port.previous_end = int(stamps[-1])
            for index, chunk in enumerate(chunks):
                yield from self._chunk(port, index, chunk, starts)

    def _finish(self, port: _Port) -> Iterator[str]:
        if port.analyzers is None:
            yield from self._start(port, final=True)
        assert port.analyzers is not None
        for index, analyzer in enumerate(port.analyzers):
            yield from self._chunk(port, index, analyzer.finish(), None)

    def _chunk(
        self, port: _Port, index: int, chunk: Chunk, starts: npt.NDArray[np.int64] | None
    ) -> Iterator[str]:
        if port.windowed:
            windows = chunk.windows.get(scale_key(MILLISECOND_NS))
            if windows is not None:
                yield from self._utilization(
                    port, index, windows.end_ns - MILLISECOND_NS, windows.end_ns,
                    windows.utilization,
                )  # fmt: skip
        elif starts is not None:
            yield from self._utilization(port, index, starts, chunk.timestamp_ns, chunk.utilization)
        yield from self._bursts(port, index, chunk)

    def _utilization(
        self,
        port: _Port,
        index: int,
        starts: npt.NDArray[np.int64],
        ends: npt.NDArray[np.int64],
        utilization: npt.NDArray[np.float64],
    ) -> Iterator[str]:
        inside = (starts < self._hi) & (ends > self._lo)
        if not inside.any():
            return
        times = np.maximum(starts[inside], self._lo)
        steps = np.rint(utilization[inside] * UTILIZATION_STEPS).astype(np.int64)
        changed = np.empty(steps.size, np.bool_)
        changed[1:] = steps[1:] != steps[:-1]
        changed[0] = steps[0] != port.last_value[index]
        port.last_value[index] = int(steps[-1])
        name, pid, base = port.names[index], self.pid, self.base
        for time, step in zip(times[changed].tolist(), steps[changed].tolist(), strict=True):
            self.tally.counter_events += 1
            yield (
                f'{{"ph":"C","name":{name},"pid":{pid},"ts":{microseconds(time, base)},'
                f'"args":{{"utilization":{_share(step)}}}}}'
            )

    def _bursts(self, port: _Port, index: int, chunk: Chunk) -> Iterator[str]:
        bursts = chunk.bursts
        if not len(bursts):
            return
        inside = (bursts.start_ns < self._hi) & (bursts.end_ns > self._lo)
        direction, tid = DIRECTIONS[index], port.tids[index]
        for start, end, size, peak, mean in zip(
            bursts.start_ns[inside].tolist(),
            bursts.end_ns[inside].tolist(),
            bursts.bytes[inside].tolist(),
            bursts.peak_utilization[inside].tolist(),
            bursts.mean_utilization[inside].tolist(),
            strict=True,
        ):
            self.tally.bursts += 1
            args = {
                "port": port.label,
                "direction": direction,
                "bytes": size,
                "peak_utilization": round(peak, 4),
                "mean_utilization": round(mean, 4),
                "duration_ns": end - start,
            }
            yield (
                f'{{"ph":"X","cat":"{CATEGORY}","name":"burst","pid":{self.pid},"tid":{tid},'
                f'"ts":{microseconds(start, self.base)},"dur":{microseconds(end, start)},'
                f'"args":{json.dumps(args, separators=(",", ":"))}}}'
            )

    def _congestion(self, series: SlowSeries) -> Iterator[str]:
        """A congestion counter's increments per second between its 1 Hz readings, each
        at the start of its interval (the reading cannot say where inside it they fell)."""
        if series.spec is None or not is_congestion(series.name):
            return
        if (series.device, series.port) not in self._ports or series.timestamp_ns.size < 2:
            return
        deltas = counter_deltas(None, series.value, series.spec, series.rebaseline)
        ends = series.timestamp_ns
        starts, ends, delta, valid = ends[:-1], ends[1:], deltas.delta[1:], deltas.valid[1:]
        inside = (starts < self._hi) & (ends > self._lo)
        seconds = (ends - starts) / NS_PER_SECOND
        rates = np.where(valid & (seconds > 0), delta / np.maximum(seconds, 1e-9), 0.0)
        name = json.dumps(f"{series.device}/{series.port} {series.name}")
        last: float | None = None
        for start, rate in zip(starts[inside].tolist(), rates[inside].tolist(), strict=True):
            value = float(f"{rate:.6g}")
            if value == last:
                continue
            last = value
            self.tally.congestion_events += 1
            yield (
                f'{{"ph":"C","name":{name},"pid":{self.pid},'
                f'"ts":{microseconds(max(start, self._lo), self.base)},'
                f'"args":{{"per_second":{_number(value)}}}}}'
            )


def _share(steps: int) -> str:
    """A utilization in UTILIZATION_STEPS as a short decimal: 4213 -> 0.4213, 10000 -> 1."""
    whole, fraction = divmod(steps, UTILIZATION_STEPS)
    return str(whole) if fraction == 0 else f"{whole}.{fraction:04d}".rstrip("0")


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)
