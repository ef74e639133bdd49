"""End to end on real kernel counters: RoCEv2 bursts through a tbf-shaped veth, recorded at 1 ms.

Two namespaces, a veth shaped to 1 Gb/s, the generator sending its seeded on/off schedule
and ``burstscope record --source netdev:vtx`` sampling the sender's veth at 1 ms, both
inside the sending namespace. The detectors must find every burst of the ground truth.

On a busy machine the run is disturbed: the host steals vCPUs, the sampler misses ticks,
the generator is descheduled long enough for the wire to idle mid-burst. The run measures
each of these itself (the trace's sampling gaps, VM steal time from /proc/stat, the
generator's starved time) and judges only the bursts none of them touched; it fails when
the product is wrong, or when too few bursts were left to judge.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from burstscope.collector.trace import read_samples
from burstscope.detectors.analyzer import Summary, analyze
from burstscope.detectors.bursts import Bursts
from burstscope.testing import testbed as bed_module
from burstscope.testing.processes import LoggedProcess, wait_until
from burstscope.testing.testbed import RECEIVER_ADDRESS, SENDER_ADDRESS, SENDER_INTERFACE
from tests.conftest import integration_unavailable, require_binary, require_root

pytestmark = pytest.mark.integration

RATE_MEGABITS = 1000
# 16 s of traffic: longer than one 15 s scrape, short enough for the < 60 s budget.
GENERATOR_SECONDS = 16.0
TAIL_NS = 300_000_000  # the recorder keeps sampling this long after the generator ends


@dataclass(frozen=True)
class Run:
    truth: dict[str, Any]
    summary: Summary
    bursts: Bursts
    timestamp_ns: npt.NDArray[np.int64]
    xmit_bytes: npt.NDArray[np.uint64]
    qdisc: dict[str, int]
    steal: StealClock


class StealClock:
    """VM steal time of the whole machine, read from /proc/stat every 10 ms during the run.

    The kernel accounts steal in USER_HZ ticks (10 ms), so a reading says only that some
    was stolen since the previous one: a burst is disturbed if steal rose in any reading
    interval that overlaps it.
    """

    PERIOD_SECONDS = 0.01

    def __init__(self) -> None:
        self.wall_ns: list[int] = []
        self.steal_ticks: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def read() -> int:
        with open("/proc/stat") as stat:
            # cpu  user nice system idle iowait irq softirq steal ... (proc(5))
            return int(stat.readline().split()[8])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.wall_ns.append(time.time_ns())
            self.steal_ticks.append(self.read())
            self._stop.wait(self.PERIOD_SECONDS)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def stolen_between(self, start_ns: int, end_ns: int) -> bool:
        stamps = np.asarray(self.wall_ns, dtype=np.int64)
        ticks = np.asarray(self.steal_ticks, dtype=np.int64)
        rose = np.flatnonzero(np.diff(ticks) > 0)
        # Interval i runs from reading i to reading i + 1.
        return bool(((stamps[rose] < end_ns) & (stamps[rose + 1] > start_ns)).any())


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
    steal = StealClock()
    steal.start()
    request.addfinalizer(steal.stop)
    recorder = LoggedProcess(
        [
            *bed.exec_prefix(),
            *(sys.executable, "-m", "burstscope.cli", "record"),
            *("--source", f"netdev:{SENDER_INTERFACE}", "--line-rate", str(RATE_MEGABITS / 1000)),
            *("-o", str(trace)),
        ]
    )
    request.addfinalizer(recorder.kill)
    # The first packet goes out only once the recorder samples, however long it takes to start.
    recorder.wait_log("sampling 1 port(s)")
    generator = LoggedProcess(
        [
            *bed.exec_prefix(),
            *(sys.executable, "-m", "burstscope.testing.rocegen", "--seed", "6"),
            *("--source", SENDER_ADDRESS, "--destination", RECEIVER_ADDRESS),
            *("--line-rate", str(RATE_MEGABITS), "--duration", str(GENERATOR_SECONDS)),
            *("--truth", str(truth_file)),
        ]
    )
    request.addfinalizer(generator.kill)
    assert generator.process.wait(timeout=GENERATOR_SECONDS + 120) == 0, generator.stderr
    truth = json.loads(truth_file.read_text())
    assert wait_until(lambda: time.time_ns() > truth["end_ns"] + TAIL_NS)
    assert recorder.stop() == 0, recorder.stderr
    steal.stop()
    qdisc = bed.qdisc_stats()
    bed.down()

    stamps, xmit = [], []
    for samples in read_samples(trace):
        assert samples.device == SENDER_INTERFACE
        stamps.append(samples.timestamp_ns)
        xmit.append(samples.xmit_bytes)
    timestamp_ns = np.concatenate(stamps)
    xmit_bytes = np.concatenate(xmit)
    summary, bursts = analyze(timestamp_ns, xmit_bytes, truth["line_rate_bytes_per_second"])
    return Run(truth, summary, bursts, timestamp_ns, xmit_bytes, qdisc, steal)


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


# What disturbs a burst, measured in the run: a sampling step this long around it (the
# sample spanning the pause cannot place the bytes at 1 ms), steal time overlapping it,
# or the generator away long enough for the wire to idle (its ``starved_ns``). A burst the
# detectors split is disturbed when the pieces are this close (tbf's dequeue lost its CPU
# for a moment; seen here: 3 to 7 ms under load), and a failure beyond.
SAMPLER_GAP_NS = 3_000_000
MARGIN_NS = 2_000_000
MAX_WIRE_PAUSE_NS = 20_000_000
# However busy the machine, this many bursts must be left to judge, or the run proved nothing.
MIN_JUDGED = 8


def disturbance(run: Run, burst: dict[str, int]) -> str | None:
    """Why the machine, not the product, decides this burst's figures; None if undisturbed."""
    start, end = burst["start_ns"] - MARGIN_NS, burst["end_ns"] + MARGIN_NS
    steps = np.diff(run.timestamp_ns)
    gap_end = run.timestamp_ns[1:][steps > SAMPLER_GAP_NS]
    gap_start = gap_end - steps[steps > SAMPLER_GAP_NS]
    if bool(((gap_start < end) & (gap_end > start)).any()):
        return "the sampler paused"
    if burst.get("starved_ns", 0) > 0:
        return f"the generator was away {burst['starved_ns'] / 1e6:.1f} ms, the wire idled"
    if run.steal.stolen_between(start, end):
        return "the host stole CPU time"
    return None


