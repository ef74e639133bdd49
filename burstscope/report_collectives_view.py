"""What ``report`` shows of the collectives: the per-class, per-collective, collision and
two-priority tables, and their JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape

from burstscope.detectors.collective_join import MappingRow, PairRow
from burstscope.detectors.config import NS_PER_SECOND
from burstscope.fitting import print_fitted
from burstscope.report_collectives import ClassRow, CollectiveReport
from burstscope.wording import byte_text

DIGITS = 6


@dataclass(frozen=True, slots=True)
class _Column:
    header: str
    priority: int  # narrow terminals drop the highest first; 0 is never dropped


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, DIGITS)


def _seconds(ns: int) -> float | None:
    return _round(ns / NS_PER_SECOND)


def _row_json(row: ClassRow) -> dict[str, Any]:
    totals = row.totals
    return {
        "name": row.name,
        "class": row.kind,
        "seconds": _seconds(totals.duration_ns),
        "bytes": totals.bytes,
        "burst_seconds": _seconds(totals.burst_ns),
        "saturated_seconds": _seconds(totals.saturated_ns),
        "hidden_saturated_seconds": _seconds(totals.hidden_saturated_ns),
        "bursts": row.bursts,
        "peak_gbytes_per_second": _round(row.peak_gbs),
        "nccl_bus_bandwidth_gbytes_per_second": _round(row.bus_bandwidth_gbs),
        "records": row.records,
        "rules": list(row.rules),
        "sampled_share": _round(row.sampled_share),
    }


def _pair_json(row: PairRow) -> dict[str, Any]:
    return {
        "pair": "-".join(row.pair),
        "saturated_seconds": _seconds(row.saturated_ns),
        "share_of_saturated": _round(row.share_of_saturated),
        "runs": row.runs,
        "urgent_first": row.in_order,
        "urgent_second": row.out_of_order,
        "ties": row.ties,
    }


def _mapping_json(row: MappingRow) -> dict[str, Any]:
    return {
        "high": sorted(row.mapping),
        "name": row.name,
        "ordered_seconds": _seconds(row.ordered_ns),
        "unresolved_seconds": _seconds(row.unresolved_ns),
        "inverted_seconds": _seconds(row.inverted_ns),
        "indifferent_seconds": _seconds(row.indifferent_ns),
    }


def collectives_json(report: CollectiveReport) -> dict[str, Any]:
    """One trace's collectives, as `report --json` gives them."""
    return {
        "source": report.source,
        "sources": list(report.sources),
        "records": report.records,
        "placed": report.spans,
        "unplaced": report.unplaced,
        "skipped": dict(report.skipped),
        "clock_offset_seconds": _seconds(report.offset_ns),
        "kernel_start_to_burst_onset_seconds": None
        if report.residual_offset_ns is None
        else _seconds(report.residual_offset_ns),
        "ports": list(report.ports),
        "saturated_seconds": _seconds(report.saturated_ns),
        "labelled": {
            "seconds": _seconds(report.labelled.duration_ns),
            "bytes": report.labelled.bytes,
            "hidden_saturated_seconds": _seconds(report.labelled.hidden_saturated_ns),
        },
        "classes": [_row_json(r) for r in report.classes],
        "collectives": [_row_json(r) for r in report.collectives],
        "bursts": [
            {"classes": list(classes), "bursts": count, "bytes": nbytes}
            for classes, count, nbytes in report.bursts
        ],
        "collisions": [_pair_json(r) for r in report.pairs],
        "two_priorities": [_mapping_json(r) for r in report.mappings],
    }


def _duration(ns: int) -> str:
    seconds = ns / NS_PER_SECOND
    return "0" if ns == 0 else f"{seconds:.3f} s"


