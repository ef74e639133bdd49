"""The slow counters in a trace: what goes into ``_slow/`` comes back whole, per counter."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
from hypothesis import given, settings
from hypothesis import strategies as st

from burstscope.collector.trace import PortColumns, SlowRow, TraceWriter, read_slow
from burstscope.detectors.counters import RESETTING_64, WRAPPING_32, CounterSpec

SPECS: dict[str, CounterSpec | None] = {
    "port_xmit_wait": RESETTING_64,
    "np_cnp_sent": WRAPPING_32,
    "state": None,
}
rows = st.lists(
    st.tuples(
        st.integers(0, 10**12),  # timestamp
        st.sampled_from(["mlx5_0", "mlx5_1", "irdma0"]),
        st.integers(1, 2),
        st.sampled_from(sorted(SPECS)),
        st.integers(0, 2**64 - 1),
        st.booleans(),
    ),
    max_size=60,
)


def one_sample(at: int) -> PortColumns:
    def one(dtype: type[np.generic], value: object) -> np.ndarray:
        return np.array([value], dtype=dtype)

    return PortColumns(
        "mlx5_0",
        1,
        1,
        one(np.int64, at),
        one(np.uint64, 0),
        one(np.uint64, 0),
        one(np.int64, 0),
        one(np.bool_, False),
    )


@settings(max_examples=60, deadline=None)
@given(rows, st.lists(st.integers(0, 60), max_size=4))
def test_every_reading_comes_back_in_its_series_in_time_order(
    written: list[tuple[int, str, int, str, int, bool]], cuts: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch)
        writer = TraceWriter(path, piece_seconds=1e9)
        # Any split across pieces, including slow rows after the last sample piece.
        edges = sorted({0, len(written), *(c for c in cuts if c < len(written))})
        for number, (low, high) in enumerate(itertools.pairwise(edges)):
            writer.append_slow(
                [SlowRow(t, d, p, n, v, SPECS[n], b) for t, d, p, n, v, b in written[low:high]]
            )
            if number % 2 == 0:
                writer.append([one_sample(number)])
                writer.flush()
        writer.close()
        series = read_slow(path)
        samples = ds.dataset(path).to_table().num_rows if any(path.glob("part-*")) else 0
    assert samples == len({n for n in range(len(edges) - 1) if n % 2 == 0})
    expected: dict[tuple[str, int, str], list[tuple[int, int, bool]]] = {}
    for t, d, p, n, v, b in written:
        expected.setdefault((d, p, n), []).append((t, v, b))
    assert [(s.device, s.port, s.name) for s in series] == sorted(expected)
    for s in series:
        key = (s.device, s.port, s.name)
        assert s.spec == SPECS[s.name]
        assert s.timestamp_ns.tolist() == sorted(t for t, _, _ in expected[key])
        columns = (s.timestamp_ns.tolist(), s.value.tolist(), s.rebaseline.tolist())
        got = sorted(zip(*columns, strict=True))
        assert got == sorted(expected[key])
