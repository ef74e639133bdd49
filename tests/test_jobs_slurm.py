"""SlurmJobs without a Slurm: job files written here as the prolog writes them, and a stub squeue.

``squeue`` is a stub script put first on PATH that prints what a test wrote for it and
records its arguments and SLURM_CONF. The prolog and epilog themselves are
tests/test_slurm_scripts.py; a real Slurm is tests/test_slurm_integration.py.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from burstscope.collector.jobs import slurm as slurm_module
from burstscope.collector.jobs.model import SLURM, Claim, Job
from burstscope.collector.jobs.slurm import (
    MalformedFile,
    SlurmJobs,
    parse_job_file,
    parse_squeue,
)
from burstscope.testing.processes import wait_until

LOGGER = "burstscope.collector.jobs.slurm"
START = 1_800_000_000.0


def write_job(
    directory: Path, job_id: str, records: Mapping[str, str] | None = None, **more: str
) -> Path:
    """A format-1 job file as the prolog writes it, by rename."""
    values = {"SLURM_JOB_ID": job_id, "SLURM_JOB_USER": "alice", **(records or {}), **more}
    body = b"BURSTSCOPE_SLURM_JOB_FORMAT=1\0BURSTSCOPE_PROLOG_TIME=%d\0" % START
    body += b"".join(f"{key}={value}".encode() + b"\0" for key, value in values.items())
    path = directory / f"slurm-{job_id}.job"
    temporary = directory / f".slurm-{job_id}.job.{os.getpid()}"
    temporary.write_bytes(body)
    temporary.rename(path)
    return path


def claim(job_id: str, gpus: tuple[str, ...] = (), name: str = "", **job: str) -> Claim:
    return Claim(
        Job(job_id, SLURM, user=job.pop("user", "alice"), name=name, start_time=START, **job),
        gpus=gpus,
        whole_node=not gpus,
    )


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "jobs"
    directory.mkdir()
    return directory


@pytest.fixture
def source(jobs_dir: Path) -> Iterator[SlurmJobs]:
    """A source that never asks Slurm by itself (tests call check_once)."""
    jobs = SlurmJobs(jobs_dir, squeue=None, background=False)
    yield jobs
    jobs.close()


# -- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "empty"),
        (
            b"BURSTSCOPE_SLURM_JOB_FORMAT=1\0SLURM_JOB_ID=5",
            "does not end with a NUL byte (cut short?)",
        ),
        (
            b"SLURM_JOB_ID=5\0BURSTSCOPE_SLURM_JOB_FORMAT=1\0",
            "first record is SLURM_JOB_ID, not BURSTSCOPE_SLURM_JOB_FORMAT",
        ),
        (
            b"BURSTSCOPE_SLURM_JOB_FORMAT=2\0SLURM_JOB_ID=5\0",
            "format '2'; this agent reads format 1",
        ),
        (b"BURSTSCOPE_SLURM_JOB_FORMAT=1\0SLURM_JOB_ID\0", "record 2 is not NAME=VALUE"),
        (b"BURSTSCOPE_SLURM_JOB_FORMAT=1\0=5\0", "record 2 is not NAME=VALUE"),
        (b"BURSTSCOPE_SLURM_JOB_FORMAT=1\0SLURM_JOB_USER=a\0", "SLURM_JOB_ID '' is not a job id"),
        (
            b"BURSTSCOPE_SLURM_JOB_FORMAT=1\0SLURM_JOB_ID=\xd9\xa5\0",
            "SLURM_JOB_ID '\u0665' is not a job id",
        ),
        (
            b"BURSTSCOPE_SLURM_JOB_FORMAT=1\0SLURM_JOB_ID=6\0",
            "SLURM_JOB_ID 6 does not match the file's name",
        ),
    ],
)
def test_a_malformed_file_says_why(data: bytes, problem: str) -> None:
    with pytest.raises(MalformedFile) as raised:
        parse_job_file(data, "5", START)
    assert str(raised.value) == problem


def test_parse_reads_every_field_and_falls_back_for_the_start_time() -> None:
    data = (
        b"BURSTSCOPE_SLURM_JOB_FORMAT=1\0BURSTSCOPE_PROLOG_TIME=1700000001\0"
        b"SLURM_JOB_ID=5\0SLURM_JOB_USER=bob\0SLURM_JOB_NAME=a=b\0SLURM_STEP_ID=0\0"
        b"SLURM_JOB_NODELIST=n[1-2]\0SLURM_NODELIST=old\0SLURM_JOB_START_TIME=1700000000\0"
        b"SLURM_JOB_GPUS= 1, 0 ,\0FUTURE_KEY=ignored\0"
    )
    record = parse_job_file(data, "5", START)
    assert record.job == Job("5", SLURM, "bob", "a=b", "0", "n[1-2]", 1_700_000_000.0)
    assert (record.gpus, record.named) == (("1", "0"), True)
    bare = parse_job_file(
        b"BURSTSCOPE_SLURM_JOB_FORMAT=1\0SLURM_JOB_ID=5\0BURSTSCOPE_PROLOG_TIME=nan\0", "5", START
    )
    assert bare.job == Job("5", SLURM, start_time=START)  # the file's mtime
    assert (bare.gpus, bare.named) == ((), False)


@pytest.mark.parametrize(
    ("output", "parsed"),
    [
        ("", {}),
        (
            "12|RUNNING|train\n13|COMPLETED|eval\n",
            {"12": ("RUNNING", "train"), "13": ("COMPLETED", "eval")},
        ),
        ("12|RUNNING|a|b c\n", {"12": ("RUNNING", "a|b c")}),
        (
            "12|RUNNING|first\nsecond\n\n13|PENDING|\n",
            {"12": ("RUNNING", "first\nsecond"), "13": ("PENDING", "")},
        ),
        ("garbage\n12|RUNNING|x\n", {"12": ("RUNNING", "x")}),
    ],
)
def test_parse_squeue(output: str, parsed: dict[str, tuple[str, str]]) -> None:
    assert parse_squeue(output) == parsed


# -- polling -------------------------------------------------------------------------------


def test_poll_returns_claims_and_follows_files_coming_and_going(
    jobs_dir: Path, source: SlurmJobs
) -> None:
    assert source.poll() == []
    write_job(jobs_dir, "10", SLURM_JOB_GPUS="0,1")
    write_job(jobs_dir, "9", SLURM_JOB_NAME="named")
    (jobs_dir / ".slurm-11.job.77").write_bytes(b"BURSTSCOPE_SLURM")  # mid-write: not yet
    assert source.poll() == [claim("9", name="named"), claim("10", gpus=("0", "1"))]
    (jobs_dir / "slurm-9.job").unlink()
    assert source.poll() == [claim("10", gpus=("0", "1"))]
    assert source.malformed_files == 0


def test_a_changed_file_is_read_again_an_unchanged_one_is_not(
    jobs_dir: Path, source: SlurmJobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    real = slurm_module.parse_job_file

    def counting(data: bytes, job_id: str, mtime: float) -> slurm_module.SlurmRecord:
        parsed.append(job_id)
        return real(data, job_id, mtime)

    monkeypatch.setattr(slurm_module, "parse_job_file", counting)
    path = write_job(jobs_dir, "20", SLURM_JOB_GPUS="0")
    write_job(jobs_dir, "21")
    assert source.poll() == [claim("20", gpus=("0",)), claim("21")]
    for _ in range(100):
        source.poll()
    assert sorted(parsed) == ["20", "21"]
    # Rewritten in place (same inode, new size and mtime): read again, alone.
    body = path.read_bytes().replace(b"SLURM_JOB_GPUS=0", b"SLURM_JOB_GPUS=0,3")
    path.write_bytes(body)
    assert source.poll() == [claim("20", gpus=("0", "3")), claim("21")]
    assert sorted(parsed) == ["20", "20", "21"]
    # Replaced by rename (a requeued job's prolog): read again.
    write_job(jobs_dir, "21", SLURM_JOB_USER="bob")
    assert source.poll() == [claim("20", gpus=("0", "3")), claim("21", user="bob")]
    assert sorted(parsed) == ["20", "20", "21", "21"]


def test_an_unchanged_directory_costs_microseconds(jobs_dir: Path, source: SlurmJobs) -> None:
    for job_id in range(8):
        write_job(jobs_dir, str(job_id), SLURM_JOB_GPUS=str(job_id))
    source.poll()
    polls = 2000
    started = time.perf_counter()
    for _ in range(polls):
        source.poll()
    per_poll = (time.perf_counter() - started) / polls
    # About 15 us on a quiet 2-core VM with 8 jobs; 1 ms leaves room for a loaded one and is
    # still 250 times less than the watcher's 0.25 s period.
    assert per_poll < 1e-3, f"{per_poll * 1e6:.0f} us per poll"


def test_malformed_and_unreadable_files_are_skipped_counted_and_logged_once(
    jobs_dir: Path, source: SlurmJobs, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    write_job(jobs_dir, "30")
    (jobs_dir / "slurm-31.job").write_bytes(b"BURSTSCOPE_SLURM_JOB_FORMAT=1\0SLURM_JOB_ID=31")
    (jobs_dir / "slurm-32.job").write_bytes(b"BURSTSCOPE_SLURM_JOB_FORMAT=9\0SLURM_JOB_ID=32\0")
    (jobs_dir / "notes.txt").write_text("hello")
    (jobs_dir / "slurm-33.job").mkdir()
    os.mkfifo(jobs_dir / "slurm-34.job")  # opening it would block: never opened
    (jobs_dir / "slurm-35.job").write_bytes(b"x" * (slurm_module.MAX_FILE_BYTES + 1))
    os.symlink("slurm-30.job", jobs_dir / "slurm-36.job")
    for _ in range(3):
        assert source.poll() == [claim("30")]
    messages = sorted(record.getMessage() for record in caplog.records)
    assert messages == [
        f"slurm: skipping {jobs_dir}/notes.txt: not a job file's name (slurm-<job id>.job)",
        f"slurm: skipping {jobs_dir}/slurm-31.job: does not end with a NUL byte (cut short?)",
        f"slurm: skipping {jobs_dir}/slurm-32.job: format '9'; this agent reads format 1",
        f"slurm: skipping {jobs_dir}/slurm-33.job: not a regular file",
        f"slurm: skipping {jobs_dir}/slurm-34.job: not a regular file",
        f"slurm: skipping {jobs_dir}/slurm-35.job: 1048577 bytes, more than a job file's",
        f"slurm: skipping {jobs_dir}/slurm-36.job: not a regular file",
    ]
    assert source.malformed_files == 7
    # A malformed file rewritten whole is a new version: read, and used when good.
    write_job(jobs_dir, "31")
    assert source.poll() == [claim("30"), claim("31")]
    assert source.malformed_files == 7


def test_an_unreadable_file_is_skipped_and_counted(
    jobs_dir: Path,
    source: SlurmJobs,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Root reads any mode, so the refusal is simulated where the file is opened."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    write_job(jobs_dir, "40")
    write_job(jobs_dir, "41")
    real_open = open

    def refusing(path: str, *args: object, **kwargs: object) -> object:
        if str(path).endswith("slurm-41.job"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", refusing)
    assert source.poll() == [claim("40")]
    assert source.poll() == [claim("40")]
    assert [r.getMessage() for r in caplog.records] == [
        f"slurm: skipping {jobs_dir}/slurm-41.job: Permission denied"
    ]
    assert source.malformed_files == 1


def test_no_directory_is_no_jobs_and_an_unreadable_one_keeps_the_last(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    directory = tmp_path / "jobs"
    source = SlurmJobs(directory, squeue=None)
    try:
        assert source.poll() == []
        assert source.poll() == []
        directory.mkdir()
        write_job(directory, "50")
        assert source.poll() == [claim("50")]

        def refused(path: object) -> None:
            raise PermissionError(13, "Permission denied", str(path))

        monkeypatch.setattr(os, "scandir", refused)
        assert source.poll() is None  # the watcher keeps the previous claims
        assert source.poll() is None
    finally:
        source.close()
    assert [r.getMessage() for r in caplog.records] == [
        f"slurm: no job directory {directory} yet: no jobs",
        f"slurm: cannot read {directory} (Permission denied)",
    ]


# -- asking Slurm: a stub squeue on PATH ----------------------------------------------------


class StubSqueue:
    """``squeue`` on PATH: prints ``output``, exits ``status`` (after ``delay`` s), and
    appends its arguments and SLURM_CONF to a log."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folder = folder
        self.calls = folder / "calls"
        script = folder / "squeue"
        script.write_text(
            "#!/bin/sh\n"
            f'printf "%s|%s\\n" "$*" "${{SLURM_CONF-}}" >>{self.calls}\n'
            f'[ "$(cat {folder}/delay)" = 0 ] || exec sleep "$(cat {folder}/delay)"\n'
            f"cat {folder}/output\n"
            f"cat {folder}/errors >&2\n"
            f'exit "$(cat {folder}/status)"\n'
        )
        script.chmod(0o755)
        self.answer("")
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")

    def answer(self, output: str, status: int = 0, errors: str = "", delay: float = 0) -> None:
        (self.folder / "output").write_text(output)
        (self.folder / "errors").write_text(errors)
        (self.folder / "status").write_text(str(status))
        (self.folder / "delay").write_text(str(delay))

    def called(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


@pytest.fixture
def squeue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StubSqueue:
    folder = tmp_path / "bin"
    folder.mkdir()
    return StubSqueue(folder, monkeypatch)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def asking(jobs_dir: Path, squeue: StubSqueue) -> Iterator[tuple[SlurmJobs, Clock]]:
    """A source that asks the stub when told to (check_once), with a clock the test moves."""
    clock = Clock(START + 60)
    jobs = SlurmJobs(
        jobs_dir,
        background=False,
        max_age_seconds=3600,
        slurm_conf="/etc/slurm/test.conf",
        command_timeout=0.5,
        clock=clock,
    )
    yield jobs, clock
    jobs.close()


def test_squeue_names_the_jobs_and_drops_those_that_ended(
    jobs_dir: Path,
    squeue: StubSqueue,
    asking: tuple[SlurmJobs, Clock],
    caplog: pytest.LogCaptureFixture,
) -> None:
    source, _ = asking
    caplog.set_level(logging.INFO, logger=LOGGER)
    for job_id in ("60", "61", "62", "63", "64"):
        write_job(jobs_dir, job_id)
    write_job(jobs_dir, "65", SLURM_JOB_NAME="from the prolog")
    assert len(source.poll() or []) == 6
    squeue.answer(
        "60|RUNNING|train llama\n61|COMPLETED|done\n62|COMPLETING|finishing\n"
        "64|NODE_FAIL|lost\n65|RUNNING|from squeue\n"
    )
    source.check_once()
    assert squeue.called() == [
        "--noheader --states=all --jobs=60,61,62,63,64,65 --format=%A|%T|%j|/etc/slurm/test.conf"
    ]
    assert source.poll() == [
        claim("60", name="train llama"),
        claim("62", name="finishing"),  # completing: its epilog is running now
        claim("65", name="from the prolog"),  # the file's name wins
    ]
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        f"slurm: job 61 dropped: its epilog never removed {jobs_dir}/slurm-61.job "
        "(squeue says COMPLETED)",
        f"slurm: job 63 dropped: its epilog never removed {jobs_dir}/slurm-63.job "
        "(squeue no longer lists it)",
        f"slurm: job 64 dropped: its epilog never removed {jobs_dir}/slurm-64.job "
        "(squeue says NODE_FAIL)",
    ]
    assert source.stale_jobs == 3
    # Asked again: the dropped ones are not asked about, nor logged, again.
    squeue.answer("60|RUNNING|train llama\n62|COMPLETING|finishing\n65|RUNNING|x\n")
    source.check_once()
    assert squeue.called()[-1].split()[2] == "--jobs=60,62,65"
    assert len(caplog.records) == 3 and source.stale_jobs == 3
    # The stale files stay (the agent cannot delete them); a new file for a job is new.
    assert sorted(os.listdir(jobs_dir))[:2] == ["slurm-60.job", "slurm-61.job"]
    write_job(jobs_dir, "61", SLURM_JOB_NAME="requeued here")
    assert claim("61", name="requeued here") in (source.poll() or [])
    # An epilog that comes late takes the file, and the job is forgotten.
    (jobs_dir / "slurm-63.job").unlink()
    assert [c.job.job_id for c in source.poll() or []] == ["60", "61", "62", "65"]


