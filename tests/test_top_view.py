"""The live view fits the terminal it is in: goldens at 80 and 200 columns, and in tmux."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from burstscope.collector.jobs.model import (
    COMPUTE,
    KUBERNETES,
    RULE_NUMA_NODE,
    RULE_PCIE_SWITCH,
    RULE_WHOLE_NODE,
    SLURM,
    STORAGE,
    Holding,
    Job,
    JobTable,
)
from burstscope.collector.slow_poller import CounterState, SlowSnapshot
from burstscope.collector.snapshot import DirectionView, Health, PortView, Snapshot
from burstscope.collector.sources.base import PortSpec
from burstscope.detectors.analyzer import DirectionAnalyzer
from burstscope.detectors.config import Thresholds
from burstscope.detectors.live import LiveDirection
from burstscope.testing.processes import wait_until
from burstscope.top_view import plain_lines, rows, table
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


def render_at(width: int, height: int, view: Snapshot) -> str:
    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    console.print(table(view, width=width, height=height))
    return console.export_text()


def node(ports: int, seconds: int = 20, names: tuple[str, ...] = ()) -> Snapshot:
    """``snapshot()`` with ``ports`` ports, named ``names`` where given."""
    base = snapshot(seconds)
    views = tuple(
        PortView(
            PortSpec(names[n] if n < len(names) else f"mlx5_{n}", 1, RATE),
            base.ports[n % len(base.ports)].directions,
            0,
        )
        for n in range(ports)
    )
    return replace(base, ports=views)


def test_a_ports_transmit_and_receive_rows_stay_together() -> None:
    found = rows(snapshot(), 250 * MS)
    pairs = [found[i : i + 2] for i in range(0, len(found), 2)]
    assert all(a.port == b.port for a, b in pairs), [(r.port, r.direction) for r in found]
    assert [(a.direction, b.direction) for a, b in pairs] == [("transmit", "receive")] * 9
    # Ports still come by urgency (1-ms peak, then name): the idle mlx5_0 comes last.
    assert [a.port for a, _ in pairs] == [f"mlx5_{n}/1" for n in (*range(1, 9), 0)]


@pytest.mark.parametrize(("width", "height", "ports"), [(100, 14, 9), (80, 24, 10)])
def test_rows_that_do_not_fit_are_counted_and_the_footer_stays(
    width: int, height: int, ports: int
) -> None:
    text = render_at(width, height, node(ports))
    lines = text.splitlines()
    assert len(lines) <= height, text
    assert "q quits" in text and "sim:moe" in text, text
    shown = [line.split()[0] for line in lines if line.startswith(" mlx5_")]
    # Whole ports only: every port shown has both its rows.
    assert len(shown) % 2 == 0 and shown[::2] == shown[1::2], shown
    more = ports - len(shown) // 2
    assert more > 0 and f"+{more} more ports below" in text, text


def test_a_terminal_tall_enough_shows_every_port_and_no_count() -> None:
    text = render_at(200, 50, node(10))
    assert "more ports" not in text
    assert sum(1 for line in text.splitlines() if line.startswith(" mlx5_")) == 20


def test_congestion_counters_sit_on_the_direction_they_answer_to() -> None:
    counters = {
        name: CounterState("hw", "mlx5_0", 1, name, value, value, 0, False, 0)
        for name, value in (
            ("np_ecn_marked_roce_packets", 7),  # ECN marks this receiver got
            ("np_cnp_sent", 5),  # CNPs it sent back: the receive side's
            ("rp_cnp_handled", 3),  # CNPs it slowed down for: the transmit side's
            ("rp_cnp_ignored", 11),  # neither: not in the column
        )
    }
    view = replace(node(1), slow=SlowSnapshot(counters, ()))
    by_direction = {r.direction: r for r in rows(view, 250 * MS)}
    assert (by_direction["receive"].ecn_marked, by_direction["receive"].cnp) == (7, 5)
    assert (by_direction["transmit"].ecn_marked, by_direction["transmit"].cnp) == (None, 3)


def test_brackets_in_names_are_text_not_markup() -> None:
    view = replace(node(2, names=("mlx5_[bold]0", "[red]x[/red]")), source="sim:[dim]moe")
    console = Console(width=200, record=True, color_system=None, force_terminal=False)
    console.print(table(view, width=200))
    text = console.export_text()
    assert "mlx5_[bold]0/1" in text and "[red]x[/red]/1" in text
    assert "sim:[dim]moe" in text


def run_in_tmux(command: str, width: int, height: int = 24, cwd: Path | None = None) -> str:
    """What ``command`` prints in a real tmux terminal of that size (started in ``cwd``),
    scrollback included, its lines stripped of trailing blanks (tmux pads the pane)."""
    # A server of its own (-L): another tmux user's options or sessions cannot reach it.
    tmux_bin = require_binary("tmux")
    session = f"bs-{width}x{height}-{time.monotonic_ns()}"
    server = [tmux_bin, "-L", session]
    marker = "__burstscope_command_done__"
    # pytest exports COLUMNS; the command must size itself from the terminal. The pane
    # stays open after the command so that its output can be read.
    script = f"env -u COLUMNS -u LINES {command}; echo {marker}; exec sleep 600"
    subprocess.run(
        [*server, "new-session", "-d", "-s", session, "-x", str(width), "-y", str(height),
         "-c", str(cwd or Path.cwd()), script],
        check=True,
    )  # fmt: skip
    screen = ""
    try:

        def finished() -> bool:
            nonlocal screen
            screen = subprocess.run(
                [*server, "capture-pane", "-p", "-S", "-", "-E", "-", "-t", session],
                capture_output=True,
                text=True,
            ).stdout
            return marker in screen

        assert wait_until(finished), screen
    finally:
        subprocess.run([*server, "kill-server"], capture_output=True)
    lines = [line.rstrip() for line in screen.splitlines()]
    return "\n".join(lines[: lines.index(marker)]) + "\n"


def test_top_in_a_short_tmux_terminal_counts_what_it_cannot_show() -> None:
    """At 100x14 rich's Live used to cut 9 of the 18 rows and the footer without a word."""
    tmux = require_binary("tmux")
    session = f"bs-short-{time.monotonic_ns()}"
    top = f"{sys.executable} -m burstscope top --source sim:moe"
    subprocess.run(
        [tmux, "new-session", "-d", "-s", session, "-x", "100", "-y", "14",
         f"env -u COLUMNS -u LINES {top}"],
        check=True,
    )  # fmt: skip
    try:
        screen = ""

        def shown() -> bool:
            nonlocal screen
            screen = tmux_screen(tmux, session)
            return "more ports below" in screen and "q quits" in screen

        assert wait_until(shown), screen
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], capture_output=True)
    ports = [line.split()[0] for line in screen.splitlines() if line.startswith(" mlx5_")]
    assert ports and ports[::2] == ports[1::2], screen  # whole ports: both rows or neither
    assert f"+{9 - len(ports) // 2} more ports below" in screen, screen


