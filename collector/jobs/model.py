"""Jobs on this node and the ports they hold: what every output says about whose burst it is.

A job source (Slurm's prolog files, the kubelet's pod-resources API) says which jobs run here
and what each holds (GPUs, RDMA devices, or the whole node): a ``Claim``. The topology
(collector.jobs.topology) turns a claim into ``Holding`` rows, one per port, each saying which
rule decided. The watcher (collector.jobs.watcher) publishes the result as an immutable
``JobTable``, the one answer every output reads (exporter, MQTT, top, the trace's side table).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

# Which schedulers a job can come from (burstscope_job_info's scheduler label).
SLURM = "slurm"
KUBERNETES = "kubernetes"

# A held port's role: compute ports carry the job's collectives and are counted in its
# per-job figures; storage ports (configured: Acme's fifth NIC) are held but reported apart.
COMPUTE = "compute"
STORAGE = "storage"
ROLES = (COMPUTE, STORAGE)

# Which rule gave a job a port (burstscope_job_port's rule label).
RULE_WHOLE_NODE = "whole_node"  # the job holds every GPU of the node, or names none
RULE_PCIE_SWITCH = "pcie_switch"  # the port's NIC shares a PCIe switch with a job's GPU
RULE_NUMA_NODE = "numa_node"  # no NIC under the GPU's switch: a NIC on the GPU's NUMA node
RULE_DEVICE = "device"  # the job was given the RDMA device itself (an SR-IOV VF's PCI address)
RULE_RESOURCE = "resource"  # a shared RDMA resource, mapped to devices by configuration
RULES = (RULE_WHOLE_NODE, RULE_PCIE_SWITCH, RULE_NUMA_NODE, RULE_DEVICE, RULE_RESOURCE)


@dataclass(frozen=True, slots=True)
class Job:
    """One job's identity, as its scheduler states it; "" where the scheduler does not say."""

    job_id: str  # Slurm: SLURM_JOB_ID; Kubernetes: the owner's namespace/name, else namespace/pod
    scheduler: str  # SLURM or KUBERNETES
    user: str = ""  # SLURM_JOB_USER; a pod has no user
    name: str = ""  # SLURM_JOB_NAME; Kubernetes: the owning object's name (PyTorchJob, JobSet)
    step: str = ""  # the job step, where the scheduler says
    nodes: str = ""  # SLURM_JOB_NODELIST as Slurm writes it (gpu-[001-004])
    start_time: float = 0.0  # Unix seconds when it started here; 0 when not known
    namespace: str = ""  # Kubernetes namespace
    pod: str = ""  # Kubernetes pod(s) on this node, comma-separated


@dataclass(frozen=True, slots=True)
class Claim:
    """What a source says one job holds on this node, before the topology maps it to ports.

    No GPUs and no devices means the whole node (a Slurm job without GRES, an exclusive job).
    """

    job: Job
    # GPUs as the source names them: an index ("3": Slurm's SLURM_JOB_GPUS), a UUID
    # ("GPU-8f6f..."; the kubelet's nvidia.com/gpu IDs) or a PCI address ("0000:3b:00.0").
    gpus: tuple[str, ...] = ()
    # RDMA devices given to the job itself: a device name ("mlx5_3") or a PCI address (an
    # SR-IOV virtual function), with the rule that says how the source knew.
    devices: tuple[tuple[str, str], ...] = ()  # (device or PCI address, RULE_DEVICE|RESOURCE)
    whole_node: bool = False


@dataclass(frozen=True, slots=True)
class Holding:
    """One port a job holds, and why."""

    job_id: str
    device: str
    port: int
    role: str  # COMPUTE or STORAGE
    rule: str  # one of RULES


@dataclass(frozen=True, slots=True)
class JobTable:
    """The jobs running here now and the ports they hold; immutable, shared by every reader."""

    jobs: tuple[Job, ...] = ()
    holdings: tuple[Holding, ...] = ()
    # Per port, the jobs holding it (a port under two jobs' GPUs by the NUMA rule is both's).
    _by_port: dict[tuple[str, int], tuple[Job, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @classmethod
    def build(cls, jobs: Sequence[Job], holdings: Sequence[Holding]) -> JobTable:
        """A table in a canonical order (jobs by id, holdings by job, device, port)."""
        ordered = tuple(sorted(jobs, key=lambda job: job.job_id))
        rows = tuple(sorted(set(holdings), key=lambda h: (h.job_id, h.device, h.port, h.role)))
        by_id = {job.job_id: job for job in ordered}
        by_port: dict[tuple[str, int], list[Job]] = {}
        for holding in rows:
            job = by_id.get(holding.job_id)
            if job is not None and job not in by_port.setdefault(
                (holding.device, holding.port), []
            ):
                by_port[(holding.device, holding.port)].append(job)
        return cls(ordered, rows, {port: tuple(held) for port, held in by_port.items()})

    def jobs_of(self, device: str, port: int) -> tuple[Job, ...]:
        """The jobs holding a port; () for a port no job holds."""
        return self._by_port.get((device, port), ())

    def holdings_of(self, job_id: str) -> tuple[Holding, ...]:
        return tuple(holding for holding in self.holdings if holding.job_id == job_id)

    def job(self, job_id: str) -> Job | None:
        for job in self.jobs:
            if job.job_id == job_id:
                return job
        return None


EMPTY_TABLE = JobTable()


@dataclass(frozen=True, slots=True)
class JobFigures:
    """One running job's totals on this node since it was first seen, over its compute ports
    and both directions (collector.jobs.accounting adds each drain's increments to the jobs
    holding the port then: a job's start and end are resolved to one drain, 1 s)."""

    saturated_seconds: float = 0.0
    hidden_saturated_seconds: float = 0.0
    burst_bytes: int = 0


class JobSource(Protocol):
    """One scheduler's view of this node's jobs. ``poll`` is called off the 1 ms path (the
    watcher's thread, a few times a second) and must be cheap when nothing changed."""

    name: str  # "slurm", "kubernetes": in log lines

    def poll(self) -> list[Claim] | None:
        """The jobs running here now; None when they cannot be read this time (the watcher
        keeps the previous answer and counts the failure: a kubelet restart is not every
        job ending)."""
        ...

    def close(self) -> None: ...
