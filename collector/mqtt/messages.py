"""What goes on the bus: topics, JSON payloads, and the port readings link events come from.

Topics (``<host>`` is the node name, each level stripped of MQTT wildcards and slashes)::

    burstscope/<host>/<device>/<port>/burst   burst events and window summaries (QoS 1)
    burstscope/<host>/<device>/<port>/event   link, saturation and congestion events (QoS 1)
    burstscope/<host>/event                   agent events: recording paused and resumed,
                                              job started, changed and ended
    burstscope/<host>/steps                   one summary per step of the node's training
                                              rails (collector.step_summaries)
    burstscope/<host>/status                  retained: online, version, ports, start time

Burst, summary and link event payloads name the jobs holding the port in ``jobs``
(collector.mqtt.jobs); burst and summary payloads of an agent that tails NCCL Inspector
dumps also carry ``collectives`` (the classes, collectives and rules they ran under, {} when
no record covers them), and come ``[collectives] label_delay`` later; the node topic also
says when a job starts, changes or ends there.
Every burst and event payload carries ``run`` (this agent run's start, wall-clock ns) and
``seq`` (1, 2, 3, ... per run, across both topics), so a subscriber that tracks
(host, run) finds gaps and drops QoS 1 redeliveries. The status is state, not an event:
it carries ``last_seq`` instead of a ``seq`` of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from burstscope.collector.mqtt.jobs import JobTag, jobs_field
from burstscope.collector.mqtt.policy import BurstRecord, BurstSummary
from burstscope.detectors.congestion import is_congestion
from burstscope.detectors.link_events import (
    BelowPeers,
    Change,
    Congestion,
    LinkDowned,
    LinkEvent,
    PortReading,
    RateChange,
    SaturationEnded,
    SaturationStarted,
    SilenceEnded,
    Silent,
    StateChange,
)
from burstscope.detectors.stragglers import NodeStep, RailStep

if TYPE_CHECKING:  # the type only: payloads and topics need none of the read model
    from burstscope.collector.collectives.live import CollectiveTag
    from burstscope.collector.pfc_watchdog import PfcStormEvent
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
    """Events of the node rather than of one port: recording paused and resumed, jobs
    started, changed and ended."""
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


def steps_topic(host: str) -> str:
    """One summary per step of the node's training rails: what the fleet consumer
    (``burstscope stragglers``) judges stragglers and slow rails from."""
    return f"{PREFIX}/{topic_level(host)}/steps"


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
        "jobs": jobs_field(record.jobs),
        **_collectives_field(record.collectives),
        "run": identity.run,
    }


def _collectives_field(tag: CollectiveTag | None) -> dict[str, Any]:
    """``collectives``, only when the agent tails collective records (collector.collectives.live):
    {"classes": [...], "collectives": [...], "rules": [...]}, or {} when none covers it."""
    return {} if tag is None else {"collectives": tag.payload()}


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
        "jobs": jobs_field(summary.jobs),
        **_collectives_field(summary.collectives),
        "run": identity.run,
    }


# The bus names of the detectors' link changes.
_KINDS: dict[type[Change], str] = {
    StateChange: "state_change",
    LinkDowned: "link_downed",
    RateChange: "rate_change",
    SaturationStarted: "saturation_started",
    SaturationEnded: "saturation_ended",
    Congestion: "congestion",
    Silent: "silent",
    SilenceEnded: "silence_ended",
    BelowPeers: "below_peers",
}


def link_event_payload(
    identity: Identity, event: LinkEvent, jobs: tuple[JobTag, ...] = ()
) -> dict[str, Any]:
    """A detected link change as the event topic carries it; port states by name, and the
    jobs holding the port (the snapshot's table)."""
    change = event.change
    details: dict[str, Any] = {f.name: getattr(change, f.name) for f in fields(change)}
    if isinstance(change, StateChange):
        details = {
            "previous_state": STATE_NAMES.get(change.previous_state, str(change.previous_state)),
            "state": STATE_NAMES.get(change.state, str(change.state)),
        }
    return {
        "kind": _KINDS[type(change)],
        "host": identity.host,
        "device": event.device,
        "port": event.port,
        "time_ns": event.time_ns,
        **details,
        "jobs": jobs_field(jobs),
        "run": identity.run,
    }


def pfc_storm_payload(
    identity: Identity, storm: PfcStormEvent, jobs: tuple[JobTag, ...] = ()
) -> dict[str, Any]:
    """A PFC storm's start or end (collector.pfc_watchdog) as the port's event topic
    carries it: one of each per storm."""
    return {
        "kind": "pfc_storm",
        "phase": "start" if storm.started else "end",
        "host": identity.host,
        "device": storm.device,
        "port": storm.port,
        "direction": storm.direction,
        "priority": storm.priority,
        "time_ns": storm.time_ns,
        "start_ns": storm.start_ns,
        "duration_seconds": (storm.time_ns - storm.start_ns) / 1e9,
        "paused_fraction": storm.paused_fraction,
        "peak_paused_fraction": storm.peak_fraction,
        "paused_seconds": storm.paused_seconds,
        "window_seconds": storm.window_seconds,
        "basis": storm.basis,
        "jobs": jobs_field(jobs),
        "run": identity.run,
    }


def readings_from_snapshot(snapshot: Snapshot) -> dict[tuple[str, int], PortReading]:
    """PortReadings from a pipeline's snapshot."""
    from burstscope.collector.snapshot import below_peer_rates

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
    for key, since in snapshot.silent_since.items():
        if key in slow:
            slow[key]["silent_since_ns"] = since
    for key, fastest in below_peer_rates(snapshot).items():
        if key in slow:
            slow[key]["below_peers_rate"] = fastest
    return {
        key: PortReading(saturated_seconds=saturated.get(key, {}), **values)
        for key, values in slow.items()
    }


# The step summary's format; a consumer refuses a version it does not know.
STEP_VERSION = 1


def step_payload(identity: Identity, step: NodeStep) -> dict[str, Any]:
    """One node's step (detectors.stragglers.NodeStep) as the steps topic carries it: times
    are the node's wall-clock ns; ``onset_latest_ns`` (the latest the first byte can have
    left) only where it is not the onset itself."""
    return {
        "kind": "step",
        "version": STEP_VERSION,
        "host": identity.host,
        "jobs": list(step.jobs),
        "onset_ns": step.onset_ns,
        **_latest(step.onset_latest_ns),
        "end_ns": step.end_ns,
        "interval_ns": step.interval_ns,
        "rails": [
            {
                "rail": rail.rail,
                "onset_ns": rail.onset_ns,
                **_latest(rail.onset_latest_ns),
                "end_ns": rail.end_ns,
                "bytes": rail.bytes,
                "peak": rail.peak,
            }
            for rail in step.rails
        ],
        "run": identity.run,
    }


def _latest(value: int | None) -> dict[str, int]:
    return {} if value is None else {"onset_latest_ns": value}


def _whole(payload: Mapping[str, Any], key: str, low: int = 0) -> int:
    value = payload.get(key)
    # bool is an int to Python, never to the format.
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{key} must be an integer >= {low}, not {value!r}")
    return value


def _latest_of(payload: Mapping[str, Any], onset: int, end: int) -> int | None:
    """The optional onset_latest_ns, between the onset and the end."""
    if "onset_latest_ns" not in payload:
        return None
    latest = _whole(payload, "onset_latest_ns")
    if not onset <= latest <= end:
        raise ValueError("onset_latest_ns is outside [onset_ns, end_ns]")
    return latest


def step_from_payload(payload: Any) -> NodeStep:
    """A step summary back from its decoded JSON; ValueError (one line) names what is wrong."""
    if not isinstance(payload, dict):
        raise ValueError("not a JSON object")
    if payload.get("version") != STEP_VERSION:
        raise ValueError(f"version {payload.get('version')!r} is not {STEP_VERSION}")
    host, jobs, rails = payload.get("host"), payload.get("jobs", []), payload.get("rails")
    if not isinstance(host, str) or not host:
        raise ValueError("host must be a non-empty string")
    if not isinstance(jobs, list) or not all(isinstance(job, str) and job for job in jobs):
        raise ValueError("jobs must be a list of job ids")
    if not isinstance(rails, list) or not rails:
        raise ValueError("rails must be a list of the rails active in the step")
    onset, end = _whole(payload, "onset_ns"), _whole(payload, "end_ns")
    if end < onset:
        raise ValueError("end_ns is before onset_ns")
    parts = []
    for rail in rails:
        if not isinstance(rail, dict) or not isinstance(rail.get("rail"), str):
            raise ValueError("each rail must be an object naming its rail")
        peak = rail.get("peak")
        if isinstance(peak, bool) or not isinstance(peak, int | float) or not 0 <= peak <= 1:
            raise ValueError(f"rail {rail['rail']!r}: peak must be in [0, 1], not {peak!r}")
        first, last = _whole(rail, "onset_ns"), _whole(rail, "end_ns")
        if not onset <= first <= last <= end:
            raise ValueError(f"rail {rail['rail']!r}: its times are outside the step's")
        parts.append(
            RailStep(
                rail["rail"],
                first,
                last,
                _whole(rail, "bytes"),
                float(peak),
                _latest_of(rail, first, last),
            )
        )
    return NodeStep(
        host,
        onset,
        end,
        _whole(payload, "interval_ns", 1),
        tuple(parts),
        tuple(jobs),
        _latest_of(payload, onset, end),
    )
