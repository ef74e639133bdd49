"""What goes on the bus: topics, JSON payloads, and link events derived from pipeline snapshots.

Topics (``<host>`` is the node name, each level stripped of MQTT wildcards and slashes)::

    burstscope/<host>/<device>/<port>/burst   burst events and window summaries (QoS 1)
    burstscope/<host>/<device>/<port>/event   link, saturation and congestion events (QoS 1)
    burstscope/<host>/event                   agent events: recording paused and resumed
    burstscope/<host>/status                  retained: online, version, ports, start time

Every burst and event payload carries ``run`` (this agent run's start, wall-clock ns) and
``seq`` (1, 2, 3, ... per run, across both topics), so a subscriber that tracks
(host, run) finds gaps and drops QoS 1 redeliveries. The status is state, not an event:
it carries ``last_seq`` instead of a ``seq`` of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from burstscope.collector.mqtt.policy import BurstRecord, BurstSummary
from burstscope.detectors.congestion import is_congestion

if TYPE_CHECKING:  # the type only: payloads and topics need none of the read model
    from burstscope.collector.snapshot import Snapshot

PREFIX = "burstscope"
_TOPIC_UNSAFE = re.compile(r"[/+#\x00]")
# Port states by IBA id (state: "4: ACTIVE").
STATE_NAMES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}


def topic_level(text: str) -> str:
    return _TOPIC_UNSAFE.sub("_", text) or "_"


def status_topic(host: str) -> str:
    return f"{PREFIX}/{topic_level(host)}/status"


def node_topic(host: str) -> str:
    """Events of the agent itself rather than of one port (recording paused, resumed)."""
    return f"{PREFIX}/{topic_level(host)}/event"


def recording_event(
    identity: Identity, paused: bool, reason: str | None, dropped: int, now_ns: int
) -> dict[str, Any]:
    return {
        "kind": "recording_paused" if paused else "recording_resumed",
        "host": identity.host,
        "time_ns": now_ns,
        "reason": reason,
        "dropped_samples": dropped,
        "run": identity.run,
    }


def port_topic(host: str, device: str, port: int, kind: str) -> str:
    return f"{PREFIX}/{topic_level(host)}/{topic_level(device)}/{port}/{kind}"


def encode(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class Identity:
    """Fields every payload of this agent run shares."""

    host: str
    run: int  # wall-clock ns at start: distinguishes runs whose seq both start at 1
    version: str
    start_time: float  # seconds since the epoch
    ports: tuple[tuple[str, int], ...]
    threshold: float  # the burst threshold (share of line rate)


def status_payload(identity: Identity, online: bool, last_seq: int | None) -> dict[str, Any]:
    return {
        "host": identity.host,
        "online": online,
        "version": identity.version,
        "ports": [f"{device}/{port}" for device, port in identity.ports],
        "start_time": identity.start_time,
        "run": identity.run,
        "last_seq": last_seq,
    }


def burst_payload(
    identity: Identity, device: str, port: int, direction: str, record: BurstRecord
) -> dict[str, Any]:
    return {
        "kind": "burst",
        "host": identity.host,
        "device": device,
        "port": port,
        "direction": direction,
        "start_ns": record.start_ns,
        "end_ns": record.end_ns,
        "duration_seconds": record.duration_ns / 1e9,
        "bytes": record.bytes,
        "peak_utilization": record.peak_utilization,
        "mean_utilization": record.mean_utilization,
        "threshold": identity.threshold,
        "merged": record.merged,
        "run": identity.run,
    }


def summary_payload(
    identity: Identity, device: str, port: int, direction: str, summary: BurstSummary
) -> dict[str, Any]:
    return {
        "kind": "summary",
        "host": identity.host,
        "device": device,
        "port": port,
        "direction": direction,
        "start_ns": summary.window_start_ns,
        "end_ns": summary.window_end_ns,
        "bursts": summary.bursts,
        "bytes": summary.bytes,
        "bursts_per_second": summary.bursts_per_second,
        "bytes_per_second": summary.bytes_per_second,
        "peak_utilization": summary.peak_utilization,
        "first_start_ns": summary.first_start_ns,
        "last_end_ns": summary.last_end_ns,
        "threshold": identity.threshold,
        "run": identity.run,
    }


@dataclass(frozen=True, slots=True)
class PortReading:
    """One port at one poll, from a pipeline snapshot."""

    state: int | None = None  # state id
    rate_bytes_per_second: int | None = None
    link_downed: int | None = None  # increments since the agent started
    congestion: Mapping[str, int] = field(default_factory=dict)  # name -> increments so far
    saturated_seconds: Mapping[str, float] = field(default_factory=dict)  # by direction


@dataclass(frozen=True, slots=True)
class LinkEvent:
    device: str
    port: int
    kind: str  # state_change, link_downed, rate_change, saturation_started/ended, congestion
    time_ns: int
    details: Mapping[str, Any]

    def payload(self, identity: Identity) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "host": identity.host,
            "device": self.device,
            "port": self.port,
            "time_ns": self.time_ns,
            **self.details,
            "run": identity.run,
        }


def readings_from_snapshot(snapshot: Snapshot) -> dict[tuple[str, int], PortReading]:
    """PortReadings from a pipeline's snapshot."""
    saturated: dict[tuple[str, int], dict[str, float]] = {}
    for view in snapshot.ports:
        key = (view.spec.device, view.spec.port)
        saturated[key] = {d: v.saturated_seconds for d, v in view.directions.items()}
    slow: dict[tuple[str, int], dict[str, Any]] = {key: {} for key in saturated}
    if snapshot.slow is not None:
        for (device, port, name), state in snapshot.slow.counters.items():
            entry = slow.setdefault((device, port), {})
            value = state.value if state.increment is None else state.increment
            if name == "state":
                entry["state"] = state.value
            elif name == "rate_bytes_per_second":
                entry["rate_bytes_per_second"] = state.value
            elif name == "link_downed":
                entry["link_downed"] = value
            elif is_congestion(name):
                entry.setdefault("congestion", {})[name] = value
    # A sampled port's rate is the one in force (after encoding, the operator's override):
    # the rate its utilization is divided by, so a rate_change event says when that moved.
    for view in snapshot.ports:
        rate = view.spec.line_rate_bytes_per_second
        if rate > 0:
            slow[(view.spec.device, view.spec.port)]["rate_bytes_per_second"] = rate
    return {
        key: PortReading(saturated_seconds=saturated.get(key, {}), **values)
        for key, values in slow.items()
    }


