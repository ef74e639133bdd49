"""How the simulated node's slow counters rise with saturation: one rule for every consumer.

A millisecond at >= 90% of line rate is saturated (detectors.config.Thresholds); while
saturated the port waits for credits (port_xmit_wait), the switch marks ECN on what it
receives, the notification point answers with CNPs and the sender's reaction point handles
them. The rates per saturated millisecond are plausible constants, not calibrated on
hardware.
"""

from __future__ import annotations

SATURATED = 0.9
XMIT_WAIT_PER_MS = 40_000  # port_xmit_wait ticks
ECN_MARKED_PER_MS = 60  # np_ecn_marked_roce_packets (receive side)
CNP_HANDLED_PER_MS = 25  # rp_cnp_handled (transmit side slows down)


def congestion_counters(
    transmit_saturated_ms: float, receive_saturated_ms: float
) -> dict[str, int]:
    """Cumulative counter values after this much saturated time, by kernel name."""
    marked = int(receive_saturated_ms * ECN_MARKED_PER_MS)
    return {
        "port_xmit_wait": int(transmit_saturated_ms * XMIT_WAIT_PER_MS),
        # 64-bit on mlx5 (QUERY_CONG_STATISTICS, drivers/infiniband/hw/mlx5/counters.c),
        # like rp_cnp_handled.
        "np_ecn_marked_roce_packets": marked,
        # The notification point sends at most one CNP per flow per interval: fewer
        # CNPs than marked packets.
        "np_cnp_sent": marked // 2,
        "rp_cnp_handled": int(transmit_saturated_ms * CNP_HANDLED_PER_MS),
    }
