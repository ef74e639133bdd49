"""Detectors on hand-built series whose answers are known exactly."""

from __future__ import annotations

import numpy as np
import pytest

from burstscope.detectors.analyzer import DirectionAnalyzer, Summary, analyze
from burstscope.detectors.bursts import Bursts
from burstscope.detectors.config import (
    Thresholds,
    nominal_interval_ns,
    round_interval_ns,
    scale_key,
)
from burstscope.detectors.congestion import congestion_share
from burstscope.detectors.contrast import Finding, contrast
from burstscope.detectors.distributions import (
    duration_quantile,
    utilization_bins,
    utilization_quantile,
)
from burstscope.detectors.synchrony import synchrony

RATE = 1_000_000_000  # bytes per second: 1 ms at line rate is 1e6 bytes
MS = 1_000_000
START = 1_500_000_000_000_000_000  # a multiple of 15 s, so windows start with the trace


def series(utilization: list[float] | np.ndarray, step_ns: int = MS) -> tuple[np.ndarray, ...]:
    """Timestamps and cumulative bytes; utilization[i] is the interval ending at sample i+1."""
    u = np.asarray(utilization, dtype=np.float64)
    stamps = START + np.arange(u.size + 1, dtype=np.int64) * step_ns
    per = np.round(u * RATE * step_ns / 1e9).astype(np.int64)
    counter = np.concatenate(([10**9], 10**9 + np.cumsum(per))).astype(np.uint64)
    return stamps, counter


def one_burst() -> np.ndarray:
    u = np.zeros(30_000)
    u[5000:5040] = 1.0  # intervals (5000 ms, 5040 ms]
    return u


def scale(summary: Summary, key: str) -> object:
    return next(s for s in summary.scales if s.key == key)


def test_one_burst_known_answers() -> None:
    stamps, counter = series(one_burst())
    summary, bursts = analyze(stamps, counter, RATE)
    assert summary.finest_interval_ns == MS
    assert [s.key for s in summary.scales] == ["0.001", "0.01", "0.1", "1", "15"]
    assert bursts == Bursts(
        np.array([START + 5000 * MS]),
        np.array([START + 5040 * MS]),
        np.array([40_000_000]),
        np.array([1.0]),
        np.array([1.0]),
    )
    assert summary.bursts.count == 1
    assert summary.bursts.duration_ns_max == 40 * MS
    assert summary.saturated_ns == 40 * MS
    assert summary.hidden_saturated_ns == 40 * MS
    assert summary.mean_utilization == pytest.approx(40e6 / 30 / RATE)
    assert summary.peak_to_mean_ratio == pytest.approx(750.0)
    finest = summary.finest
    assert (finest.count, finest.maximum, finest.idle, finest.busy) == (30_000, 1.0, 29_960, 40)
    ten = summary.scale(10 * MS)
    assert ten is not None and (ten.count, ten.maximum, ten.busy) == (3000, 1.0, 4)
    coarse = summary.coarse
    assert coarse.count == 2 and coarse.maximum == pytest.approx(40e6 / 15 / RATE)
    assert coarse.idle == 2 and coarse.busy == 0  # 0.27% is below the 1% idle line
    assert summary.resets == summary.gaps == summary.clipped_samples == 0
    seen = contrast(summary)
    assert seen.finding is Finding.HIDDEN_SATURATION
    assert seen.idle_fraction_coarse == 1.0
    assert seen.idle_fraction_finest == pytest.approx(29_960 / 30_000)


def test_burst_straddling_window_edges_splits_its_bytes() -> None:
    u = np.zeros(100)
    u[5:15] = 1.0  # (5 ms, 15 ms]: half in window (0, 10], half in (10, 20]
    stamps, counter = series(u)
    summary, bursts = analyze(stamps, counter, RATE)
    ten = summary.scale(10 * MS)
    assert ten is not None and ten.maximum == pytest.approx(0.5) and ten.count == 10
    assert len(bursts) == 1 and bursts.duration_ns[0] == 10 * MS


