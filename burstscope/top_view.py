"""The live terminal view: every port's millisecond peak beside its 15-second average.

Rendering only: the figures come from the pipeline's snapshot (detectors computed them),
and this module turns them into a rich table that fits the terminal, or into plain lines
when stdout is not a terminal. Ports are sorted by hidden saturation, then by the 15 s
peak: what an operator most needs to see is what the 15 s dashboards cannot show. A port's
transmit and receive rows stay together; ports that do not fit the terminal's height are
counted ("+N more ports") and the footer stays. Every
column header names its window: "15 s" (trailing), "run" (since the view started), or the
display interval for "now". With job attribution on and a job running, a "job" column names
the jobs holding each port (the snapshot's job table): after the port itself, the column
narrow terminals keep longest.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from burstscope.collector.jobs.model import STORAGE, JobTable
from burstscope.collector.snapshot import Snapshot
from burstscope.detectors.config import DIRECTIONS
from burstscope.detectors.congestion import CNPS, ECN_MARKED, congestion_direction
from burstscope.detectors.rails import KIND_NAMES
from burstscope.fitting import fit

WINDOW_NS = 15_000_000_000
SPARK_SECONDS = 30
_SPARKS = " ▁▂▃▄▅▆▇█"
# Packets, so they add up: ECN marks received, CNPs sent and handled (port_xmit_wait
# counts ticks, a different unit, and is on the dashboards instead). Each shows on the
# direction it answers to (detectors.congestion.congestion_direction): a receiver's
# notification point counts the ECN-marked packets it received (np_ecn_marked_roce_packets)
# and the CNPs it sent back (np_cnp_sent), so those are the receive row's; a sender's
# reaction point counts the CNPs it handled by slowing down (rp_cnp_handled), the transmit
# row's. Names: drivers/infiniband/hw/mlx5/counters.c (np_*, rp_* congestion counters);
# roles (r_roce_ecn_np notification point, r_roce_ecn_rp reaction point):
# https://docs.nvidia.com/networking/display/MLNXOFEDv23100540/Explicit+Congestion+Notification+(ECN)


@dataclass(frozen=True, slots=True)
class Row:
    """One port direction as the view shows it."""

    port: str
    direction: str
    line_rate_bytes_per_second: int
    now: float | None  # peak of the last display interval
    average: float | None
    peak: float | None
    p99: float | None
    saturated_seconds: float
    hidden_saturated_seconds: float
    bursts_per_second: float
    history: list[float]
    ecn_marked: int | None  # since the agent started; receive rows only
    cnp: int | None  # receive: CNPs sent (np_cnp_sent); transmit: handled (rp_cnp_handled)
    seen_ns: int  # how much of the 15 s window has samples
    stuck: tuple[str, ...] = ()  # PortCounters of the port at all-ones: no longer counting
    jobs: str = "-"  # the jobs holding the port ("4242", "4242 storage", "-": none)
    rail: str = ""  # "light" or "slow" while the rail is flagged against its peers


def port_jobs(table: JobTable, device: str, port: int) -> str:
    """The jobs holding a port as the view names them: ids, a storage port's marked."""
    roles = {h.job_id: h.role for h in table.holdings if (h.device, h.port) == (device, port)}
    held = [
        f"{job.job_id} storage" if roles.get(job.job_id) == STORAGE else job.job_id
        for job in table.jobs_of(device, port)
    ]
    return ", ".join(held) or "-"


def rows(snapshot: Snapshot, now_window_ns: int) -> list[Row]:
    now = snapshot.now_ns
    ecn: dict[tuple[str, int, str], int] = {}
    cnp: dict[tuple[str, int, str], int] = {}
    stuck = stuck_counters(snapshot)
    if snapshot.slow is not None:
        for state in snapshot.slow.counters.values():
            side = congestion_direction(state.name)
            if state.increment is None or side is None:
                continue
            key = (state.device, state.port, side)
            if state.name == ECN_MARKED:
                ecn[key] = ecn.get(key, 0) + state.increment
            elif state.name in CNPS:
                cnp[key] = cnp.get(key, 0) + state.increment
    groups: list[list[Row]] = []
    for port in snapshot.ports:
        pair: list[Row] = []
        for direction in DIRECTIONS:
            key = (port.spec.device, port.spec.port, direction)
            view = port.directions[direction]
            live = view.live
            pair.append(
                Row(
                    port=f"{port.spec.device}/{port.spec.port}",
                    direction=direction,
                    line_rate_bytes_per_second=port.spec.line_rate_bytes_per_second,
                    now=live.peak(now_window_ns, now),
                    average=live.mean(WINDOW_NS, now),
                    peak=live.peak(WINDOW_NS, now),
                    p99=view.p99,
                    saturated_seconds=view.saturated_seconds,
                    hidden_saturated_seconds=view.hidden_saturated_seconds,
                    bursts_per_second=live.burst_rate(WINDOW_NS, now),
                    history=live.history(SPARK_SECONDS, now),
                    ecn_marked=ecn.get(key),
                    cnp=cnp.get(key),
                    seen_ns=live.seen_ns(WINDOW_NS, now),
                    stuck=tuple(stuck.get(key[:2], ())),
                    jobs=port_jobs(snapshot.jobs, port.spec.device, port.spec.port),
                    rail=rail_marks(snapshot).get(key[:2], ""),
                )
            )
        groups.append(pair)

    def urgency(pair: list[Row]) -> tuple[float, float, str]:
        # A port sorts by its more urgent direction and keeps both rows together.
        return (
            -max(r.hidden_saturated_seconds for r in pair),
            -max(r.peak or 0.0 for r in pair),
            pair[0].port,
        )

    groups.sort(key=urgency)
    return [row for pair in groups for row in pair]


