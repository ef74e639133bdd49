"""MQTT without a broker: URL parsing, the rate policy, link events, the spool, seq tracking."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from burstscope.collector.jobs.model import (
    COMPUTE,
    EMPTY_TABLE,
    KUBERNETES,
    RULE_NUMA_NODE,
    RULE_PCIE_SWITCH,
    RULE_WHOLE_NODE,
    SLURM,
    STORAGE,
    Holding,
    Job,
    JobTable,
)
from burstscope.collector.mqtt.jobs import JobTag, job_events, port_tags
from burstscope.collector.mqtt.messages import (
    Identity,
    burst_payload,
    link_event_payload,
    port_topic,
    status_topic,
    steps_topic,
)
from burstscope.collector.mqtt.policy import (
    BurstRecord,
    BurstSummary,
    PolicyState,
    RatePolicy,
    apply_policy,
    flush,
)
from burstscope.collector.mqtt.publisher import Backoff
from burstscope.collector.mqtt.settings import (
    BrokerUrl,
    MqttSettings,
    MqttSettingsError,
    build_settings,
    parse_broker_url,
)
from burstscope.collector.mqtt.spool import MemorySpool, Message, SqliteSpool
from burstscope.detectors.link_events import LinkDowned, LinkEvent, LinkEventDeriver, PortReading
from burstscope.fleet_events import FleetView, SequenceTracker, Verdict, describe_row, topics
from tests.test_cli_core import assert_usage_error, burstscope

MS = 1_000_000
S = 1_000_000_000


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mqtt://broker", BrokerUrl(False, "broker", 1883, None, None)),
        ("mqtts://broker", BrokerUrl(True, "broker", 8883, None, None)),
        ("mqtt://10.0.0.1:1884", BrokerUrl(False, "10.0.0.1", 1884, None, None)),
        ("mqtt://me:s%40cret@broker:1", BrokerUrl(False, "broker", 1, "me", "s@cret")),
        ("mqtts://me@[::1]:8884/", BrokerUrl(True, "::1", 8884, "me", None)),
    ],
)
def test_broker_urls(url: str, expected: BrokerUrl) -> None:
    assert parse_broker_url(url) == expected


@pytest.mark.parametrize(
    "url",
    ["http://broker", "broker:1883", "mqtt://", "mqtt://broker:99999", "mqtt://b:x", "mqtt://b/t"],
)
def test_bad_broker_urls(url: str) -> None:
    with pytest.raises(MqttSettingsError, match="is not mqtt://"):
        parse_broker_url(url)


def test_settings_validate_tls_files_and_combinations(tmp_path: Path) -> None:
    with pytest.raises(MqttSettingsError, match="need an mqtts:// URL"):
        build_settings("mqtt://b", ca_file=str(tmp_path / "ca.pem"))
    with pytest.raises(MqttSettingsError, match="cannot load MQTT TLS files"):
        build_settings("mqtts://b", ca_file=str(tmp_path / "missing.pem"))
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(MqttSettingsError, match="cannot load MQTT TLS files"):
        build_settings("mqtts://b", ca_file=str(garbage))
    with pytest.raises(MqttSettingsError, match="password needs a user"):
        build_settings("mqtt://b", password="x")
    settings = build_settings("mqtt://u:p@b", username="v")
    assert (settings.username, settings.password) == ("v", "p")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["agent", "--source", "netdev:lo", "--line-rate", "10", "--mqtt", "tcp://b"], "tcp://b"),
        (["agent", "--source", "netdev:lo", "--line-rate", "10", "--mqtt", "mqtts://b",
          "--mqtt-ca", "/nonexistent/ca.pem"], "/nonexistent/ca.pem"),
        (["events", "--mqtt", "mqtt://b:port"], "mqtt://b:port"),
    ],
)  # fmt: skip
def test_bad_mqtt_input_is_one_line_and_status_2(args: list[str], fragment: str) -> None:
    assert_usage_error(burstscope(*args, timeout=30), fragment)


def burst(
    start_ms: float,
    end_ms: float,
    size: int = 1000,
    peak: float = 0.9,
    jobs: tuple[JobTag, ...] = (),
) -> BurstRecord:
    return BurstRecord(round(start_ms * MS), round(end_ms * MS), size, peak, 0.7, jobs=jobs)


def run_policy(
    policy: RatePolicy, batches: list[tuple[list[BurstRecord], float]]
) -> list[list[BurstRecord | BurstSummary]]:
    state = PolicyState()
    outputs = []
    for bursts, now_ms in batches:
        state, out = apply_policy(policy, state, bursts, round(now_ms * MS))
        outputs.append(out)
    return outputs


POLICY = RatePolicy(merge_gap_ns=5 * MS, max_events_per_second=3, flush_delay_ns=100 * MS)


@pytest.mark.parametrize(
    ("name", "batches", "expected"),
    [
        (
            "held until the gap and the flush delay have passed",
            [([burst(0, 10)], 20), ([], 114), ([], 116)],
            [[], [], [burst(0, 10)]],
        ),
        (
            "closer than the gap: merged, across deliveries",
            [([burst(0, 10, 100, 0.8)], 20), ([burst(14, 20, 300, 0.95)], 40), ([], 200)],
            [[], [], [BurstRecord(0, 20 * MS, 400, 0.95, 0.7, merged=2)]],
        ),
        (
            "a gap of exactly merge_gap separates",
            [([burst(0, 10), burst(15, 20)], 21), ([], 500)],
            [[burst(0, 10)], [burst(15, 20)]],
        ),
        (
            "over the budget: a summary of the window, sent once the window is over",
            [
                ([burst(i * 100, i * 100 + 10, 1000, 0.6 + i / 100) for i in range(6)], 600),
                ([], 1104),
                ([], 1106),
            ],
            [
                [burst(i * 100, i * 100 + 10, 1000, 0.6 + i / 100) for i in range(3)],
                [],
                [BurstSummary(0, S, 3, 3000, 0.65, 300 * MS, 510 * MS)],
            ],
        ),
        (
            "a burst in the next window releases the summary first",
            [([burst(i * 100, i * 100 + 10) for i in range(5)] + [burst(1200, 1210)], 1400)],
            [
                [
                    *(burst(i * 100, i * 100 + 10) for i in range(3)),
                    BurstSummary(0, S, 2, 2000, 0.9, 300 * MS, 410 * MS),
                    burst(1200, 1210),
                ]
            ],
        ),
    ],
)
def test_rate_policy(
    name: str,
    batches: list[tuple[list[BurstRecord], float]],
    expected: list[list[BurstRecord | BurstSummary]],
) -> None:
    assert run_policy(POLICY, batches) == expected, name


def test_a_saturated_link_sends_at_most_limit_plus_one_per_window() -> None:
    """1 ms bursts every 7 ms for 10 s: 1429 bursts become 3 bursts + 1 summary a second."""
    bursts = [burst(t, t + 1, 100) for t in range(0, 10_000, 7)]
    state, out = apply_policy(POLICY, PolicyState(), bursts, 10_000 * MS)
    state, rest = flush(POLICY, state)
    out += rest
    for window in range(10):
        in_window = [o for o in out if _end(o) // S == window]
        assert len(in_window) <= POLICY.limit + 1
    total = sum(o.merged if isinstance(o, BurstRecord) else o.bursts for o in out)
    assert total == len(bursts)
    assert sum(o.bytes for o in out) == 100 * len(bursts)
    assert state == PolicyState(window=9, sent=3)


def _end(item: BurstRecord | BurstSummary) -> int:
    return item.end_ns if isinstance(item, BurstRecord) else item.window_end_ns - 1


def test_fractional_rates_widen_the_window() -> None:
    assert (RatePolicy(max_events_per_second=0.5).window_ns, RatePolicy(0, 0.5).limit) == (2 * S, 1)
    assert (RatePolicy(max_events_per_second=2.5).window_ns, RatePolicy(0, 2.5).limit) == (S, 2)


def reading(**values: object) -> PortReading:
    return PortReading(**values)  # type: ignore[arg-type]


def test_link_events_from_successive_readings() -> None:
    deriver = LinkEventDeriver()
    key = ("mlx5_0", 1)
    base = {
        "state": 4,
        "rate_bytes_per_second": 50_000_000_000,
        "link_downed": 0,
        "congestion": {"np_cnp_sent": 10, "port_xmit_wait": 5},
        "saturated_seconds": {"transmit": 0.0, "receive": 0.0},
    }
    steps: list[tuple[dict[str, object], list[tuple[str, dict[str, object]]]]] = [
        (base, []),
        ({**base, "congestion": {"np_cnp_sent": 20, "port_xmit_wait": 5}}, []),  # no saturation
        (
            {
                **base,
                "congestion": {"np_cnp_sent": 30, "port_xmit_wait": 9},
                "saturated_seconds": {"transmit": 0.25, "receive": 0.0},
            },
            [
                ("saturation_started", {"direction": "transmit", "saturated_seconds": 0.25}),
                (
                    "congestion",
                    {
                        "counters": {"np_cnp_sent": 10, "port_xmit_wait": 4},
                        "saturated_seconds": {"transmit": 0.25},
                    },
                ),
            ],
        ),
        (
            {**base, "congestion": {"np_cnp_sent": 30, "port_xmit_wait": 9},
             "saturated_seconds": {"transmit": 0.5, "receive": 0.0}},
            [],
        ),
        (
            {**base, "state": 1, "link_downed": 1, "rate_bytes_per_second": 25_000_000_000,
             "congestion": {"np_cnp_sent": 30, "port_xmit_wait": 9},
             "saturated_seconds": {"transmit": 0.5, "receive": 0.0}},
            [
                ("state_change", {"previous_state": "ACTIVE", "state": "DOWN"}),
                ("link_downed", {"increment": 1}),
                ("rate_change", {"previous_rate_bytes_per_second": 50_000_000_000,
                                 "rate_bytes_per_second": 25_000_000_000}),
                ("saturation_ended", {"direction": "transmit", "saturated_seconds": 0.5,
                                      "duration_seconds": 2.0}),
            ],
        ),
    ]  # fmt: skip
    identity = Identity("node1", 7, "1.0", 0.0, (key,), 0.5)
    for second, (values, expected) in enumerate(steps):
        events = deriver.update({key: reading(**values)}, second * S)
        payloads = [link_event_payload(identity, event) for event in events]
        assert payloads == [
            {"kind": kind, "host": "node1", "device": "mlx5_0", "port": 1, "time_ns": second * S}
            | details
            | {"jobs": [], "run": 7}
            for kind, details in expected
        ]


# -- jobs on the bus -----------------------------------------------------------------------

ALICE = Job("4242", SLURM, "alice", "llama-pretrain", nodes="gpu-[001-004]", start_time=1e9)
BOB = Job("team-a/eval", KUBERNETES, "", "eval", namespace="team-a", pod="eval-0")
SHARED = JobTable.build(
    [ALICE, BOB],
    [
        Holding("4242", "mlx5_0", 1, COMPUTE, RULE_PCIE_SWITCH),
        Holding("4242", "mlx5_4", 1, STORAGE, RULE_WHOLE_NODE),
        Holding("team-a/eval", "mlx5_0", 1, COMPUTE, RULE_NUMA_NODE),  # a port two jobs share
    ],
)
ALICE_TAG = JobTag("4242", SLURM, "alice", "llama-pretrain", COMPUTE)
BOB_TAG = JobTag("team-a/eval", KUBERNETES, "", "eval", COMPUTE)


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("mlx5_0", (ALICE_TAG, BOB_TAG)),
        ("mlx5_4", (JobTag("4242", SLURM, "alice", "llama-pretrain", STORAGE),)),
        ("mlx5_1", ()),  # no job holds it: "jobs": []
    ],
)
def test_events_name_every_job_holding_the_port(device: str, expected: tuple[JobTag, ...]) -> None:
    assert port_tags(SHARED, device, 1) == expected
    identity = Identity("node1", 7, "1.0", 0.0, ((device, 1),), 0.5)
    payload = burst_payload(identity, device, 1, "transmit", burst(0, 10, jobs=expected))
    assert payload["jobs"] == [
        {"job_id": t.job_id, "scheduler": t.scheduler, "user": t.user, "name": t.name,
         "role": t.role}
        for t in expected
    ]  # fmt: skip
    event = LinkEvent(device, 1, 5 * S, LinkDowned(1))
    assert link_event_payload(identity, event, expected)["jobs"] == payload["jobs"]


def test_a_merged_burst_names_the_jobs_of_its_end_and_a_summary_all_of_them() -> None:
    """The table in force when a burst ended: a merge takes its last part's; a window's
    summary names every job its counted bursts were under, once each."""
    first, second = burst(0, 10, jobs=(ALICE_TAG,)), burst(12, 20, jobs=(BOB_TAG,))
    (merged,) = run_policy(POLICY, [([first, second], 20), ([], 500)])[1]
    assert isinstance(merged, BurstRecord) and merged.jobs == (BOB_TAG,)
    crowded = [burst(i * 100, i * 100 + 10, jobs=(ALICE_TAG,)) for i in range(4)]
    crowded += [burst(i * 100, i * 100 + 10, jobs=(BOB_TAG, ALICE_TAG)) for i in range(4, 6)]
    *_, summary = run_policy(POLICY, [(crowded, 600), ([], 1200)])[1]
    assert isinstance(summary, BurstSummary) and summary.jobs == (ALICE_TAG, BOB_TAG)


def test_job_events_say_what_started_changed_and_ended() -> None:
    identity = Identity("node1", 7, "1.0", 0.0, (), 0.5)
    alone = JobTable.build([ALICE], [Holding("4242", "mlx5_0", 1, COMPUTE, RULE_PCIE_SWITCH)])
    assert job_events(identity, EMPTY_TABLE, EMPTY_TABLE, S) == []
    assert job_events(identity, SHARED, SHARED, S) == []
    started = job_events(identity, EMPTY_TABLE, alone, S)
    assert started == [
        {"kind": "job_started", "host": "node1", "time_ns": S, "job_id": "4242",
         "scheduler": "slurm", "user": "alice", "name": "llama-pretrain", "step": "",
         "nodes": "gpu-[001-004]", "start_time": 1e9, "namespace": "", "pod": "",
         "ports": [{"device": "mlx5_0", "port": 1, "role": "compute", "rule": "pcie_switch"}],
         "run": 7},
    ]  # fmt: skip
    changes = job_events(identity, alone, SHARED, 2 * S)  # alice gains storage, bob starts
    assert [(e["kind"], e["job_id"], len(e["ports"])) for e in changes] == [
        ("job_changed", "4242", 2),
        ("job_started", "team-a/eval", 1),
    ]
    ended = job_events(identity, SHARED, EMPTY_TABLE, 3 * S)
    assert [(e["kind"], e["job_id"], len(e["ports"])) for e in ended] == [
        ("job_ended", "4242", 2),  # with the ports it held
        ("job_ended", "team-a/eval", 1),
    ]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_spool_keeps_order_drops_oldest_and_counts(kind: str, tmp_path: Path) -> None:
    def make() -> MemorySpool | SqliteSpool:
        return MemorySpool(3) if kind == "memory" else SqliteSpool(str(tmp_path), 3)

    spool = make()
    spool.append([Message(f"t/{i}", str(i).encode()) for i in range(5)])
    assert (len(spool), spool.dropped) == (3, 2)
    head = spool.peek(2)
    assert [e.message.payload for e in head] == [b"2", b"3"]
    spool.remove_through(head[0].id)
    assert [e.message.topic for e in spool.peek(10)] == ["t/3", "t/4"]
    spool.close()
    if kind == "sqlite":  # a restart finds what was left, still in order
        again = make()
        assert [e.message.topic for e in again.peek(10)] == ["t/3", "t/4"]
        again.append([Message("t/5", b"5")])
        assert [e.message.payload for e in again.peek(10)] == [b"3", b"4", b"5"]
        again.close()


def test_sequence_tracker_finds_gaps_duplicates_and_late_arrivals() -> None:
    tracker = SequenceTracker()
    seen = [(s, tracker.observe("h", 7, s)) for s in (1, 2, 2, 5, 3, 3, 6, 4)]
    assert seen == [
        (1, (Verdict.NEW, None)),
        (2, (Verdict.NEW, None)),
        (2, (Verdict.DUPLICATE, None)),
        (5, (Verdict.NEW, (3, 4))),
        (3, (Verdict.LATE, None)),
        (3, (Verdict.DUPLICATE, None)),
        (6, (Verdict.NEW, None)),
        (4, (Verdict.LATE, None)),
    ]
    assert tracker.missing_count() == 0
    assert tracker.observe("h", 8, 1) == (Verdict.NEW, None)  # a new run starts again at 1


def test_fleet_view_prints_gaps_and_drops_redeliveries() -> None:
    view = FleetView()
    topic = port_topic("h", "mlx5_0", 1, "burst")
    lines = [view.handle(topic, f'{{"host":"h","run":1,"seq":{s}}}'.encode()) for s in (1, 1, 3)]
    assert lines == [
        [{"topic": topic, "host": "h", "run": 1, "seq": 1}],
        [],
        [{"gap": {"host": "h", "run": 1, "first": 2, "last": 2, "reason": "missing"}},
         {"topic": topic, "host": "h", "run": 1, "seq": 3}],
    ]  # fmt: skip
    assert (view.received, view.duplicates) == (2, 1)
    assert view.handle(topic, b"not json") == []


def test_events_subscribes_to_every_numbered_topic_so_step_summaries_are_no_gap() -> None:
    """The step summaries share the agent's seq: a subscriber without their topic saw each
    as a missing message (the demo's event stream under load)."""
    assert "burstscope/+/steps" in topics(None)
    assert steps_topic("gpu-01") in topics("gpu-01")
    view = FleetView()
    burst = port_topic("h", "mlx5_0", 1, "burst")
    step = (
        '{"kind":"step","host":"h","run":1,"seq":2,"onset_ns":0,"end_ns":3000000,'
        '"rails":[{"rail":0,"bytes":5000000},{"rail":1,"bytes":7000000}]}'
    )
    lines = [
        view.handle(burst, b'{"host":"h","run":1,"seq":1}'),
        view.handle(steps_topic("h"), step.encode()),
        view.handle(burst, b'{"host":"h","run":1,"seq":3}'),
    ]
    assert not any("gap" in line for batch in lines for line in batch)
    assert view.tracker.missing_count() == 0
    assert describe_row(lines[1][0]) == "2 rails 3.0 ms 12.0 MB"


def test_fleet_view_reports_joining_mid_stream_and_what_was_never_delivered() -> None:
    view = FleetView()
    topic = port_topic("h", "mlx5_0", 1, "burst")
    joined = view.handle(topic, b'{"host":"h","run":1,"seq":40}')
    assert joined[0] == {
        "gap": {"host": "h", "run": 1, "first": 1, "last": 39, "reason": "joined mid-stream"}
    }
    assert view.tracker.missing_count() == 0  # before we joined: not owed to us
    # The agent stops with its spool overflowed: its offline status says how far it got.
    status = status_topic("h")
    offline = view.handle(status, b'{"host":"h","run":1,"online":false,"last_seq":55}')
    assert offline[0] == {
        "gap": {"host": "h", "run": 1, "first": 41, "last": 55, "reason": "never delivered"}
    }
    online = view.handle(status, b'{"host":"h","run":1,"online":true,"last_seq":60}')
    assert len(online) == 1  # an online status promises delivery: no gap yet


def test_backoff_is_jittered_capped_and_resets() -> None:
    backoff = Backoff(0.5, 4.0, uniform=lambda low, high: high)
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    low = Backoff(0.5, 4.0, uniform=lambda low, high: low)
    assert [low.next_delay() for _ in range(3)] == [0.25, 0.5, 1.0]
    backoff.reset()
    assert backoff.next_delay() == 0.5


def test_reloading_a_publisher_that_is_not_running_is_an_error_not_a_crash() -> None:
    from types import SimpleNamespace

    from burstscope import __version__
    from burstscope.collector.mqtt import attach_mqtt
    from burstscope.collector.sources.base import PortSpec

    pipeline = SimpleNamespace(
        source=SimpleNamespace(ports=(PortSpec("mlx5_0", 1, 50_000_000_000),)),
        thresholds=SimpleNamespace(burst=0.5),
        listeners=[],
    )
    handle = attach_mqtt(pipeline, build_settings("mqtt://127.0.0.1:1"), version=__version__)  # type: ignore[arg-type]
    with pytest.raises(MqttSettingsError, match="not running"):
        handle.reload(build_settings("mqtt://127.0.0.1:2"))


def test_a_dropped_connection_is_one_line_not_paho_s_error_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """paho logs a connection reset at ERROR before aiomqtt raises it; the publisher logs
    the outage itself, once, so paho's copy is demoted to DEBUG; paho's other messages pass."""
    import asyncio
    import logging

    import paho.mqtt.client as paho

    from burstscope.collector.mqtt.publisher import client

    settings = MqttSettings("mqtt://127.0.0.1:1", parse_broker_url("mqtt://127.0.0.1:1"))

    async def made() -> Any:  # aiomqtt builds its client on a running loop; none connects
        return client(settings, None)

    # paho's own logging path (Client._easy_log, as _packet_read calls it on ECONNRESET).
    log = asyncio.run(made())._client._easy_log
    with caplog.at_level(logging.INFO):
        log(paho.MQTT_LOG_ERR, "failed to receive on socket: %s", ConnectionResetError(104, "x"))
        log(paho.MQTT_LOG_ERR, "some other paho failure")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", "some other paho failure")
    ]
