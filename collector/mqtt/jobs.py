"""The jobs on the bus: which jobs a burst or link event's port belongs to, and job events.

Every burst, summary and link event carries ``jobs``: one small object per job holding the
port when the event was detected (the table in force at the drain that closed the burst,
the snapshot's table for link events), ``[]`` when no job holds it::

    "jobs": [{"job_id": "4242", "scheduler": "slurm", "user": "alice",
              "name": "llama-pretrain", "role": "compute"}]

``role`` says whether the job uses the port for its collectives (``compute``) or as its
storage port. The node topic (``burstscope/<host>/event``) says when a job starts, changes
its ports or ends on the node: ``job_started``, ``job_changed``, ``job_ended``, with the
job's fields and its ports.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from burstscope.collector.jobs.model import Holding, JobTable
    from burstscope.collector.mqtt.messages import Identity


@dataclass(frozen=True, slots=True)
class JobTag:
    """One job holding a port, as events name it."""

    job_id: str
    scheduler: str
    user: str
    name: str
    role: str  # compute or storage

    def payload(self) -> dict[str, str]:
        return {
            "job_id": self.job_id,
            "scheduler": self.scheduler,
            "user": self.user,
            "name": self.name,
            "role": self.role,
        }


def port_tags(table: JobTable, device: str, port: int) -> tuple[JobTag, ...]:
    """The jobs holding ``device`` port ``port`` in ``table``, by job id; () for none."""
    jobs = table.jobs_of(device, port)
    if not jobs:
        return ()
    roles = {h.job_id: h.role for h in table.holdings if h.device == device and h.port == port}
    return tuple(
        JobTag(job.job_id, job.scheduler, job.user, job.name, roles.get(job.job_id, ""))
        for job in jobs
    )


def jobs_field(tags: tuple[JobTag, ...]) -> list[dict[str, str]]:
    return [tag.payload() for tag in tags]


def union(first: tuple[JobTag, ...], second: tuple[JobTag, ...]) -> tuple[JobTag, ...]:
    """The tags of both, each once, in order of first appearance (a window's summary)."""
    return first + tuple(tag for tag in second if tag not in first)


def _ports(holdings: tuple[Holding, ...]) -> list[dict[str, Any]]:
    return [{"device": h.device, "port": h.port, "role": h.role, "rule": h.rule} for h in holdings]


def job_events(
    identity: Identity, before: JobTable, after: JobTable, now_ns: int
) -> list[dict[str, Any]]:
    """Node-topic events for the jobs that started, changed (fields or ports) or ended
    between two tables; [] when nothing did."""
    events = []
    old = {job.job_id: job for job in before.jobs}
    new = {job.job_id: job for job in after.jobs}
    for job_id in sorted(old.keys() | new.keys()):
        job = new.get(job_id) or old[job_id]
        holdings = after.holdings_of(job_id) if job_id in new else before.holdings_of(job_id)
        if job_id not in old:
            kind = "job_started"
        elif job_id not in new:
            kind = "job_ended"
        elif old[job_id] != new[job_id] or before.holdings_of(job_id) != holdings:
            kind = "job_changed"
        else:
            continue
        events.append(
            {
                "kind": kind,
                "host": identity.host,
                "time_ns": now_ns,
                **asdict(job),
                "ports": _ports(holdings),
                "run": identity.run,
            }
        )
    return events
