"""The two small protocols every counter source implements: fast (every tick) and slow (<= 1 Hz)."""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from burstscope.collector.discovery import DEFAULT_SYSFS_ROOT, DeviceInfo

if TYPE_CHECKING:  # numpy and the trace format: not for `discover` or `--version`
    from burstscope.collector.trace import SlowRow
    from burstscope.detectors.counters import CounterSpec

# Per-port status written beside every sample.
STATUS_OK = 0
STATUS_REBASELINE = 1  # first reading after the counter was (re)opened: no delta into it
STATUS_MISSING = 2  # the read failed; the port is down and being retried with backoff
# From STATUS_BAD on, the status byte says which counter file misbehaved and why: one bad
# file costs its port that tick (and a rebaseline), never the sampler or another port.
STATUS_BAD = 8
# Why a reading was refused. Indexes below BAD_ERRNO are value faults; BAD_ERRNO + errno is
# a read that failed with that errno (EIO, EINVAL from a driver's show()).
BAD_REASONS = ("not_a_number", "negative", "out_of_range")
BAD_ERRNO = len(BAD_REASONS)
_MAX_ERRNO = (255 - STATUS_BAD) // 2 - BAD_ERRNO
# The two data counter files of a port, by their position in the status byte.
COUNTER_FILES = ("port_xmit_data", "port_rcv_data")
# Cumulative byte counters travel as unsigned 64-bit values (the ring, the trace).
MAX_COUNTER_BYTES = (1 << 64) - 1
# The slow gauge every source's slow companions report as the utilization denominator: the
# data rate after line encoding, or the operator's override (0 or absent: unknown).
DATA_RATE_GAUGE = "data_rate_bytes_per_second"


def bad_status(counter: int, reason: int) -> int:
    """The status byte of a refused reading of ``COUNTER_FILES[counter]`` for ``reason``."""
    return STATUS_BAD + 2 * reason + counter


def bad_errno_status(counter: int, error: int) -> int:
    """The status byte of a read of ``COUNTER_FILES[counter]`` that failed with ``error``."""
    return bad_status(counter, BAD_ERRNO + min(max(error, 0), _MAX_ERRNO))


def describe_bad_status(status: int) -> tuple[str, str]:
    """(counter file, reason) of a status byte at or above STATUS_BAD."""
    code = status - STATUS_BAD
    counter, reason = code % 2, code // 2
    if reason < BAD_ERRNO:
        why = BAD_REASONS[reason]
    else:
        number = reason - BAD_ERRNO
        why = errno.errorcode.get(number, f"errno {number}")
    return COUNTER_FILES[counter], why


def usable(status: int) -> bool:
    """True for a reading that carries a value (OK or REBASELINE)."""
    return status < STATUS_MISSING


# Not read this tick: the kernel would return its cached value (hw_counters lifespan), and
# a repeated value followed by a jump is no measurement. Not a sample, not a failure.
STATUS_HELD = 3


class SourceError(Exception):
    """A source cannot start: bad specification, unknown interface, nothing to read."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Settings every source may use; each takes what applies to it."""

    sysfs_root: str = DEFAULT_SYSFS_ROOT
    include: re.Pattern[str] | None = None
    exclude: re.Pattern[str] | None = None
    line_rate_bytes_per_second: int | None = None  # --line-rate: every port
    # [source.line_rates] / --line-rate-for DEVICE=GBITS: per device, over the rest.
    line_rates: tuple[tuple[str, int], ...] = ()
    # Read the ethtool statistics (PFC) of each netdev. SIOCETHTOOL asks the running kernel
    # whatever sysfs_root says, so whoever builds the options decides it once, from the
    # settings, for every command.
    ethtool: bool = True

    def line_rate_for(self, device: str) -> int | None:
        """The operator's data rate for this device, bytes/s; None: read it from the kernel."""
        return dict(self.line_rates).get(device, self.line_rate_bytes_per_second)


@dataclass(frozen=True, slots=True)
class UnsampledPort:
    """A port the source keeps (state, rate exported) without sampling its bytes."""

    device: str
    port: int
    reason: str  # the sentence, for the log and discover
    code: str = "other"  # enumerated (collector.discovery.NOT_SAMPLED_REASONS): the label


@dataclass(frozen=True, slots=True)
class PortSpec:
    """One port a fast source fills, in column order."""

    device: str
    port: int
    line_rate_bytes_per_second: int  # data rate at start; 0 when unknown
    # Finest honest resolution: hw_counters are cached for their lifespan. 0: every tick.
    min_read_interval_ns: int = 0
    rate_problem: str = ""  # why the rate is unknown at start, when it is


@dataclass(slots=True)
class SampleRow:
    """One tick's readings, one entry per port; a source overwrites them in place."""

    timestamp_ns: list[int]  # CLOCK_MONOTONIC midpoint of the port's reads
    xmit_bytes: list[int]  # cumulative, already in bytes
    rcv_bytes: list[int]
    read_ns: list[int]  # duration of the port's reads
    status: list[int]  # STATUS_*

    @classmethod
    def for_ports(cls, count: int) -> SampleRow:
        return cls([0] * count, [0] * count, [0] * count, [0] * count, [STATUS_OK] * count)


@dataclass(frozen=True, slots=True)
class RecordLayout:
    """Where a tick's columns sit in one ring record, in bytes from the record's start.

    collector.ring owns the layout and hands it to a source that can fill a record in place
    (``record_reader``, an optional method of file sources with the compiled tick). Each
    column holds ``ports`` 8-byte values (status: 1 byte each).
    """

    ports: int
    timestamp_ns: int  # int64
    xmit_bytes: int  # uint64
    rcv_bytes: int  # uint64
    read_ns: int  # int64
    status: int  # uint8


class CounterSource(Protocol):
    """A fast source: the data counters of its ports, read once per tick.

    Constructed in the parent process (cheap, picklable: configuration only), then
    ``open``-ed inside the sampler process, which owns the file descriptors.
    """

    name: str
    ports: tuple[PortSpec, ...]
    # Ports kept without sampling, with why (a source may leave it at the default, empty).
    unsampled: tuple[UnsampledPort, ...]
    devices: tuple[DeviceInfo, ...]  # board, firmware, HCA type; () where none
    # What the port selection left out, one line each, for the log at start (a source may
    # leave it at the default, empty): an --include never drops ports without a word.
    notes: tuple[str, ...]

    def open(self) -> None: ...

    def read_into(self, row: SampleRow) -> None: ...

    def close(self) -> None: ...

    def slow_sources(self) -> list[SlowSource]:
        """The slow sources that go with this one (errors, congestion, PFC), maybe none.

        The source names its own companions, so no other module switches on its type;
        ethtool among them only where its SourceOptions said so.
        """
        ...


@dataclass(frozen=True, slots=True)
class SlowReading:
    """One slow counter or gauge of one port."""

    device: str
    port: int
    name: str  # the kernel's name: symbol_error, port_xmit_wait, np_cnp_sent, rx_prio3_pause
    value: int
    counter: CounterSpec | None  # how it wraps; None for gauges (state, rate)

    def as_trace_row(self, timestamp_ns: int, rebaseline: bool) -> SlowRow:
        """This reading as a trace row, stamped on the samples' wall clock."""
        from burstscope.collector.trace import SlowRow

        return SlowRow(
            timestamp_ns, self.device, self.port, self.name, self.value, self.counter, rebaseline
        )


class SlowSource(Protocol):
    """A slow source: error, congestion and PFC counters, polled at <= 1 Hz."""

    name: str

    def open(self) -> None: ...

    def poll(self) -> list[SlowReading]: ...

    def close(self) -> None: ...
