"""The fleet consumer, ``burstscope stragglers``: step summaries grouped by job, each step
judged once settled, the standings on /metrics; bad input; and the whole road through a
real broker."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from burstscope.collector.mqtt.messages import Identity, encode, step_payload, steps_topic
from burstscope.detectors.stragglers import NodeStep, RailStep, StepLimits
from burstscope.straggler_watch import (
    HELP,
    StragglerWatch,
    WatchSettings,
    verdict_document,
    verdict_line,
    watch_settings,
)
from burstscope.testing.processes import fetch, free_port, wait_until
from tests.test_cli_core import assert_usage_error, burstscope

MS = 1_000_000
SECOND = 1_000 * MS
PERIOD = 3_300 * MS  # the simulated MoE job's iteration
# Steps a real broker carries, 300 ms apart and starting 2 s from now: every step is still
# open when its four summaries come. A step already due could be judged by a settle tick
# between them, from its first summary alone (fewer than 3 nodes: not judged), and the
# other three would be dropped as late (seen on a loaded machine).
LIVE_PERIOD = 300 * MS
LIVE_LEAD = 2 * SECOND
EPOCH = 1_800_000_000 * SECOND
NODES = ("gpu01", "gpu02", "gpu03", "gpu04")
RAILS = tuple(f"mlx5_{index}/1" for index in range(4))


def summary(
    host: str,
    step: int,
    late_ms: float = 0.0,
    jobs: tuple[str, ...] = ("4242",),
    slow_rail: str | None = None,
    start: int = EPOCH,
    period: int = PERIOD,
) -> NodeStep:
    """One node's step ``step`` of a job: 200 ms of traffic on four rails, the onset of
    every rail ``late_ms`` late; ``slow_rail`` ends 10 ms after the others."""
    onset = start + step * period + round(late_ms * MS) + 20_000 * NODES.index(host)
    end = onset + 200 * MS
    rails = tuple(
        RailStep(rail, onset, end + (10 * MS if rail == slow_rail else 0), 10**9, 1.0)
        for rail in RAILS
    )
    return NodeStep(host, onset, max(r.end_ns for r in rails), MS, rails, jobs)


def message(step: NodeStep) -> tuple[str, bytes]:
    identity = Identity(step.host, 1, "1.0", 0.0, (), 0.5)
    return steps_topic(step.host), encode({**step_payload(identity, step), "seq": 1})


def samples(watch: StragglerWatch) -> set[str]:
    """The exposition's sample lines."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(watch)
    text = generate_latest(registry).decode()
    return {line for line in text.splitlines() if not line.startswith("#")}


def test_a_step_is_judged_once_settled_and_the_straggler_stands_out() -> None:
    settle = 2 * SECOND
    watch = StragglerWatch(WatchSettings(settle_ns=settle))
    steps = 25
    for step in range(steps):
        for host in NODES:
            late = 5.0 if host == "gpu03" else 0.0
            watch.handle(*message(summary(host, step, late)), EPOCH)
    # Nothing judged yet: only the message counters are there, no standing is a guess.
    assert samples(watch) == {
        "burstscope_step_messages_total 100.0",
        "burstscope_step_messages_malformed_total 0.0",
        "burstscope_step_messages_late_total 0.0",
    }
    last_end = max(summary(host, steps - 1, 5.0 if host == "gpu03" else 0).end_ns for host in NODES)
    settled_at = last_end + StepLimits().quiet_ns + settle
    judged = watch.settle(settled_at - 1)
    assert len(judged) == steps - 1  # the last step is not settled yet
    judged += watch.settle(settled_at)
    assert len(judged) == steps
    assert all(j.group == "4242" and j.verdict.stragglers == ("gpu03",) for j in judged)
    # A summary of a judged step, come too late, is counted and dropped.
    watch.handle(*message(summary("gpu01", steps - 1, 0.3)), settled_at)
    lines = samples(watch)
    expected = {
        'burstscope_judged_steps_total{group="4242"} 25.0',
        'burstscope_straggler_score{group="4242",node="gpu03"} 1.0',
        'burstscope_straggler_score{group="4242",node="gpu01"} 0.0',
        'burstscope_straggler_window_steps{group="4242",node="gpu03"} 25.0',
        'burstscope_straggler_steps_total{group="4242",node="gpu03"} 25.0',
        'burstscope_straggler_steps_total{group="4242",node="gpu02"} 0.0',
        'burstscope_step_lag_seconds{group="4242",node="gpu03",quantile="0.5"} 0.00502',
        'burstscope_step_lag_seconds{group="4242",node="gpu03",quantile="1"} 0.00502',
        'burstscope_step_lag_seconds{group="4242",node="gpu01",quantile="0.9"} -2e-05',
        'burstscope_step_excess_seconds{group="4242",node="gpu03",quantile="0.9"} 0.00502',
        "burstscope_step_messages_late_total 1.0",
    }
    assert expected <= lines, expected - lines
    # Per node: score, window, 3 lag and 3 excess quantiles, its straggler count.
    per_node = [line for line in lines if 'node="gpu02"' in line]
    assert len(per_node) == 9
    assert not any("slow_rail" in line for line in lines)  # absent until a rail is called


