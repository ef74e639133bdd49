"""The shipped Slurm prolog and epilog, run as slurmd runs them: what they write, that they
never fail a job, and that install-files writes them out executable.

slurmd gives a prolog a bare environment (no PATH) with the job's variables (man
slurm.conf(5), "PROLOG AND EPILOG SCRIPTS"); ``run_script`` does the same with ``env``
built here. The real slurmd runs them in tests/test_slurm_integration.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from burstscope.collector.jobs import slurm as slurm_module
from burstscope.collector.jobs.model import SLURM, Claim, Job
from burstscope.collector.jobs.slurm import SlurmJobs
from tests.test_jobs_slurm import write_job

REPOSITORY = Path(__file__).resolve().parent.parent
PROLOG = REPOSITORY / "systemd" / "slurm" / "burstscope-prolog"
EPILOG = REPOSITORY / "systemd" / "slurm" / "burstscope-epilog"

# A job name with every awkward byte a user can give sbatch --job-name (no NUL: an
# environment string cannot hold one).
AWKWARD_NAME = b"train=llama\n70b|%s \xff\tend"

# What slurmd 22.05 gave the prolog for a GPU job (seen on Debian 12's slurm-wlm: see
# tests/test_slurm_integration.py), less the paths.
SLURMD_ENVIRONMENT = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOBID": "4242",
    "SLURM_JOB_USER": "alice",
    "SLURM_JOB_UID": "1000",
    "SLURM_JOB_GID": "1000",
    "SLURM_JOB_PARTITION": "gpu",
    "SLURM_NODELIST": "gpu-[001-004]",
    "SLURM_CLUSTER_NAME": "acme",
    "SLURMD_NODENAME": "gpu-002",
    "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
    "SLURM_JOB_GPUS": "2,3",
    "CUDA_VISIBLE_DEVICES": "2,3",
    "GPU_DEVICE_ORDINAL": "2,3",
}


def run_script(
    script: Path,
    jobs_dir: Path | None,
    environment: Mapping[str, str | bytes],
    **extra: str | bytes,
) -> subprocess.CompletedProcess[str]:
    """The script as slurmd runs it: a bare environment (no PATH), the job's variables."""
    env: dict[bytes, bytes] = {
        key.encode(): value if isinstance(value, bytes) else value.encode()
        for key, value in {**environment, **extra}.items()
    }
    if jobs_dir is not None:
        env[b"BURSTSCOPE_JOBS_DIR"] = os.fsencode(jobs_dir)
    env.setdefault(b"BURSTSCOPE_SLURM_ENV_FILE", b"/nonexistent/slurm-jobs.env")
    return subprocess.run(
        [str(script)], env=env, capture_output=True, text=True, check=False, timeout=30
    )


# -- the prolog and epilog ----------------------------------------------------------------


