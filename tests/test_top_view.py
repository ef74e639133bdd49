"""The live view fits the terminal it is in: goldens at 80 and 200 columns, and in tmux."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from burstscope.collector.snapshot import DirectionView, Health, PortView, Snapshot
from burstscope.collector.sources.base import PortSpec
from burstscope.detectors.analyzer import DirectionAnalyzer
from burstscope.detectors.config import Thresholds
from burstscope.detectors.live import LiveDirection
from burstscope.testing.processes import wait_until
from burstscope.top_view import plain_lines, table
from tests.conftest import FIXTURES, compare_golden, require_binary

MS = 1_000_000
START_NS = 1_700_000_010_000_000_000  # a whole 15 s multiple: windows line up
RATE = 50_000_000_000  # 400 Gb/s


def direction(duty: float, seconds: int, seed: int) -> DirectionView:
    """``seconds`` of 1 ms samples, saturated for ``duty`` of each second, quiet otherwise."""
    rng = np.random.default_rng(seed)
    count = seconds * 1000
    stamps = START_NS + np.arange(count + 1, dtype=np.int64) * MS
    busy = (np.arange(count) % 1000) < duty * 1000
    steps = np.where(busy, RATE // 1000, rng.integers(0, RATE // 200_000, count))
    values = np.concatenate([[0], np.cumsum(steps)]).astype(np.uint64)
    analyzer = DirectionAnalyzer(RATE, Thresholds(), MS, keep_bursts=False)
    live = LiveDirection()
    live.update(analyzer.feed(stamps, values))
    return DirectionView(int(values[-1]), live, analyzer.saturated_ns / 1e9, 0.0, 0, 1.0)


def snapshot(seconds: int = 20) -> Snapshot:
    ports = tuple(
        PortView(
            PortSpec(f"mlx5_{n}", 1, RATE),
            {"transmit": direction(0.04 * n, seconds, n), "receive": direction(0.0, seconds, 9)},
            0,
        )
        for n in range(9)
    )
    health = Health(
        ticks=seconds * 1000,
        missed_ticks=3,
        lost_rows=0,
        realtime=True,
        cpu=1,
        interval_ns=MS,
        sampler_alive=True,
        lateness_buckets=np.zeros(1, dtype=np.int64),
        lateness_sum_seconds=0.0,
        read_buckets=np.zeros(1, dtype=np.int64),
        read_sum_seconds=0.0,
        heartbeat_ns=0,
    )
    return Snapshot("sim:moe", START_NS + seconds * 1000 * MS, ports, health, None, Thresholds())


def render(width: int, seconds: int = 20) -> str:
    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    console.print(table(snapshot(seconds), width=width))
    return console.export_text()


@pytest.mark.parametrize("width", [80, 120, 200])
def test_the_view_fits_and_matches_golden(width: int, update_golden: bool) -> None:
    text = render(width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text  # nothing cut: whole columns go instead
    assert len(text.splitlines()) <= 24  # 18 port directions fit a 24-line terminal
    compare_golden(FIXTURES / "top" / f"view-{width}.golden.txt", text, update_golden)


def test_narrow_terminals_keep_the_contrast() -> None:
    narrow = render(80)
    for header in ("port", "dir", "avg", "1-ms peak", "hidden sat."):
        assert header in narrow
    assert "peak per second" not in narrow and "peak per second" in render(200)


def test_a_young_view_says_its_15_s_figures_are_partial() -> None:
    assert "15 s figures over the first 5 s" in render(200, seconds=5)
    assert "over the first" not in render(200, seconds=20)
    # Bursts per second over the 5 s seen, not over 15 s: mlx5_8 bursts once a second.
    line = next(
        line for line in plain_lines(snapshot(5), 5_000_000_000) if "mlx5_8/1 transmit" in line
    )
    assert "bursts/s15s=1.0" in line and "(15s over first 5s)" in line


def tmux_screen(tmux: str, session: str) -> str:
    return subprocess.run(
        [tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True
    ).stdout


@pytest.mark.parametrize(("width", "height"), [(80, 24), (200, 50)])
def test_top_in_tmux_fits_the_terminal(
    width: int, height: int, tmp_path: Path, update_golden: bool
) -> None:
    tmux = require_binary("tmux")
    session = f"bs-fit-{width}-{time.monotonic_ns()}"
    top = f"{sys.executable} -m burstscope top --source sim:moe"
    subprocess.run(
        [tmux, "new-session", "-d", "-s", session, "-x", str(width), "-y", str(height),
         f"env -u COLUMNS -u LINES {top}"],
        check=True,
    )  # fmt: skip
    try:
        screen = ""

        def shown() -> bool:
            nonlocal screen
            screen = tmux_screen(tmux, session)
            return "mlx5_8/1" in screen and "q quits" in screen

        assert wait_until(shown), screen
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], capture_output=True)
    lines = screen.splitlines()
    assert "…" not in screen
    # The title and the header: the same as the golden view of that width.
    top_index = next(i for i, line in enumerate(lines) if "burstscope top" in line)
    header = "\n".join(line.rstrip() for line in lines[top_index : top_index + 4]) + "\n"
    compare_golden(FIXTURES / "top" / f"tmux-header-{width}.golden.txt", header, update_golden)
    golden_view = render(width).splitlines()
    assert header.splitlines() == [line.rstrip() for line in golden_view[:4]]
