"""Tables that fit a terminal: whole columns leave by priority, a cell is never cut.

``top``, ``report`` and ``discover`` share this: each names its columns with a priority
(0 stays whatever the width; the highest number leaves first), and says in a footer which
columns a wider terminal would show.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table


class Prioritised(Protocol):
    @property
    def header(self) -> str: ...

    @property
    def priority(self) -> int: ...


C = TypeVar("C", bound=Prioritised)


def fit(
    columns: Sequence[C], build: Callable[[list[C]], Table], width: int | None
) -> tuple[Table, list[C]]:
    """The table ``build`` makes from the columns that fit in ``width`` (None: all of them),
    and the columns left out, in the order they left."""
    chosen = list(columns)
    dropped: list[C] = []
    view = build(chosen)
    if width is None:
        return view, dropped
    measure = Console(width=10_000)
    while True:
        needed = Measurement.get(measure, measure.options, view).maximum
        droppable = [c for c in chosen if c.priority > 0]
        if needed <= width or not droppable:
            return view, sorted(dropped, key=list(columns).index)
        leaving = max(droppable, key=lambda c: c.priority)
        chosen.remove(leaving)
        dropped.append(leaving)
        view = build(chosen)


def left_out(dropped: Sequence[Prioritised], width: int) -> str | None:
    """The footer line naming the columns a wider terminal shows; None when all fit."""
    if not dropped:
        return None
    names = ", ".join(" ".join(c.header.split()) for c in dropped)
    return f"not shown at {width} columns: {names}"


def print_fitted(
    console: Console,
    title: str,
    columns: Sequence[C],
    rows: Sequence[Mapping[str, Any]],
    options: Callable[[C], dict[str, Any]],
) -> None:
    """``rows`` (cells by header) as a table at the console's width, then the footer naming
    the columns left out. ``options``: rich's add_column keywords for a column."""

    def build(chosen: list[C]) -> Table:
        table = Table(title=title)
        for column in chosen:
            table.add_column(column.header, no_wrap=True, **options(column))
        for row in rows:
            table.add_row(*(row[c.header] for c in chosen))
        return table

    table, dropped = fit(columns, build, console.width)
    console.print(table)
    footer = left_out(dropped, console.width)
    if footer:
        console.print(footer, highlight=False)
