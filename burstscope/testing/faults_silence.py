"""Injected silent NICs and slow links on the simulated node, and the detectors scored on them.

The truth is the injection: a rail whose counters stop moving at a known second (its NIC or
path died) while the job holding the node runs on, or a rail whose line rate is a fraction
of its peers' (a link that trained at a lower speed or width). The simulated MoE node moves
bytes on every rail every second (``TrafficModel.counters_at``), so a clean run has nothing
to find; the detectors see the counters once a second, as the agent's drain does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from burstscope.collector.simulation.model import TrafficModel
from burstscope.detectors.silence import PeerPort, SilenceStarted, SilenceWatch, below_peers
from burstscope.testing import scoring

SECOND_NS = 1_000_000_000
JOB = ("5150",)


@dataclass(frozen=True, slots=True)
class SilentRail:
    """Rail ``port`` of the node stops moving bytes at ``at_s`` (model seconds)."""

    port: int
    at_s: int


@dataclass(frozen=True, slots=True)
class SilenceScore:
    injected: int
    found: int  # injected rails reported silent at threshold after their last byte, +- 1 s
    false_alarms: int  # silences reported on rails nothing was injected into
    delays_s: tuple[float, ...]  # from each found rail's stop to its report

    @property
    def recall(self) -> float:
        return scoring.recall(self.found, self.injected)

    @property
    def precision(self) -> float:
        return scoring.precision(self.found, self.false_alarms)


def node_counters(seed: int, seconds: int, profile: str = "moe") -> np.ndarray:
    """Cumulative bytes, both directions, per port and second: (ports, seconds)."""
    model = TrafficModel(profile, seed=seed)
    times = np.arange(1, seconds + 1, dtype=np.int64) * SECOND_NS
    xmit, rcv = model.counters_at(times)
    return np.asarray(xmit + rcv, dtype=np.int64)


def inject_silence(counters: np.ndarray, faults: Sequence[SilentRail]) -> np.ndarray:
    """The counters with each faulty rail frozen from its second on."""
    out = counters.copy()
    for fault in faults:
        out[fault.port, fault.at_s - 1 :] = out[fault.port, fault.at_s - 2]
    return out


def score_silence(
    counters: np.ndarray, faults: Sequence[SilentRail], threshold_s: int
) -> SilenceScore:
    """SilenceWatch over the counters, one update a second, a job holding every port."""
    watch = SilenceWatch(threshold_s * SECOND_NS)
    faulty = {fault.port: fault for fault in faults}
    reported: dict[int, float] = {}
    false_alarms = 0
    for second in range(counters.shape[1]):
        now = (second + 1) * SECOND_NS
        ports = {("sim", port): (int(counters[port, second]), JOB) for port in range(len(counters))}
        for (_, port), change in watch.update(now, ports):
            if not isinstance(change, SilenceStarted):
                continue
            if port in faulty:
                reported.setdefault(port, now / SECOND_NS)
            else:
                false_alarms += 1
    found, delays = 0, []
    for port, fault in faulty.items():
        if port in reported:
            # The last byte moved in the second before ``at_s``; the report comes a threshold
            # after the update that saw it, give or take the one-second update period.
            delay = reported[port] - (fault.at_s - 1)
            delays.append(delay)
            found += abs(delay - threshold_s) <= 1
    return SilenceScore(len(faults), found, false_alarms, tuple(delays))


@dataclass(frozen=True, slots=True)
class PeerScore:
    injected: int
    found: int
    false_alarms: int
    smallest_fraction_found: float | None  # the mildest slowdown (rate / peers') flagged


def score_below_peers(
    rates: Sequence[int], slow: dict[int, float], model: str = "MT4129"
) -> PeerScore:
    """below_peers on one node whose rails ``slow`` (port -> fraction) run below the rest."""
    ports = [
        PeerPort(("sim", port), model, "Ethernet", int(rate * slow.get(port, 1.0)))
        for port, rate in enumerate(rates)
    ]
    flagged = {key[1] for key, fastest in below_peers(ports).items() if fastest}
    found = flagged & set(slow)
    fractions = [slow[port] for port in found]
    return PeerScore(
        len(slow), len(found), len(flagged - set(slow)), max(fractions) if fractions else None
    )
