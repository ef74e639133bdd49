"""Job attribution: which job (Slurm, Kubernetes) holds each port, for every output."""

from burstscope.collector.jobs.model import (
    COMPUTE,
    EMPTY_TABLE,
    KUBERNETES,
    RULES,
    SLURM,
    STORAGE,
    Claim,
    Holding,
    Job,
    JobFigures,
    JobSource,
    JobTable,
)

__all__ = [
    "COMPUTE",
    "EMPTY_TABLE",
    "KUBERNETES",
    "RULES",
    "SLURM",
    "STORAGE",
    "Claim",
    "Holding",
    "Job",
    "JobFigures",
    "JobSource",
    "JobTable",
]
