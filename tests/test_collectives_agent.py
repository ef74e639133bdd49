"""The running agent tails an NCCL Inspector dump directory: classes on burst events and on
the node's per-class counters.

The node is the emulated one (burstscope.testing.emulated_node: a writer moves its counters
with a 200 ms line-rate burst every 0.5 s) under the real in-process ``Agent``; the dump is
written as a training process writes it (burstscope.testing.inspector_dumps: verbose
records on the wall clock, one dump every 0.1 s) with the collectives a test chooses for
each moment. Labels wait ``label_delay`` (3 s), so every wait here is on a condition.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstscope.collector.collectives.live import (
    CLASSES,
    DEFAULT_LABEL_DELAY_NS,
    PAIR_NAMES,
    SKIP_KINDS,
    CollectiveLabels,
    SpanStore,
)
from burstscope.detectors.analyzer import Chunk
from burstscope.detectors.bursts import Bursts
from burstscope.detectors.config import Thresholds
from burstscope.detectors.scales import Windows
from burstscope.testing.emulated_node import CounterWriter, EmulatedNode, Load, running_agent
from burstscope.testing.emulated_node import scrape as get
from burstscope.testing.inspector_dumps import PacedWriter
from burstscope.testing.inspector_writer import InspectorWriter, Operation
from burstscope.testing.processes import wait_until
from tests.test_cli_core import assert_usage_error

BURSTSCOPE = [sys.executable, "-m", "burstscope"]
SECOND_NS = 1_000_000_000
# Bursts of 200 ms every 0.5 s at line rate on mlx5_0's transmit side.
BURSTS = Load(1.0, period_s=0.5, duty=0.4)


class Phase:
    """The types whose collectives the dump says ran from now on (a test switches it)."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.since_ns = 0

    def set(self, *kinds: str) -> int:
        self.kinds = list(kinds)
        self.since_ns = time.time_ns()
        return self.since_ns

    def __call__(self, from_ns: int, to_ns: int) -> list[str]:
        return list(self.kinds)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[EmulatedNode]:
    emulated = EmulatedNode(tmp_path / "sys", ["mlx5_0"]).build()
    writer = CounterWriter(emulated)
    with writer.running_in_thread():
        writer.set_load("mlx5_0", "transmit", BURSTS)
        yield emulated


