"""The fleet's MQTT events for ``burstscope events``: the subscriber, the per-agent sequence
tracker that finds gaps, and the live table."""

from __future__ import annotations

import argparse
import asyncio
import enum
import json
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from burstscope.collector.mqtt.messages import PREFIX, topic_level
from burstscope.collector.mqtt.settings import (
    MqttSettings,
    MqttSettingsError,
    client_tls_context,
)

REFRESH_PER_SECOND = 4  # the table redraws at most this often, however fast events arrive
ROWS = 30


class Verdict(enum.Enum):
    NEW = "new"
    DUPLICATE = "duplicate"  # a QoS 1 redelivery: already shown
    LATE = "late"  # fills a gap reported earlier


@dataclass
class SequenceTracker:
    """Per (host, run): the highest seq seen and the ranges still missing below it."""

    highest: dict[tuple[str, int], int] = field(default_factory=dict)
    missing: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict)

    def observe(self, host: str, run: int, seq: int) -> tuple[Verdict, tuple[int, int] | None]:
        """The verdict on one message and the gap (first, last) it reveals, if any."""
        key = (host, run)
        highest = self.highest.get(key)
        if highest is None:
            # Joined mid-stream: what came before is reported once, but not owed to us
            # (it is not counted as missing and never fills in later).
            self.highest[key] = seq
            self.missing[key] = []
            return Verdict.NEW, (1, seq - 1) if seq > 1 else None
        if seq > highest:
            self.highest[key] = seq
            if seq > highest + 1:
                gap = (highest + 1, seq - 1)
                self.missing[key].append(gap)
                return Verdict.NEW, gap
            return Verdict.NEW, None
        ranges = self.missing[key]
        for index, (first, last) in enumerate(ranges):
            if first <= seq <= last:
                pieces = [(first, seq - 1), (seq + 1, last)]
                ranges[index : index + 1] = [(a, b) for a, b in pieces if a <= b]
                return Verdict.LATE, None
        return Verdict.DUPLICATE, None

    def missing_count(self) -> int:
        return sum(b - a + 1 for ranges in self.missing.values() for a, b in ranges)


def topics(host: str | None) -> list[str]:
    """Every topic an agent numbers in ``seq``, and its status: a subscriber that left one
    out would report its messages as gaps (the step summaries share the sequence)."""
    level = topic_level(host) if host else "+"
    return [
        f"{PREFIX}/{level}/status",
        f"{PREFIX}/{level}/event",
        f"{PREFIX}/{level}/steps",
        *(f"{PREFIX}/{level}/+/+/{k}" for k in ("burst", "event")),
    ]


@dataclass
class FleetView:
    """What the table shows: recent events, node status, counts."""

    rows: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=ROWS))
    status: dict[str, dict[str, Any]] = field(default_factory=dict)
    tracker: SequenceTracker = field(default_factory=SequenceTracker)
    received: int = 0
    duplicates: int = 0
    gaps: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0
    connected: bool = False

    def handle(self, topic: str, body: bytes) -> list[dict[str, Any]]:
        """Update the view; returns the JSON lines to print (payloads and gap reports)."""
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict):
                raise ValueError("not an object")
        except ValueError:
            self.unreadable += 1
            return []
        record: dict[str, Any] = {"topic": topic, **payload}
        if topic.endswith("/status"):
            self.status[str(payload.get("host", topic))] = payload
            return [*self._undelivered(payload), record]
        host, run, seq = payload.get("host"), payload.get("run"), payload.get("seq")
        if not isinstance(host, str) or not isinstance(run, int) or not isinstance(seq, int):
            self.unreadable += 1
            return []
        joined = (host, run) not in self.tracker.highest
        verdict, gap = self.tracker.observe(host, run, seq)
        if verdict is Verdict.DUPLICATE:
            self.duplicates += 1
            return []
        self.received += 1
        out = []
        if gap is not None:
            reason = "joined mid-stream" if joined else "missing"
            out.append(self._gap(host, run, gap, reason))
        self.rows.appendleft(record)
        out.append(record)
        return out

    def _gap(self, host: str, run: int, gap: tuple[int, int], reason: str) -> dict[str, Any]:
        report = {"host": host, "run": run, "first": gap[0], "last": gap[1], "reason": reason}
        self.gaps.append(report)
        return {"gap": report}

    def _undelivered(self, status: dict[str, Any]) -> list[dict[str, Any]]:
        """An offline status whose last_seq is beyond what arrived: those never will (the
        agent's spool overflowed, or it stopped before delivering them)."""
        host, run, last = status.get("host"), status.get("run"), status.get("last_seq")
        if status.get("online") or not isinstance(host, str) or not isinstance(run, int):
            return []
        highest = self.tracker.highest.get((host, run))
        if not isinstance(last, int) or highest is None or last <= highest:
            return []
        self.tracker.highest[(host, run)] = last
        return [self._gap(host, run, (highest + 1, last), "never delivered")]