def test_a_slow_rail_the_default_group_and_too_few_nodes() -> None:
    watch = StragglerWatch(WatchSettings(default_group="rack7", settle_ns=0))
    for step in range(3):
        for host in NODES:
            watch.handle(*message(summary(host, step, jobs=(), slow_rail="mlx5_2/1")), 0)
    for host in NODES[:2]:  # a step of two nodes: nothing to compare
        watch.handle(*message(summary(host, 3, jobs=())), 0)
    judged = watch.settle(EPOCH + 10 * PERIOD)
    assert [j.verdict.slow_rail for j in judged] == ["mlx5_2/1"] * 3
    assert {j.group for j in judged} == {"rack7"}
    lines = samples(watch)
    assert 'burstscope_slow_rail_steps_total{group="rack7",rail="mlx5_2/1"} 3.0' in lines
    assert 'burstscope_judged_steps_total{group="rack7"} 3.0' in lines
    line = verdict_line(judged[0])
    assert line.endswith(" rack7 (4 nodes): slow rail mlx5_2/1"), line
    assert verdict_document(judged[0]) == {
        "group": "rack7",
        "onset_ns": EPOCH + 20_000,
        "nodes": 4,
        "stragglers": [],
        "slow_rail": "mlx5_2/1",
        "resolution_seconds": StepLimits().resolution_ns(MS) / 1e9,
        "schema_version": 1,
    }


