"""``--source replay:PATH``: a recorded trace played back through the agent at recorded speed.

Each tick reports, for every port, the counters the recording implies at that moment of
the trace: linear interpolation between the two recorded samples around it, so a 1 ms
recording replayed by a 1 ms sampler shows the same bursts and the same 15 s means. A
re-baseline in the recording is carried through. Pieces are loaded ahead of time by a
small thread, so the sampler never waits on Parquet decoding.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from burstscope.collector.discovery import DeviceInfo
from burstscope.collector.sources.base import (
    STATUS_MISSING,
    STATUS_OK,
    STATUS_REBASELINE,
    PortSpec,
    SampleRow,
    SlowReading,
    SlowSource,
    SourceError,
    SourceOptions,
    UnsampledPort,
)
from burstscope.collector.trace import (
    PortSamples,
    SlowSeries,
    TraceError,
    read_samples,
    read_slow,
    slow_files,
)

_PREFETCH_PIECES = 2


@dataclass(slots=True)
class _PortCursor:
    """The loaded stretch of one port's recording and where playback stands in it."""

    timestamp_ns: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, np.int64))
    xmit: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0, np.float64))
    rcv: npt.NDArray[np.float64] = field(default_factory=lambda: np.empty(0, np.float64))
    rebaseline: npt.NDArray[np.bool_] = field(default_factory=lambda: np.empty(0, np.bool_))
    index: int = 0
    started: bool = False
    announced: int = -1  # the re-baseline sample already reported

    def extend(self, samples: PortSamples) -> None:
        keep = max(self.index - 1, 0)
        self.timestamp_ns = np.concatenate([self.timestamp_ns[keep:], samples.timestamp_ns])
        self.xmit = np.concatenate([self.xmit[keep:], samples.xmit_bytes.astype(np.float64)])
        self.rcv = np.concatenate([self.rcv[keep:], samples.rcv_bytes.astype(np.float64)])
        flags = (
            samples.rebaseline
            if samples.rebaseline is not None
            else np.zeros(samples.timestamp_ns.size, np.bool_)
        )
        self.rebaseline = np.concatenate([self.rebaseline[keep:], flags])
        self.index -= keep
        self.announced -= keep


def _trace_ports(path: Path) -> tuple[tuple[PortSpec, ...], int]:
    """Ports and the first timestamp, from the first piece of the trace."""
    found: dict[tuple[str, int], PortSpec] = {}
    first_ns: int | None = None
    first_file: Path | None = None
    try:
        for samples in read_samples(path):
            first_file = first_file or samples.source
            if samples.source != first_file:
                break  # the ports of the first piece are the ports of the trace
            rate = samples.line_rate_bytes_per_second
            line_rate = int(rate[-1]) if rate is not None and rate.size else 0
            found.setdefault(
                (samples.device, samples.port), PortSpec(samples.device, samples.port, line_rate)
            )
            start = int(samples.timestamp_ns[0])
            first_ns = start if first_ns is None else min(first_ns, start)
    except TraceError as exc:
        raise SourceError(f"replay: {exc}") from None
    if first_ns is None:
        raise SourceError(f"replay: {str(path)!r} holds no samples")
    return tuple(found[key] for key in sorted(found)), first_ns


