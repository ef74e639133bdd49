"""Congestion beside bursts: the share of slow-counter increments in seconds holding saturation."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from burstscope.detectors.config import NS_PER_SECOND
from burstscope.detectors.counters import RESETTING_64, CounterSpec, counter_deltas

# The one vocabulary of congestion counters, for the report, the exporter, MQTT and top.
# RoCE congestion control's packet counters (mlx5 hw_counters, cong_cnts in
# drivers/infiniband/hw/mlx5/counters.c): packets that arrived ECN-marked, CNPs this port
# sent as notification point and handled (or ignored) as reaction point.
ECN_MARKED = "np_ecn_marked_roce_packets"
CNPS = ("np_cnp_sent", "rp_cnp_handled")
CONGESTION_PACKET_COUNTERS = (*CNPS, "rp_cnp_ignored", ECN_MARKED)

# Which direction's saturation a congestion counter answers to. Transmit: the port waited
# for credits (port_xmit_wait), its reaction point was told to slow down (rp_cnp_handled),
# or its peer paused it (rx_*pause: pause frames received). Receive: what arrived carried
# ECN marks, so the notification point sent CNPs, or the port paused its peer (tx_*pause).
_TRANSMIT = re.compile(
    r"^(port_xmit_wait|rp_cnp_handled|rx_prio\d+_pause(_duration)?|rx_pause_ctrl_phy)$"
)
_RECEIVE = re.compile(
    r"^(np_ecn_marked_roce_packets|np_cnp_sent|tx_prio\d+_pause(_duration)?|tx_pause_ctrl_phy)$"
)


def is_congestion(name: str) -> bool:
    """Whether a slow counter says the fabric pushed back (CNPs, ECN, xmit_wait, PFC)."""
    return name in CONGESTION_PACKET_COUNTERS or congestion_direction(name) is not None


def congestion_direction(name: str) -> str | None:
    """ "transmit" or "receive" for a congestion counter's kernel name; None for others."""
    if _TRANSMIT.match(name):
        return "transmit"
    if _RECEIVE.match(name):
        return "receive"
    return None


@dataclass(frozen=True, slots=True)
class CongestionShare:
    """How much of a congestion counter's growth coincided with saturation."""

    increments_total: int  # over known intervals
    increments_during_saturation: int  # in intervals touching a saturated second
    unknown_intervals: int  # first reading, resets, rebaselines: increment not counted

    @property
    def share(self) -> float | None:
        if self.increments_total == 0:
            return None
        return self.increments_during_saturation / self.increments_total


def congestion_share(
    timestamp_ns: npt.ArrayLike,
    values: npt.ArrayLike,
    saturated_seconds: npt.ArrayLike,
    spec: CounterSpec = RESETTING_64,
    previous: int | None = None,
    rebaseline: npt.ArrayLike | None = None,
) -> CongestionShare:
    """Slow counters (xmit_wait, CNPs, ECN marks, PFC pauses) read at about 1 Hz.

    ``saturated_seconds`` holds wall-clock second indices (ns // 1e9) that contained a
    saturated sample, as ``DirectionAnalyzer.saturated_seconds()`` gives them. A counter
    interval (t_{i-1}, t_i] is attributed to saturation when it overlaps any of them: at
    1 Hz the counter cannot say where inside the interval its increments fell.
    """
    end = np.asarray(timestamp_ns, dtype=np.int64)
    deltas = counter_deltas(previous, values, spec, rebaseline)
    seconds = np.asarray(saturated_seconds, dtype=np.int64)
    if not bool((seconds[1:] > seconds[:-1]).all()):  # the analyzer's are sorted and unique
        seconds = np.unique(seconds)
    if end.size == 0:
        return CongestionShare(0, 0, 0)
    start = np.empty_like(end)
    start[0] = end[0]
    start[1:] = end[:-1]
    # Second s covers [s, s+1) seconds; it overlaps (start, end] when s*1e9 < end and
    # (s+1)*1e9 > start.
    lowest = start // NS_PER_SECOND
    highest = (end - 1) // NS_PER_SECOND
    inside = np.searchsorted(seconds, highest, side="right") - np.searchsorted(
        seconds, lowest, side="left"
    )
    touching = (inside > 0) & deltas.valid
    return CongestionShare(
        increments_total=int(deltas.delta.sum()),
        increments_during_saturation=int(deltas.delta[touching].sum()),
        unknown_intervals=int(np.count_nonzero(~deltas.valid)),
    )
