"""detectors.stragglers against stragglers injected into a simulated job (2-20 ms late in
known steps), and a clean job that must call none. bench/culprits.py scores 24 nodes over
an hour through the same functions."""

from __future__ import annotations

from burstscope.collector.simulation.stragglers import JobGroup, Straggler
from burstscope.testing.faults_stragglers import hosts, score_stragglers, simulate_fleet

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