def test_interval_holding_a_boundary_is_interpolated() -> None:
    # 4 ms samples; the interval (8, 12] ms carries 4e6 bytes: 2e6 fall in each 10 ms window.
    u = [0.0, 0.0, 1.0, 0.0, 0.0]
    stamps, counter = series(u, step_ns=4 * MS)
    summary, _ = analyze(stamps, counter, RATE, finest_interval_ns=4 * MS)
    ten = summary.scale(10 * MS)
    assert ten is not None and ten.count == 2
    assert ten.maximum == pytest.approx(0.2)
    assert summary.finest.key == "0.004"


@pytest.mark.parametrize("cut", [1, 5001, 5020, 5039, 5040, 5041, 15_000, 29_999])
def test_burst_straddling_chunk_edges_is_one_burst(cut: int) -> None:
    stamps, counter = series(one_burst())
    whole = analyze(stamps, counter, RATE)
    analyzer = DirectionAnalyzer(RATE, finest_interval_ns=MS)
    first = analyzer.feed(stamps[:cut], counter[:cut])
    second = analyzer.feed(stamps[cut:], counter[cut:])
    last = analyzer.finish()
    assert analyzer.summary() == whole[0]
    assert analyzer.bursts() == whole[1]
    assert len(first.bursts) + len(second.bursts) + len(last.bursts) == 1
    utilization = np.concatenate([first.utilization, second.utilization])
    assert utilization.max() == 1.0 and not np.isnan(utilization).any()