class ReplaySource:
    """Plays a trace back; the trace's first sample lines up with open()."""

    unsampled: tuple[UnsampledPort, ...] = ()
    notes: tuple[str, ...] = ()
    devices: tuple[DeviceInfo, ...] = ()

    def __init__(
        self,
        path: Path,
        line_rate_bytes_per_second: int | None = None,
        line_rates: tuple[tuple[str, int], ...] = (),
    ) -> None:
        self.path = path
        self.name = "replay"
        ports, self._first_ns = _trace_ports(path)
        rates = dict(line_rates)
        if line_rate_bytes_per_second is not None or rates:
            ports = tuple(
                PortSpec(
                    p.device,
                    p.port,
                    rates.get(p.device, line_rate_bytes_per_second or p.line_rate_bytes_per_second),
                )
                for p in ports
            )
        self.ports = ports
        self._cursors: list[_PortCursor] = []
        self._queue: deque[PortSamples] = deque()
        self._wanted = threading.Semaphore(_PREFETCH_PIECES)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_ns = 0
        self.finished = False

    def slow_sources(self) -> list[SlowSource]:
        """The slow counters recorded beside the trace, played back with it; none if none.

        SourceOptions.ethtool does not apply: the recording holds what ethtool read, if anything.
        """
        return [ReplaySlowSource(self.path, self._first_ns)] if slow_files(self.path) else []

    def __getstate__(self) -> dict[str, object]:
        return {"path": self.path, "ports": self.ports, "first_ns": self._first_ns}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]
        self.ports = state["ports"]  # type: ignore[assignment]

    def open(self) -> None:
        self._cursors = [_PortCursor() for _ in self.ports]
        self._thread = threading.Thread(target=self._load, name="replay-loader", daemon=True)
        self._thread.start()
        # Wait for the first piece so the first ticks have something to play.
        deadline = time.monotonic() + 30
        while not self._queue and not self.finished and time.monotonic() < deadline:
            time.sleep(0.01)
        self._start_ns = time.monotonic_ns()

    def _load(self) -> None:
        try:
            for samples in read_samples(self.path):
                self._wanted.acquire()
                if self._stop.is_set():
                    return
                self._queue.append(samples)
        except TraceError:
            pass  # a damaged tail ends the replay where the good data ends
        self.finished = True

    def _take_loaded(self, until_ns: int) -> None:
        index = {(p.device, p.port): i for i, p in enumerate(self.ports)}
        while self._queue:
            samples = self._queue[0]
            if int(samples.timestamp_ns[0]) > until_ns + 1_000_000_000:
                return
            self._queue.popleft()
            self._wanted.release()
            position = index.get((samples.device, samples.port))
            if position is not None:
                self._cursors[position].extend(samples)

    def read_into(self, row: SampleRow) -> None:
        now = time.monotonic_ns()
        trace_ns = self._first_ns + (now - self._start_ns)
        self._take_loaded(trace_ns)
        for position, cursor in enumerate(self._cursors):
            row.timestamp_ns[position] = now
            row.read_ns[position] = 0
            stamps = cursor.timestamp_ns
            last = stamps.size - 1
            while cursor.index < last and stamps[cursor.index + 1] <= trace_ns:
                cursor.index += 1
            i = cursor.index
            ended = i == last and self.finished and not self._queue
            if last < 0 or stamps[i] > trace_ns or (ended and stamps[i] < trace_ns):
                row.status[position] = STATUS_MISSING  # before its first sample, or past its end
                continue
            if i < last and not cursor.rebaseline[i + 1]:
                weight = (trace_ns - stamps[i]) / (stamps[i + 1] - stamps[i])
                xmit = cursor.xmit[i] + weight * (cursor.xmit[i + 1] - cursor.xmit[i])
                rcv = cursor.rcv[i] + weight * (cursor.rcv[i + 1] - cursor.rcv[i])
            else:  # the last sample, or the next one starts a new baseline: hold still
                xmit, rcv = cursor.xmit[i], cursor.rcv[i]
            row.xmit_bytes[position] = int(xmit)
            row.rcv_bytes[position] = int(rcv)
            status = STATUS_OK
            if not cursor.started or (cursor.rebaseline[i] and cursor.announced != i):
                status = STATUS_REBASELINE
                cursor.started = True
                cursor.announced = i
            row.status[position] = status

    def close(self) -> None:
        self._stop.set()
        self._wanted.release()


class ReplaySlowSource:
    """The slow counters recorded beside a trace, played back with it.

    Each poll reports every recorded counter and gauge as it last read at or before the
    same moment of the trace (a step, as a 1 Hz poller saw it). Its clock starts at its own
    open(), which the agent calls just after the sampler's: the two line up within the
    sampler's start-up, far below the 1 s between polls.
    """

    def __init__(self, path: Path, first_ns: int) -> None:
        self.path = path
        self.first_ns = first_ns
        self.name = "replay-slow"
        self._series: list[SlowSeries] = []
        self._start_ns = 0

    def open(self) -> None:
        try:
            self._series = read_slow(self.path)
        except TraceError as exc:
            raise SourceError(f"replay: {exc}") from None
        self._start_ns = time.monotonic_ns()

    def poll(self) -> list[SlowReading]:
        trace_ns = self.first_ns + (time.monotonic_ns() - self._start_ns)
        readings = []
        for series in self._series:
            index = int(np.searchsorted(series.timestamp_ns, trace_ns, side="right")) - 1
            if index >= 0:
                value = int(series.value[index])
                readings.append(
                    SlowReading(series.device, series.port, series.name, value, series.spec)
                )
        return readings

    def close(self) -> None:
        self._series = []


def from_spec(argument: str | None, options: SourceOptions) -> ReplaySource:
    if not argument:
        raise SourceError("replay needs a trace: replay:PATH")
    return ReplaySource(Path(argument), options.line_rate_bytes_per_second, options.line_rates)
