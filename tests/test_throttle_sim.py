"""The throttle classifier scored against the episodes a simulated node was given, and the
report's causes end to end (JSON, the flag that gives port_xmit_wait's tick)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from burstscope.collector.simulation.congestion import (
    CREDIT,
    ECN,
    PFC,
    XMIT_WAIT_TICK_NS,
    episode_counters,
    place_episodes,
)
from burstscope.testing.faults_throttle import DURATIONS_NS, score_node

REPO = Path(__file__).resolve().parent.parent
S = 1_000_000_000


def test_episodes_are_placed_by_seed_and_counted_as_mlx5_would() -> None:
    first = place_episodes(7, (S, 2 * S), (0, 1), 60 * S)
    assert first == place_episodes(7, (S, 2 * S), (0, 1), 60 * S)
    assert first != place_episodes(8, (S, 2 * S), (0, 1), 60 * S)
    # Transmit: three causes, receive two (no credit wait on the receive side).
    assert len(first) == 2 * (3 + 2) * 2
    for episode in first:
        same = [e for e in first if (e.port, e.direction) == (episode.port, episode.direction)]
        assert all(
            e is episode or e.end_ns <= episode.start_ns or e.start_ns >= episode.end_ns
            for e in same
        )
    pfc = next(e for e in first if e.cause == PFC and e.direction == "transmit")
    after = episode_counters((pfc,), pfc.port, pfc.end_ns)
    paused_ns = pfc.duration_ns * pfc.intensity
    # Paused by its peer: rx_ pause time in microseconds, and the held data's xmit_wait.
    assert abs(after["rx_prio3_pause_duration"] - paused_ns / 1_000) <= 1
    assert abs(after["port_xmit_wait"] - paused_ns / XMIT_WAIT_TICK_NS) <= 1
    assert after["tx_prio3_pause_duration"] == 0 and after["rp_cnp_handled"] == 0
    before = episode_counters((pfc,), pfc.port, pfc.start_ns)
    assert set(before.values()) == {0}


def test_classifier_finds_each_injected_cause(tmp_path: Path) -> None:
    scores = score_node(tmp_path / "trace", seed=3)
    table = {
        cause: (s.precision, s.recall, s.smallest_found_seconds) for cause, s in scores.items()
    }
    print(
        "throttle causes, episodes of "
        + ", ".join(f"{d / S:g}" for d in DURATIONS_NS)
        + " s (precision, recall scored from 0.5 s; smallest found):",
        table,
    )
    for cause in (PFC, ECN, CREDIT):
        score = scores[cause]
        assert score.truth_seconds > 50, score
        assert score.precision is not None and score.precision >= 0.95, score
        assert score.recall is not None and score.recall >= 0.95, score
        assert score.smallest_found_seconds is not None
        assert score.smallest_found_seconds <= 0.5, score
    clean = scores["clean"]
    assert clean.precision is not None and clean.precision >= 0.95, clean


def test_report_json_gives_each_direction_its_causes() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "report", "tests/fixtures/report/trace", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    ports = {
        (p["device"], p["direction"]): p["throttle"] for p in json.loads(result.stdout)["ports"]
    }
    # mlx5_0 transmit: port_xmit_wait rises 1000 a poll, rp_cnp_handled only 5 (under the
    # 100 a second that ECN needs): credit-starved by presence, every saturated second.
    assert ports[("mlx5_0", "transmit")] == {
        "seconds": 30,
        "causes": {
            "pfc": {"seconds": 0, "share": 0.0},
            "ecn": {"seconds": 0, "share": 0.0},
            "credit": {"seconds": 30, "share": 1.0},
            "clean": {"seconds": 0, "share": 0.0},
        },
        "credit_judged_by": "presence",
    }
    # mlx5_1 transmit: no congestion counter recorded, so nothing to judge by.
    assert ports[("mlx5_1", "transmit")] is None


def test_xmit_wait_tick_must_be_a_positive_number() -> None:
    for bad in ("0", "-3", "nan", "inf"):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "burstscope",
                "report",
                "tests/fixtures/report/trace",
                "--xmit-wait-tick",
                bad,
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert "--xmit-wait-tick" in result.stderr


def _simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "burstscope", "simulate", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def test_simulate_injects_episodes_and_writes_their_truth(tmp_path: Path) -> None:
    trace = tmp_path / "node"
    result = _simulate("--duration", "65", "--seed", "2", "-o", str(trace), "--throttle-episodes")
    assert result.returncode == 0, result.stderr
    lines = [
        json.loads(line) for line in (trace / "_throttle_episodes.jsonl").read_text().splitlines()
    ]
    expected = place_episodes(2, (S // 2, S, 2 * S, 5 * S), tuple(range(8)), 65 * S)
    assert [(r["device"], r["direction"], r["cause"], r["duration_ns"]) for r in lines] == [
        (f"mlx5_{e.port}", e.direction, e.cause, e.duration_ns) for e in expected
    ]
    assert lines[0]["start_ns"] == expected[0].start_ns + 1_704_067_200 * S
    # Too short to hold them, or a live tree: one line, status 2, nothing written.
    for bad in (
        ["--duration", "30", "-o", str(tmp_path / "short"), "--throttle-episodes"],
        ["--sysfs", str(tmp_path / "tree"), "--throttle-episodes"],
    ):
        result = _simulate(*bad)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "--throttle-episodes" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "short").exists() and not (tmp_path / "tree").exists()