def describe_row(row: dict[str, Any]) -> str:
    kind = row.get("kind")
    if kind == "burst":
        return (
            f"{row.get('direction', '')} {row.get('duration_seconds', 0) * 1e3:.1f} ms "
            f"{row.get('bytes', 0) / 1e6:.1f} MB peak {row.get('peak_utilization', 0):.0%}"
        )
    if kind == "summary":
        return (
            f"{row.get('direction', '')} {row.get('bursts', 0)} bursts "
            f"{row.get('bytes_per_second', 0) / 1e9:.2f} GB/s peak "
            f"{row.get('peak_utilization', 0):.0%}"
        )
    if kind == "step":
        rails = row.get("rails") or []
        moved = sum(r.get("bytes", 0) for r in rails if isinstance(r, dict))
        span = (row.get("end_ns", 0) - row.get("onset_ns", 0)) / 1e6
        return f"{len(rails)} rails {span:.1f} ms {moved / 1e6:.1f} MB"
    skip = {"topic", "kind", "host", "device", "port", "run", "seq", "time_ns"}
    return " ".join(f"{k}={v}" for k, v in row.items() if k not in skip)


def render(view: FleetView, endpoint: str) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    online = sum(1 for s in view.status.values() if s.get("online"))
    header = Text(
        f"{endpoint}  {'connected' if view.connected else 'reconnecting'}  nodes online "
        f"{online}/{len(view.status)}  events {view.received}  duplicates dropped "
        f"{view.duplicates}  missing {view.tracker.missing_count()}"
    )
    table = Table(expand=True)
    for column in ("time", "host", "port", "event", "detail", "seq"):
        table.add_column(column)
    for row in view.rows:
        stamp = row.get("end_ns", row.get("time_ns"))
        clock = time.strftime("%H:%M:%S", time.localtime(stamp / 1e9)) if stamp else ""
        # Every cell comes from a payload: Text, so brackets in a name are not rich markup.
        table.add_row(
            *(
                Text(cell)
                for cell in (
                    clock,
                    str(row.get("host", "")),
                    f"{row.get('device', '')}/{row.get('port', '')}",
                    str(row.get("kind", "")),
                    describe_row(row),
                    str(row.get("seq", "")),
                )
            )
        )
    return Group(header, table)


async def subscribe(
    settings: MqttSettings,
    wanted: list[str],
    session: str | None,
    on_message: Callable[[str, bytes], None],
    on_state: Callable[[bool], None],
    name: str = "burstscope events",
) -> None:
    """Subscribe at QoS 1 until cancelled, reconnecting with jittered, capped backoff;
    ``name`` begins the lines it says so in on stderr."""
    import aiomqtt

    from burstscope.collector.mqtt.publisher import Backoff, client, refusal

    backoff = Backoff(settings.backoff_initial_seconds, settings.backoff_max_seconds)
    context = client_tls_context(settings)
    first = True
    while True:
        try:
            async with client(
                settings, context, identifier=session, clean_session=session is None
            ) as connection:
                for topic in wanted:
                    await connection.subscribe(topic, qos=1)
                backoff.reset()
                on_state(True)
                if first:
                    print(f"{name}: subscribed to {settings.endpoint}", file=sys.stderr)
                first = False
                async for message in connection.messages:
                    body = message.payload
                    on_message(str(message.topic), body if isinstance(body, bytes) else b"")
        except aiomqtt.MqttError as exc:
            on_state(False)
            reason = refusal(exc)
            if reason is not None and first:
                problem = f"MQTT broker {settings.endpoint} refused us: {reason}"
                raise MqttSettingsError(problem) from None
            first = False
            at_cap = backoff.at_cap
            delay = backoff.next_delay()
            if not at_cap:
                print(
                    f"{name}: MQTT broker {settings.endpoint} unreachable ({exc}); "
                    f"retrying in {delay:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
            await asyncio.sleep(delay)


# The shape of each `events --json` line (docs/report.md#json-outputs).
SCHEMA_VERSION = 1


async def follow(args: argparse.Namespace, settings: MqttSettings) -> None:
    """Events as JSON lines (--json) or a live table, until interrupted."""
    view = FleetView()
    wanted = topics(args.host)
    if args.json:

        def print_lines(topic: str, body: bytes) -> None:
            for line in view.handle(topic, body):
                # Last: the line's own keys (an agent's payload) never replace it.
                document = {**line, "schema_version": SCHEMA_VERSION}
                print(json.dumps(document, separators=(",", ":")), flush=True)

        def set_state(connected: bool) -> None:
            view.connected = connected

        await subscribe(settings, wanted, args.session, print_lines, set_state)
        return

    from rich.live import Live

    with Live(render(view, settings.endpoint), auto_refresh=False, transient=False) as live:
        last = 0.0

        def redraw(force: bool = False) -> None:
            nonlocal last
            now = time.monotonic()
            if force or now - last >= 1 / REFRESH_PER_SECOND:
                last = now
                live.update(render(view, settings.endpoint), refresh=True)

        def show(topic: str, body: bytes) -> None:
            view.handle(topic, body)
            redraw()

        def set_state(connected: bool) -> None:
            view.connected = connected
            redraw(force=True)

        async def tick() -> None:
            while True:  # draws the last events of a burst that arrived within one refresh
                await asyncio.sleep(1 / REFRESH_PER_SECOND)
                redraw()

        async with asyncio.TaskGroup() as group:
            group.create_task(tick(), name="events-redraw")
            group.create_task(
                subscribe(settings, wanted, args.session, show, set_state), name="events-subscribe"
            )
