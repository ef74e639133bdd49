"""detectors.stragglers against stragglers injected into a simulated job (2-20 ms late in
known steps), and a clean job that must call none. bench/culprits.py scores 24 nodes over
an hour through the same functions."""

from __future__ import annotations

from burstscope.collector.simulation.stragglers import JobGroup, Straggler
from burstscope.testing.faults_stragglers import (
    hosts,
    score_slow_rails,
    score_stragglers,
    simulate_fleet,
    slow_rail_group,
)

MS = 1_000_000
SECONDS = 20  # six steps of the MoE job
NODES = hosts(4)
# Two late in steps 1 and 4: the (lower) median node is on time in every step.
STRAGGLERS = (
    Straggler(NODES[1], 2 * MS, first_step=0, every=2),
    Straggler(NODES[2], 20 * MS, first_step=1, every=3),
    Straggler(NODES[3], 5 * MS, first_step=1, every=2),
)


def test_injected_stragglers_are_found_in_their_steps_on_their_hosts() -> None:
    fleet = simulate_fleet(JobGroup(NODES, STRAGGLERS, seed=3), SECONDS)
    score = score_stragglers(fleet)
    assert score.iterations == score.judged == 6, score
    assert score.injected == 8 and score.missed == (), score
    assert score.recall >= 0.95 and score.precision >= 0.95, score
    assert score.smallest_found_ns == 2 * MS


def test_a_clean_job_has_no_straggler() -> None:
    fleet = simulate_fleet(JobGroup(NODES, (), seed=3), SECONDS)
    score = score_stragglers(fleet)
    assert score.judged == score.iterations == 6, score
    assert score.false_alarms == 0 and score.injected == 0, score


def test_a_rail_slowed_on_every_node_is_the_steps_slow_rail_and_none_before() -> None:
    # Rail 5 at 0.8 of its rate from the fourth step (10 s) on: the mildest fault the
    # benchmark injects; before it, every step of the same job is clean.
    fleet = simulate_fleet(slow_rail_group(4, 3, 5, 0.8, 10.0), SECONDS)
    score = score_slow_rails(fleet)
    assert score.injected >= 2 and score.found == score.injected, score
    assert score.false_alarms == 0 and score.fractions_found == (0.8,), score