def test_the_prolog_records_what_slurmd_gives_and_the_epilog_removes_it(
    tmp_path: Path,
) -> None:
    jobs_dir = tmp_path / "run" / "jobs"  # made by the prolog
    before = time.time()
    # A job's working directory is more than other users may see: not recorded.
    result = run_script(
        PROLOG,
        jobs_dir,
        SLURMD_ENVIRONMENT,
        SLURM_JOB_NAME=AWKWARD_NAME,
        SLURM_JOB_WORK_DIR="/home/alice/secret-project",
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    path = jobs_dir / "slurm-4242.job"
    assert oct(path.stat().st_mode & 0o7777) == "0o644"
    assert oct(jobs_dir.stat().st_mode & 0o7777) == "0o755"
    assert os.listdir(jobs_dir) == ["slurm-4242.job"]  # the temporary file was renamed
    records = path.read_bytes().split(b"\0")
    assert records[0] == b"BURSTSCOPE_SLURM_JOB_FORMAT=1"
    prolog_time = int(records[1].removeprefix(b"BURSTSCOPE_PROLOG_TIME="))
    assert before - 1 <= prolog_time <= time.time()
    expected = {
        f"{key}={value}".encode()
        for key, value in SLURMD_ENVIRONMENT.items()
        if key not in ("SLURM_JOBID", "SLURM_JOB_GID", "SLURM_SCRIPT_CONTEXT")
    }
    assert set(records[2:-1]) == expected | {b"SLURM_JOB_NAME=" + AWKWARD_NAME}
    assert records[-1] == b""
    source = SlurmJobs(tmp_path / "run" / "jobs", squeue=None)
    try:
        job = Job(
            "4242",
            SLURM,
            user="alice",
            name=AWKWARD_NAME.decode("utf-8", "replace"),
            nodes="gpu-[001-004]",
            start_time=float(prolog_time),
        )
        assert source.poll() == [Claim(job, gpus=("2", "3"))]
        result = run_script(EPILOG, jobs_dir, SLURMD_ENVIRONMENT)
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
        assert os.listdir(jobs_dir) == []
        assert source.poll() == []
        assert source.malformed_files == 0
    finally:
        source.close()


def test_the_environment_file_names_the_directory_unless_the_environment_does(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / "slurm-jobs.env"
    env_file.write_text(f"BURSTSCOPE_JOBS_DIR={tmp_path / 'from-file'}\n")
    job = {"SLURM_JOB_ID": "7", "BURSTSCOPE_SLURM_ENV_FILE": str(env_file)}
    assert run_script(PROLOG, None, job).returncode == 0
    assert os.listdir(tmp_path / "from-file") == ["slurm-7.job"]
    assert run_script(PROLOG, tmp_path / "from-environment", job).returncode == 0
    assert os.listdir(tmp_path / "from-environment") == ["slurm-7.job"]
    assert run_script(EPILOG, None, job).returncode == 0
    assert os.listdir(tmp_path / "from-file") == []


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no job id", "burstscope-prolog: SLURM_JOB_ID is '', not a job id: nothing recorded"),
        ("bad job id", "burstscope-prolog: SLURM_JOB_ID is '1;rm', not a job id: nothing recorded"),
        (
            "directory is a file",
            "burstscope-prolog: job 9: cannot create {dir}: the agent will not see this job",
        ),
        ("broken environment file", "burstscope-prolog: {env} has an error: ignored"),
    ],
)
def test_the_prolog_never_fails_the_job(tmp_path: Path, case: str, message: str) -> None:
    """A failing prolog drains the node (man slurm.conf): exit 0 and one line on stderr."""
    jobs_dir = tmp_path / "jobs"
    env_file = tmp_path / "bad.env"
    environment = {"SLURM_JOB_ID": "9"}
    if case == "no job id":
        environment = {}
    elif case == "bad job id":
        environment = {"SLURM_JOB_ID": "1;rm"}
    elif case == "directory is a file":
        jobs_dir.write_text("")
    else:
        env_file.write_text("if then\n")
        environment["BURSTSCOPE_SLURM_ENV_FILE"] = str(env_file)
    result = run_script(PROLOG, jobs_dir, environment)
    assert result.returncode == 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("burstscope-")]
    assert lines == [message.format(dir=jobs_dir, env=env_file)]
    if case == "broken environment file":  # the job is still recorded, in the default place
        assert os.listdir(jobs_dir) == ["slurm-9.job"]


def test_the_epilog_never_fails_the_job(tmp_path: Path) -> None:
    assert run_script(EPILOG, tmp_path / "missing", {"SLURM_JOB_ID": "9"}).returncode == 0
    result = run_script(EPILOG, tmp_path, {})
    assert result.returncode == 0
    assert result.stderr == "burstscope-epilog: SLURM_JOB_ID is '', not a job id: nothing removed\n"
    # A prolog killed mid-write left its temporary file: the epilog takes it too.
    jobs_dir = tmp_path / "jobs"
    jobs_dir.mkdir()
    (jobs_dir / ".slurm-9.job.123").write_bytes(b"BURSTSCOPE_SLURM_JOB_FORMAT=1\0SLURM_")
    write_job(jobs_dir, "9")
    write_job(jobs_dir, "99")
    assert run_script(EPILOG, jobs_dir, {"SLURM_JOB_ID": "9"}).returncode == 0
    assert os.listdir(jobs_dir) == ["slurm-99.job"]


def test_install_files_writes_the_scripts_executable(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "burstscope", "install-files", "--prefix", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in ("burstscope-prolog", "burstscope-epilog"):
        installed = tmp_path / "systemd" / "slurm" / name
        assert installed.read_bytes() == (PROLOG.parent / name).read_bytes()
        assert oct(installed.stat().st_mode & 0o777) == "0o755"
    tmpfiles = tmp_path / "systemd" / "slurm" / "burstscope-jobs.tmpfiles.conf"
    assert oct(tmpfiles.stat().st_mode & 0o777) != "0o755"


def test_the_tmpfiles_entry_makes_the_directory_the_prolog_and_agent_use(tmp_path: Path) -> None:
    conf = PROLOG.parent / "burstscope-jobs.tmpfiles.conf"
    lines = [line for line in conf.read_text().splitlines() if not line.startswith("#")]
    assert lines == [f"d {slurm_module.DEFAULT_DIRECTORY} 0755 root root -"]
    for script in (PROLOG, EPILOG):  # the scripts' default
        assert "${BURSTSCOPE_JOBS_DIR:-/run/burstscope/jobs}" in script.read_text()