# -- jobs ----------------------------------------------------------------------------------

JOBS = JobTable.build(
    [Job("4242", SLURM, "alice", "llama"), Job("team-a/eval", KUBERNETES, name="eval")],
    [
        *(Holding("4242", f"mlx5_{n}", 1, COMPUTE, RULE_PCIE_SWITCH) for n in range(1, 7)),
        Holding("4242", "mlx5_8", 1, STORAGE, RULE_WHOLE_NODE),
        Holding("4242", "mlx5_7", 1, COMPUTE, RULE_NUMA_NODE),
        Holding("team-a/eval", "mlx5_7", 1, COMPUTE, RULE_NUMA_NODE),  # two jobs, one port
    ],
)


def render_jobs(width: int) -> str:
    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    console.print(table(replace(snapshot(), jobs=JOBS), width=width))
    return console.export_text()


@pytest.mark.parametrize("width", [80, 120, 200])
def test_the_job_holding_each_port_fits_and_matches_golden(width: int, update_golden: bool) -> None:
    text = render_jobs(width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text and len(text.splitlines()) <= 24
    # After the contrast, the job is the column a narrow terminal keeps longest.
    assert "job" in text.splitlines()[1] and "peak per second" not in render_jobs(80)
    cells = {line.split("│")[0].strip(): line.split("│")[2].strip() for line in
             text.splitlines() if line.startswith(" mlx5_") and "│ tx" in line}  # fmt: skip
    assert cells == {
        **{f"mlx5_{n}/1": "4242" for n in range(1, 7)},
        "mlx5_7/1": "4242, team-a/eval",
        "mlx5_8/1": "4242 storage",
        "mlx5_0/1": "-",  # no job holds it
    }
    compare_golden(FIXTURES / "top" / f"view-jobs-{width}.golden.txt", text, update_golden)


def test_without_a_job_the_view_has_no_job_column() -> None:
    assert "job" not in render(200).splitlines()[1]


def test_plain_lines_name_the_job() -> None:
    lines = plain_lines(replace(snapshot(), jobs=JOBS), 1000 * MS)
    by_port = {line.split()[1]: line for line in lines if " transmit " in line}
    assert by_port["mlx5_1/1"].endswith(" job=4242")
    assert by_port["mlx5_7/1"].endswith(" job=4242,team-a/eval")
    assert by_port["mlx5_8/1"].endswith(" job=4242:storage")
    assert "job=" not in by_port["mlx5_0/1"]
