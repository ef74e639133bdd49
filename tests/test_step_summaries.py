"""The agent's step summaries: the training rails chosen, steps from fed counters, the
message on the bus and back, the [steps] settings, and the pipeline feeding them."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from burstscope.collector.config import ConfigError, parse_config
from burstscope.collector.jobs.model import (
    COMPUTE,
    RULE_WHOLE_NODE,
    STORAGE,
    Holding,
    Job,
    JobTable,
)
from burstscope.collector.mqtt.messages import (
    Identity,
    encode,
    step_from_payload,
    step_payload,
    steps_topic,
)
from burstscope.collector.sources.base import PortSpec
from burstscope.collector.step_summaries import (
    STALE_NS,
    LiveSteps,
    StepSettings,
    step_settings,
    training_rails,
)
from burstscope.detectors.stragglers import NodeStep, RailStep, StepLimits

RATE = 50_000_000_000  # 400 Gb/s in bytes per second
MS = 1_000_000
SECOND = 1_000 * MS
RAILS = [PortSpec(f"mlx5_{index}", 1, RATE) for index in range(8)]
STORAGE_PORT = PortSpec("mlx5_8", 1, RATE // 2)


@pytest.mark.parametrize(
    ("ports", "storage", "expected"),
    [
        # Eight 400G rails and a 200G storage NIC: the rails.
        ([(f"r{i}", 400) for i in range(8)] + [("s", 200)], (), [f"r{i}" for i in range(8)]),
        # A storage NIC of the same rate, held by the job as storage: left out.
        ([("a", 400), ("b", 400), ("c", 400), ("s", 400)], ("s",), ["a", "b", "c"]),
        # Two groups: the larger; on a tie, the faster.
        ([("a", 200), ("b", 200), ("c", 200), ("d", 200), ("x", 400), ("y", 400), ("z", 400)],
         (), ["a", "b", "c", "d"]),
        ([("a", 200), ("b", 200), ("c", 200), ("x", 400), ("y", 400), ("z", 400)],
         (), ["x", "y", "z"]),
        # Fewer than three of one rate: no training rails, no steps.
        ([("a", 400), ("b", 400), ("s", 200)], (), []),
    ],
)  # fmt: skip
def test_training_rails_are_the_rails_detectors_peer_groups(
    ports: list[tuple[str, int]], storage: tuple[str, ...], expected: list[str]
) -> None:
    keyed = [((name, 1), rate) for name, rate in ports]
    found = training_rails(keyed, {(name, 1) for name in storage})
    assert found == tuple((name, 1) for name in expected)


def counters(start_ns: int, ticks: int, busy: dict[int, tuple[int, int]], total: int) -> tuple:
    """Cumulative bytes of ``ticks`` 1 ms readings from ``start_ns``: line rate over the
    ticks in ``busy`` (first, last) of each rail index, nothing otherwise."""
    stamps = start_ns + MS * np.arange(1, ticks + 1, dtype=np.int64)
    out = {}
    for index in range(total):
        first, last = busy.get(index, (ticks, ticks))
        moved = np.where((np.arange(ticks) >= first) & (np.arange(ticks) <= last), RATE // 1000, 0)
        out[index] = (np.int64(1 << 40) + np.cumsum(moved)).astype(np.uint64)
    return stamps, out


def drain(live: LiveSteps, start_ns: int, ticks: int, busy: dict[int, tuple[int, int]]) -> None:
    """One drain's transmit readings of the eight rails and the storage port."""
    ports = [*RAILS, STORAGE_PORT]
    stamps, values = counters(start_ns, ticks, busy, len(ports))
    restart = np.zeros(ticks, dtype=np.bool_)
    for index, spec in enumerate(ports):
        live.feed(spec, stamps, values[index], restart)


