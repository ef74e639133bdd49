"""End to end on real kernel counters: RoCEv2 bursts through a tbf-shaped veth, recorded at 1 ms.

Two namespaces, a veth shaped to 1 Gb/s, the generator sending its seeded on/off schedule
and ``burstscope record --source netdev:vtx`` sampling the sender's veth at 1 ms, both
inside the sending namespace. The detectors must find every burst of the ground truth.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from collector import testbed as bed_module
from collector.testbed import RECEIVER_ADDRESS, SENDER_ADDRESS, SENDER_INTERFACE
from collector.trace import read_samples
from detectors.analyzer import Summary, analyze
from detectors.bursts import Bursts
from tests.conftest import integration_unavailable, require_binary, require_root

pytestmark = pytest.mark.integration

RATE_MEGABITS = 1000
# 16 s of traffic: longer than one 15 s scrape, short enough for the < 60 s budget.
GENERATOR_SECONDS = 16.0
LEAD_SECONDS = 1.0  # the recorder is sampling before the first packet


@dataclass(frozen=True)
class Run:
    truth: dict[str, Any]
    summary: Summary
    bursts: Bursts
    timestamp_ns: npt.NDArray[np.int64]
    xmit_bytes: npt.NDArray[np.uint64]
    qdisc: dict[str, int]


@pytest.fixture(scope="module")
def testbed_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    require_root()
    require_binary("ip")
    require_binary("tc")
    bed = bed_module.Testbed(rate_megabits=RATE_MEGABITS, burst_bytes=32 * 1024)
    # The finalizer is registered before anything is built, so a failure half-way
    # through still deletes whatever namespaces exist.
    request.addfinalizer(bed.down)
    try:
        bed.up()
    except bed_module.TestbedError as exc:
        integration_unavailable(f"cannot build the namespace testbed: {exc}")
    work = tmp_path_factory.mktemp("testbed")
    trace = work / "trace"
    truth_file = work / "truth.json"
    recorder = subprocess.Popen(
        [
            *bed.exec_prefix(),
            *(sys.executable, "-m", "burstscope.cli", "record"),
            *("--source", f"netdev:{SENDER_INTERFACE}", "--line-rate", str(RATE_MEGABITS / 1000)),
            *("--duration", str(GENERATOR_SECONDS + 2 * LEAD_SECONDS), "-o", str(trace)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    request.addfinalizer(lambda: recorder.kill() if recorder.poll() is None else None)
    time.sleep(LEAD_SECONDS)
    generator = subprocess.run(
        [
            *bed.exec_prefix(),
            *(sys.executable, "-m", "collector.rocegen", "--seed", "6"),
            *("--source", SENDER_ADDRESS, "--destination", RECEIVER_ADDRESS),
            *("--line-rate", str(RATE_MEGABITS), "--duration", str(GENERATOR_SECONDS)),
            *("--truth", str(truth_file)),
        ],
        capture_output=True,
        text=True,
        timeout=GENERATOR_SECONDS + 20,
    )
    assert generator.returncode == 0, generator.stderr
    _, recorded = recorder.communicate(timeout=30)
    assert recorder.returncode == 0, recorded
    qdisc = bed.qdisc_stats()
    bed.down()

    stamps, xmit = [], []
    for samples in read_samples(trace):
        assert samples.device == SENDER_INTERFACE
        stamps.append(samples.timestamp_ns)
        xmit.append(samples.xmit_bytes)
    timestamp_ns = np.concatenate(stamps)
    xmit_bytes = np.concatenate(xmit)
    truth = json.loads(truth_file.read_text())
    summary, bursts = analyze(timestamp_ns, xmit_bytes, truth["line_rate_bytes_per_second"])
    return Run(truth, summary, bursts, timestamp_ns, xmit_bytes, qdisc)


def _bytes_between(run: Run, start_ns: int, end_ns: int) -> float:
    cumulative = run.xmit_bytes.astype(np.float64)
    values = np.interp([start_ns, end_ns], run.timestamp_ns.astype(np.float64), cumulative)
    return float(values[1] - values[0])


def test_the_shaper_never_dropped(testbed_run: Run) -> None:
    # Drops would make the ground truth (bytes handed to the socket) overstate the wire.
    assert testbed_run.qdisc["drops"] == 0
    assert testbed_run.qdisc["bytes"] >= testbed_run.truth["bytes_total"]


def test_generator_reaches_line_rate(testbed_run: Run) -> None:
    share = testbed_run.truth["achieved_share"]
    assert share is not None and share >= 0.95, share


# On a shared VM the host sometimes takes a vCPU away for ~15 ms (steal time). When that
# hits the sampler, the sample around it spans the pause and the counters cannot place
# the bytes at 1 ms; when it hits the CPU running tbf's dequeue, the wire itself pauses
# mid-burst and the detectors rightly see two bursts. Both are counted, bounded, and the
# rest must meet the tolerances exactly.
SAMPLER_GAP_NS = 3_000_000
MAX_DISTURBED_SHARE = 0.1
# Seen here: pauses of 3 to 7 ms under a loaded CI run; a host can steal ~15 ms.
MAX_WIRE_PAUSE_NS = 20_000_000


def test_every_burst_found_on_time(testbed_run: Run) -> None:
    truth = testbed_run.truth["bursts"]
    found = testbed_run.bursts
    steps = np.diff(testbed_run.timestamp_ns)
    gap_end = testbed_run.timestamp_ns[1:][steps > SAMPLER_GAP_NS]
    gap_start = gap_end - steps[steps > SAMPLER_GAP_NS]
    assert len(truth) >= 20
    matched: set[int] = set()
    problems, disturbed = [], []
    start_errors, duration_errors, peaks = [], [], []
    for burst in truth:
        start, end = burst["start_ns"], burst["end_ns"]
        overlapping = np.flatnonzero((found.start_ns < end) & (found.end_ns > start))
        matched.update(int(i) for i in overlapping)
        if bool(((gap_start < end + 2_000_000) & (gap_end > start - 2_000_000)).any()):
            disturbed.append(f"burst at {start}: the sampler paused")
            continue
        if overlapping.size == 0:
            problems.append(f"burst at {start}: not found")
            continue
        first, last = int(overlapping[0]), int(overlapping[-1])
        if overlapping.size > 1:
            pauses = found.start_ns[overlapping[1:]] - found.end_ns[overlapping[:-1]]
            if int(pauses.max()) > MAX_WIRE_PAUSE_NS:
                problems.append(f"burst at {start}: split by {int(pauses.max()) / 1e6:.1f} ms")
                continue
            disturbed.append(f"burst at {start}: the wire paused {int(pauses.max()) / 1e6} ms")
        start_error_ms = (int(found.start_ns[first]) - start) / 1e6
        duration_ms = (end - start) / 1e6
        found_ms = (int(found.end_ns[last]) - int(found.start_ns[first])) / 1e6
        allowed_ms = max(0.2 * duration_ms, 3.0)
        peak = float(found.peak_utilization[first : last + 1].max())
        start_errors.append(abs(start_error_ms))
        duration_errors.append(abs(found_ms - duration_ms))
        peaks.append(peak)
        if abs(start_error_ms) > 3.0:
            problems.append(f"burst at {start}: start off by {start_error_ms:.2f} ms")
        if abs(found_ms - duration_ms) > allowed_ms:
            problems.append(f"burst at {start}: {found_ms:.2f} ms found, {duration_ms:.2f} sent")
        if peak < 0.85:
            problems.append(f"burst at {start}: peak {peak:.3f}")
    # The figures, for `pytest -s` and the README.
    print(
        f"\ntestbed: {len(truth)} bursts, {len(disturbed)} disturbed; |start error| max "
        f"{max(start_errors):.2f} ms mean {np.mean(start_errors):.2f} ms; |duration error| "
        f"max {max(duration_errors):.2f} ms; peak min {min(peaks):.3f}; generator "
        f"{testbed_run.truth['achieved_share']:.3f} of line rate"
    )
    assert not problems, problems
    assert len(disturbed) <= MAX_DISTURBED_SHARE * len(truth), disturbed
    # Nothing else above the burst threshold: the background stays far below it.
    assert matched == set(range(len(found)))


def test_mean_matches_the_schedule(testbed_run: Run) -> None:
    # Compared over the generator's whole run (16 s, longer than one 15 s scrape; the
    # wall-clock-aligned 15 s windows of the detectors only partly overlap it).
    truth = testbed_run.truth
    seconds = (truth["end_ns"] - truth["start_ns"]) / 1e9
    expected = truth["bytes_total"] / seconds / truth["line_rate_bytes_per_second"]
    counted = _bytes_between(testbed_run, truth["start_ns"], truth["end_ns"])
    measured = counted / seconds / truth["line_rate_bytes_per_second"]
    assert abs(measured - expected) <= 0.02 * expected, (measured, expected)


def test_contrast_low_coarse_mean_and_line_rate_millisecond_peak(testbed_run: Run) -> None:
    summary = testbed_run.summary
    coarse = summary.coarse
    assert coarse.maximum is not None and coarse.maximum < summary.thresholds.busy
    assert summary.finest.maximum is not None and summary.finest.maximum >= 0.95
    ratio = summary.peak_to_mean_ratio
    assert ratio is not None and ratio > 4
    assert summary.saturated_ns_in_quiet_windows > 0
