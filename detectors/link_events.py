"""Link events: what changed on a port between two polls of its slow counters and gauges.

The deriver compares successive readings (about once a second) and names each change in a
typed record; the clock is the caller's (``now_ns``) and the words and payloads are the
outputs' (collector.mqtt.messages puts them on the bus).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PortKey = tuple[str, int]  # (device, port)


@dataclass(frozen=True, slots=True)
class PortReading:
    """One port at one poll."""

    state: int | None = None  # IBA port state id (counters/../state: "4: ACTIVE")
    rate_bytes_per_second: int | None = None  # the line rate in force
    link_downed: int | None = None  # increments since the agent started
    congestion: Mapping[str, int] = field(default_factory=dict)  # name -> increments so far
    saturated_seconds: Mapping[str, float] = field(default_factory=dict)  # by direction
    # detectors.silence: when a port silent under its jobs last moved a byte; None while
    # it moves or the question does not apply.
    silent_since_ns: int | None = None
    # detectors.silence.below_peers: the fastest peer's rate when this port's is below it.
    below_peers_rate: int = 0


@dataclass(frozen=True, slots=True)
class StateChange:
    previous_state: int
    state: int


@dataclass(frozen=True, slots=True)
class LinkDowned:
    increment: int  # counters/link_downed went up by this much


@dataclass(frozen=True, slots=True)
class RateChange:
    previous_rate_bytes_per_second: int
    rate_bytes_per_second: int


@dataclass(frozen=True, slots=True)
class SaturationStarted:
    direction: str
    saturated_seconds: float  # saturated time in the poll interval that started it


@dataclass(frozen=True, slots=True)
class SaturationEnded:
    direction: str
    saturated_seconds: float  # over the whole episode
    duration_seconds: float  # from the poll that started it to the one that ended it


@dataclass(frozen=True, slots=True)
class Congestion:
    """The fabric pushed back while this port was at line rate."""

    counters: Mapping[str, int]  # increments of CNP, ECN, xmit_wait and PFC pause counters
    saturated_seconds: Mapping[str, float]  # by direction, in the same interval


@dataclass(frozen=True, slots=True)
class Silent:
    """The port carried its running jobs' traffic and has moved nothing since (a hung job or
    a dead path; detectors.silence)."""

    silent_since_ns: int  # its last byte, wall clock


@dataclass(frozen=True, slots=True)
class SilenceEnded:
    silent_seconds: float  # from its last byte to the poll that saw the silence end


@dataclass(frozen=True, slots=True)
class BelowPeers:
    """The port's line rate fell below its peers' on this node (same device model)."""

    rate_bytes_per_second: int
    peer_rate_bytes_per_second: int  # the fastest peer's


Change = (
    StateChange
    | LinkDowned
    | RateChange
    | SaturationStarted
    | SaturationEnded
    | Congestion
    | Silent
    | SilenceEnded
    | BelowPeers
)


@dataclass(frozen=True, slots=True)
class LinkEvent:
    device: str
    port: int
    time_ns: int  # the poll that saw the change
    change: Change


@dataclass(slots=True)
class _Episode:
    start_ns: int
    saturated_seconds: float = 0.0


@dataclass
class LinkEventDeriver:
    """Compares successive readings and names what changed.

    - StateChange / RateChange: the gauge differs from the previous poll;
    - LinkDowned: counters/link_downed went up;
    - Silent / SilenceEnded: a port went silent under the jobs it served, or moved again;
    - BelowPeers: a port's line rate fell below its peers' on the node;
    - SaturationStarted / SaturationEnded: a direction's saturated time starts or stops
      growing between polls (one event each per episode, not one per second);
    - Congestion: CNP, ECN, xmit_wait or PFC pause counters went up in an interval that
      had saturated time: the fabric pushed back while this port was at line rate.
    The first reading of a port is the baseline and produces nothing.
    """

    previous: dict[PortKey, PortReading] = field(default_factory=dict)
    episodes: dict[tuple[str, int, str], _Episode] = field(default_factory=dict)

    def update(self, readings: Mapping[PortKey, PortReading], now_ns: int) -> list[LinkEvent]:
        events: list[LinkEvent] = []
        for key, current in sorted(readings.items()):
            before = self.previous.get(key)
            if before is not None:
                changes = _gauge_changes(before, current, now_ns)
                changes += self._saturation_changes(key, before, current, now_ns)
                events += [LinkEvent(key[0], key[1], now_ns, change) for change in changes]
        self.previous = dict(readings)
        return events

    def _saturation_changes(
        self, key: PortKey, before: PortReading, now: PortReading, now_ns: int
    ) -> list[Change]:
        changes: list[Change] = []
        saturated: dict[str, float] = {}
        for direction, seconds in sorted(now.saturated_seconds.items()):
            grown = seconds - before.saturated_seconds.get(direction, seconds)
            episode_key = (*key, direction)
            episode = self.episodes.get(episode_key)
            if grown > 0:
                saturated[direction] = grown
                if episode is None:
                    self.episodes[episode_key] = _Episode(now_ns, grown)
                    changes.append(SaturationStarted(direction, grown))
                else:
                    episode.saturated_seconds += grown
            elif episode is not None:
                del self.episodes[episode_key]
                duration = (now_ns - episode.start_ns) / 1e9
                changes.append(SaturationEnded(direction, episode.saturated_seconds, duration))
        increments = {
            name: value - before.congestion[name]
            for name, value in sorted(now.congestion.items())
            if name in before.congestion and value > before.congestion[name]
        }
        if saturated and increments:
            changes.append(Congestion(increments, saturated))
        return changes


def _gauge_changes(before: PortReading, now: PortReading, now_ns: int) -> list[Change]:
    changes: list[Change] = []
    if before.silent_since_ns is None and now.silent_since_ns is not None:
        changes.append(Silent(now.silent_since_ns))
    elif before.silent_since_ns is not None and now.silent_since_ns is None:
        changes.append(SilenceEnded((now_ns - before.silent_since_ns) / 1e9))
    if now.below_peers_rate and not before.below_peers_rate and now.rate_bytes_per_second:
        changes.append(BelowPeers(now.rate_bytes_per_second, now.below_peers_rate))
    if before.state is not None and now.state is not None and before.state != now.state:
        changes.append(StateChange(before.state, now.state))
    downed_before, downed_now = before.link_downed, now.link_downed
    if downed_before is not None and downed_now is not None and downed_now > downed_before:
        changes.append(LinkDowned(downed_now - downed_before))
    old_rate, new_rate = before.rate_bytes_per_second, now.rate_bytes_per_second
    if old_rate is not None and new_rate is not None and old_rate != new_rate:
        changes.append(RateChange(old_rate, new_rate))
    return changes