def test_malformed_messages_are_counted_and_logged_once_per_sender(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = StragglerWatch()
    with caplog.at_level(logging.WARNING, "burstscope.stragglers"):
        for body in (b"{not json", b'"a string"', b'{"version": 9}', b"\xff\xfe"):
            watch.handle("burstscope/gpu09/steps", body, 0)
        watch.handle("burstscope/gpu10/steps", b"[]", 0)
    assert "burstscope_step_messages_malformed_total 5.0" in samples(watch)
    told = [record.getMessage() for record in caplog.records]
    assert len(told) == 2 and told[0].startswith("gpu09: a message on burstscope/gpu09/steps")
    assert "burstscope_step_messages_malformed_total" in told[0]


def test_every_served_family_has_help() -> None:
    watch = StragglerWatch(WatchSettings(settle_ns=0))
    for host in NODES:
        watch.handle(*message(summary(host, 0, slow_rail="mlx5_0/1")), 0)
    watch.settle(EPOCH + PERIOD)
    names = set()
    for family in watch.collect():
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    assert names == set(HELP)


def test_the_simulated_jobs_straggler_through_the_agents_summaries() -> None:
    """Four nodes of the simulated MoE job (each step waits for the last rank), gpu03 3 ms
    late in every step: each node's LiveSteps, fed its transmit counters drain by drain as
    the pipeline feeds them, publishes its steps; the consumer calls gpu03, and no other."""
    import numpy as np

    from burstscope.collector.jobs.model import JobTable
    from burstscope.collector.simulation.model import TrafficModel
    from burstscope.collector.simulation.stragglers import JobGroup, Straggler
    from burstscope.collector.sources.base import PortSpec
    from burstscope.collector.step_summaries import LiveSteps

    group = JobGroup(NODES, (Straggler("gpu03", 3 * MS),), seed=1)
    watch = StragglerWatch(WatchSettings(settle_ns=0))
    stamps = MS * np.arange(1, 12_001, dtype=np.int64)  # 12 s: three iterations and a half
    for host in NODES:
        model = TrafficModel("moe", 1, group=group, host=host)
        live = LiveSteps(host, MS)
        transmit, _ = model.counters_at(stamps)
        for drain in range(12):
            piece = slice(drain * 1000, (drain + 1) * 1000)
            for index, port in enumerate(model.ports):
                spec = PortSpec(port.device, port.port, port.line_rate_bytes_per_second)
                live.feed(spec, stamps[piece], transmit[index][piece], np.zeros(1000, bool))
            for step in live.close(JobTable()):
                watch.handle(*message(step), 0)
    judged = watch.settle(20 * SECOND)
    # The first step began before the first drain chose the rails: seen from its second
    # second on, on every node alike.
    assert [j.verdict.stragglers for j in judged[1:]] == [("gpu03",)] * 2
    assert all(set(j.verdict.stragglers) <= {"gpu03"} for j in judged)
    lags = dict(zip(judged[-1].verdict.nodes, judged[-1].verdict.lag_ns, strict=True))
    assert 2.9 * MS <= lags["gpu03"] <= 3.1 * MS


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--listen", "nowhere"], "--listen 'nowhere' is not ADDR:PORT"),
        (["--listen", "10.0.0.300:9848"], "'10.0.0.300' is not an IP address"),
        (["--settle", "soon"], "--settle 'soon' is not a number of seconds"),
        (["--settle", "-1"], "--settle '-1' must be between 0 and 600 seconds"),
        (["--settle", "nan"], "--settle 'nan' must be between 0 and 600 seconds"),
        (["--quiet", "5us"], "--quiet: interval '5us' is outside the supported range"),
        (["--group", " "], "--group must be a non-empty name"),
        (["--mqtt", "http://broker"], "--mqtt"),
    ],
)
def test_bad_flags_are_one_line_and_status_2(
    args: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from burstscope.cli import main

    assert main(["stragglers", "--mqtt", "mqtt://127.0.0.1:1", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("burstscope stragglers: error: "), err
    assert complaint in err


def test_a_listen_port_in_use_is_one_line_and_status_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = burstscope(
            "stragglers", "--mqtt", "mqtt://127.0.0.1:1", "--listen", f"127.0.0.1:{port}"
        )
    assert_usage_error(result, f"cannot listen on 127.0.0.1:{port}")


def test_watch_settings_take_the_flags() -> None:
    assert watch_settings("fleet", "0.5", "30ms") == WatchSettings(
        "fleet", 500 * MS, StepLimits(quiet_ns=30 * MS)
    )


class Consumer:
    """``burstscope stragglers`` in a subprocess, its stdout lines collected by a thread."""

    def __init__(self, url: str, listen: str, *args: str) -> None:
        self.lines: list[str] = []
        self.errors: list[str] = []
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "burstscope", "stragglers", "--mqtt", url,
                "--listen", listen, *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        self.subscribed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._watch, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        self.lines.extend(self.process.stdout)

    def _watch(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.errors.append(line)
            if "subscribed" in line:
                self.subscribed.set()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture
def consumer(tmp_path: Path) -> Iterator[tuple[Consumer, str, str]]:
    from tests.test_mqtt_broker import Broker

    broker = Broker(tmp_path)
    broker.start()
    url = f"mqtt://127.0.0.1:{broker.port}"
    listen = f"127.0.0.1:{free_port()}"
    running = Consumer(url, listen, "--settle", "0.1", "--json")
    try:
        assert running.subscribed.wait(30), "".join(running.errors)
        yield running, url, f"http://{listen}/metrics"
    finally:
        running.stop()
        broker.kill()


@pytest.mark.integration
def test_four_nodes_through_a_real_broker(consumer: tuple[Consumer, str, str]) -> None:
    """Four agents' summaries of five steps, gpu04 late by 6 ms in each, published to a real
    mosquitto; the consumer judges them and serves gpu04's standing, and prints one JSON
    line per step."""
    import paho.mqtt.publish

    running, url, metrics = consumer
    start = time.time_ns() + LIVE_LEAD
    bodies = [
        message(
            summary(host, step, 6.0 if host == "gpu04" else 0.0, start=start, period=LIVE_PERIOD)
        )
        for step in range(5)
        for host in NODES
    ]
    port = int(url.rsplit(":", 1)[1])
    paho.mqtt.publish.multiple(
        [{"topic": topic, "payload": body, "qos": 1} for topic, body in bodies],
        hostname="127.0.0.1",
        port=port,
    )

    def judged() -> bool:
        return 'burstscope_judged_steps_total{group="4242"} 5.0' in fetch(metrics)

    assert wait_until(judged, 30), fetch(metrics)
    body = fetch(metrics)
    assert 'burstscope_straggler_score{group="4242",node="gpu04"} 1.0' in body
    assert 'burstscope_straggler_steps_total{group="4242",node="gpu04"} 5.0' in body
    assert 'burstscope_straggler_score{group="4242",node="gpu01"} 0.0' in body
    lag = re.search(
        r'burstscope_step_lag_seconds\{group="4242",node="gpu04",quantile="0\.5"\} (\S+)', body
    )
    assert lag is not None and float(lag[1]) == pytest.approx(0.00604)
    assert wait_until(lambda: len(running.lines) == 5, 10), running.lines
    documents = [json.loads(line) for line in running.lines]
    assert [d["stragglers"][0]["node"] for d in documents] == ["gpu04"] * 5
    assert {d["schema_version"] for d in documents} == {1}  # docs/report.md, JSON outputs


CONSUMER_METRICS = tuple(HELP)


@pytest.mark.integration
def test_the_fleet_dashboards_straggler_panels_read_the_consumer_in_prometheus(
    consumer: tuple[Consumer, str, str], tmp_path: Path
) -> None:
    """The fleet overview's panels on the consumer's series, as a real Prometheus scrapes
    it under a job of its own: 21 steps of four nodes, gpu04 6 ms late in each and rail
    mlx5_2/1 ending 10 ms late on every node; the panels show one straggling node, gpu04
    first by score, and the slow rail (tests/test_fleet.py and test_operator_labels.py run
    the rest of the dashboard on agents alone, where these panels are empty)."""
    import paho.mqtt.publish

    from burstscope.testing import simulated_fleet
    from tests.conftest import require_binary

    binary = require_binary("prometheus")
    _, url, metrics = consumer
    start = time.time_ns() + LIVE_LEAD
    bodies = [
        message(summary(host, step, 6.0 if host == "gpu04" else 0.0, start=start,
                        slow_rail="mlx5_2/1", period=LIVE_PERIOD))
        for step in range(21)
        for host in NODES
    ]  # fmt: skip
    paho.mqtt.publish.multiple(
        [{"topic": topic, "payload": body, "qos": 1} for topic, body in bodies],
        hostname="127.0.0.1",
        port=int(url.rsplit(":", 1)[1]),
    )
    assert wait_until(
        lambda: 'burstscope_judged_steps_total{group="4242"} 21.0' in fetch(metrics), 30
    ), fetch(metrics)
    config = tmp_path / "prometheus.yml"
    target = metrics.removeprefix("http://").removesuffix("/metrics")
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
        "scrape_configs:\n  - job_name: burstscope-stragglers\n"
        f"    static_configs:\n      - targets: [{json.dumps(target)}]\n"
    )
    panels = [
        t
        for t in simulated_fleet.dashboard_targets()
        if t.dashboard == "fleet-overview" and any(name in t.expr for name in CONSUMER_METRICS)
    ]
    assert sorted(t.title for t in panels) == [
        "Slow rails across nodes [A]",
        "Straggler score, highest nodes [A]",
        "Straggling nodes [A]",
    ]
    with simulated_fleet.running_prometheus(
        binary, config, tmp_path / "data", free_port()
    ) as server:
        answers: dict[str, list[dict[str, object]]] = {}

        def every_panel_answers() -> bool:
            for panel in panels:
                query = simulated_fleet.substitute(panel.expr, "", 1, 1)
                answers[panel.title] = server.get("/api/v1/query", query=query)["data"]["result"]
            return (
                all(answers.values())
                and float(
                    answers["Straggling nodes [A]"][0]["value"][1]  # type: ignore[index]
                )
                == 1.0
            )

        assert wait_until(every_panel_answers, 30), answers
    scores = answers["Straggler score, highest nodes [A]"]
    best = max(scores, key=lambda s: float(s["value"][1]))  # type: ignore[index]
    assert best["metric"]["node"] == "gpu04"  # type: ignore[index]
    assert len(scores) == len(NODES)  # the top five of four
    rails = answers["Slow rails across nodes [A]"]
    assert [r["metric"] for r in rails] == [{"group": "4242", "rail": "mlx5_2/1"}]
