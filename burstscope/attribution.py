"""The agent's job attribution: its settings, and the watcher built from them.

Sources are optional by nature: a node whose Slurm prolog never wrote a job, or without the
kubelet's pod-resources socket, simply has no jobs from it, said once in the log. The
Kubernetes client needs grpcio (the ``kubernetes`` extra): without it that source is off,
with one log line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from burstscope.collector.jobs.kubernetes import DEFAULT_KUBELET_SOCKET
from burstscope.collector.jobs.model import Claim, Holding, Job, JobSource
from burstscope.collector.jobs.slurm import DEFAULT_DIRECTORY as DEFAULT_SLURM_DIR
from burstscope.collector.jobs.slurm import SlurmJobs
from burstscope.collector.jobs.watcher import JobWatcher
from burstscope.collector.sources.base import PortSpec
from burstscope.detectors.silence import DEFAULT_SILENCE_SECONDS

DEFAULT_PROC_ROOT = "/proc"  # where the NVIDIA driver's gpus/ folder is
# [jobs] keys handed to the Kubernetes source without their prefix.
KUBERNETES_KEYS = ("kubernetes_api", "kubernetes_token_file", "kubernetes_ca_file")
# [jobs] keys naming which kubelet resources (fnmatch patterns) are GPUs, SR-IOV VFs or shared
# RDMA devices, and the ResourceNames field each sets.
RESOURCE_KEYS = (
    ("gpu_resources", "gpus"),
    ("sriov_resources", "sriov"),
    ("shared_rdma_resources", "shared_rdma"),
)


@dataclass(frozen=True, slots=True)
class JobSettings:
    """[jobs] in the configuration file, with --slurm-jobs-dir, --kubelet-socket, --no-jobs."""

    enabled: bool = True
    slurm_dir: str = DEFAULT_SLURM_DIR
    slurm_max_age_seconds: float | None = None  # None: the Slurm source's default
    # A port silent this long under the jobs it served is reported (detectors.silence).
    silence_seconds: float = DEFAULT_SILENCE_SECONDS
    kubelet_socket: str = DEFAULT_KUBELET_SOCKET
    # Options passed to the Kubernetes source as given ([jobs] kubernetes_* keys).
    kubernetes: tuple[tuple[str, Any], ...] = ()
    # RDMA shared device plugin resources: resource name -> the RDMA devices it hands out.
    rdma_resources: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Resource name patterns by ResourceNames field; unset: the Kubernetes source's defaults.
    resource_names: tuple[tuple[str, tuple[str, ...]], ...] = ()
    storage_devices: tuple[str, ...] = ()
    gres_conf: str | None = None
    proc_root: str = DEFAULT_PROC_ROOT
    poll_seconds: float = 0.25


def job_settings(config_get: Any, args: Any) -> JobSettings:
    """The settings in force: flags over the file's [jobs] table over defaults."""

    def pick(flag: str, key: str, default: Any) -> Any:
        value = getattr(args, flag, None)
        return value if value is not None else config_get("jobs", key, default)

    enabled = config_get("jobs", "enabled", True) and not getattr(args, "no_jobs", False)
    kubernetes = tuple(
        (key.removeprefix("kubernetes_"), config_get("jobs", key))
        for key in KUBERNETES_KEYS
        if config_get("jobs", key) is not None
    )
    resources = config_get("jobs", "rdma_resources", {})
    return JobSettings(
        enabled=bool(enabled),
        slurm_dir=pick("slurm_jobs_dir", "slurm_dir", DEFAULT_SLURM_DIR),
        slurm_max_age_seconds=config_get("jobs", "slurm_max_age", None),
        silence_seconds=config_get("jobs", "silence", DEFAULT_SILENCE_SECONDS),
        kubelet_socket=pick("kubelet_socket", "kubelet_socket", DEFAULT_KUBELET_SOCKET),
        kubernetes=kubernetes,
        rdma_resources=tuple(sorted((name, tuple(devs)) for name, devs in resources.items())),
        resource_names=tuple(
            (field_name, tuple(config_get("jobs", key)))
            for key, field_name in RESOURCE_KEYS
            if config_get("jobs", key) is not None
        ),
        storage_devices=tuple(config_get("jobs", "storage_devices", ())),
        gres_conf=config_get("jobs", "gres_conf", None),
        proc_root=config_get("jobs", "proc_root", DEFAULT_PROC_ROOT),
    )


