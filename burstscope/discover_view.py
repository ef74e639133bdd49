"""What ``burstscope discover`` prints as text: the ports as a table that fits the terminal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from burstscope.arguments import LINE_RATE_HINT
from burstscope.collector.discovery import Discovery
from burstscope.fitting import print_fitted

if TYPE_CHECKING:
    from burstscope.collector.probe import Probe
    from burstscope.detectors.read_cost import Spread


@dataclass(frozen=True, slots=True)
class _Column:
    header: str
    priority: int  # narrow terminals drop the highest first; 0 is never dropped


_COLUMNS = (
    _Column("device", 0),
    _Column("port", 0),
    _Column("link layer", 3),
    _Column("state", 0),
    _Column("rate", 2),
    _Column("data rate", 0),
    _Column("bytes from", 4),
    _Column("netdev", 1),
)


def print_ports(found: Discovery, root: object, console: Console) -> None:
    """The ports at the console's width (80 when piped): whole columns leave, device and port
    are never cut, and each port's notes follow the table as lines of their own."""
    cells: list[dict[str, str]] = []
    notes: list[str] = []
    for port in (*found.ports, *found.unsampled):
        rate, data = port.rate_bytes_per_second, port.data_rate_bytes_per_second
        files = port.byte_files
        said = []
        if port.not_sampled:
            said.append(f"not sampled: {port.not_sampled}")
        if port.rate_problem:
            said.append(f"{port.rate_problem}: utilization absent; {LINE_RATE_HINT}")
        if files is not None and files.min_read_interval_ns:
            said.append(f"resolution {files.min_read_interval_ns / 1e6:g} ms (kernel cache)")
        if port.saturated:
            said.append(f"stuck at all-ones: {', '.join(port.saturated)}")
        values = (
            port.device,
            str(port.port),
            port.link_layer,
            port.state.name if port.state else "?",
            f"{rate * 8 / 1e9:g} Gb/s" if rate else "?",
            f"{data * 8 / 1e9:.6g} Gb/s" if data else "?",
            f"{files.directory}/{'+'.join(files.transmit)}" if files else "-",
            port.netdev or "",
        )
        # Names and paths come from the tree: brackets in them are text, not rich markup.
        cells.append({c.header: escape(v) for c, v in zip(_COLUMNS, values, strict=True)})
        notes += [f"{escape(port.device)}/{port.port}: {escape(note)}" for note in said]
    longest = max((len(row["device"]) for row in cells), default=6)

    print_fitted(
        console,
        f"RDMA ports under {escape(str(root))}",
        _COLUMNS,
        cells,
        lambda c: {"min_width": longest if c.header == "device" else None},
    )
    for note in notes:
        # One line per note however long, for grep; a terminal folds it where it must.
        console.print(note, highlight=False, soft_wrap=True)


# The paced figures are the judgement's basis (the reads as the agent makes them), so they
# stay; the back-to-back ones leave first, their median before their tail.
_PROBE_COLUMNS = (
    _Column("device", 0),
    _Column("port", 0),
    _Column("paced p50", 0),
    _Column("paced p99", 0),
    _Column("paced max", 1),
    _Column("b2b p50", 4),
    _Column("b2b p99", 2),
    _Column("b2b max", 3),
)


def print_probe(console: Console, probed: Probe) -> None:
    """``discover --probe``: each port's read cost and the whole tick's, in microseconds, at
    the console's width like the ports table, then the verdict."""
    from burstscope.collector.probe import verdict

    def figures(item: Spread | None) -> tuple[str, str, str]:
        if item is None:
            return ("-", "-", "-")
        p50, p99, most = (f"{value / 1e3:.1f}" for value in (item.p50_ns, item.p99_ns, item.max_ns))
        return (p50, p99, most)

    rows: list[dict[str, str]] = []
    named = [(escape(spec.device), str(spec.port)) for spec in probed.ports]
    paired = [
        (*name, *figures(probed.paced.ports[index]), *figures(probed.back_to_back.ports[index]))
        for index, name in enumerate(named)
    ]
    paired.append(
        ("whole tick", "", *figures(probed.paced.window), *figures(probed.back_to_back.window))
    )
    for values in paired:
        rows.append({c.header: v for c, v in zip(_PROBE_COLUMNS, values, strict=True)})
    interval = f"{probed.interval_ns / 1e6:g} ms"
    title = (
        f"data counter read cost, us: paced = {probed.paced.ticks} ticks at {interval} in a "
        f"sampler process, b2b = {probed.back_to_back.ticks} back to back "
        f"({'compiled' if probed.compiled else 'Python'} tick)"
    )

    print_fitted(
        console,
        title,
        _PROBE_COLUMNS,
        rows,
        lambda c: {"justify": "left" if c.header in ("device", "port") else "right"},
    )
    console.print(
        escape(verdict(probed.paced, probed.interval_ns)[0]), highlight=False, soft_wrap=True
    )