def rail_marks(snapshot: Snapshot) -> dict[tuple[str, int], str]:
    """The rails flagged against their peers (detectors.rails), by port: light or slow."""
    return {key: KIND_NAMES[kind] for key, kind in snapshot.rails.flagged.items()}


def stuck_counters(snapshot: Snapshot) -> dict[tuple[str, int], list[str]]:
    """PortCounters stuck at all-ones, by port: they stop there instead of wrapping."""
    stuck: dict[tuple[str, int], list[str]] = {}
    if snapshot.slow is not None:
        for state in sorted(snapshot.slow.counters.values(), key=lambda s: s.name):
            if state.saturated:
                stuck.setdefault((state.device, state.port), []).append(state.name)
    return stuck


def count(value: int | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{unit}"
    return str(value)


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def sparkline(values: list[float]) -> str:
    top = len(_SPARKS) - 1
    return "".join(_SPARKS[min(top, round(v * top))] for v in values)


def _style(value: float | None) -> str:
    if value is None:
        return "dim"
    if value >= 0.9:
        return "bold red"
    if value >= 0.5:
        return "yellow"
    return ""


def _seconds(value: float) -> str:
    return f"{value:.1f} s"


@dataclass(frozen=True, slots=True)
class Column:
    header: str  # two lines: what, then its window
    justify: str
    priority: int  # narrow terminals drop the highest first; 0 is never dropped
    width: int  # at least this wide, so the layout holds still while values change
    cell: Callable[[Row], Text | str]


def _ecn_cnp(row: Row) -> str:
    if row.ecn_marked is None and row.cnp is None:
        return "-"
    return f"{count(row.ecn_marked)} / {count(row.cnp)}"


def _columns(now_label: str, jobs: bool = False) -> tuple[Column, ...]:
    """The view's columns; ``jobs``: with the job column (a job runs on the node)."""

    def styled(value: float | None) -> Text:
        return Text(percent(value), _style(value))

    job = (Column("job\n", "left", 1, 4, lambda r: Text(r.jobs)),) if jobs else ()
    return (
        Column(
            "port\n",
            "left",
            0,
            8,
            lambda r: Text(r.port) + Text(f" {r.rail}", "bold red") if r.rail else Text(r.port),
        ),
        Column("dir\n", "left", 0, 3, lambda r: "tx" if r.direction == "transmit" else "rx"),
        *job,
        Column("avg\n15 s", "right", 0, 4, lambda r: styled(r.average)),
        Column("1-ms peak\n15 s", "right", 0, 9, lambda r: styled(r.peak)),
        Column(
            "hidden sat.\nrun",
            "right",
            0,
            11,
            lambda r: Text(
                _seconds(r.hidden_saturated_seconds),
                "bold red" if r.hidden_saturated_seconds else "",
            ),
        ),
        Column(f"peak\n{now_label}", "right", 2, 6, lambda r: styled(r.now)),
        Column("bursts/s\n15 s", "right", 3, 8, lambda r: f"{r.bursts_per_second:.1f}"),
        Column("saturated\nrun", "right", 4, 9, lambda r: _seconds(r.saturated_seconds)),
        Column("p99\nrun", "right", 5, 4, lambda r: percent(r.p99)),
        Column(
            "line rate\n",
            "right",
            6,
            9,
            lambda r: (
                f"{r.line_rate_bytes_per_second * 8 / 1e9:g} Gb/s"
                if r.line_rate_bytes_per_second > 0
                else "unknown"
            ),
        ),
        Column("ECN / CNP\nrun", "right", 7, 13, _ecn_cnp),
        Column(
            f"peak per second\nlast {SPARK_SECONDS} s",
            "left",
            8,
            SPARK_SECONDS,
            lambda r: Text(sparkline(r.history), style="cyan"),
        ),
    )


def _interval_label(interval_ns: int) -> str:
    seconds = interval_ns / 1e9
    return f"{seconds:g} s" if seconds >= 1 else f"{seconds * 1000:g} ms"


def table(
    snapshot: Snapshot,
    title: str = "burstscope top",
    width: int | None = None,
    now_window_ns: int = 250_000_000,
    height: int | None = None,
) -> Table:
    """The view, with the columns that fit in ``width`` and the ports that fit in ``height``
    (None: all of them). Ports that do not fit are counted in the footer, which stays."""
    health = snapshot.health
    found = rows(snapshot, now_window_ns)
    columns = list(_columns(_interval_label(now_window_ns), jobs=bool(snapshot.jobs.jobs)))
    partial = min((r.seen_ns for r in found), default=WINDOW_NS)
    notes = [
        f"{snapshot.source}",
        f"{health.interval_ns / 1e6:g} ms",
        f"ticks {health.ticks}",
        f"missed {health.missed_ticks}",
        "SCHED_FIFO" if health.realtime else "normal scheduling",
    ]
    if partial < WINDOW_NS:
        notes.append(f"15 s figures over the first {partial / 1e9:.0f} s")
    for (device, port), names in sorted(stuck_counters(snapshot).items()):
        notes.append(f"{device}/{port} stuck at all-ones: {', '.join(names)}")
    for (device, port), kind in sorted(rail_marks(snapshot).items()):
        notes.append(f"{device}/{port} {kind} rail beside its peers")
    notes.append("q quits")
    ports = [found[i : i + len(DIRECTIONS)] for i in range(0, len(found), len(DIRECTIONS))]

    def build(chosen: list[Column], shown: int = len(ports), dropped: int = 0) -> Table:
        head = [] if shown == len(ports) else [f"+{len(ports) - shown} more ports below"]
        tail = [f"{dropped} more column{'s' if dropped > 1 else ''} wider"] if dropped else []
        # Names come from the machine: markup in them is text, not style.
        caption = " · ".join(escape(note) for note in head + notes[:-1] + tail + notes[-1:])
        # No outer border: 18 rows, two header lines and the caption fit 24 terminal lines.
        view = Table(title=title, caption=caption, expand=False, show_edge=False)
        for column in chosen:
            view.add_column(
                column.header,
                justify=column.justify,  # type: ignore[arg-type]
                no_wrap=True,
                min_width=column.width,
            )
        for pair in ports[:shown]:
            for row in pair:
                view.add_row(*(column.cell(row) for column in chosen))
        return view

    view, left = fit(columns, build, width)
    chosen = [c for c in columns if c not in left]
    view = build(chosen, dropped=len(left))
    if height is None:
        return view
    screen = Console(width=width or 10_000, color_system=None, force_terminal=False)
    shown = len(ports)

    def lines(view: Table) -> int:
        return len(screen.render_lines(view, screen.options, pad=False))

    excess = lines(view) - height
    if excess > 0:
        # A port is its two rows; the "+N more" note may take a caption line of its own.
        shown = max(0, shown - -(-(excess + 1) // len(DIRECTIONS)))
        view = build(chosen, shown, len(left))
        while shown > 0 and lines(view) > height:
            shown -= 1
            view = build(chosen, shown, len(left))
    return view


def plain_lines(snapshot: Snapshot, every_ns: int) -> list[str]:
    """The same figures, one line per port direction, for logs and pipes; "peak" covers the
    ``every_ns`` since the previous lines."""
    stamp = datetime.datetime.fromtimestamp(snapshot.now_ns / 1e9, datetime.UTC)
    clock = stamp.strftime("%H:%M:%S")
    label = _interval_label(every_ns).replace(" ", "")
    return [
        f"{clock} {row.port} {row.direction} peak{label}={percent(row.now)} "
        f"avg15s={percent(row.average)} peak15s={percent(row.peak)} "
        f"bursts/s15s={row.bursts_per_second:.1f} hidden_run={row.hidden_saturated_seconds:.1f}s "
        f"saturated_run={row.saturated_seconds:.1f}s p99_run={percent(row.p99)}"
        + (
            ""
            if row.ecn_marked is None and row.cnp is None
            else f" ecn_run={count(row.ecn_marked)} cnp_run={count(row.cnp)}"
        )
        + ("" if row.seen_ns >= WINDOW_NS else f" (15s over first {row.seen_ns / 1e9:.0f}s)")
        + (f" stuck={','.join(row.stuck)}" if row.stuck else "")
        + (f" rail={row.rail}" if row.rail else "")
        + ("" if row.jobs == "-" else f" job={row.jobs.replace(', ', ',').replace(' ', ':')}")
        for row in rows(snapshot, every_ns)
    ]
