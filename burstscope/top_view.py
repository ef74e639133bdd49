"""The live terminal view: every port's millisecond peak beside its 15-second average.

Rendering only: the figures come from the pipeline's snapshot (detectors computed them),
and this module turns them into a rich table, or into plain lines when stdout is not a
terminal. Rows are sorted by hidden saturation, then by the 15 s peak: what an operator
most needs to see is what the 15 s dashboards cannot show.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from collector.pipeline import Snapshot
from detectors.config import DIRECTIONS

WINDOW_NS = 15_000_000_000
SPARK_SECONDS = 30
_SPARKS = " ▁▂▃▄▅▆▇█"
# Packets, so they add up: ECN marks received, CNPs sent and handled (port_xmit_wait
# counts ticks, a different unit, and is on the dashboards instead).
_ECN = ("np_ecn_marked_roce_packets",)
_CNP = ("np_cnp_sent", "rp_cnp_handled")


@dataclass(frozen=True, slots=True)
class Row:
    """One port direction as the view shows it."""

    port: str
    direction: str
    line_rate_bytes_per_second: int
    now: float | None
    average: float | None
    peak: float | None
    p99: float | None
    saturated_seconds: float
    hidden_seconds: float
    bursts_per_second: float
    history: list[float]
    ecn_marked: int | None  # since the agent started
    cnp: int | None


def rows(snapshot: Snapshot) -> list[Row]:
    now = snapshot.now_ns
    ecn: dict[tuple[str, int], int] = {}
    cnp: dict[tuple[str, int], int] = {}
    if snapshot.slow is not None:
        for state in snapshot.slow.counters.values():
            if state.increment is None:
                continue
            key = (state.device, state.port)
            if state.name in _ECN:
                ecn[key] = ecn.get(key, 0) + state.increment
            elif state.name in _CNP:
                cnp[key] = cnp.get(key, 0) + state.increment
    out = []
    for port in snapshot.ports:
        key = (port.spec.device, port.spec.port)
        for direction in DIRECTIONS:
            view = port.directions[direction]
            live = view.live
            out.append(
                Row(
                    port=f"{port.spec.device}/{port.spec.port}",
                    direction=direction,
                    line_rate_bytes_per_second=port.spec.line_rate_bytes_per_second,
                    now=live.latest_utilization,
                    average=live.mean(WINDOW_NS, now),
                    peak=live.peak(WINDOW_NS, now),
                    p99=view.p99,
                    saturated_seconds=view.saturated_seconds,
                    hidden_seconds=view.hidden_saturated_seconds,
                    bursts_per_second=live.burst_rate(WINDOW_NS, now),
                    history=live.history(SPARK_SECONDS, now),
                    ecn_marked=ecn.get(key),
                    cnp=cnp.get(key),
                )
            )
    out.sort(key=lambda r: (-r.hidden_seconds, -(r.peak or 0.0), r.port, r.direction))
    return out


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


def table(snapshot: Snapshot, title: str = "burstscope top") -> Table:
    health = snapshot.health
    caption = (
        f"source {snapshot.source} · {health.interval_ns / 1e6:g} ms · ticks {health.ticks} "
        f"· missed {health.missed_ticks} · "
        f"{'SCHED_FIFO' if health.realtime else 'normal scheduling'} · q or Ctrl-C quits"
    )
    view = Table(title=title, caption=caption, expand=False)
    for name, justify in (
        ("port", "left"),
        ("dir", "left"),
        ("line rate", "right"),
        ("1 ms now", "right"),
        ("15 s avg", "right"),
        ("1 ms peak 15 s", "right"),
        ("p99", "right"),
        ("saturated", "right"),
        ("hidden", "right"),
        ("bursts/s", "right"),
        (f"peak per second, last {SPARK_SECONDS} s", "left"),
        ("ECN / CNP", "right"),
    ):
        view.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in rows(snapshot):
        view.add_row(
            row.port,
            "tx" if row.direction == "transmit" else "rx",
            f"{row.line_rate_bytes_per_second * 8 / 1e9:g} Gb/s",
            Text(percent(row.now), style=_style(row.now)),
            Text(percent(row.average), style=_style(row.average)),
            Text(percent(row.peak), style=_style(row.peak)),
            percent(row.p99),
            f"{row.saturated_seconds:.1f} s",
            Text(f"{row.hidden_seconds:.1f} s", style="bold red" if row.hidden_seconds else ""),
            f"{row.bursts_per_second:.1f}",
            Text(sparkline(row.history), style="cyan"),
            "-"
            if row.ecn_marked is None and row.cnp is None
            else f"{count(row.ecn_marked)} / {count(row.cnp)}",
        )
    return view


def plain_lines(snapshot: Snapshot) -> list[str]:
    """The same figures, one line per port direction, for logs and pipes."""
    stamp = datetime.datetime.fromtimestamp(snapshot.now_ns / 1e9, datetime.UTC)
    clock = stamp.strftime("%H:%M:%S")
    return [
        f"{clock} {row.port} {row.direction} now={percent(row.now)} "
        f"avg15s={percent(row.average)} peak15s={percent(row.peak)} p99={percent(row.p99)} "
        f"saturated={row.saturated_seconds:.1f}s hidden={row.hidden_seconds:.1f}s "
        f"bursts/s={row.bursts_per_second:.1f}"
        + (
            ""
            if row.ecn_marked is None and row.cnp is None
            else f" ecn={count(row.ecn_marked)} cnp={count(row.cnp)}"
        )
        for row in rows(snapshot)
    ]