def test_every_burst_found_on_time(testbed_run: Run) -> None:
    truth = testbed_run.truth["bursts"]
    found = testbed_run.bursts
    assert len(truth) >= 20
    matched: set[int] = set()
    problems, disturbed = [], []
    disturbed_spans: list[tuple[int, int]] = []
    start_errors, duration_errors, peaks = [], [], []
    for burst in truth:
        start, end = burst["start_ns"], burst["end_ns"]
        overlapping = np.flatnonzero((found.start_ns < end) & (found.end_ns > start))
        matched.update(int(i) for i in overlapping)
        reason = disturbance(testbed_run, burst)
        if reason is not None:
            disturbed.append(f"burst at {start}: {reason}")
            disturbed_spans.append((start, end))
            continue
        if overlapping.size == 0:
            problems.append(f"burst at {start}: not found")
            continue
        first, last = int(overlapping[0]), int(overlapping[-1])
        if overlapping.size > 1:
            pauses = found.start_ns[overlapping[1:]] - found.end_ns[overlapping[:-1]]
            if int(pauses.max()) > MAX_WIRE_PAUSE_NS:
                problems.append(
                    f"burst at {start}: split by {int(pauses.max()) / 1e6:.1f} ms; "
                    f"{_around(testbed_run, start, end)}"
                )
                continue
            disturbed.append(f"burst at {start}: the wire paused {int(pauses.max()) / 1e6} ms")
            disturbed_spans.append((start, end))
            continue
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
    judged = len(truth) - len(disturbed)
    # The figures, for `pytest -s` and the README.
    print(
        f"\ntestbed: {len(truth)} bursts, {judged} judged, {len(disturbed)} disturbed "
        f"({_reasons(disturbed)}); |start error| max {max(start_errors, default=0):.2f} ms "
        f"mean {np.mean(start_errors) if start_errors else 0:.2f} ms; |duration error| max "
        f"{max(duration_errors, default=0):.2f} ms; peak min {min(peaks, default=0):.3f}; "
        f"generator {testbed_run.truth['achieved_share']:.3f} of line rate"
    )
    assert not problems, problems
    assert judged >= MIN_JUDGED, f"only {judged} undisturbed bursts to judge: {disturbed}"
    # Nothing else above the burst threshold: the background stays far below it. A burst
    # found beside a disturbed one (its tail, placed late by a paused sampler) is part of
    # that disturbance; anywhere else it is a false burst.
    false_bursts = [
        int(found.start_ns[i])
        for i in sorted(set(range(len(found))) - matched)
        if not any(
            int(found.start_ns[i]) < end + MAX_WIRE_PAUSE_NS
            and int(found.end_ns[i]) > start - MAX_WIRE_PAUSE_NS
            for start, end in disturbed_spans
        )
    ]
    assert not false_bursts, (
        f"bursts found where none was sent: {_explain(testbed_run, false_bursts)}"
    )


def _reasons(disturbed: list[str]) -> str:
    counts: dict[str, int] = {}
    for line in disturbed:
        reason = line.split(": ", 1)[1].split(" ")[1]  # sampler, generator, host, wire
        counts[reason] = counts.get(reason, 0) + 1
    return ", ".join(f"{count} {reason}" for reason, count in sorted(counts.items())) or "none"


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
    assert summary.hidden_saturated_ns > 0


def _explain(run: Run, starts: list[int]) -> list[str]:
    """Each false burst with what was around it, for the failure message."""
    truth = run.truth["bursts"]
    found = run.bursts
    lines = []
    for start in starts:
        i = int(np.flatnonzero(found.start_ns == start)[0])
        end = int(found.end_ns[i])
        nearest = min(truth, key=lambda b: min(abs(b["start_ns"] - end), abs(b["end_ns"] - start)))
        near = np.flatnonzero(
            (run.timestamp_ns > start - 5_000_000) & (run.timestamp_ns < end + 5_000_000)
        )
        steps = np.diff(run.timestamp_ns[near]).tolist()
        lines.append(
            f"{(end - start) / 1e6:.2f} ms at {start}, "
            f"peak {float(found.peak_utilization[i]):.2f}; "
            f"nearest sent burst {nearest['start_ns']}..{nearest['end_ns']} "
            f"(starved {nearest.get('starved_ns', 0)}); sample steps around: {steps}"
        )
    return lines


def _around(run: Run, start: int, end: int) -> str:
    """Sample steps (us) and bytes per sample across a sent burst, for a failure message."""
    near = np.flatnonzero(
        (run.timestamp_ns > start - 3_000_000) & (run.timestamp_ns < end + 3_000_000)
    )
    steps = (np.diff(run.timestamp_ns[near]) // 1000).tolist()
    sent = np.diff(run.xmit_bytes[near].astype(np.int64)).tolist()
    return f"steps us {steps}; bytes {sent}"
