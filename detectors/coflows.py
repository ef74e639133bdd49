"""Coflow collisions after Hermod (SIGCOMM 2025): who shared a saturated link, who went first."""

# Definitions. A *moment* is a 1 ms bin in which the link (every captured byte, RoCE or
# not) carried >= ``saturated`` of line rate and coflows of at least two different types
# sent bytes. Consecutive moments with the same coflows form one *collision*. A coflow's
# *arrival* is the first packet of its current run of consecutive active bins, so a coflow
# already sending when the other joined counts as first. Hermod's static order ranks by
# micro-batch, then type (EP and PP before DP), then layer; the *urgent* coflow is the
# first in that order. A collision is *out of order* when the coflow that arrived first
# ranks strictly after the urgent one; then every byte the urgent coflow sent during the
# collision waited behind a less urgent coflow (``urgent_bytes_waited``).

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from burstscope.detectors.arrays import I64
from burstscope.detectors.packets import BIN_NS, FrameColumns, PacketColumns

TYPE_RANK = {"EP": 0, "PP": 0, "DP": 1}  # Hermod: EP and PP before DP


@dataclass(frozen=True, slots=True, order=True)
class Coflow:
    """One coflow; fields in this order so sorting is Hermod's order (kind breaks EP/PP ties)."""

    micro_batch: int
    rank: int  # from the type, for Hermod's order
    layer: int
    kind: str  # EP, PP or DP

    @property
    def hermod_key(self) -> tuple[int, int, int]:
        return (self.micro_batch, self.rank, self.layer)

    @property
    def name(self) -> str:
        return f"{self.kind}/mb{self.micro_batch}/L{self.layer}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.kind,
            "micro_batch": self.micro_batch,
            "layer": self.layer,
        }


@dataclass(frozen=True, slots=True)
class Mapping:
    """Which coflow a packet belongs to: by destination QP, else by DSCP."""

    by_qp: dict[int, Coflow]
    by_dscp: dict[int, Coflow]

    @property
    def coflows(self) -> list[Coflow]:
        return sorted(set(self.by_qp.values()) | set(self.by_dscp.values()))


def assign(packets: PacketColumns, mapping: Mapping) -> tuple[I64, list[Coflow]]:
    """Coflow index per packet (-1: unmapped), and the coflows indexed."""
    coflows = mapping.coflows
    index = {c: i for i, c in enumerate(coflows)}
    out = np.full(len(packets), -1, dtype=np.int64)
    for dscp, coflow in mapping.by_dscp.items():
        out[packets.dscp == dscp] = index[coflow]
    # After DSCP, so a QP selector wins.
    for qp, coflow in mapping.by_qp.items():
        out[packets.destination_qp == qp] = index[coflow]
    return out, coflows


def collisions(
    frames: FrameColumns,
    packets: PacketColumns,
    mapping: Mapping,
    line_rate_bytes_per_second: int,
    saturated: float = 0.9,
) -> dict[str, Any]:
    """The collisions of mapped coflows on a link of this line rate, as the CLI's JSON."""
    coflow_of, coflows = assign(packets, mapping)
    capacity = line_rate_bytes_per_second * BIN_NS / 1e9
    mapped = coflow_of >= 0
    summary: dict[str, Any] = {
        "line_rate_bytes_per_second": line_rate_bytes_per_second,
        "saturated": saturated,
        "coflows": [c.to_json() for c in coflows],
        "unmapped_packets": int((~mapped).sum()),
        "collisions": [],
        "moments": 0,
        "out_of_order": 0,
        "urgent_bytes_waited": 0,
    }
    if not mapped.any() or len(coflows) < 2:
        return summary
    # Link load per 1 ms bin, over every frame.
    all_bins, all_inverse = np.unique(frames.timestamp_ns // BIN_NS, return_inverse=True)
    load = np.bincount(all_inverse.reshape(-1), weights=frames.wire_length)
    saturated_bins = set(all_bins[load >= saturated * capacity].tolist())
    utilization = dict(zip(all_bins.tolist(), (load / capacity).tolist(), strict=True))

    # Per (bin, coflow): bytes and first packet time.
    stamps = packets.timestamp_ns[mapped]
    owner = coflow_of[mapped]
    wire = packets.wire_length[mapped]
    bins = stamps // BIN_NS
    count = len(coflows)
    pair = bins * count + owner
    pairs, first_index, inverse = np.unique(pair, return_index=True, return_inverse=True)
    pair_bytes = np.bincount(inverse.reshape(-1), weights=wire).astype(np.int64)
    pair_first = stamps[first_index]  # stamps are in capture order: the first occurrence
    pair_bin, pair_coflow = pairs // count, pairs % count
    # Arrival: first packet of the coflow's current run of consecutive active bins.
    arrival = np.empty_like(pair_first)
    for c in range(count):
        rows = np.flatnonzero(pair_coflow == c)  # in bin order
        if rows.size == 0:
            continue  # a mapped coflow that sent nothing in this capture
        run_start = np.flatnonzero(np.diff(pair_bin[rows], prepend=pair_bin[rows][0] - 2) != 1)
        starts = np.zeros(rows.size, dtype=np.int64)
        starts[run_start] = run_start
        np.maximum.accumulate(starts, out=starts)
        arrival[rows] = pair_first[rows][starts]

    moments: list[tuple[int, dict[int, tuple[int, int]]]] = []
    bin_edges = [*np.flatnonzero(np.diff(pair_bin, prepend=pair_bin[0] - 1)).tolist(), pairs.size]
    for lo, hi in itertools.pairwise(bin_edges):
        b = int(pair_bin[lo])
        present = {
            int(pair_coflow[i]): (int(pair_bytes[i]), int(arrival[i])) for i in range(lo, hi)
        }
        if b in saturated_bins and len({coflows[c].kind for c in present}) > 1:
            moments.append((b, present))

    grouped: list[list[tuple[int, dict[int, tuple[int, int]]]]] = []
    for moment in moments:
        previous = grouped[-1][-1] if grouped else None
        if previous and previous[0] == moment[0] - 1 and previous[1].keys() == moment[1].keys():
            grouped[-1].append(moment)
        else:
            grouped.append([moment])
    for group in grouped:
        members = sorted(group[0][1])
        arrivals = {c: min(m[1][c][1] for m in group) for c in members}
        sent = {c: sum(m[1][c][0] for m in group) for c in members}
        first = min(members, key=lambda c: (arrivals[c], coflows[c]))
        urgent = min(members, key=lambda c: coflows[c])
        # Strictly later in Hermod's order: EP and PP of one micro-batch and layer tie.
        out_of_order = coflows[first].hermod_key > coflows[urgent].hermod_key
        waited = sent[urgent] if out_of_order else 0
        summary["collisions"].append(
            {
                "start_ns": group[0][0] * BIN_NS,
                "end_ns": (group[-1][0] + 1) * BIN_NS,
                "moments": len(group),
                "peak_utilization": max(utilization[m[0]] for m in group),
                "coflows": [
                    {"name": coflows[c].name, "bytes": sent[c], "arrival_ns": arrivals[c]}
                    for c in members
                ],
                "first": coflows[first].name,
                "hermod_first": coflows[urgent].name,
                "in_order": not out_of_order,
                "urgent_bytes_waited": waited,
            }
        )
        summary["moments"] += len(group)
        summary["out_of_order"] += int(out_of_order)
        summary["urgent_bytes_waited"] += waited
    return summary
