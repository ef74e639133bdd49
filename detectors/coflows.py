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
        """The coflow as the mapping file names it: type, micro-batch, layer."""
        return f"{self.kind}/mb{self.micro_batch}/L{self.layer}"


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


@dataclass(frozen=True, slots=True)
class CoflowShare:
    """What one coflow sent during a collision."""

    coflow: Coflow
    bytes: int
    arrival_ns: int  # first packet of its run of active bins, at or before the collision


@dataclass(frozen=True, slots=True)
class Collision:
    """Consecutive saturated moments shared by the same coflows."""

    start_ns: int
    end_ns: int
    moments: int  # saturated 1 ms bins
    peak_utilization: float  # of the whole link, over the moments
    shares: tuple[CoflowShare, ...]  # in the mapping's coflow order
    first: Coflow  # the one that arrived first
    urgent: Coflow  # the first in Hermod's order
    in_order: bool  # the first to arrive does not rank after the urgent one
    urgent_bytes_waited: int  # bytes the urgent coflow sent while out of order


@dataclass(frozen=True, slots=True)
class Collisions:
    """Every collision of the mapped coflows on one link."""

    line_rate_bytes_per_second: int
    saturated: float  # the share of line rate a moment reaches
    coflows: tuple[Coflow, ...]
    unmapped_packets: int
    collisions: tuple[Collision, ...]

    @property
    def moments(self) -> int:
        return sum(c.moments for c in self.collisions)

    @property
    def out_of_order(self) -> int:
        return sum(not c.in_order for c in self.collisions)

    @property
    def urgent_bytes_waited(self) -> int:
        return sum(c.urgent_bytes_waited for c in self.collisions)


# A saturated 1 ms bin: its index, and per coflow index present (bytes, arrival ns).
_Moment = tuple[int, dict[int, tuple[int, int]]]


def collisions(
    frames: FrameColumns,
    packets: PacketColumns,
    mapping: Mapping,
    line_rate_bytes_per_second: int,
    saturated: float = 0.9,
) -> Collisions:
    """The collisions of mapped coflows on a link of this line rate."""
    coflow_of, coflows = assign(packets, mapping)
    mapped = coflow_of >= 0
    found: list[Collision] = []
    if mapped.any() and len(coflows) >= 2:
        utilization, saturated_bins = _link_load(frames, line_rate_bytes_per_second, saturated)
        moments = _moments(packets, coflow_of, coflows, saturated_bins)
        found = [_collision(group, coflows, utilization) for group in _runs(moments)]
    return Collisions(
        line_rate_bytes_per_second=line_rate_bytes_per_second,
        saturated=saturated,
        coflows=tuple(coflows),
        unmapped_packets=int((~mapped).sum()),
        collisions=tuple(found),
    )


def _link_load(
    frames: FrameColumns, line_rate_bytes_per_second: int, saturated: float
) -> tuple[dict[int, float], set[int]]:
    """Utilization of the link per 1 ms bin over every frame, and the saturated bins."""
    capacity = line_rate_bytes_per_second * BIN_NS / 1e9
    all_bins, all_inverse = np.unique(frames.timestamp_ns // BIN_NS, return_inverse=True)
    load = np.bincount(all_inverse.reshape(-1), weights=frames.wire_length)
    saturated_bins = set(all_bins[load >= saturated * capacity].tolist())
    return dict(zip(all_bins.tolist(), (load / capacity).tolist(), strict=True)), saturated_bins


def _moments(
    packets: PacketColumns, coflow_of: I64, coflows: list[Coflow], saturated_bins: set[int]
) -> list[_Moment]:
    """The saturated bins in which coflows of at least two types sent bytes."""
    mapped = coflow_of >= 0
    # Per (bin, coflow): bytes and first packet time.
    stamps = packets.timestamp_ns[mapped]
    owner = coflow_of[mapped]
    count = len(coflows)
    pair = stamps // BIN_NS * count + owner
    pairs, first_index, inverse = np.unique(pair, return_index=True, return_inverse=True)
    wire = packets.wire_length[mapped]
    pair_bytes = np.bincount(inverse.reshape(-1), weights=wire).astype(np.int64)
    pair_bin, pair_coflow = pairs // count, pairs % count
    # stamps are in capture order: the first occurrence is the first packet.
    arrival = _arrivals(pair_bin, pair_coflow, stamps[first_index], count)
    moments: list[_Moment] = []
    bin_edges = [*np.flatnonzero(np.diff(pair_bin, prepend=pair_bin[0] - 1)).tolist(), pairs.size]
    for lo, hi in itertools.pairwise(bin_edges):
        b = int(pair_bin[lo])
        present = {
            int(pair_coflow[i]): (int(pair_bytes[i]), int(arrival[i])) for i in range(lo, hi)
        }
        if b in saturated_bins and len({coflows[c].kind for c in present}) > 1:
            moments.append((b, present))
    return moments


def _arrivals(pair_bin: I64, pair_coflow: I64, pair_first: I64, count: int) -> I64:
    """Per (bin, coflow): the first packet of the coflow's current run of active bins."""
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
    return arrival


def _runs(moments: list[_Moment]) -> list[list[_Moment]]:
    """Consecutive moments with the same coflows: one collision each."""
    grouped: list[list[_Moment]] = []
    for moment in moments:
        previous = grouped[-1][-1] if grouped else None
        if previous and previous[0] == moment[0] - 1 and previous[1].keys() == moment[1].keys():
            grouped[-1].append(moment)
        else:
            grouped.append([moment])
    return grouped


def _collision(
    group: list[_Moment], coflows: list[Coflow], utilization: dict[int, float]
) -> Collision:
    members = sorted(group[0][1])
    arrivals = {c: min(m[1][c][1] for m in group) for c in members}
    sent = {c: sum(m[1][c][0] for m in group) for c in members}
    first = min(members, key=lambda c: (arrivals[c], coflows[c]))
    urgent = min(members, key=lambda c: coflows[c])
    # Strictly later in Hermod's order: EP and PP of one micro-batch and layer tie.
    out_of_order = coflows[first].hermod_key > coflows[urgent].hermod_key
    return Collision(
        start_ns=group[0][0] * BIN_NS,
        end_ns=(group[-1][0] + 1) * BIN_NS,
        moments=len(group),
        peak_utilization=max(utilization[m[0]] for m in group),
        shares=tuple(CoflowShare(coflows[c], sent[c], arrivals[c]) for c in members),
        first=coflows[first],
        urgent=coflows[urgent],
        in_order=not out_of_order,
        urgent_bytes_waited=sent[urgent] if out_of_order else 0,
    )