def test_an_epilog_that_ran_since_the_last_poll_is_not_a_stale_job(
    jobs_dir: Path,
    squeue: StubSqueue,
    asking: tuple[SlurmJobs, Clock],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """squeue says COMPLETED only after the epilog returned, so the usual order is: the epilog
    removes the file, squeue says COMPLETED, and the next poll sees it gone. A check between
    the epilog and that poll must not call the job stale (a CI run found this race)."""
    source, _ = asking
    caplog.set_level(logging.INFO, logger=LOGGER)
    write_job(jobs_dir, "80")
    assert source.poll() == [claim("80")]
    (jobs_dir / "slurm-80.job").unlink()  # the epilog, after the poll
    squeue.answer("80|COMPLETED|done\n")
    source.check_once()
    assert (caplog.records, source.stale_jobs) == ([], 0)
    assert source.poll() == []


def test_a_job_squeue_does_not_list_is_dropped_once_squeue_has_shown_it_sees_jobs(
    jobs_dir: Path,
    squeue: StubSqueue,
    asking: tuple[SlurmJobs, Clock],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not listed means ended only once squeue has listed some job here: before that it may
    be a job purged long ago (MinJobAge) or one Slurm hides from us."""
    source, clock = asking
    caplog.set_level(logging.INFO, logger=LOGGER)
    write_job(jobs_dir, "70")  # started a minute before the clock: not just started
    assert source.poll() == [claim("70")]
    # squeue --jobs=ONE exits 1 for a job it no longer knows (22.05); several: exit 0.
    squeue.answer("", status=1, errors="slurm_load_jobs error: Invalid job id specified\n")
    source.check_once()
    assert source.poll() == [claim("70")]
    assert (caplog.records, source.stale_jobs, source.check_failures) == ([], 0, 0)
    write_job(jobs_dir, "71", BURSTSCOPE_PROLOG_TIME=str(int(clock.now) - 5))
    assert len(source.poll() or []) == 2  # the checker asks about the jobs poll has seen
    squeue.answer("71|RUNNING|new\n")
    source.check_once()
    assert source.poll() == [
        Claim(Job("71", SLURM, "alice", "new", start_time=clock.now - 5), whole_node=True)
    ]
    (jobs_dir / "slurm-71.job").unlink()
    write_job(jobs_dir, "72")
    assert source.poll() == [claim("72")]
    squeue.answer("", status=1, errors="slurm_load_jobs error: Invalid job id specified\n")
    source.check_once()
    assert source.poll() == []
    assert [r.getMessage() for r in caplog.records] == [
        f"slurm: job {job_id} dropped: its epilog never removed {jobs_dir}/slurm-{job_id}.job "
        "(squeue no longer lists it)"
        for job_id in ("70", "72")
    ]
    assert (source.stale_jobs, source.check_failures) == (2, 0)


def test_jobs_slurm_hides_are_said_once_and_dropped_only_by_age(
    jobs_dir: Path,
    squeue: StubSqueue,
    asking: tuple[SlurmJobs, Clock],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """slurm.conf PrivateData=jobs: squeue lists the agent's user none of the jobs here."""
    source, clock = asking
    caplog.set_level(logging.INFO, logger=LOGGER)
    write_job(jobs_dir, "80", BURSTSCOPE_PROLOG_TIME=str(int(clock.now) - 30))
    write_job(jobs_dir, "81", BURSTSCOPE_PROLOG_TIME=str(int(clock.now) - 7200))
    assert len(source.poll() or []) == 2
    squeue.answer("")
    source.check_once()
    source.check_once()
    assert source.poll() == [
        Claim(Job("80", SLURM, "alice", start_time=clock.now - 30), whole_node=True)
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "slurm: squeue does not list job 80, which started here 30 s ago: Slurm hides jobs "
        "from the agent's user (PrivateData=jobs in slurm.conf?); job names stay empty, and "
        "a job whose epilog never ran is dropped after 1.0 h",
        f"slurm: job 81 dropped: its epilog never removed {jobs_dir}/slurm-81.job (started "
        "2.0 h ago, past the 1.0 h max age, and squeue does not list it)",
    ]
    squeue.answer("80|RUNNING|seen\n")
    source.check_once()
    assert caplog.records[-1].getMessage() == "slurm: squeue lists this node's jobs again"
    assert [c.job.name for c in source.poll() or []] == ["seen"]


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (
            "exit",
            "squeue exited 1: slurm_load_jobs error: Unable to contact slurm controller "
            "(connect failure)",
        ),
        ("timeout", "squeue took over 0.5 s"),
        ("missing", "no-such-squeue: No such file or directory"),
    ],
)
def test_when_slurm_cannot_be_asked_old_jobs_go_by_age(
    jobs_dir: Path,
    squeue: StubSqueue,
    asking: tuple[SlurmJobs, Clock],
    caplog: pytest.LogCaptureFixture,
    failure: str,
    reason: str,
) -> None:
    source, clock = asking
    caplog.set_level(logging.INFO, logger=LOGGER)
    if failure == "exit":
        squeue.answer(
            "", 1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
        )
    elif failure == "timeout":
        squeue.answer("70|RUNNING|late\n", delay=5)
    else:
        source.squeue = "no-such-squeue"
    write_job(jobs_dir, "80")  # started at START
    write_job(jobs_dir, "81", BURSTSCOPE_PROLOG_TIME=str(int(START + 3000)))
    assert len(source.poll() or []) == 2
    clock.now = START + 3600 + 1  # job 80 is past the hour, 81 is not
    source.check_once()
    source.check_once()  # still failing: no second warning
    assert source.poll() == [
        Claim(Job("81", SLURM, "alice", start_time=START + 3000), whole_node=True)
    ]
    assert [r.getMessage() for r in caplog.records] == [
        f"slurm: cannot ask Slurm which jobs still run ({reason}): a job whose epilog never "
        "ran is dropped after 1.0 h",
        f"slurm: job 80 dropped: its epilog never removed {jobs_dir}/slurm-80.job (started "
        "1.0 h ago, past the 1.0 h max age, and Slurm cannot be asked)",
    ]
    assert (source.stale_jobs, source.check_failures) == (1, 2)
    # Slurm answers again: said once; the young job runs on.
    source.squeue = "squeue"
    squeue.answer("81|RUNNING|young\n")
    source.check_once()
    assert caplog.records[-1].getMessage() == "slurm: squeue answers again"
    assert [c.job.name for c in source.poll() or []] == ["young"]