def steady(fraction: float, count: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    return series(np.full(count, fraction))


def test_counter_reset_is_left_out_without_a_spike() -> None:
    stamps, counter = steady(0.3)
    counter[1500:] -= counter[1500] - np.uint64(77)  # reset to 77 at sample 1500
    summary, bursts = analyze(stamps, counter, RATE)
    assert summary.resets == 1
    assert summary.valid_samples == 3000 - 1
    assert summary.finest.maximum == pytest.approx(0.3)
    assert summary.mean_utilization == pytest.approx(0.3)
    for stats in summary.scales:
        assert stats.maximum == pytest.approx(0.3)
    assert len(bursts) == 0


@pytest.mark.parametrize("chunk", [None, 700])
def test_an_increase_of_2_63_or_more_is_a_bad_reading_not_traffic(chunk: int | None) -> None:
    """A step no link carries (a driver printing garbage) leaves its interval unknown, as
    counter_deltas rules, on the fast path too; it is no reset and breaks nothing."""
    stamps, counter = steady(0.3)
    counter[1500:] += np.uint64(2**63)  # one interval steps by 2**63 plus its traffic
    if chunk is None:
        summary, bursts = analyze(stamps, counter, RATE)
    else:
        analyzer = DirectionAnalyzer(RATE)
        for start in range(0, stamps.size, chunk):
            analyzer.feed(stamps[start : start + chunk], counter[start : start + chunk])
        analyzer.finish()
        summary, bursts = analyzer.summary(), analyzer.bursts()
    assert summary.resets == 0
    assert summary.valid_samples == 3000 - 1
    assert summary.finest.maximum == pytest.approx(0.3)
    assert summary.mean_utilization == pytest.approx(0.3)
    assert len(bursts) == 0


def test_reset_inside_a_burst_splits_it() -> None:
    stamps, counter = steady(1.0, 100)
    counter[50:] -= counter[50] - np.uint64(0)
    _summary, bursts = analyze(stamps, counter, RATE)
    assert len(bursts) == 2
    assert bursts.end_ns[0] == START + 49 * MS and bursts.start_ns[1] == START + 50 * MS


def test_gap_is_left_out_and_windows_in_it_are_skipped() -> None:
    stamps, counter = steady(0.3, 6000)
    keep = np.ones(stamps.size, dtype=bool)
    keep[2001:3501] = False  # 1.5 s without samples > max_gap (1 s)
    summary, bursts = analyze(stamps[keep], counter[keep], RATE)
    assert summary.gaps == 1
    assert summary.covered_ns == (6000 - 1501) * MS
    assert summary.mean_utilization == pytest.approx(0.3)
    ten = summary.scale(10 * MS)
    assert ten is not None and ten.count == 6000 // 10 - 150
    for stats in summary.scales:
        assert stats.maximum == pytest.approx(0.3) and stats.idle == 0
    assert len(bursts) == 0


def test_rebaseline_interval_is_unknown() -> None:
    stamps, counter = steady(0.3, 100)
    counter[40:] += np.uint64(10**12)  # re-opened counter reads something else entirely
    marks = np.zeros(stamps.size, dtype=bool)
    marks[40] = True
    summary, _ = analyze(stamps, counter, RATE, rebaseline=marks)
    assert summary.rebaselines == 1 and summary.resets == 0
    assert summary.finest.maximum == pytest.approx(0.3)


def test_quiet_port() -> None:
    stamps, counter = steady(0.0, 20_000)
    summary, bursts = analyze(stamps, counter, RATE)
    assert summary.mean_utilization == 0.0
    assert summary.peak_to_mean_ratio is None
    assert summary.finest.idle_fraction == 1.0 and summary.coarse.idle_fraction == 1.0
    assert len(bursts) == 0
    assert contrast(summary).finding is Finding.QUIET


def test_port_saturated_throughout() -> None:
    stamps, counter = steady(1.0, 20_000)
    summary, bursts = analyze(stamps, counter, RATE)
    assert len(bursts) == 1 and bursts.duration_ns[0] == 20_000 * MS
    assert summary.saturated_ns == 20_000 * MS
    assert summary.hidden_saturated_ns == 0
    assert summary.finest.p99 == 1.0 and summary.peak_to_mean_ratio == pytest.approx(1.0)
    assert contrast(summary).finding is Finding.SATURATED_THROUGHOUT


def test_bursts_without_saturation_and_visible_saturation_findings() -> None:
    summary, _ = analyze(*series(bursts_of(0.7)), RATE)
    assert contrast(summary).finding is Finding.UNSATURATED_BURSTS
    summary, _ = analyze(*series(bursts_of(1.0)), RATE)
    assert contrast(summary).finding is Finding.VISIBLE_SATURATION


def bursts_of(peak: float) -> np.ndarray:
    """30 s at 30% with a 1 ms sample at ``peak`` every 100 ms."""
    u = np.full(30_000, 0.3)
    u[::100] = peak
    return u


def test_timestamp_jitter_is_clipped_and_counted() -> None:
    rng = np.random.default_rng(1)
    stamps, counter = steady(1.0, 1000)
    stamps = stamps + np.concatenate(([0], rng.integers(-30_000, 30_000, 1000)))
    summary, _ = analyze(stamps, counter, RATE)
    assert summary.clipped_samples > 100
    assert summary.finest.maximum == 1.0 and summary.finest_interval_ns == MS


def test_equal_timestamps_are_invalid_and_backwards_ones_refused() -> None:
    stamps, counter = steady(0.3, 10)
    stamps[5] = stamps[4]
    summary, _ = analyze(stamps, counter, RATE)
    assert summary.valid_samples == 10 - 1
    assert np.isfinite(summary.finest.maximum or 0.0)
    stamps[5] = stamps[4] - 1
    with pytest.raises(ValueError, match="backwards"):
        analyze(stamps, counter, RATE)


def test_bounded_mode_keeps_no_bursts_and_bounded_seconds() -> None:
    u = np.zeros(10_000)
    u[::1000] = 1.0
    stamps, counter = series(u)
    analyzer = DirectionAnalyzer(RATE, keep_bursts=False, saturated_second_retention=3)
    analyzer.feed(stamps, counter)
    analyzer.finish()
    assert len(analyzer.bursts()) == 0 and analyzer.summary().bursts.count == 10
    assert analyzer.summary().bursts.bytes_total == 10 * 10**6 and analyzer.saturated_ns == 10 * MS
    assert analyzer.saturated_seconds().tolist() == [
        START // 10**9 + 7,
        START // 10**9 + 8,
        START // 10**9 + 9,
    ]
    assert analyzer.finest_histogram.sum() == 10_000
    assert analyzer.summary().bytes_total == 10 * 10**6


def test_scale_names_and_nominal_interval() -> None:
    assert [scale_key(n) for n in (100_000, MS, 10 * MS, 10**9, 15 * 10**9)] == [
        "0.0001",
        "0.001",
        "0.01",
        "1",
        "15",
    ]
    jitter = np.cumsum(np.full(100, MS) + np.tile([-400, 300], 50))
    assert nominal_interval_ns(jitter) == MS
    assert Thresholds().window_scales(100_000)[0] == MS
    assert Thresholds().window_scales(MS)[0] == 10 * MS
    with pytest.raises(ValueError):
        Thresholds(burst=0.0)


@pytest.mark.parametrize(
    ("measured_ns", "expected_ns"),
    [
        (999_400, MS),  # a 1 ms sampler on a busy machine
        (1_000_600, MS),
        (999_971_000, 10**9),  # a 1 s trace: one label for every port
        (1_400_000, MS),
        (1_500_000, 2 * MS),  # nearer 2 than 1 on a log scale
        (3_000_000, 2 * MS),
        (4_000_000, 5 * MS),
        (99_800, 100_000),
        (10_000_000_000, 10**10),
        (0.4, 1),
        (float("nan"), 1),
    ],
)
def test_an_unstated_interval_is_the_nearest_round_one(
    measured_ns: float, expected_ns: int
) -> None:
    assert round_interval_ns(measured_ns) == expected_ns


def test_a_jittered_median_is_never_the_finest_scale() -> None:
    # Median step 999.4 us: the old rounding to a microsecond named it "0.000999".
    steps = np.full(1001, 999_400, dtype=np.int64)
    steps[::3] += 1_000
    stamps = np.cumsum(steps)
    assert nominal_interval_ns(stamps) == MS
    assert scale_key(nominal_interval_ns(stamps)) == "0.001"


def test_quantiles_from_fixed_bins() -> None:
    values = np.array([0.0, 0.0005, 0.25, 1.0])
    counts = utilization_bins(values)
    assert counts[0] == 2 and counts[250] == 1 and counts[999] == 1
    assert utilization_quantile(counts, 0.5) == 0.001
    assert utilization_quantile(counts, 0.75) == 0.251
    assert utilization_quantile(counts, 0.99) == 1.0
    assert utilization_quantile(np.zeros(1000, np.int64), 0.5) is None
    durations = np.zeros(1401, np.int64)
    durations[700] = 3  # (10**6.99, 10**7] ns
    assert duration_quantile(durations, 0.5, 9_000_000) == 0.009
    assert duration_quantile(durations, 0.5, 20_000_000) == pytest.approx(0.01)


def test_congestion_share_attributes_increments_to_saturated_seconds() -> None:
    second = 10**9
    stamps = [int(x * second) for x in (8.5, 9.5, 10.5, 11.5, 12.5)]
    share = congestion_share(stamps, [0, 1, 11, 111, 1111], [10, 11])
    assert share.increments_total == 1111 and share.increments_during_saturation == 1110
    assert share.unknown_intervals == 1
    assert share.share == pytest.approx(1110 / 1111)
    reset = congestion_share(stamps, [0, 1, 11, 5, 1005], [12])
    assert reset.increments_total == 1011 and reset.increments_during_saturation == 1000
    assert congestion_share([], [], [1]).share is None


def test_synchrony_matrix_and_node_number() -> None:
    a = (np.array([0, 20]), np.array([10, 30]))
    b = (np.array([5]), np.array([25]))
    c = (np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    result = synchrony(["a", "b", "c"], [a[0], b[0], c[0]], [a[1], b[1], c[1]])
    assert result.matrix == ((1.0, 0.5, 0.0), (0.5, 1.0, 0.0), (None, None, None))
    assert result.node == 0.25
    together = synchrony(["x", "y"], [a[0], a[0]], [a[1], a[1]])
    assert together.node == 1.0


def test_windows_covered_less_than_half_are_left_out_unless_nothing_else() -> None:
    # 16 s from a 15 s boundary: the second 15 s window holds 1 s, at full line rate.
    u = np.full(16_000, 0.1)
    u[15_000:] = 1.0
    summary, _ = analyze(*series(u), RATE)
    coarse = summary.coarse
    assert coarse.count == 1
    assert coarse.maximum == pytest.approx(0.1)
    # A 5 s trace has only a partial window: it is the best 15 s figure there is.
    short, _ = analyze(*series(np.full(5_000, 0.3)), RATE)
    assert short.coarse.count == 1
    assert short.coarse.maximum == pytest.approx(0.3)
