"""Silence under a job, and a link slower than its peers: two signatures of a dead path.

A hung job and a dead path look the same from the NIC: the bytes stop while the scheduler
still says the job runs. ``SilenceWatch`` follows each port's byte counter and the jobs
holding it. A port is *silent* once it has carried traffic for the jobs holding it now and
then moved nothing for ``threshold_ns``. Moving again, or the jobs changing (one ended,
another began), ends the silence. A port no job holds is never silent: an idle node is not
a fault. A port that has not carried traffic for the jobs holding it is not silent either:
a job that never used a rail (a storage NIC under a job that reads nothing) is not a hang.
Long legitimate pauses (a checkpoint written to local disk, an evaluation phase without
collectives) last minutes; the default threshold of 10 minutes sits above the ones seen
in training logs, and it can be set.

``below_peers`` compares each port's line rate with its peers' on the same node: ports of
the same device model and link layer. A 200 Gb/s link on a rail of 400 Gb/s NICs has
trained at a lower speed or lost lanes. The kernel's ``rate`` file states speed and width
together ("200 Gb/sec (4X HDR)", drivers/infiniband/core/sysfs.c rate_show), so a lost lane
halves the rate. The line rate used is the data rate after encoding, as everywhere else.
The clock is the caller's; nothing here reads files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PortKey = tuple[str, int]  # (device, port)
DEFAULT_SILENCE_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class SilenceStarted:
    """The port has moved nothing for the threshold while the jobs it served still run."""

    silent_since_ns: int  # when it last moved a byte
    jobs: tuple[str, ...]  # the jobs holding it, by id


@dataclass(frozen=True, slots=True)
class SilenceEnded:
    """The silence is over: the port moved bytes again, or its jobs changed."""

    silent_seconds: float  # from its last byte to the update that ended the silence
    reason: str  # "traffic" or "jobs_changed"


SilenceChange = SilenceStarted | SilenceEnded


@dataclass(slots=True)
class _Watch:
    jobs: tuple[str, ...]
    bytes_total: int | None
    last_moved_ns: int
    carried: bool = False  # moved bytes since these jobs began holding it
    silent: bool = False


@dataclass
class SilenceWatch:
    """Per port: has it gone silent under the jobs it served? One update per drain."""

    threshold_ns: int = int(DEFAULT_SILENCE_SECONDS * 1e9)

    def __post_init__(self) -> None:
        if self.threshold_ns <= 0:
            raise ValueError("the silence threshold must be above 0")
        self._ports: dict[PortKey, _Watch] = {}

    def update(
        self, now_ns: int, ports: Mapping[PortKey, tuple[int | None, tuple[str, ...]]]
    ) -> list[tuple[PortKey, SilenceChange]]:
        """``ports``: each port's cumulative bytes (both directions; None until read) and the
        ids of the running jobs holding it. Returns what started or ended, by port."""
        changes: list[tuple[PortKey, SilenceChange]] = []
        for key in sorted(ports):
            total, jobs = ports[key]
            watch = self._ports.get(key)
            if watch is None:
                self._ports[key] = _Watch(jobs, total, now_ns)
                continue
            if jobs != watch.jobs:
                if watch.silent:
                    silent = (now_ns - watch.last_moved_ns) / 1e9
                    changes.append((key, SilenceEnded(silent, "jobs_changed")))
                self._ports[key] = _Watch(jobs, total, now_ns)
                continue
            moved = (
                total is not None and watch.bytes_total is not None and total > watch.bytes_total
            )
            if total is not None and (watch.bytes_total is None or total < watch.bytes_total):
                # First reading, or the counter went back (a reset the tracker re-baselined):
                # a new baseline, not traffic.
                watch.bytes_total = total
            if moved:
                assert total is not None
                if watch.silent:
                    silent = (now_ns - watch.last_moved_ns) / 1e9
                    changes.append((key, SilenceEnded(silent, "traffic")))
                watch.bytes_total, watch.last_moved_ns = total, now_ns
                watch.carried, watch.silent = bool(jobs), False
            elif (
                jobs
                and watch.carried
                and not watch.silent
                and now_ns - watch.last_moved_ns >= self.threshold_ns
            ):
                watch.silent = True
                changes.append((key, SilenceStarted(watch.last_moved_ns, jobs)))
        for key in set(self._ports) - set(ports):
            del self._ports[key]  # a port that left (its device went away)
        return changes

    def states(self) -> dict[PortKey, int | None]:
        """For the ports that carried traffic for the jobs holding them now (the ports the
        question applies to; absent for the others): when a silent port last moved a byte,
        None for one that is not silent."""
        return {
            key: watch.last_moved_ns if watch.silent else None
            for key, watch in self._ports.items()
            if watch.jobs and watch.carried
        }


@dataclass(frozen=True, slots=True)
class PeerPort:
    """What ``below_peers`` needs of one port."""

    key: PortKey
    model: str  # the device's hca_type ("MT4129"); ports of one model are peers
    link_layer: str  # "InfiniBand" or "Ethernet"
    rate_bytes_per_second: int  # the line rate in force; 0 when unknown


def below_peers(ports: Sequence[PeerPort]) -> dict[PortKey, int]:
    """For every port with at least one peer of known rate: the fastest peer's rate when
    this port's is below it, else 0. Ports without a known rate, a model or peers: absent."""
    groups: dict[tuple[str, str], list[PeerPort]] = {}
    for port in ports:
        if port.model and port.rate_bytes_per_second > 0:
            groups.setdefault((port.model, port.link_layer), []).append(port)
    result: dict[PortKey, int] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        for port in members:
            fastest = max(p.rate_bytes_per_second for p in members if p.key != port.key)
            result[port.key] = fastest if port.rate_bytes_per_second < fastest else 0
    return result