Note = tuple[int, str]  # (logging level, line): said when the watcher starts


def job_sources(settings: JobSettings, notes: list[Note]) -> list[JobSource]:
    """The sources this node has; each absent one said once (in ``notes``)."""
    sources: list[JobSource] = []
    # Always: /run is empty after a boot until the prolog of the first job makes the
    # directory, and an agent started before that must still see the job (the source says
    # once that the directory is missing; a poll of a missing directory is one failed stat).
    kwargs: dict[str, Any] = {}
    if settings.slurm_max_age_seconds is not None:
        kwargs["max_age_seconds"] = settings.slurm_max_age_seconds
    sources.append(SlurmJobs(settings.slurm_dir, **kwargs))
    notes.append(
        (
            logging.INFO,
            f"jobs: Slurm jobs from {settings.slurm_dir} (the shipped prolog writes them)",
        )
    )
    if os.path.exists(settings.kubelet_socket):
        kubernetes = _kubernetes(settings, notes)
        if kubernetes is not None:
            sources.append(kubernetes)
    else:
        notes.append(
            (
                logging.INFO,
                f"jobs: no kubelet pod-resources socket at {settings.kubelet_socket}: "
                "no Kubernetes jobs",
            )
        )
    return sources


def _kubernetes(settings: JobSettings, notes: list[Note]) -> JobSource | None:
    """The pod-resources source, or None (said once) when its client cannot run here."""
    try:
        from burstscope.collector.jobs.kubernetes import PodResourcesJobs, ResourceNames
    except ImportError as exc:
        notes.append(
            (
                logging.WARNING,
                f"jobs: kubelet socket {settings.kubelet_socket} present but the Kubernetes "
                f"client cannot load ({exc}; install burstscope[kubernetes]): no Kubernetes jobs",
            )
        )
        return None
    try:
        source = PodResourcesJobs(
            settings.kubelet_socket,
            rdma_resources=dict(settings.rdma_resources),
            resource_names=ResourceNames(**dict(settings.resource_names)),
            **dict(settings.kubernetes),
        )
    except ValueError as exc:
        raise JobSettingsError(f"[jobs] {exc}") from None
    if source.off:
        return None  # it said why, once
    notes.append(
        (logging.INFO, f"jobs: reading pods from the kubelet at {settings.kubelet_socket}")
    )
    return source


class JobSettingsError(Exception):
    """A [jobs] setting that only the source can judge (an API server URL): exit status 2."""


def build_watcher(
    settings: JobSettings, ports: Sequence[PortSpec], sysfs_root: str
) -> JobWatcher | None:
    """The watcher for this node, or None when attribution is off."""
    if not settings.enabled:
        return None
    notes: list[Note] = []
    sources = job_sources(settings, notes)
    from burstscope.collector.jobs.topology import Topology

    built: list[Topology] = []

    def resolve(claims: Sequence[Claim]) -> tuple[list[Job], list[Holding]]:
        # Read at the first job, in the watcher's thread: a node that never runs one never
        # walks its PCI tree, and nothing is logged by an agent whose start fails.
        if not built:
            built.append(
                Topology(
                    sysfs_root,
                    settings.proc_root,
                    ports,
                    storage_devices=settings.storage_devices,
                    gres_conf=settings.gres_conf,
                )
            )
        return built[0].resolve(claims)

    watcher = JobWatcher(sources, resolve, settings.poll_seconds)
    watcher.start_notes.extend(notes)
    return watcher