def test_live_steps_from_a_fed_sequence() -> None:
    """The first drain chooses the rails (the storage port is not one); a step on every
    rail, rail 5 late by 3 ms, closes once a drain has read past its end and the quiet, with
    each rail's first and last bytes and the jobs holding the rails, to every listener."""
    live = LiveSteps("gpu01", MS, StepLimits(quiet_ns=30 * MS))
    heard: list[NodeStep] = []
    live.listeners.append(heard.append)
    table = JobTable.build(
        [Job("4242", "slurm", "alice", "train")],
        [Holding("4242", spec.device, 1, COMPUTE, RULE_WHOLE_NODE) for spec in RAILS]
        + [Holding("4242", "mlx5_8", 1, STORAGE, RULE_WHOLE_NODE)],
    )
    epoch = 1_700_000_000_000_000_000
    drain(live, epoch, 1000, {})
    assert live.close(table) == [] and live.rails == tuple((s.device, 1) for s in RAILS)
    # Ticks 100..199 busy on every rail, rail 5 from 103; the storage port busy throughout.
    busy = {index: (103 if index == 5 else 100, 199) for index in range(8)} | {8: (0, 999)}
    drain(live, epoch + 1000 * MS, 1000, busy)
    (step,) = live.close(table)
    assert heard == [step]
    begin = epoch + 1000 * MS
    # Tick i's reading ends at (i + 1) ms: its interval [i, i + 1) ms is its sample.
    assert (step.onset_ns, step.end_ns) == (begin + 100 * MS, begin + 200 * MS)
    assert step.jobs == ("4242",) and step.host == "gpu01" and step.interval_ns == MS
    rails = {rail.rail: rail for rail in step.rails}
    assert sorted(rails) == [f"mlx5_{index}/1" for index in range(8)]
    assert rails["mlx5_5/1"].onset_ns == begin + 103 * MS
    assert rails["mlx5_0/1"].bytes == 100 * RATE // 1000 and rails["mlx5_0/1"].peak == 1.0


def test_a_rail_no_longer_read_leaves_so_steps_still_close() -> None:
    live = LiveSteps("gpu01", MS, StepLimits(quiet_ns=30 * MS))
    drain(live, 0, 1000, {})
    live.close(JobTable())
    assert len(live.rails) == 8
    # mlx5_7 stops being read (a reload removed it, or its reads fail).
    start = 1000 * MS
    for _ in range(3):
        stamps, values = counters(start, 1000, {i: (10, 20) for i in range(7)}, 8)
        for index, spec in enumerate(RAILS[:7]):
            live.feed(spec, stamps, values[index], np.zeros(1000, np.bool_))
        live.close(JobTable())
        start += 1000 * MS
    # Read last at 1 s, the others at 4 s: more than STALE_NS behind, so no longer a rail.
    assert start - 1000 * MS > STALE_NS
    assert ("mlx5_7", 1) not in live.rails and len(live.rails) == 7
    stamps, values = counters(start, 1000, {i: (10, 20) for i in range(7)}, 8)
    for index, spec in enumerate(RAILS[:7]):
        live.feed(spec, stamps, values[index], np.zeros(1000, np.bool_))
    assert len(live.close(JobTable())) == 1


IDENTITY = Identity("gpu01", 17, "1.0", 0.0, (), 0.5)
STEP = NodeStep(
    "gpu01",
    1_000_000,
    9_000_000,
    MS,
    (
        RailStep("mlx5_0/1", 1_000_000, 9_000_000, 123_456, 0.9876, 1_500_000),
        RailStep("mlx5_1/1", 2_000_000, 8_000_000, 654_321, 1.0),
    ),
    ("4242", "77"),
    1_500_000,
)


def test_a_step_round_trips_through_its_message() -> None:
    payload = step_payload(IDENTITY, STEP)
    assert steps_topic("gpu/01") == "burstscope/gpu_01/steps"
    document = json.loads(encode({**payload, "seq": 5}))
    assert document["version"] == 1 and document["kind"] == "step" and document["run"] == 17
    assert step_from_payload(document) == STEP
    # The host is the publisher's (its identity), whatever the splitter was told.
    assert step_from_payload(step_payload(replace(IDENTITY, host="other"), STEP)).host == "other"


def broken(change: dict[str, Any]) -> dict[str, Any]:
    payload = step_payload(IDENTITY, STEP)
    for key, value in change.items():
        if value is None:
            del payload[key]
        else:
            payload[key] = value
    return payload


