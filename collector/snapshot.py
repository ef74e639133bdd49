"""What readers see of a running pipeline: immutable snapshots of ports, health and recording.

The exporter, MQTT, the terminal view and the recorder's health read these types and
nothing else of the pipeline: a snapshot is built at most once per drain, owns copies of
what it shows, and never changes after it is handed out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from burstscope.collector.discovery import DeviceInfo
from burstscope.collector.jobs.model import EMPTY_TABLE, JobFigures, JobTable
from burstscope.collector.recording import RecordingHealth
from burstscope.collector.slow_poller import SlowSnapshot
from burstscope.collector.sources.base import PortSpec, UnsampledPort
from burstscope.detectors.analyzer import DirectionAnalyzer
from burstscope.detectors.config import Thresholds
from burstscope.detectors.distributions import utilization_quantile
from burstscope.detectors.live import LiveDirection
from burstscope.detectors.silence import PeerPort, below_peers

# Sampler lateness and read durations, in seconds: 1 us .. 10 ms.
TIMING_BUCKETS_SECONDS = (1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 1e-2)


@dataclass(frozen=True, slots=True)
class DirectionView:
    """What readers see of one port direction."""

    # The counter as last read (x4 already), as node_exporter exports it; None until the
    # first reading, so the series is absent rather than a 0 that rate() takes for a reset.
    bytes_total: int | None
    live: LiveDirection  # a copy, owned by the snapshot (LiveDirection.copy)
    saturated_seconds: float
    hidden_saturated_seconds: float  # saturated inside coarse windows that look quiet
    resets: int
    p99: float | None  # of per-sample utilization since the agent started


def direction_view(
    bytes_total: int | None, live: LiveDirection, analyzer: DirectionAnalyzer | None
) -> DirectionView:
    """A direction as readers see it; without an analyzer (no usable rate yet) its
    utilization figures are absent or zero, never guessed."""
    if analyzer is None:
        return DirectionView(bytes_total, live.copy(), 0.0, 0.0, 0, None)
    return DirectionView(
        bytes_total=bytes_total,
        live=live.copy(),
        saturated_seconds=analyzer.saturated_ns / 1e9,
        hidden_saturated_seconds=analyzer.hidden_saturated_ns / 1e9,
        resets=analyzer.resets,
        p99=utilization_quantile(analyzer.finest_histogram, 0.99),
    )


@dataclass(frozen=True, slots=True)
class PortView:
    spec: PortSpec  # line_rate_bytes_per_second: the rate in force (0: unknown)
    directions: dict[str, DirectionView]
    failed_reads: int
    # Data counter readings refused, by (counter file, reason: negative, EIO, ...).
    refused: dict[tuple[str, str], int] = field(default_factory=dict)
    rate_changes: int = 0  # times the line rate in force changed while running
    resolution_ns: int = 0  # finest honest sample interval: max(interval, cache lifetime)

    @property
    def line_rate_bytes_per_second(self) -> int:
        return self.spec.line_rate_bytes_per_second


@dataclass(frozen=True, slots=True)
class Health:
    ticks: int
    missed_ticks: int
    lost_rows: int
    realtime: bool
    cpu: int
    interval_ns: int
    sampler_alive: bool
    lateness_buckets: npt.NDArray[np.int64]  # cumulative per TIMING_BUCKETS_SECONDS, +Inf
    lateness_sum_seconds: float
    read_buckets: npt.NDArray[np.int64]
    read_sum_seconds: float
    heartbeat_ns: int
    restarts: dict[str, int] = field(default_factory=dict)  # by component: sampler, slow_poller
    sampler_pid: int = 0  # 0 while no sampler process runs
    # The finest honest interval judged from the sampler's first reads (collector.probe);
    # 0 until judged.
    finest_interval_ns: int = 0


@dataclass(frozen=True, slots=True)
class RailVerdicts:
    """The rails flagged as of the latest coarse windows (port -> detectors.rails LIGHT or
    SLOW), and how many rails were judged (in a peer group with enough windows)."""

    flagged: dict[tuple[str, int], int] = field(default_factory=dict)
    judged: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    source: str
    now_ns: int  # wall clock of the newest sample
    ports: tuple[PortView, ...]
    health: Health
    slow: SlowSnapshot | None
    thresholds: Thresholds
    recording: RecordingHealth | None = None
    unsampled: tuple[UnsampledPort, ...] = ()  # kept ports not sampled, with why
    devices: tuple[DeviceInfo, ...] = ()
    # The jobs holding this node's ports now (collector.jobs), and each running job's
    # totals by job_id; empty where attribution is off or no job runs.
    jobs: JobTable = EMPTY_TABLE
    job_figures: dict[str, JobFigures] = field(default_factory=dict)
    # Ports that carried traffic for the jobs holding them now (detectors.silence): when a
    # silent one last moved a byte (wall clock ns), None while it is not silent.
    silent_since: dict[tuple[str, int], int | None] = field(default_factory=dict)
    # Training rails against their peers over the coarse windows (detectors.rails).
    rails: RailVerdicts = field(default_factory=lambda: RailVerdicts())


def below_peer_rates(snapshot: Snapshot) -> dict[tuple[str, int], int]:
    """Each sampled port with peers on this node (ports of its device model, of known rate):
    the fastest peer's line rate where this port's is below it, else 0 (detectors.silence)."""
    models = {device.device: device.hca_type for device in snapshot.devices}
    return below_peers(
        [
            PeerPort(
                (view.spec.device, view.spec.port),
                models.get(view.spec.device, ""),
                "",
                view.spec.line_rate_bytes_per_second,
            )
            for view in snapshot.ports
        ]
    )
