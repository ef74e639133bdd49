"""--source replay: a recorded trace through the real sampler shows the same traffic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from burstscope.collector.trace import read_slow
from tests.test_cli_core import assert_usage_error, burstscope


def test_replay_reproduces_means_and_peaks(tmp_path: Path) -> None:
    original = tmp_path / "original"
    replayed = tmp_path / "replayed"
    assert (
        burstscope(
            "simulate", "--profile", "moe", "--duration", "4", "-o", str(original)
        ).returncode
        == 0
    )
    result = burstscope(
        "record", "--source", f"replay:{original}", "--duration", "3.5", "-o", str(replayed)
    )
    assert result.returncode == 0, result.stderr
    first = json.loads(burstscope("report", "--json", str(original)).stdout)["ports"]
    second = json.loads(burstscope("report", "--json", str(replayed)).stdout)["ports"]
    assert [(p["device"], p["direction"]) for p in first] == [
        (p["device"], p["direction"]) for p in second
    ]
    for a, b in zip(first, second, strict=True):
        assert a["line_rate_bytes_per_second"] == b["line_rate_bytes_per_second"]
        # 3.5 s of the 4 s recording: the means agree closely, the peaks exactly.
        assert b["mean_utilization"] == pytest.approx(a["mean_utilization"], abs=0.06)
        if a["bursts"]["count"] > 20:  # the training rails; the storage port bursts rarely
            assert b["scales"]["0.001"]["max"] == pytest.approx(
                a["scales"]["0.001"]["max"], abs=0.05
            )
            assert b["bursts"]["count"] >= 0.7 * a["bursts"]["count"]
    # The slow counters recorded with the trace are played back with it: the replay's
    # recording holds the original's readings (steps at 1 Hz), rising as they did.
    original_slow = {(s.device, s.name): s for s in read_slow(original)}
    replayed_slow = {(s.device, s.name): s for s in read_slow(replayed)}
    assert set(replayed_slow) == set(original_slow)
    wait, played = (
        original_slow[("mlx5_0", "port_xmit_wait")],
        replayed_slow[("mlx5_0", "port_xmit_wait")],
    )
    assert set(played.value.tolist()) <= set(wait.value.tolist())
    assert int(played.value[-1]) > int(played.value[0])
    rail = next(p for p in second if (p["device"], p["direction"]) == ("mlx5_0", "transmit"))
    assert rail["congestion"]["port_xmit_wait"]["share"] > 0.9


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("replay:", "replay needs a trace"),
        ("replay:/nonexistent/trace", "no such file or directory"),
        ("replay:{notrace}", "replay:"),
    ],
)
def test_replay_of_something_that_is_not_a_trace(spec: str, fragment: str, tmp_path: Path) -> None:
    notrace = tmp_path / "notes.txt"
    notrace.write_text("hello\n")
    result = burstscope(
        "record", "--source", spec.replace("{notrace}", str(notrace)), "-o", str(tmp_path / "out")
    )
    assert_usage_error(result, fragment)