def series(url: str) -> dict[str, float]:
    """The collective families' samples by name and labels."""
    found = {}
    for line in get(url).splitlines():
        if line.startswith("burstscope_collective_"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def value(url: str, name: str, label: str, key: str) -> float:
    return series(url).get(f'burstscope_collective_{name}{{{label}="{key}"}}', 0.0)


EXPECTED_SERIES = {
    *(f'burstscope_collective_class_{n}{{class="{c}"}}' for n in (
        "saturated_seconds_total", "hidden_saturated_seconds_total", "burst_bytes_total"
    ) for c in CLASSES),
    *(f'burstscope_collective_collision_saturated_seconds_total{{pair="{p}"}}' for p in PAIR_NAMES),
    'burstscope_collective_records_total{source="nccl-inspector"}',
    *(f'burstscope_collective_skipped_total{{kind="{k}"}}' for k in SKIP_KINDS),
    "burstscope_collective_files",
    "burstscope_collective_cpu_seconds_total",
}  # fmt: skip


def test_the_families_are_absent_without_a_directory_and_all_there_with_one(
    node: EmulatedNode, tmp_path: Path
) -> None:
    with running_agent(node.root) as (agent, url):
        assert series(url) == {}
        assert agent.collectives is None and agent.pipeline.chunk_listeners == []
    with running_agent(node.root, "--nccl-inspector-dir", str(tmp_path / "dumps")) as (_, url):
        found = series(url)
        assert set(found) == EXPECTED_SERIES  # per node and class: never per communicator
        assert all(v == 0 for k, v in found.items() if "class_" in k or "collision" in k)


def test_the_counters_grow_for_the_class_running(node: EmulatedNode, tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    phase = Phase()
    with (
        running_agent(node.root, "--nccl-inspector-dir", str(dumps)) as (_, url),
        PacedWriter(dumps, phase).running(),
    ):
        phase.set("EP")
        assert wait_until(lambda: value(url, "class_saturated_seconds_total", "class", "EP") > 0.3)
        assert value(url, "class_burst_bytes_total", "class", "EP") > 0
        phase.set("EP", "DP")
        assert wait_until(
            lambda: value(url, "collision_saturated_seconds_total", "pair", "EP-DP") > 0.3
        )
        assert value(url, "class_saturated_seconds_total", "class", "DP") > 0.3
        for other in ("PP", "other"):
            assert value(url, "class_saturated_seconds_total", "class", other) == 0
        for pair in ("PP-DP", "EP-PP"):
            assert value(url, "collision_saturated_seconds_total", "pair", pair) == 0
        assert value(url, "records_total", "source", "nccl-inspector") > 0
        assert series(url)["burstscope_collective_files"] == 1
        # The labels' own CPU (the tail's thread, the drain's keeping): some, and no more than
        # this whole process (the agent runs in it) has used.
        assert 0 < series(url)["burstscope_collective_cpu_seconds_total"] <= time.process_time()


@pytest.mark.integration
def test_burst_events_carry_the_collectives_they_ran_under(
    node: EmulatedNode, tmp_path: Path
) -> None:
    from tests.test_mqtt_broker import Broker, Subscriber

    broker = Broker(tmp_path)
    broker.start()
    dumps = tmp_path / "dumps"
    phase = Phase()
    url = f"mqtt://127.0.0.1:{broker.port}"
    subscriber = Subscriber(url)
    try:
        with (
            running_agent(node.root, "--mqtt", url, "--nccl-inspector-dir", str(dumps)) as (
                _,
                metrics,
            ),
            PacedWriter(dumps, phase).running(),
        ):
            seen: dict[int, int] = {}  # seq -> when this test first saw the event

            def burst_after(since_ns: int) -> dict[str, Any] | None:
                now = time.time_ns()
                for event in subscriber.events():
                    seen.setdefault(event["seq"], now)
                    # A burst that began after the records changed (a dump's period later).
                    if event.get("kind") == "burst" and event["start_ns"] > since_ns + 2e8:
                        return event
                return None

            for kinds, expected in (
                (("EP",), {"classes": ["EP"], "collectives": ["AllToAll"],
                           "rules": ["inferred:all-to-all"]}),
                (("EP", "DP"), {"classes": ["EP", "DP"],
                                "collectives": ["AllToAll", "ReduceScatter"],
                                "rules": ["inferred:all-to-all", "inferred:largest-group"]}),
                ((), {}),
            ):  # fmt: skip
                since = phase.set(*kinds)
                assert subscriber.wait_for(lambda: burst_after(since) is not None, 15), kinds  # noqa: B023
                event = burst_after(since)
                assert event is not None and event["collectives"] == expected, event
                # Held for the label delay (docs/collectives.md): published 3 s after its end
                # or later, so seen no earlier.
                assert seen[event["seq"]] - event["end_ns"] >= DEFAULT_LABEL_DELAY_NS
            # The counters settle on the tail's own cadence (every third poll), not when the
            # event goes out: the last phase's saturated time under no record shows up.
            assert wait_until(
                lambda: value(metrics, "class_saturated_seconds_total", "class", "none") > 0
            )
    finally:
        subscriber.stop()
        broker.kill()


def test_a_bad_record_is_one_counted_skip_and_a_log_line(
    node: EmulatedNode, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dumps = tmp_path / "dumps"
    with running_agent(node.root, "--nccl-inspector-dir", str(dumps)) as (_, url):
        writer = InspectorWriter(dumps)
        start = time.time_ns()
        with caplog.at_level(logging.WARNING):
            writer._file.write('{"header": {"id": "0x1", "rank"\n')  # cut by a dying writer
            writer.write(Operation("EP", "All2All", start, start, start + 10**6, 1 << 20))
            writer.close()
            assert wait_until(lambda: value(url, "records_total", "source", "nccl-inspector") == 1)
            assert wait_until(lambda: value(url, "skipped_total", "kind", "malformed") == 1)
        said = [m for m in caplog.messages if "malformed Inspector object" in m]
        assert len(said) == 1, caplog.messages


def test_a_file_deleted_mid_run_and_a_directory_made_late_are_fine(
    node: EmulatedNode, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dumps = tmp_path / "not-yet"
    phase = Phase()
    phase.set("EP")
    caplog.set_level(logging.INFO, logger="burstscope.collector.collectives.tail")
    with running_agent(node.root, "--nccl-inspector-dir", str(dumps)) as (agent, url):
        assert wait_until(lambda: "does not exist" in caplog.text)
        # What docs/operations.md tells an operator top -H shows (and bench/agent.py reads).
        assert {"bs-pipeline", "bs-http", "bs-collectives"} <= _thread_names()
        with PacedWriter(dumps, phase).running() as writer:
            assert wait_until(lambda: series(url)["burstscope_collective_files"] == 1)
            writer.path.unlink()
            assert wait_until(lambda: series(url)["burstscope_collective_files"] == 0)
        records = value(url, "records_total", "source", "nccl-inspector")
        with PacedWriter(dumps, phase).running():  # the same name again: a new file
            assert wait_until(
                lambda: value(url, "records_total", "source", "nccl-inspector") > records
            )
        assert agent.collectives is not None
    assert "a poll failed" not in caplog.text


def _thread_names() -> set[str]:
    """The kernel's names (comm) of this process's threads: the in-process agent's among them."""
    names = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            names.add((task / "comm").read_text().strip())
    return names


def test_bad_collective_flags_and_keys_are_one_line_and_exit_2(tmp_path: Path) -> None:
    def agent(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*BURSTSCOPE, "agent", "--source", "sim", "--listen", "127.0.0.1:0", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert_usage_error(
        agent("--nccl-inspector-dir", str(tmp_path), "--collective-clock-offset", "5 parsecs"),
        "--collective-clock-offset",
    )
    mapping = tmp_path / "map.toml"
    mapping.write_text('"0x1" = "TP"\n')
    assert_usage_error(agent("--collective-map", str(mapping)), "--collective-map", "'TP'")
    config = tmp_path / "agent.toml"
    config.write_text('[collectives]\nclock_offset = "soon"\n')
    assert_usage_error(agent("--config", str(config)), "collectives.clock_offset")


# -- the labels on their own: chunks in, per-class totals out -------------------------------


BASE_NS = 1_781_012_346 * SECOND_NS  # a wall-clock time: 0 is the plugin's "never came"
MS = 1_000_000


def chunk(stamps_ms: list[int], saturated: list[int], windows: Windows | None = None) -> Chunk:
    stamps = BASE_NS + np.array(stamps_ms, dtype=np.int64) * MS
    empty = np.empty(0, dtype=np.int64)
    bursts = Bursts(empty, empty, empty, np.empty(0), np.empty(0))
    return Chunk(
        stamps,
        np.ones(stamps.size),
        np.ones(stamps.size, dtype=bool),
        bursts,
        {} if windows is None else {"15": windows},
        np.array(saturated, dtype=np.intp),
    )


def test_labels_wait_for_the_delay_and_hidden_time_waits_for_its_window(
    tmp_path: Path,
) -> None:
    """Samples ending 1, 2, 3 ms in are saturated under EP (a record covering 0..2 ms) and
    DP (1..10 ms); the 15 s window they are in closes quiet: hidden, once both are known."""
    from burstscope.collector.collectives.nccl_inspector import Spans, parse_span

    writer = InspectorWriter(tmp_path)
    store = SpanStore()
    store.add(
        Spans.of(
            [
                parse_span(
                    writer.record(Operation("EP", "All2All", BASE_NS, 0, BASE_NS + 2 * MS, 1))
                ),
                parse_span(
                    writer.record(
                        Operation("DP", "ReduceScatter", BASE_NS + MS, 0, BASE_NS + 10 * MS, 1)
                    )
                ),
            ]
        )
    )
    labels = CollectiveLabels(store, label_delay_ns=2 * SECOND_NS)
    key = ("mlx5_0", 1, "transmit")
    labels.on_chunk(key, chunk([0, 1, 2, 3], [1, 2, 3]), Thresholds())

    def totals() -> dict[str, dict[str, float]]:
        got = labels.figures(0, {}, 0)
        return {
            "saturated": got.saturated_seconds,
            "hidden": got.hidden_saturated_seconds,
            "collision": got.collision_saturated_seconds,
        }

    labels.settle(BASE_NS + 2 * SECOND_NS)  # 3 ms + 2 s have not passed yet
    assert totals()["saturated"] == dict.fromkeys(CLASSES, 0.0)
    labels.settle(BASE_NS + 2 * SECOND_NS + 3 * MS)
    # (0,1] under EP; (1,2] under EP and DP; (2,3] under DP.
    assert totals()["saturated"] == {"EP": 0.002, "PP": 0, "DP": 0.002, "other": 0, "none": 0}
    assert totals()["collision"] == {"EP-DP": 0.001, "PP-DP": 0, "EP-PP": 0}
    assert totals()["hidden"] == dict.fromkeys(CLASSES, 0.0)
    # The window (BASE - BASE mod 15 s, +15 s] they fall in closes quiet (mean 1%).
    end = (BASE_NS // (15 * SECOND_NS) + 1) * 15 * SECOND_NS
    closed = Windows(np.array([end]), np.array([0.01]), np.array([15 * SECOND_NS]))
    labels.on_chunk(key, chunk([(end - BASE_NS) // MS + 1], [], closed), Thresholds())
    labels.settle(end + 2 * SECOND_NS)
    assert totals()["hidden"] == {"EP": 0.002, "PP": 0, "DP": 0.002, "other": 0, "none": 0}


def _span_columns(starts_ms: list[int], lengths_ms: list[int]) -> Any:
    """Verbose-record spans (microseconds, the plugin's unit) of one EP collective."""
    from burstscope.collector.collectives.nccl_inspector import SpanKind, Spans

    start_us = (BASE_NS // 1000) + np.array(starts_ms, dtype=np.int64) * 1000
    kind = SpanKind(socket.gethostname(), "v4.0", "0x1", None, 8, 1, "AllToAll")
    return Spans(
        (kind,),
        np.zeros(len(starts_ms), dtype=np.int64),
        start_us,
        start_us + np.array(lengths_ms, dtype=np.int64) * 1000,
    )


def test_the_store_forgets_spans_past_its_horizon_and_keeps_the_rest() -> None:
    """A span per 10 ms for 30 s; forgotten at 30 s with a 10 s horizon, what is kept
    spans the last 10 s (a few more, at most twice the horizon) and tags are unchanged."""
    store = SpanStore(horizon_ns=10 * SECOND_NS)
    starts = list(range(0, 30_000, 10))
    store.add(_span_columns(starts, [5] * len(starts)))
    before = store.tag(BASE_NS + 25 * SECOND_NS, BASE_NS + 26 * SECOND_NS)
    store.forget(BASE_NS + 30 * SECOND_NS)
    kept_starts = store.kept()[0]
    assert kept_starts.size <= 2 * 1000 + 1  # at most twice the horizon's spans
    assert int(kept_starts.min()) >= BASE_NS + 10 * SECOND_NS
    assert int(store.kept()[1].min()) >= BASE_NS + 20 * SECOND_NS - 5 * MS
    assert store.tag(BASE_NS + 25 * SECOND_NS, BASE_NS + 26 * SECOND_NS) == before


def test_one_span_longer_than_the_horizon_does_not_keep_the_others() -> None:
    store = SpanStore(horizon_ns=10 * SECOND_NS)
    starts = [0, *range(1, 30_000, 10)]
    lengths = [60 * 60 * 1000] + [5] * (len(starts) - 1)  # an hour-long one first
    store.add(_span_columns(starts, lengths))
    store.forget(BASE_NS + 30 * SECOND_NS)
    ends = store.kept()[1]
    # Every span kept ends within the horizon: the hour-long one and the last 10 s.
    assert int(ends.min()) >= BASE_NS + 20 * SECOND_NS
    assert ends.size <= 1000 + 1


@given(
    steps=st.lists(
        st.one_of(
            st.lists(st.tuples(st.integers(0, 40_000), st.integers(1, 3_000)), max_size=60),
            st.integers(0, 40_000),  # a forget at this many ms, plus the horizon
        ),
        max_size=16,
    )
)
@settings(max_examples=80, deadline=None)
def test_the_store_keeps_every_batch_sorted_and_forgets_only_what_ended(
    steps: list[list[tuple[int, int]] | int],
) -> None:
    """Batches in any order (late records start before those kept), forgets between them,
    in a buffer small enough to grow and compact: what is kept is always what a sorted
    list would keep, and a forget drops only spans that ended before its horizon."""
    horizon_ms = 10_000
    store = SpanStore(horizon_ns=horizon_ms * MS)
    store._buffer = np.empty((3, 8), dtype=np.int64)
    model: list[tuple[int, int]] = []  # (start, end) in ms, sorted by start, stable
    for step in steps:
        if isinstance(step, list):
            if step:
                store.add(_span_columns([s for s, _ in step], [n for _, n in step]))
                model = sorted(model + [(s, s + n) for s, n in step], key=lambda x: x[0])
        else:
            oldest = step  # forget(now) with now = oldest + the horizon
            store._forgotten_at = 0  # every forget here runs, however close the last
            store.forget(BASE_NS + (oldest + horizon_ms) * MS)
            live = {span for span in model if span[1] >= oldest}
            kept_now = [
                ((a - BASE_NS) // MS, (b - BASE_NS) // MS) for a, b in store.kept()[:2].T.tolist()
            ]
            assert live <= set(kept_now)  # nothing that ends within the horizon is lost
            assert set(kept_now) <= set(model)
            model = [span for span in model if span in set(kept_now)]
        kept = [((a - BASE_NS) // MS, (b - BASE_NS) // MS) for a, b in store.kept()[:2].T.tolist()]
        assert kept == model
