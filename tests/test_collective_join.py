"""The join core: each sample's class set, collision runs, Hermod's order and two priorities.

The masks are checked against a brute-force overlap of every span with every sample; the
records come from the parser fixtures (tests/fixtures/collectives/).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burstscope.collector.collectives import join
from burstscope.collector.collectives.pytorch_trace import read_trace
from burstscope.detectors import collective_classes as classes
from burstscope.detectors import collective_join as cj
from tests.conftest import FIXTURES

HERE = FIXTURES / "collectives"


def span(start: int, end: int, kind: str | None, name: str = "AllToAll") -> cj.CollectiveSpan:
    return cj.CollectiveSpan(
        start, end, name, kind, classes.MAPPING_GROUP, "g", 8, 1, 1024, None, join.PYTORCH
    )


def brute_masks(spans: list[cj.CollectiveSpan], lo: np.ndarray, hi: np.ndarray) -> list[int]:
    out = []
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        mask = 0
        for s in spans:
            if s.start_ns < b and s.end_ns > a:
                mask |= s.bit
        out.append(mask)
    return out


KINDS = st.sampled_from(["EP", "PP", "DP", None])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(1, 20), KINDS), max_size=12),
    st.lists(st.integers(0, 80), min_size=2, max_size=30, unique=True),
)
def test_masks_equal_the_overlap_of_every_span_with_every_sample(
    raw: list[tuple[int, int, str | None]], times: list[int]
) -> None:
    spans = [span(s, s + d, k) for s, d, k in raw]
    stamps = np.array(sorted(times), dtype=np.int64)
    lo, hi = stamps[:-1], stamps[1:]
    index = cj.SpanIndex(spans)
    assert index.masks(lo, hi).tolist() == brute_masks(spans, lo, hi)
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        found = index.collectives(a, b)
        assert sorted(found, key=id) == sorted(
            [s for s in spans if s.start_ns < b and s.end_ns > a], key=id
        )


def test_class_names_and_bits() -> None:
    assert cj.class_names(cj.EP | cj.DP) == ("EP", "DP")
    assert cj.class_names(cj.OTHER) == ("other",)
    assert cj.class_bit("PP") == cj.PP and cj.class_bit(None) == cj.OTHER
    assert cj.urgent_class(cj.EP | cj.DP) == "EP"
    assert cj.urgent_class(cj.EP | cj.PP) is None  # a tie by type


@pytest.mark.parametrize(
    ("high", "mask", "verdict"),
    [
        ({"EP", "PP"}, cj.EP | cj.DP, cj.ORDERED),
        ({"EP"}, cj.EP | cj.DP, cj.ORDERED),
        ({"EP"}, cj.PP | cj.DP, cj.UNRESOLVED),
        ({"DP"}, cj.PP | cj.DP, cj.INVERTED),
        ({"EP"}, cj.EP | cj.PP | cj.DP, cj.UNRESOLVED),
        ({"EP", "PP"}, cj.EP | cj.PP | cj.DP, cj.ORDERED),
        ({"PP", "DP"}, cj.EP | cj.DP, cj.INVERTED),
        ({"EP"}, cj.EP | cj.PP, cj.INDIFFERENT),
    ],
)
def test_two_priorities_judged_against_hermods_key(high: set[str], mask: int, verdict: str) -> None:
    assert cj.judge(frozenset(high), mask) == verdict


def test_collision_runs_name_the_urgent_class_and_who_went_first() -> None:
    # DP runs 0-10 ms, EP joins at 4 ms: the urgent EP went second (out of order);
    # then PP starts at 20 ms and DP joins at 22 ms: the urgent PP went first.
    ms = 1_000_000
    spans = [span(0, 10 * ms, "DP"), span(4 * ms, 8 * ms, "EP"), span(20 * ms, 26 * ms, "PP")]
    spans.append(span(22 * ms, 30 * ms, "DP"))
    index = cj.SpanIndex(spans)
    stamps = np.arange(0, 31 * ms, ms, dtype=np.int64)
    lo, hi = stamps[:-1], stamps[1:]
    masks = index.masks(lo, hi)
    saturated = np.ones(lo.shape, dtype=np.bool_)
    runs = cj.collision_runs(lo, hi, masks, saturated, index)
    assert [(r.start_ns // ms, r.end_ns // ms, r.urgent, r.first, r.in_order) for r in runs] == [
        (4, 8, "EP", "DP", False),
        (22, 26, "PP", "PP", True),
    ]
    rows = {r.pair: r for r in cj.pair_rows(runs, saturated_ns=30 * ms)}
    assert rows[("EP", "DP")].saturated_ns == 4 * ms
    assert rows[("EP", "DP")].out_of_order == 1
    assert rows[("PP", "DP")].in_order == 1
    assert rows[("EP", "PP")].saturated_ns == 0
    by_name = {r.name: r for r in cj.mapping_rows(runs)}
    assert by_name["{EP,PP} high / {DP} low"].ordered_ns == 8 * ms
    assert by_name["{EP} high / {PP,DP} low"].unresolved_ns == 4 * ms
    assert by_name["{DP} high / {EP,PP} low"].inverted_ns == 8 * ms


def test_unsaturated_or_single_class_samples_are_no_collision() -> None:
    spans = [span(0, 10, "DP"), span(0, 10, "DP", "AllGather"), span(0, 10, None)]
    index = cj.SpanIndex(spans)
    lo, hi = np.array([0, 5]), np.array([5, 10])
    masks = index.masks(lo, hi)
    assert masks.tolist() == [cj.DP | cj.OTHER] * 2
    assert cj.collision_runs(lo, hi, masks, np.ones(2, dtype=np.bool_), index) == []


def test_offset_estimate_is_the_median_lag_to_the_first_onset_inside_a_span() -> None:
    spans = [span(100, 200, "EP"), span(300, 400, "DP"), span(500, 510, "PP")]
    onsets = np.array([120, 330, 600], dtype=np.int64)  # the last one lies past its span
    assert cj.estimate_offset_ns(spans, onsets) == 25
    assert cj.estimate_offset_ns([], onsets) is None


def test_mask_ledger_totals_by_class_set() -> None:
    ledger = cj.MaskLedger()
    masks = np.array([cj.EP, cj.EP | cj.DP, 0], dtype=np.uint8)
    ones = np.ones(3, dtype=np.bool_)
    ledger.add(masks, np.array([1, 2, 3]), np.array([10, 20, 30]), ones, ones, ~ones)
    assert ledger.total(cj.EP).bytes == 30
    assert ledger.total(cj.DP).duration_ns == 2
    assert ledger.total(0).bytes == 60


def test_verbose_inspector_records_become_spans_on_the_kernel_times() -> None:
    records, skipped = join.read_inspector([HERE / "inspector-verbose.log"], "gpu-node-07")
    log = join.collective_log(records, offset_ns=1_000, skipped=skipped)
    assert log.records == len(records) and log.unplaced == 0
    first = records[0]
    assert first.kernel_channels is not None
    spans = [s for s in log.spans if s.communicator == first.communicator_id]
    starts = [c.start_us for c in first.kernel_channels if c.start_us is not None]
    assert min(s.start_ns for s in spans) <= min(starts) * 1000 + 1_000
    assert {s.source for s in log.spans} == {join.INSPECTOR}


def test_plain_records_count_but_are_never_placed() -> None:
    records, _ = join.read_inspector([HERE / "inspector-plain.log"])
    log = join.collective_log(records)
    assert log.spans == () and log.unplaced == len(records) > 0
    assert sum(f.records for f in log.figures) == len(records)


def test_pytorch_kernels_become_spans_classified_by_their_group() -> None:
    trace = read_trace(HERE / "pytorch-trace.json")
    spans = join.pytorch_spans(trace)
    assert len(spans) == len(trace.kernels) > 0
    assert all(s.end_ns > s.start_ns for s in spans)
    assert {s.source for s in spans} == {join.PYTORCH}


def test_mapping_file_errors_name_the_file_and_the_key(tmp_path: Path) -> None:

    root = tmp_path
    good = root / "map.toml"
    good.write_text('"0xabc" = "EP"\nDATA_PARALLEL_GROUP = "DP"\n')
    assert join.read_mapping(good) == {"0xabc": "EP", "DATA_PARALLEL_GROUP": "DP"}
    bad = root / "bad.toml"
    bad.write_text('"0xabc" = "XP"\n')
    with pytest.raises(join.MappingError, match=r"bad\.toml.*XP"):
        join.read_mapping(bad)
    with pytest.raises(join.MappingError, match="cannot be read"):
        join.read_mapping(root / "missing.toml")
