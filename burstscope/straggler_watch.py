"""The fleet's step summaries for ``burstscope stragglers``: grouped by job, each step judged
once no summary of it can still come, each group's standings served as Prometheus metrics.

Every agent publishes one summary per step of its training rails on
``burstscope/<host>/steps`` (collector.step_summaries). Here they are grouped by the
first job id they name (without jobs: one group, ``--group``, "fleet" by default), and the
steps of a group are matched across its nodes (detectors.stragglers.match_steps: onsets
within ``quiet`` of the next). A step is **settled**, and judged
(detectors.stragglers.judge_step), once the wall clock is past the latest end among its
summaries + ``quiet`` + ``settle``: an agent closes a step only after ``quiet`` of silence
past its end and publishes it at its next drain (once a second), so by then every node's
summary of it has come, ``settle`` (2 s) covering that drain, the broker and the clocks.
A summary that comes later still, for a step already judged, is counted late and dropped.

Each judged step goes into the group's detectors.stragglers.Standings (each node's score,
lag and excess quantiles over its last 300 steps), which a custom Collector turns into
metric families at scrape time; a group's families are absent until its first step is
judged, and a group that sends nothing for ``FORGET_NS`` is forgotten with its series (a
job that ended). ``StragglerWatch`` takes "now" as an argument and reads no clock, so the
benchmark (bench/stragglers.py) drives the same code on simulated time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from burstscope.collector.mqtt.messages import PREFIX, step_from_payload
from burstscope.collector.mqtt.settings import MqttSettings
from burstscope.collector.sampler import parse_interval
from burstscope.detectors.stragglers import (
    QUANTILES,
    QUIET_NS,
    WINDOW_STEPS,
    NodeStep,
    Standings,
    StepLimits,
    StepVerdict,
    judge_step,
    match_steps,
)

_LOG = logging.getLogger("burstscope.stragglers")

STEPS_TOPIC = f"{PREFIX}/+/steps"
DEFAULT_GROUP = "fleet"
DEFAULT_SETTLE_SECONDS = 2.0
# Beside the agent's 9847 (collector.http.DEFAULT_PORT).
DEFAULT_LISTEN = "127.0.0.1:9848"
TICK_SECONDS = 0.1  # how often settled steps are judged
FORGET_NS = 15 * 60 * 1_000_000_000  # a group silent this long is forgotten (its job ended)
MAX_SENDERS_TOLD = 10_000  # senders whose first malformed message was logged, at most
QUANTILE_LABELS = tuple(f"{q:g}" for q in QUANTILES)  # "0.5", "0.9", "1"

# One name -> HELP table of what the consumer serves (the agent's is collector.exporter's).
HELP: dict[str, str] = {
    "burstscope_straggler_score": "Share of the node's last judged steps (at most 300) in "
    "which it was a straggler: its first bytes came later than the group's median node's by "
    "at least the clock error plus one sampling interval. Absent until the node is in a "
    "judged step.",
    "burstscope_straggler_window_steps": "Judged steps the node's score and quantiles are "
    "over: its last ones, at most 300. Absent until the node is in a judged step.",
    "burstscope_step_lag_seconds": "Quantiles (0.5, 0.9, 1: the largest) over the node's last "
    "judged steps of its lag: the onset of its first bytes of the step minus the group's "
    "median onset. Absent until the node is in a judged step.",
    "burstscope_step_excess_seconds": "Quantiles (0.5, 0.9, 1) over the node's last judged "
    "steps of its excess: the end of its last bytes of the step minus the group's median end "
    "(steps it split like the others only). Absent until such a step is judged.",
    "burstscope_straggler_steps_total": "Judged steps in which the node was a straggler, since "
    "the consumer started. Absent until the node is in a judged step.",
    "burstscope_judged_steps_total": "Steps of the group judged across its nodes (three or "
    "more), since the consumer started. Absent until the group's first judged step.",
    "burstscope_slow_rail_steps_total": "Judged steps whose slow rail was this one: the rail "
    "whose transfers ended last, clearly after its node's other rails (detectors/stragglers.py: "
    "5 ms), on more than half the nodes. "
    "Absent until the rail is called.",
    "burstscope_step_messages_total": "Step summaries received from the agents, well formed.",
    "burstscope_step_messages_malformed_total": "Messages on burstscope/+/steps that are not "
    "a step summary (bad JSON, a field missing or of the wrong kind, an unknown version): "
    "counted and dropped; the first from each sender is logged.",
    "burstscope_step_messages_late_total": "Step summaries that came after their step was "
    "judged (more than --settle after it went quiet): dropped. Rising: raise --settle.",
}


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """How summaries are grouped and when a step is settled."""

    default_group: str = DEFAULT_GROUP  # the group of summaries that name no job
    settle_ns: int = round(DEFAULT_SETTLE_SECONDS * 1e9)
    limits: StepLimits = field(default_factory=StepLimits)  # quiet: as the agents'
    window: int = WINDOW_STEPS


def watch_settings(group: str, settle: str, quiet: str | None) -> WatchSettings:
    """The command's --group, --settle and --quiet; ValueError (one line) naming the flag."""
    if not group.strip():
        raise ValueError("--group must be a non-empty name")
    try:
        seconds = float(settle)
    except ValueError:
        raise ValueError(f"--settle {settle!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or not 0 <= seconds <= 600:
        raise ValueError(f"--settle {settle!r} must be between 0 and 600 seconds")
    quiet_ns = QUIET_NS
    if quiet is not None:
        try:
            quiet_ns = parse_interval(quiet)
        except ValueError as exc:
            raise ValueError(f"--quiet: {exc}") from None
    return WatchSettings(group, round(seconds * 1e9), StepLimits(quiet_ns=quiet_ns))


@dataclass(frozen=True, slots=True)
class Judged:
    """One step of one group, judged."""

    group: str
    verdict: StepVerdict


@dataclass(slots=True)
class _Group:
    standings: Standings
    pending: list[NodeStep] = field(default_factory=list)
    changed: bool = False  # summaries came since the pending steps were last matched
    due_ns: int = 0  # when the earliest pending step settles, as last matched
    judged_until_ns: int | None = None  # the latest onset of the last judged step
    last_seen_ns: int = 0  # wall clock of its latest summary
    slow_rails: dict[str, int] = field(default_factory=dict)  # per rail: steps called slow


class StragglerWatch:
    """The groups' pending steps and standings. ``handle`` and ``settle`` run in the event
    loop, ``collect`` in scrape threads: one lock between them."""

    def __init__(self, settings: WatchSettings | None = None) -> None:
        self.settings = settings or WatchSettings()
        self._groups: dict[str, _Group] = {}
        self._lock = threading.Lock()
        self.received = 0
        self.malformed = 0
        self.late = 0
        self._told: set[str] = set()  # senders whose malformed message was logged

    # -- intake -----------------------------------------------------------------------
    def handle(self, topic: str, body: bytes, now_ns: int) -> None:
        """One message from the steps topics; a malformed one is counted, never raised."""
        try:
            step = step_from_payload(json.loads(body))
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
            self._malformed(topic, str(exc))
            return
        name = step.jobs[0] if step.jobs else self.settings.default_group
        with self._lock:
            group = self._groups.get(name)
            if group is None:
                group = self._groups[name] = _Group(Standings(self.settings.window))
            group.last_seen_ns = now_ns
            until = group.judged_until_ns
            if until is not None and step.onset_ns <= until + self.settings.limits.quiet_ns:
                self.late += 1
                return
            self.received += 1
            group.pending.append(step)
            group.changed = True

    def _malformed(self, topic: str, reason: str) -> None:
        with self._lock:
            self.malformed += 1
        parts = topic.split("/")
        sender = parts[1] if len(parts) == 3 else topic
        if sender not in self._told and len(self._told) < MAX_SENDERS_TOLD:
            self._told.add(sender)
            _LOG.warning(
                "%s: a message on %s is not a step summary (%s); it and any more like it are "
                "dropped, counted in burstscope_step_messages_malformed_total",
                sender,
                topic,
                reason[:200],
            )

    # -- judging ----------------------------------------------------------------------
    def settle(self, now_ns: int) -> list[Judged]:
        """Judge every step settled by ``now_ns``, oldest first per group."""
        out: list[Judged] = []
        with self._lock:
            for name in sorted(self._groups):
                group = self._groups[name]
                if group.pending and (group.changed or now_ns >= group.due_ns):
                    self._settle(name, group, now_ns, out)
                elif not group.pending and now_ns - group.last_seen_ns > FORGET_NS:
                    del self._groups[name]
                    _LOG.info("group %s: no step summary for 15 minutes; forgotten", name)
        return out

    def _settle(self, name: str, group: _Group, now_ns: int, out: list[Judged]) -> None:
        limits = self.settings.limits
        group.changed = False
        for cluster in match_steps(group.pending, limits.quiet_ns):
            due = max(step.end_ns for step in cluster) + limits.quiet_ns + self.settings.settle_ns
            if now_ns < due:
                group.due_ns = due  # later steps wait for this one: they settle in order
                break
            group.judged_until_ns = max(step.onset_ns for step in cluster)
            verdict = judge_step(cluster, limits)
            if verdict is None:  # fewer than min_nodes nodes: nothing to compare
                continue
            group.standings.add(verdict)
            if verdict.slow_rail is not None:
                rail = verdict.slow_rail
                group.slow_rails[rail] = group.slow_rails.get(rail, 0) + 1
            out.append(Judged(name, verdict))
        until = group.judged_until_ns
        if until is not None:
            # A node's second step inside a judged one goes with it (match_steps keeps its first).
            group.pending = [step for step in group.pending if step.onset_ns > until]

    # -- exposition (a prometheus-client custom Collector) ----------------------------
    def describe(self) -> list[Metric]:
        return []  # no fixed set: families come and go with the groups

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = self._families()
        yield from families

    def _families(self) -> list[Metric]:
        node = ["group", "node"]
        score = GaugeMetricFamily(
            "burstscope_straggler_score", HELP["burstscope_straggler_score"], labels=node
        )
        window = GaugeMetricFamily(
            "burstscope_straggler_window_steps",
            HELP["burstscope_straggler_window_steps"],
            labels=node,
        )
        lag = GaugeMetricFamily(
            "burstscope_step_lag_seconds",
            HELP["burstscope_step_lag_seconds"],
            labels=[*node, "quantile"],
        )
        excess = GaugeMetricFamily(
            "burstscope_step_excess_seconds",
            HELP["burstscope_step_excess_seconds"],
            labels=[*node, "quantile"],
        )
        calls = _counter("burstscope_straggler_steps_total", node)
        judged = _counter("burstscope_judged_steps_total", ["group"])
        slow = _counter("burstscope_slow_rail_steps_total", ["group", "rail"])
        for name in sorted(self._groups):
            group = self._groups[name]
            if group.standings.judged == 0:
                continue
            judged.add_metric([name], group.standings.judged)
            for rail, count in sorted(group.slow_rails.items()):
                slow.add_metric([name, rail], count)
            for standing in group.standings.standings():
                labels = [name, standing.host]
                score.add_metric(labels, standing.score)
                window.add_metric(labels, standing.steps)
                calls.add_metric(labels, group.standings.straggler_calls.get(standing.host, 0))
                for quantile, value in zip(QUANTILE_LABELS, standing.lag_quantiles_ns, strict=True):
                    lag.add_metric([*labels, quantile], value / 1e9)
                if standing.excess_quantiles_ns is not None:
                    for quantile, value in zip(
                        QUANTILE_LABELS, standing.excess_quantiles_ns, strict=True
                    ):
                        excess.add_metric([*labels, quantile], value / 1e9)
        messages = [
            ("burstscope_step_messages_total", self.received),
            ("burstscope_step_messages_malformed_total", self.malformed),
            ("burstscope_step_messages_late_total", self.late),
        ]
        families: list[Metric] = [score, window, lag, excess, calls, judged, slow]
        for family_name, count in messages:
            family = _counter(family_name, [])
            family.add_metric([], count)
            families.append(family)
        return [family for family in families if family.samples]


def _counter(name: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name.removesuffix("_total"), HELP[name], labels=labels)


# -- what the command prints -----------------------------------------------------------
# The shape of each `stragglers --json` line.
SCHEMA_VERSION = 1


def verdict_document(judged: Judged) -> dict[str, Any]:
    """One judged step with a straggler or a slow rail, as a --json line."""
    verdict = judged.verdict
    lags = dict(zip(verdict.nodes, verdict.lag_ns, strict=True))
    return {
        "group": judged.group,
        "onset_ns": verdict.onset_ns,
        "nodes": len(verdict.nodes),
        "stragglers": [
            {"node": host, "lag_seconds": lags[host] / 1e9} for host in verdict.stragglers
        ],
        "slow_rail": verdict.slow_rail,
        "resolution_seconds": verdict.resolution_ns / 1e9,
        "schema_version": SCHEMA_VERSION,
    }


def verdict_line(judged: Judged) -> str:
    """One judged step with a straggler or a slow rail, as a line of text."""
    verdict = judged.verdict
    lags = dict(zip(verdict.nodes, verdict.lag_ns, strict=True))
    seconds, fraction = divmod(verdict.onset_ns, 1_000_000_000)
    clock = time.strftime("%H:%M:%S", time.localtime(seconds)) + f".{fraction // 1_000_000:03d}"
    parts = [f"{clock} {judged.group} ({len(verdict.nodes)} nodes):"]
    if verdict.stragglers:
        late = ", ".join(f"{host} +{lags[host] / 1e6:.1f} ms" for host in verdict.stragglers)
        parts.append(f"straggler {late}")
    if verdict.slow_rail is not None:
        parts.append(f"slow rail {verdict.slow_rail}")
    return " ".join(parts)


async def follow(
    settings: MqttSettings, watch: StragglerWatch, show: Callable[[Judged], None]
) -> None:
    """Subscribe to every node's steps, judge them as they settle, until cancelled."""
    from burstscope.fleet_events import subscribe

    def on_message(topic: str, body: bytes) -> None:
        watch.handle(topic, body, time.time_ns())

    async def judge() -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            for judged in watch.settle(time.time_ns()):
                if judged.verdict.stragglers or judged.verdict.slow_rail is not None:
                    show(judged)

    async with asyncio.TaskGroup() as group:
        group.create_task(judge(), name="stragglers-judge")
        group.create_task(
            subscribe(
                settings, [STEPS_TOPIC], None, on_message, lambda _: None, "burstscope stragglers"
            ),
            name="stragglers-subscribe",
        )


def printer(as_json: bool) -> Callable[[Judged], None]:
    """What the command prints for each step with a straggler or a slow rail."""

    def show(judged: Judged) -> None:
        if as_json:
            print(json.dumps(verdict_document(judged), separators=(",", ":")), flush=True)
        else:
            print(verdict_line(judged), flush=True)

    return show


def serve(listen: str, as_json: bool, mqtt: MqttSettings, settings: WatchSettings) -> None:
    """The consumer: /metrics on ``listen``, then the steps until interrupted. HttpError
    when ``listen`` cannot be served, MqttSettingsError when the broker refuses us."""
    from prometheus_client import CollectorRegistry

    from burstscope.collector.http import MetricsServer

    watch = StragglerWatch(settings)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(watch)
    server = MetricsServer(registry, listen)
    print(f"burstscope stragglers: metrics on http://{server.address}/metrics", file=sys.stderr)
    try:
        asyncio.run(follow(mqtt, watch, printer(as_json)))
    finally:
        server.close()
