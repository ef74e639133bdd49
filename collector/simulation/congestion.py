"""How the simulated node's slow counters rise: a working fabric's background, and injected
throttling episodes (PFC, ECN/CNP, credit starvation) with known times and magnitudes.

Background: a millisecond at >= 90% of line rate is saturated (detectors.config.Thresholds);
while saturated the port now and then waits for credits (port_xmit_wait), the switch marks
ECN on a few packets it forwards to us, the notification point answers with CNPs and the
sender's reaction point handles some. A fabric that keeps up gives only this trickle.

Episodes (``ThrottleEpisode``, the ground truth of detectors/throttle.py's scoring) are
what a congested fabric adds, each on one port direction for a stated time:
- PFC (transmit): the peer pauses the port for ``intensity`` of the episode
  (rx_prio3_pause_duration in microseconds and rx_prio3_pause frames, one per refresh of a
  pause, as mlx5 counts them; drivers/net/ethernet/mellanox/mlx5/core/en_stats.c
  pport_per_prio_pfc_stats_desc); the data it held shows as port_xmit_wait too.
  PFC (receive): the port pauses its peer (tx_prio3_pause_duration, tx_prio3_pause).
- ECN (transmit): the reaction point handles ``intensity`` CNPs a second (rp_cnp_handled).
  ECN (receive): ``intensity`` ECN-marked packets a second arrive, half as many CNPs go back.
- credit (transmit): the port stalls for want of credits ``intensity`` of the time
  (port_xmit_wait, in ticks of ``XMIT_WAIT_TICK_NS``).
Episodes move the slow counters only: the samples are the traffic model's, so the seconds
a classifier judges are the model's saturated seconds, whatever was injected. The rates are
plausible constants, not calibrated on hardware; everything is deterministic by seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SATURATED = 0.9
XMIT_WAIT_PER_MS = 0.5  # port_xmit_wait ticks per saturated millisecond (background)
ECN_MARKED_PER_MS = 0.05  # np_ecn_marked_roce_packets (receive side)
CNP_HANDLED_PER_MS = 0.02  # rp_cnp_handled (transmit side slows down)
# The simulated HCA's PortSamplesControl tick: what `[throttle] xmit_wait_tick` would be set
# to for it (the IBA leaves the length to the device; sysfs does not show it).
XMIT_WAIT_TICK_NS = 256
# The lossless RoCE priority of NVIDIA's RoCE configuration guides (DSCP 26 -> priority 3).
PFC_PRIORITY = 3
# A paused port's peer refreshes its pause about every half quanta: at 400 Gb/s a pause of
# 65535 x 512 bit times lasts 84 us, so one frame per 42 us paused.
PAUSE_FRAME_EVERY_NS = 42_000

PFC = "pfc"
ECN = "ecn"
CREDIT = "credit"
# What each cause's intensity means, drawn per episode from these ranges.
INTENSITY = {
    PFC: (0.2, 1.0),  # share of the episode the port is paused
    ECN: (1_000.0, 20_000.0),  # CNPs (transmit) or ECN-marked packets (receive) a second
    CREDIT: (0.05, 0.5),  # share of the episode the port stalls for credits
}
_CAUSE_DIRECTIONS = {
    PFC: ("transmit", "receive"),
    ECN: ("transmit", "receive"),
    CREDIT: ("transmit",),
}


def congestion_counters(
    transmit_saturated_ms: float, receive_saturated_ms: float
) -> dict[str, int]:
    """Cumulative background counter values after this much saturated time, by kernel name."""
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


@dataclass(frozen=True, slots=True)
class ThrottleEpisode:
    """One injected episode (ground truth): which port direction, which cause, when, how
    long and how hard (``INTENSITY`` says the unit per cause)."""

    port: int  # index into the node's ports
    direction: str  # the saturation it answers to: "transmit" or "receive"
    cause: str  # PFC, ECN or CREDIT
    start_ns: int  # model time
    duration_ns: int
    intensity: float

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


def place_episodes(
    seed: int,
    durations_ns: tuple[int, ...],
    ports: tuple[int, ...],
    span_ns: int,
    gap_ns: int = 3_000_000_000,
) -> tuple[ThrottleEpisode, ...]:
    """Episodes of every cause, each of the given durations on every port direction that
    can have that cause, in random order and at random times, at least ``gap_ns`` apart on
    a port direction; the span must hold them (ValueError otherwise)."""
    rng = np.random.default_rng([seed, 0x7407])
    placed = []
    for port in ports:
        for direction in ("transmit", "receive"):
            kinds = [
                (cause, duration)
                for cause, directions in _CAUSE_DIRECTIONS.items()
                if direction in directions
                for duration in durations_ns
            ]
            order = rng.permutation(len(kinds))
            spare = span_ns - sum(d for _, d in kinds) - gap_ns * (len(kinds) + 1)
            if spare < 0:
                raise ValueError(f"{len(kinds)} episodes do not fit in {span_ns / 1e9:g} s")
            # Spare time shared out at random between the episodes: each starts a gap (and
            # its share) after the one before ended.
            shares = np.diff(np.sort(rng.integers(0, spare + 1, len(kinds))), prepend=0)
            at = 0
            for index, share in zip(order.tolist(), shares.tolist(), strict=True):
                cause, duration = kinds[index]
                at += gap_ns + int(share)
                low, high = INTENSITY[cause]
                placed.append(
                    ThrottleEpisode(
                        port, direction, cause, at, int(duration), float(rng.uniform(low, high))
                    )
                )
                at += int(duration)
    return tuple(sorted(placed, key=lambda e: (e.start_ns, e.port, e.direction)))


def _active_ns(episode: ThrottleEpisode, model_ns: int) -> int:
    """How much of the episode has passed at ``model_ns``."""
    return min(max(model_ns - episode.start_ns, 0), episode.duration_ns)


def episode_counters(
    episodes: tuple[ThrottleEpisode, ...], port: int, model_ns: int
) -> dict[str, int]:
    """What the episodes of one port have added to each counter by ``model_ns`` (cumulative,
    by kernel name; every counter an episode can move is present, from 0)."""
    pause_ns = {"transmit": 0.0, "receive": 0.0}
    ecn = {"transmit": 0.0, "receive": 0.0}
    stall_ns = 0.0
    for episode in episodes:
        if episode.port != port:
            continue
        passed = _active_ns(episode, model_ns)
        if episode.cause == PFC:
            pause_ns[episode.direction] += passed * episode.intensity
            if episode.direction == "transmit":
                stall_ns += passed * episode.intensity  # the held data waited out the pause
        elif episode.cause == ECN:
            ecn[episode.direction] += passed / 1e9 * episode.intensity
        else:
            stall_ns += passed * episode.intensity
    marked = int(ecn["receive"])
    return {
        f"rx_prio{PFC_PRIORITY}_pause_duration": int(pause_ns["transmit"]) // 1_000,
        f"rx_prio{PFC_PRIORITY}_pause": int(pause_ns["transmit"]) // PAUSE_FRAME_EVERY_NS,
        f"tx_prio{PFC_PRIORITY}_pause_duration": int(pause_ns["receive"]) // 1_000,
        f"tx_prio{PFC_PRIORITY}_pause": int(pause_ns["receive"]) // PAUSE_FRAME_EVERY_NS,
        "rp_cnp_handled": int(ecn["transmit"]),
        "np_ecn_marked_roce_packets": marked,
        "np_cnp_sent": marked // 2,
        "port_xmit_wait": int(stall_ns) // XMIT_WAIT_TICK_NS,
    }


# The magnitudes: what `simulate --throttle-episodes` injects on each port direction.
EPISODE_SECONDS = (0.5, 1.0, 2.0, 5.0)
EPISODES_FILE = "_throttle_episodes.jsonl"


def episode_record(
    episode: ThrottleEpisode, device: str, port: int, wall_offset_ns: int
) -> dict[str, object]:
    """One episode as the simulated trace's ground truth states it (a JSON object): the port
    by name, and its start on the trace's wall clock (model time + ``wall_offset_ns``)."""
    return {
        "device": device,
        "port": port,
        "direction": episode.direction,
        "cause": episode.cause,
        "start_ns": episode.start_ns + wall_offset_ns,
        "duration_ns": episode.duration_ns,
        "intensity": round(episode.intensity, 6),
    }
