"""Slurm jobs without Slurm: the shipped prolog and epilog run as slurmd would run them.

For tests and benchmarks that need jobs on a node (a real Slurm is in
tests/test_slurm_integration.py): the scripts are the ones the wheel installs
(``burstscope install-files``), given the environment slurmd gives a prolog.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import burstscope

SCRIPTS = Path(burstscope.__file__).resolve().parent / "data-files" / "systemd" / "slurm"
PROLOG = SCRIPTS / "burstscope-prolog"
EPILOG = SCRIPTS / "burstscope-epilog"


def _run(script: Path, jobs: Path, job_id: int, user: str, gpus: str | None) -> None:
    environment = {
        "BURSTSCOPE_JOBS_DIR": str(jobs),
        # No /etc/burstscope/slurm-jobs.env of this machine's may point elsewhere.
        "BURSTSCOPE_SLURM_ENV_FILE": os.devnull,
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOB_USER": user,
        "SLURM_JOB_UID": "1000",
        "SLURM_NODELIST": "gpu-[001-004]",
    }
    if gpus is not None:
        environment["SLURM_JOB_GPUS"] = gpus
    subprocess.run([str(script)], env=environment, check=True, capture_output=True)


def start_job(jobs: Path, job_id: int, user: str = "alice", gpus: str | None = None) -> None:
    """The prolog of job ``job_id`` on this node: its file appears in ``jobs``."""
    _run(PROLOG, jobs, job_id, user, gpus)


def end_job(jobs: Path, job_id: int) -> None:
    """The epilog of job ``job_id``: its file goes."""
    _run(EPILOG, jobs, job_id, "", None)