def _gbs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _class_table(console: Console, title: str, rows: tuple[ClassRow, ...]) -> None:
    columns = [
        _Column("name", 0),
        _Column("class", 0),
        _Column("bytes", 1),
        _Column("at line rate", 0),
        _Column("hidden sat.", 0),
        _Column("in bursts", 2),
        _Column("peak GB/s", 3),
        _Column("NCCL busBw GB/s", 3),
        _Column("records", 4),
        _Column("sampled", 4),
    ]
    cells = []
    for row in rows:
        totals = row.totals
        values = (
            escape(row.name),
            row.kind or "-",
            byte_text(totals.bytes),
            _duration(totals.saturated_ns),
            _duration(totals.hidden_saturated_ns),
            _duration(totals.burst_ns),
            _gbs(row.peak_gbs if totals.samples else None),
            _gbs(row.bus_bandwidth_gbs),
            str(row.records),
            _share(row.sampled_share),
        )
        cells.append({c.header: v for c, v in zip(columns, values, strict=True)})
    print_fitted(
        console,
        title,
        columns,
        cells,
        lambda c: {"justify": "left" if c.header in ("name", "class") else "right"},
    )


def print_collectives(reports: tuple[CollectiveReport, ...], console: Console) -> None:
    """Per trace with records: which classes its samples ran under, collisions, priorities."""
    for report in reports:
        _print_one(report, console)


def _print_one(report: CollectiveReport, console: Console) -> None:
    source = escape(report.source)
    skipped = ", ".join(f"{n} {kind}" for kind, n in report.skipped) or "none"
    console.print(
        f"collectives of {source}: {report.records} records from "
        f"{' and '.join(report.sources) or 'no source'}, {report.spans} with kernel times, "
        f"{report.unplaced} without (plain Inspector dumps: counted below, never placed); "
        f"skipped: {skipped}",
        highlight=False,
    )
    lag = report.residual_offset_ns
    console.print(
        f"clock: records joined by this host's wall clock, offset given "
        f"{report.offset_ns / 1e3:g} us; kernel start to burst onset, median: "
        + ("-" if lag is None else f"{lag / 1e3:.0f} us"),
        highlight=False,
    )
    _class_table(
        console,
        "by class: the labelled ports' samples under each class's collectives",
        report.classes,
    )
    _class_table(console, "by collective", report.collectives)
    decided = "; ".join(
        f"{escape(row.name)} {row.kind or 'no class'} by {', '.join(row.rules)}"
        for row in report.collectives
        if row.rules
    )
    if decided:
        console.print(f"classes decided: {decided}", highlight=False)
    columns = [
        _Column("pair", 0),
        _Column("saturated", 0),
        _Column("share", 0),
        _Column("runs", 1),
        _Column("urgent first", 0),
        _Column("urgent second", 0),
        _Column("ties", 2),
    ]
    cells = []
    for row in report.pairs:
        values = (
            "-".join(row.pair),
            _duration(row.saturated_ns),
            _share(row.share_of_saturated),
            str(row.runs),
            str(row.in_order),
            str(row.out_of_order),
            str(row.ties),
        )
        cells.append({c.header: v for c, v in zip(columns, values, strict=True)})
    print_fitted(
        console,
        "collisions: saturated samples under two of Hermod's types (share of saturated time)",
        columns,
        cells,
        lambda c: {"justify": "left" if c.header == "pair" else "right"},
    )
    mapping_columns = [
        _Column("high / low", 0),
        _Column("ordered", 0),
        _Column("unresolved", 0),
        _Column("inverted", 0),
        _Column("indifferent", 1),
    ]
    cells = []
    for mapping in report.mappings:
        judged = (
            mapping.name,
            _duration(mapping.ordered_ns),
            _duration(mapping.unresolved_ns),
            _duration(mapping.inverted_ns),
            _duration(mapping.indifferent_ns),
        )
        cells.append({c.header: v for c, v in zip(mapping_columns, judged, strict=True)})
    print_fitted(
        console,
        "two lossless priorities: the collision time each mapping orders as Hermod's key wants",
        mapping_columns,
        cells,
        lambda c: {"justify": "left" if c.header == "high / low" else "right"},
    )
    console.print(
        "note: Hermod's key by type alone (EP and PP before DP): NCCL and PyTorch record no "
        "micro-batch or layer, so EP with PP is a tie; 'urgent first' says which collective "
        "started moving data first, not what the next computation waited for, which no "
        "record shows",
        highlight=False,
    )