@dataclass(slots=True)
class _Episode:
    start_ns: int
    saturated_seconds: float = 0.0


@dataclass
class LinkEventDeriver:
    """Compares successive readings (about once a second) and names what changed.

    - state_change / rate_change: the gauge differs from the previous poll;
    - link_downed: counters/link_downed went up;
    - saturation_started / saturation_ended: a direction's saturated time starts or stops
      growing between polls (one event each per episode, not one per second);
    - congestion: CNP, ECN, xmit_wait or PFC pause counters went up in an interval that
      had saturated time: the fabric pushed back while this port was at line rate.
    The first reading of a port is the baseline and produces nothing.
    """

    previous: dict[tuple[str, int], PortReading] = field(default_factory=dict)
    episodes: dict[tuple[str, int, str], _Episode] = field(default_factory=dict)

    def update(
        self, readings: Mapping[tuple[str, int], PortReading], now_ns: int
    ) -> list[LinkEvent]:
        events: list[LinkEvent] = []
        for key, current in sorted(readings.items()):
            before = self.previous.get(key)
            if before is not None:
                events.extend(self._compare(key, before, current, now_ns))
        self.previous = dict(readings)
        return events

    def _compare(
        self, key: tuple[str, int], before: PortReading, now: PortReading, now_ns: int
    ) -> list[LinkEvent]:
        device, port = key
        events: list[LinkEvent] = []

        def emit(kind: str, **details: Any) -> None:
            events.append(LinkEvent(device, port, kind, now_ns, details))

        if before.state is not None and now.state is not None and before.state != now.state:
            emit(
                "state_change",
                previous_state=STATE_NAMES.get(before.state, str(before.state)),
                state=STATE_NAMES.get(now.state, str(now.state)),
            )
        downed_before, downed_now = before.link_downed, now.link_downed
        if downed_before is not None and downed_now is not None and downed_now > downed_before:
            emit("link_downed", increment=downed_now - downed_before)
        old_rate, new_rate = before.rate_bytes_per_second, now.rate_bytes_per_second
        if old_rate is not None and new_rate is not None and old_rate != new_rate:
            emit(
                "rate_change",
                previous_rate_bytes_per_second=old_rate,
                rate_bytes_per_second=new_rate,
            )
        saturated: dict[str, float] = {}
        for direction, seconds in sorted(now.saturated_seconds.items()):
            grown = seconds - before.saturated_seconds.get(direction, seconds)
            episode_key = (device, port, direction)
            episode = self.episodes.get(episode_key)
            if grown > 0:
                saturated[direction] = grown
                if episode is None:
                    self.episodes[episode_key] = _Episode(now_ns, grown)
                    emit("saturation_started", direction=direction, saturated_seconds=grown)
                else:
                    episode.saturated_seconds += grown
            elif episode is not None:
                del self.episodes[episode_key]
                emit(
                    "saturation_ended",
                    direction=direction,
                    saturated_seconds=episode.saturated_seconds,
                    duration_seconds=(now_ns - episode.start_ns) / 1e9,
                )
        increments = {
            name: value - before.congestion[name]
            for name, value in sorted(now.congestion.items())
            if name in before.congestion and value > before.congestion[name]
        }
        if saturated and increments:
            emit("congestion", counters=increments, saturated_seconds=saturated)
        return events
