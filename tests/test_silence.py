"""Silence under a job and links below their peers: the rules, their invariants, and the
detectors scored against silent rails and slow links injected into the simulated node."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstscope.detectors.silence import (
    PeerPort,
    SilenceChange,
    SilenceEnded,
    SilenceStarted,
    SilenceWatch,
    below_peers,
)
from burstscope.testing.emulated_node import running_agent, scrape
from burstscope.testing.faults_silence import (
    SilentRail,
    inject_silence,
    node_counters,
    score_below_peers,
    score_silence,
)
from burstscope.testing.processes import wait_until
from burstscope.testing.slurm_jobs import start_job
from tests.test_faults import PORT0, write_counter

S = 1_000_000_000
PORT = ("mlx5_0", 1)
JOB = ("42",)


def run(
    watch: SilenceWatch, steps: Sequence[tuple[int, int | None, tuple[str, ...]]]
) -> list[SilenceChange]:
    changes: list[SilenceChange] = []
    for second, total, jobs in steps:
        changes += [change for _, change in watch.update(second * S, {PORT: (total, jobs)})]
    return changes


def test_a_port_that_served_the_job_and_stops_is_silent_after_the_threshold_once() -> None:
    watch = SilenceWatch(10 * S)
    steps = [(0, 0, JOB), (1, 100, JOB)] + [(t, 100, JOB) for t in range(2, 30)]
    changes = run(watch, steps)
    assert changes == [SilenceStarted(1 * S, JOB)]  # at second 11, once
    assert watch.states() == {PORT: 1 * S}
    # Traffic again ends it, with how long it lasted.
    assert run(watch, [(31, 150, JOB)]) == [SilenceEnded(30.0, "traffic")]
    assert watch.states() == {PORT: None}


def test_no_job_no_traffic_under_the_job_or_a_new_job_is_not_silence() -> None:
    idle = SilenceWatch(5 * S)
    assert run(idle, [(0, 0, ()), (1, 10, ())] + [(t, 10, ()) for t in range(2, 20)]) == []
    assert idle.states() == {}  # nobody's port: the question does not apply
    unused = SilenceWatch(5 * S)  # a rail the job never used
    assert run(unused, [(t, 7, JOB) for t in range(20)]) == []
    assert unused.states() == {}
    switched = SilenceWatch(5 * S)
    steps = [(0, 0, JOB), (1, 9, JOB)] + [(t, 9, JOB) for t in range(2, 8)]
    assert run(switched, steps) == [SilenceStarted(1 * S, JOB)]
    # The job ends: the silence ends with it, and the next job starts from scratch.
    assert run(switched, [(8, 9, ("43",))]) == [SilenceEnded(7.0, "jobs_changed")]
    assert run(switched, [(t, 9, ("43",)) for t in range(9, 30)]) == []


def test_a_counter_reset_or_an_unread_counter_is_not_traffic() -> None:
    watch = SilenceWatch(5 * S)
    steps = [(0, None, JOB), (1, 50, JOB), (2, 60, JOB), (3, 5, JOB)]
    steps += [(t, 5, JOB) for t in range(4, 9)]
    # Last moved at 2 s (the reset at 3 s is a new baseline): silent from 7 s.
    assert run(watch, steps) == [SilenceStarted(2 * S, JOB)]
    with pytest.raises(ValueError, match="above 0"):
        SilenceWatch(0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from([(), ("1",), ("2",)])),
        min_size=1,
        max_size=80,
    ),
    st.integers(1, 12),
)
def test_starts_and_ends_alternate_and_only_under_a_job(
    moves: list[tuple[int, tuple[str, ...]]], threshold_s: int
) -> None:
    """Whatever the traffic and jobs: per port a start is followed by an end before the next
    start, a start names the jobs holding the port then, and no start is sooner than the
    threshold after the last byte."""
    watch = SilenceWatch(threshold_s * S)
    total, last_moved, silent = 0, None, False
    for second, (step, jobs) in enumerate(moves):
        total += step
        for _, change in watch.update(second * S, {PORT: (total, jobs)}):
            if isinstance(change, SilenceStarted):
                assert not silent and jobs and change.jobs == jobs
                assert second * S - change.silent_since_ns >= threshold_s * S
                silent = True
            else:
                assert silent
                silent = False
        if step:
            last_moved = second
    assert last_moved is None or (watch.states().get(PORT) is not None) == silent


def test_below_peers_compares_ports_of_one_model_and_link_layer() -> None:
    g400, g200 = 50_000_000_000, 25_000_000_000
    ports = [PeerPort(("mlx5_0", 1), "MT4129", "InfiniBand", g400)]
    ports += [PeerPort((f"mlx5_{n}", 1), "MT4129", "InfiniBand", g400) for n in (1, 2)]
    ports += [PeerPort(("mlx5_3", 1), "MT4129", "InfiniBand", g200)]
    # Another model (a storage NIC) and an unknown rate are nobody's peers.
    ports += [PeerPort(("mlx5_8", 1), "MT4125", "Ethernet", g200)]
    ports += [PeerPort(("mlx5_9", 1), "MT4129", "InfiniBand", 0)]
    assert below_peers(ports) == {
        ("mlx5_0", 1): 0,
        ("mlx5_1", 1): 0,
        ("mlx5_2", 1): 0,
        ("mlx5_3", 1): g400,
    }
    assert below_peers(ports[:1]) == {}  # a port alone has no peers


def test_injected_silent_rails_are_found_at_the_threshold_and_nothing_else() -> None:
    """The simulated MoE node for 30 minutes, rails 2 and 7 dead at minutes 5 and 12: both
    found 10 minutes after their last byte, no other rail reported (the clean run of the same
    half hour reports nothing)."""
    counters = node_counters(seed=3, seconds=1800)
    assert score_silence(counters, [], 600).false_alarms == 0
    faults = [SilentRail(2, 300), SilentRail(7, 720)]
    score = score_silence(inject_silence(counters, faults), faults, 600)
    assert (score.recall, score.precision) == (1.0, 1.0)
    assert score.delays_s == (600.0, 600.0)


def test_injected_slow_links_are_found_down_to_the_mildest_step() -> None:
    """Eight 400 Gb/s rails; one trained at 200 (2X width or HDR speed), one at 300 Gb/s: both
    flagged, no healthy rail flagged; a rail 1% slow is found too (any rate below its peers')."""
    rates = [50_000_000_000] * 8
    score = score_below_peers(rates, {3: 0.5, 5: 0.75})
    assert (score.found, score.false_alarms) == (2, 0)
    assert score_below_peers(rates, {1: 0.99}).smallest_fraction_found == 0.99
    assert score_below_peers(rates, {}).false_alarms == 0


def test_the_agent_reports_a_port_gone_silent_under_its_job_and_its_return(
    tmp_path: Path, sysfs_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The real agent on a writable fixture tree with a Slurm job holding the node and
    [jobs] silence = "2s": the port that moved under the job and then stopped is silent
    (metric 1 and one log line), the ports that never moved are not asked about (absent),
    and its next bytes end the silence (0)."""
    caplog.set_level(logging.INFO, logger="burstscope.collector.pipeline")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    config = tmp_path / "agent.toml"
    config.write_text('[jobs]\nsilence = "2s"\n')
    counter = sysfs_copy / PORT0 / "counters" / "port_xmit_data"
    series = 'burstscope_port_silent_under_job{device="mlx5_0",port="1"}'
    with running_agent(sysfs_copy, "--slurm-jobs-dir", str(jobs), "--config", str(config)) as (
        _,
        url,
    ):
        start_job(jobs, 42)
        assert wait_until(lambda: "burstscope_job_info{" in scrape(url))
        base = int(counter.read_text())
        moved = [0]

        def traffic() -> bool:
            moved[0] += 1000
            write_counter(counter, f"{base + moved[0]}\n")
            return f"{series} 0.0" in scrape(url)

        # The job's traffic until the agent has seen the port carry it, then nothing.
        assert wait_until(traffic)
        assert wait_until(lambda: f"{series} 1.0" in scrape(url))
        body = scrape(url)
        assert body.count("burstscope_port_silent_under_job{") == 1  # only the port that moved
        write_counter(counter, f"{base + moved[0] + 1000}\n")
        assert wait_until(lambda: f"{series} 0.0" in scrape(url))
    said = [r.getMessage() for r in caplog.records if r.name == "burstscope.collector.pipeline"]
    # Once each way; the seconds depend on when the drains fell (2 s and up).
    lines = [re.sub(r"after \d+ s|for \d+ s", "N s", m) for m in said if "silen" in m]
    assert lines == [
        "mlx5_0 port 1: silent N s under job 42, which it carried traffic for: a hung job "
        "or a dead path (burstscope_port_silent_under_job)",
        "mlx5_0 port 1: silence over N s (traffic)",
    ]


def test_link_events_say_when_a_port_goes_silent_comes_back_or_falls_below_its_peers() -> None:
    from burstscope.collector.mqtt.messages import Identity, link_event_payload
    from burstscope.detectors.link_events import (
        BelowPeers,
        LinkEventDeriver,
        PortReading,
        Silent,
    )
    from burstscope.detectors.link_events import (
        SilenceEnded as Ended,
    )

    deriver = LinkEventDeriver()
    g400, g200 = 50_000_000_000, 25_000_000_000
    steps = [
        PortReading(rate_bytes_per_second=g400, below_peers_rate=0),
        PortReading(rate_bytes_per_second=g400, silent_since_ns=5 * S),
        PortReading(rate_bytes_per_second=g400, silent_since_ns=5 * S),  # still: no event
        PortReading(rate_bytes_per_second=g200, below_peers_rate=g400),
    ]
    changes = [
        [event.change for event in deriver.update({PORT: reading}, (10 + n) * S)]
        for n, reading in enumerate(steps)
    ]
    assert changes[0] == [] and changes[2] == []
    assert changes[1] == [Silent(5 * S)]
    assert Ended(8.0) in changes[3] and BelowPeers(g200, g400) in changes[3]
    identity = Identity("node1", 7, "1.0", 0.0, (PORT,), 0.5)
    events = deriver.update({PORT: steps[-1]}, 20 * S)
    assert events == []  # below its peers still: said once
    payloads = [
        link_event_payload(identity, event)
        for event in LinkEventDeriver().update({PORT: steps[0]}, 0)
        + LinkEventDeriver(previous={PORT: steps[0]}).update({PORT: steps[1]}, S)
    ]
    assert [p["kind"] for p in payloads] == ["silent"]
    assert payloads[0]["silent_since_ns"] == 5 * S
