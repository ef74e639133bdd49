"""A real one-node Slurm for the tests: munged, slurmctld and slurmd started on this host.

``slurm`` (session scope) starts Debian's ``munge`` and ``slurm-wlm`` (22.05) as root in the
foreground, as children of the test, from a generated slurm.conf: absolute paths, free
ports, a munge key and socket of its own, this host as the one node with its CPUs and two
stand-in GPUs (character devices made with mknod, so ``--gres=gpu:N`` gives a job
``SLURM_JOB_GPUS``), no accounting, and as Prolog/Epilog small wrappers that point the
SHIPPED ``systemd/slurm/burstscope-prolog`` and ``-epilog`` at ``jobs_dir`` and log when each
returned. A test can start ``burstscope agent --slurm-jobs-dir <jobs_dir>`` beside it with
``env=cluster.env`` (SLURM_CONF set, so the agent's squeue reaches this controller).

Skips (fails under BURSTSCOPE_REQUIRE_INTEGRATION=1) when not root or a binary is missing:
``make test`` installs both packages as root (scripts/install-system-packages.sh).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from burstscope.testing.processes import LoggedProcess, free_port, wait_for, wait_until
from tests.conftest import require_binary, require_root

REPOSITORY = Path(__file__).resolve().parent.parent
PROLOG = REPOSITORY / "systemd" / "slurm" / "burstscope-prolog"
EPILOG = REPOSITORY / "systemd" / "slurm" / "burstscope-epilog"
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
GPUS = 2
# slurmctld marks a node whose slurmd stopped answering DOWN after SlurmdTimeout and the
# failed pings' MessageTimeout (default 10 s): 26 s here with the default, 13.8 s with
# MessageTimeout=4 (the test cluster's: twice what a loaded VM's RPCs need, 9.9 s with 2).
NODE_FAIL_SECONDS = 60.0
COMMAND_SECONDS = 30.0

HOOK = """#!/bin/sh
# Test wrapper: the shipped script against this cluster's jobs directory, then a line
# saying when it returned (the epilog's removal time for the tests) and its status.
BURSTSCOPE_JOBS_DIR={jobs}
BURSTSCOPE_SLURM_ENV_FILE={root}/no-env-file
export BURSTSCOPE_JOBS_DIR BURSTSCOPE_SLURM_ENV_FILE
{script}
status=$?
printf '%s %s %s %s\\n' {kind} "$SLURM_JOB_ID" "$(date +%s%N)" "$status" >>{root}/hooks.log
exit $status
"""


class SlurmCluster:
    """One controller and one node on this host; every path under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.jobs_dir = root / "jobs"
        self.conf = root / "etc" / "slurm.conf"
        self.hooks_log = root / "hooks.log"
        self.node = socket.gethostname().split(".")[0]
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._munged: LoggedProcess | None = None
        self._slurmctld: LoggedProcess | None = None
        self._slurmd: LoggedProcess | None = None
        self._submitted: list[str] = []

    # -- set up --------------------------------------------------------------------------------

    def write_files(self) -> None:
        root = self.root
        for folder, mode in (
            ("etc", 0o755),
            ("munge-key", 0o700),  # munged refuses a key others can read
            ("munge", 0o755),  # ... and a socket folder others cannot enter
            ("state", 0o755),
            ("spool", 0o755),
            ("log", 0o755),
            ("dev", 0o755),
            ("work", 0o755),
        ):
            (root / folder).mkdir(mode=mode)
            (root / folder).chmod(mode)
        for index in range(GPUS):  # stand-ins for /dev/nvidiaN: gres/gpu only needs devices
            os.mknod(root / "dev" / f"gpu{index}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        for kind, script in (("prolog", PROLOG), ("epilog", EPILOG)):
            hook = root / "etc" / f"{kind}.sh"
            hook.write_text(HOOK.format(jobs=self.jobs_dir, root=root, script=script, kind=kind))
            hook.chmod(0o755)
        (root / "etc" / "gres.conf").write_text(f"Name=gpu File={root}/dev/gpu[0-{GPUS - 1}]\n")
        self.conf.write_text(self.slurm_conf())

    def slurm_conf(self) -> str:
        """slurm.conf(5) for one node: daemons as root, nothing outside ``root``."""
        root = self.root
        cpus = os.cpu_count() or 1
        return f"""\
ClusterName=burstscope
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
SlurmdTimeout=5
MessageTimeout=4
ReturnToService=2
JobRequeue=0
KillWait=2
Prolog={root}/etc/prolog.sh
Epilog={root}/etc/epilog.sh
PrologFlags=Alloc
CommunicationParameters=NoInAddrAny
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} Gres=gpu:{GPUS} State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

    def start(self) -> None:
        self.write_files()
        root = self.root
        subprocess.run(
            ["mungekey", "--create", f"--keyfile={root}/munge-key/munge.key"],
            check=True,
            capture_output=True,
        )
        self._munged = LoggedProcess(
            [
                "munged",
                "--foreground",
                f"--key-file={root}/munge-key/munge.key",
                f"--socket={root}/munge/munge.socket",
                f"--pid-file={root}/munge/munged.pid",
                f"--log-file={root}/log/munged.log",
                f"--seed-file={root}/munge/munged.seed",
            ]
        )
        socket_path = root / "munge" / "munge.socket"
        wait_for(lambda: self._alive(self._munged) and socket_path.exists(), 30, "munged")
        self._slurmctld = LoggedProcess(["slurmctld", "-D", "-f", str(self.conf)], env=self.env)
        wait_for(
            lambda: self._alive(self._slurmctld) and "is UP" in self.run("scontrol", "ping").stdout,
            COMMAND_SECONDS,
            "slurmctld to answer",
        )
        self.start_slurmd()

    def start_slurmd(self) -> None:
        self._slurmd = LoggedProcess(
            ["slurmd", "-D", "-N", self.node, "-f", str(self.conf)], env=self.env
        )
        self.wait_idle()

    @staticmethod
    def _alive(process: LoggedProcess | None) -> bool:
        assert process is not None
        if process.process.poll() is not None:
            pytest.fail(f"{process.process.args!r} exited: {process.stderr}")
        return True

    def wait_idle(self, timeout: float = COMMAND_SECONDS) -> None:
        """Until the node takes jobs (idle: nothing running, nothing completing)."""

        def idle() -> bool:
            self._alive(self._slurmd)
            state = self.run("sinfo", "--noheader", f"--nodes={self.node}", "--format=%T")
            return state.stdout.strip() == "idle"

        wait_for(idle, timeout, f"node {self.node} idle; slurmd: {self._log('slurmd')}")

    # -- what tests do -------------------------------------------------------------------------

    def run(self, *argv: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            env=self.env,
            capture_output=True,
            text=True,
            check=check,
            timeout=COMMAND_SECONDS,
            cwd=self.root / "work",
        )

    def sbatch(self, *args: str) -> str:
        """Submits a batch job; its id."""
        done = self.run("sbatch", "--parsable", "--output=/dev/null", *args, check=True)
        job_id = done.stdout.strip().split(";")[0]
        self._submitted.append(job_id)
        return job_id

    def state(self, job_id: str) -> str:
        """The job's state as squeue says it ("" when squeue no longer lists it)."""
        done = self.run("squeue", "--noheader", "--states=all", f"--jobs={job_id}", "--format=%T")
        return done.stdout.strip()

    def hook_returned(self, kind: str, job_id: str) -> tuple[float, int] | None:
        """(Unix time, exit status) when the prolog or epilog of a job returned, if it has."""
        if not self.hooks_log.exists():
            return None
        for line in self.hooks_log.read_text().splitlines():
            logged_kind, logged_job, time_ns, status = line.split()
            if (logged_kind, logged_job) == (kind, job_id):
                return int(time_ns) / 1e9, int(status)
        return None

    def kill_slurmd(self) -> None:
        """SIGKILL slurmd, as a crash would: its jobs' processes run on, no epilog runs."""
        assert self._slurmd is not None
        self._slurmd.kill()

    # -- tear down -----------------------------------------------------------------------------

    def stop(self) -> None:
        slurmd_alive = self._slurmd is not None and self._slurmd.process.poll() is None
        if self._slurmctld is not None and slurmd_alive and self._submitted:
            self.run("scancel", *self._submitted)
            wait_until(lambda: not self._job_processes(), 20)  # epilogs run, steps end
        for process in (self._slurmd, self._slurmctld, self._munged):
            if process is not None and process.process.poll() is None:
                process.stop(timeout=30)
        # What a killed slurmd left running: this cluster's job processes, never another's.
        for pid in self._job_processes():
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                os.kill(pid, signal.SIGKILL)

    def _job_processes(self) -> list[int]:
        """This cluster's slurmstepd processes and the job processes under them: found by
        this cluster's SLURM_CONF in their environment (sbatch passes the submitter's on to
        the job; slurmd, which we start with it, to slurmstepd) and by a job's own marks."""
        mine = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes()
                environment = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            in_job = any(variable.startswith(b"SLURM_JOB_ID=") for variable in environment)
            stepd = command.startswith(b"slurmstepd:")
            if mine in environment and (stepd or in_job):
                found.append(int(entry.name))
        return found

    def _log(self, daemon: str) -> str:
        path = self.root / "log" / f"{daemon}.log"
        return "\n".join(path.read_text().splitlines()[-20:]) if path.exists() else "(no log)"


def require_slurm() -> None:
    """Skip (or fail under BURSTSCOPE_REQUIRE_INTEGRATION=1) without root or the binaries."""
    require_root()
    for name in BINARIES:
        require_binary(name)


@pytest.fixture(scope="session", name="slurm")
def slurm_fixture() -> Iterator[SlurmCluster]:
    """The running cluster; stopped, every job cancelled, at the end of the session."""
    require_slurm()
    # Not under pytest's 0700 temporary folders: munged wants every folder above its socket
    # open to all (and an agent under test need not be root to read the jobs directory).
    root = Path(tempfile.mkdtemp(prefix="burstscope-slurm-"))
    root.chmod(0o755)
    cluster = SlurmCluster(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
