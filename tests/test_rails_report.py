"""The report's rails side by side: a simulated node with a slow rail, its job table naming
the storage NIC, through ``analyze_paths`` to the text and the JSON."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from burstscope.collector.simulation.model import TrafficModel
from burstscope.collector.simulation.profiles import SECOND, SLOW_RAIL, RailFault
from burstscope.collector.trace import TraceInfo, TraceWriter
from burstscope.collector.tracegen import (
    FIXED_EPOCH_NS,
    NodeTiming,
    SimulatedScheduler,
    simulate_trace,
)
from burstscope.detectors.config import Thresholds
from burstscope.detectors.rails import SLOW
from burstscope.report_model import Report, analyze_paths
from burstscope.report_view import print_table, to_json

FAULT_AT_S = 8


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """40 s of the MoE node whose rail mlx5_3 runs at half its rate from 8 s on."""
    path = tmp_path_factory.mktemp("rails") / "trace"
    path.mkdir()
    fault = RailFault(3, SLOW_RAIL, 0.5, FAULT_AT_S * SECOND)
    model = TrafficModel("moe", 0, rail_faults=(fault,))
    simulate_trace(
        model,
        TraceWriter(path, info=TraceInfo(1_000_000, "sim:moe", "gpu-node-03", 0)),
        40 * SECOND,
        node=NodeTiming(0),
        scheduler=SimulatedScheduler(path, "gpu-node-03", 0, FIXED_EPOCH_NS),
    )
    return analyze_paths([path], None, False, Thresholds())


def test_the_slow_rail_is_flagged_among_the_compute_rails_not_the_storage_nic(
    report: Report,
) -> None:
    (rails,) = report.rails
    assert rails.rails == tuple(f"mlx5_{i}/1" for i in range(8))  # mlx5_8: storage
    for name, table, findings in rails.directions:
        assert [(f.rail, f.kind) for f in findings] == [(3, SLOW)], name
        # The slowed rail stretches the step from 8 s on: in this one minute no period
        # repeats, and the steps are 1 s windows.
        assert set(table.period_ns.tolist()) == {0}
        first = findings[0].first_step
        assert table.end_ns[first] > FIXED_EPOCH_NS + FAULT_AT_S * SECOND
        assert first >= 1 and table.peak[first:, 3].max() <= 0.55 < table.peak[:first, 3].min()


def test_the_text_marks_the_rail_and_says_why_and_the_json_holds_every_step(
    report: Report,
) -> None:
    out = io.StringIO()
    print_table(report, Console(file=out, width=100))
    text = out.getvalue()
    # The heading names the trace's path, which may wrap the line (a long temporary folder).
    heading = " ".join(text.split())
    assert "rails of " in heading and "40 windows of 1 s (no period repeats)" in heading
    slow_rows = [line for line in text.splitlines() if line.strip().endswith(" slow")]
    assert [row.split()[:2] for row in slow_rows] == [["mlx5_3/1", "tx"], ["mlx5_3/1", "rx"]]
    assert "mlx5_3/1 tx slow in" in text and "peak under 0.85x" in text
    document = json.loads(json.dumps(to_json(report)))
    (node,) = document["rails"]
    steps = len(node["steps"]["start_ns"])
    transmit = node["directions"]["transmit"]
    assert len(transmit["bytes"]) == len(transmit["peak"]) == steps
    assert {len(row) for row in transmit["burst_seconds"]} == {8}
    assert [(f["rail"], f["kind"]) for f in transmit["findings"]] == [("mlx5_3/1", "slow")]