@pytest.mark.parametrize(
    ("payload", "complaint"),
    [
        ([1, 2], "not a JSON object"),
        (broken({"version": 2}), "version 2 is not 1"),
        (broken({"host": ""}), "host must be a non-empty string"),
        (broken({"jobs": "4242"}), "jobs must be a list"),
        (broken({"rails": []}), "rails must be a list"),
        (broken({"onset_ns": True}), "onset_ns must be an integer"),
        (broken({"end_ns": None}), "end_ns must be an integer"),
        (broken({"end_ns": 10}), "end_ns is before onset_ns"),
        (broken({"interval_ns": 0}), "interval_ns must be an integer >= 1"),
        (broken({"onset_latest_ns": 10**12}), "onset_latest_ns is outside"),
        (broken({"rails": [{"rail": "a", "onset_ns": 1, "end_ns": 2}]}), "peak must be"),
        (broken({"rails": [{"onset_ns": 1}]}), "each rail must be an object naming its rail"),
        (
            broken({"rails": [{"rail": "a", "onset_ns": 0, "end_ns": 2, "bytes": 1, "peak": 1}]}),
            "its times are outside the step's",
        ),
    ],
)
def test_a_malformed_step_message_names_what_is_wrong(payload: Any, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint) as raised:
        step_from_payload(payload)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[steps]\npublish = 'yes'", "agent.toml: steps.publish must be true or false"),
        ("[steps]\nquiet = 30", "agent.toml: steps.quiet must be a string, not int"),
        ("[steps]\nquiet = '1us'", "agent.toml: steps.quiet interval '1us' is outside"),
        ("[steps]\nfloor = 0.9", "agent.toml: steps.floor must be between 0.001 and 0.5"),
        ("[steps]\nsilence = '1s'", "agent.toml: unknown key steps.silence"),
    ],
)
def test_bad_steps_settings_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        parse_config(text, "agent.toml")
    assert "\n" not in str(raised.value)


def test_steps_publish_with_mqtt_by_default_and_need_it() -> None:
    def get(values: dict[str, Any]) -> Any:
        return lambda table, key, default: values.get(key, default)

    assert step_settings(get({}), True, MS).publish
    assert not step_settings(get({}), False, MS).publish
    assert not step_settings(get({"publish": False}), True, MS).publish
    chosen = step_settings(get({"quiet": 40 * MS, "floor": 0.02}), True, MS)
    assert chosen == StepSettings(True, 40 * MS, 0.02)
    assert chosen.limits == StepLimits(quiet_ns=40 * MS, floor=0.02)
    with pytest.raises(ValueError, match=r"steps\.publish needs MQTT"):
        step_settings(get({"publish": True}), False, MS)
    with pytest.raises(ValueError, match="must be more than two sampling intervals"):
        step_settings(get({"quiet": 2 * MS}), True, MS)
    # At an interval too coarse for the default quiet, steps are off unless asked for.
    coarse = 2 * SECOND
    assert not step_settings(get({}), True, coarse).publish
    assert not step_settings(get({}), False, coarse).publish
    for asked in ({"publish": True}, {"quiet": 50 * MS}):
        with pytest.raises(ValueError, match="must be more than two sampling intervals"):
            step_settings(get(asked), True, coarse)


def test_the_agent_refuses_steps_without_mqtt_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('[source]\nspec = "sim"\n\n[steps]\npublish = true\n')
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "agent", "--check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "steps.publish needs MQTT (--mqtt or [mqtt] url)" in result.stderr


def test_the_pipeline_feeds_the_simulated_nodes_rails() -> None:
    """The pipeline feeds the simulated node's transmit counters to LiveSteps and closes its
    steps every drain (a quiet of 5 ms, so the first comes within half a second)."""
    from burstscope.arguments import build_source_from
    from burstscope.collector.pipeline import Pipeline

    source = build_source_from("sim", "/sys", None, None, None, {}, None)
    pipeline = Pipeline(source, drain_seconds=0.1)
    live = LiveSteps("gpu01", pipeline.interval_ns, StepLimits(quiet_ns=5 * MS))
    heard: list[NodeStep] = []
    came = threading.Event()
    live.listeners.append(lambda step: (heard.append(step), came.set()))
    pipeline.steps = live
    pipeline.start()
    try:
        assert came.wait(20), "no step closed"
    finally:
        pipeline.close()
    assert live.rails == tuple((f"mlx5_{index}", 1) for index in range(8))  # not the storage
    step = heard[0]
    assert {rail.rail for rail in step.rails} <= {f"mlx5_{index}/1" for index in range(8)}
    assert step.onset_ns <= step.end_ns and step.bytes > 0