def test_without_squeue_and_max_age_nothing_is_dropped(jobs_dir: Path) -> None:
    source = SlurmJobs(jobs_dir, squeue=None, max_age_seconds=None, clock=lambda: START + 1e9)
    try:
        write_job(jobs_dir, "90")
        source.poll()
        source.check_once()
        assert source.poll() == [claim("90")]
        assert (source.stale_jobs, source.check_failures) == (0, 0)
    finally:
        source.close()


def test_the_background_check_names_a_new_job_and_drops_an_ended_one(
    jobs_dir: Path, squeue: StubSqueue
) -> None:
    """No check_once here: the thread poll() starts asks by itself, never on poll's path."""
    squeue.answer("100|RUNNING|looked up\n")
    source = SlurmJobs(jobs_dir, check_seconds=0.2, name_lookup_seconds=0.1)
    try:
        write_job(jobs_dir, "100")
        started = time.monotonic()
        assert source.poll() == [claim("100")]  # at once, before any squeue answer
        assert time.monotonic() - started < 0.5
        assert wait_until(lambda: source.poll() == [claim("100", name="looked up")], 10)
        squeue.answer("100|CANCELLED|looked up\n")
        assert wait_until(lambda: source.poll() == [], 10)
        assert source.stale_jobs == 1
    finally:
        source.close()
    # Closed: the thread has ended (close joins it), so nothing asks Slurm any more.
    assert [t for t in threading.enumerate() if t.name == "burstscope-slurm-check"] == []
