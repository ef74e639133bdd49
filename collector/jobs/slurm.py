"""Slurm jobs on this node, from the files the shipped prolog writes (systemd/slurm/).

``burstscope-prolog`` runs as root under slurmd when a job starts here and writes
``DIR/slurm-<job id>.job`` (default /run/burstscope/jobs); ``burstscope-epilog`` removes it
when the job ends. Each file is format 1: ``NAME=VALUE`` records each ended by a NUL byte,
``BURSTSCOPE_SLURM_JOB_FORMAT=1`` first, then ``BURSTSCOPE_PROLOG_TIME`` and the job's
identity and GPU variables among those slurmd gave the prolog (man slurm.conf(5), "PROLOG
AND EPILOG SCRIPTS"; https://slurm.schedmd.com/prolog_epilog.html). Slurm 22.05 gives the
prolog the job id, user, node list (``SLURM_NODELIST``; ``SLURM_JOB_NODELIST`` in later
releases) and the GPUs it holds here (``SLURM_JOB_GPUS``, indices such as ``0,1``) but not
the job's name, which the man page lists for PrologSlurmctld only: the name is asked of
``squeue`` in the background.

``SlurmJobs.poll`` is one ``os.scandir`` and one ``stat`` per file: a file is re-read only
when its inode, size, mtime or ctime changed, so an unchanged directory costs microseconds
(the watcher polls four times a second). A file that cannot be read or parsed is skipped,
counted in ``malformed_files`` and logged once per version of it.

A job whose epilog never ran (slurmd killed, the directory on a disk that outlived a crash)
is cleaned up in a background thread, never on the poll path: every ``check_seconds``
(30 s), and when a job without a name appears (at most once a second), it asks ``squeue``
(``SLURM_CONF`` honoured, with a timeout) about every job it holds, and drops those Slurm
lists as ended, or no longer lists once squeue has shown it can see this node's jobs (with
``PrivateData=jobs`` it lists only the caller's own: a just-started job it does not list
says so). When Slurm cannot be asked, or hides the jobs, it drops jobs older than
``max_age_seconds``. Each cleanup is one log line naming the job.

The agent does not delete a stale file: the directory is root's (the prolog runs as root)
and the agent runs unprivileged (DynamicUser), so it ignores that version of the file, which
goes at the next boot (/run is a tmpfs) or when an operator removes it. A new file for the
same job (a requeued job starting here again) is a new version and is read again.
"""

from __future__ import annotations

import logging
import math
import os
import re
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from burstscope.collector.jobs.model import SLURM, Claim, Job

_LOG = logging.getLogger(__name__)

DEFAULT_DIRECTORY = "/run/burstscope/jobs"  # the prolog's default (systemd/slurm/)
FORMAT = "1"  # BURSTSCOPE_SLURM_JOB_FORMAT this reader understands
FORMAT_KEY = "BURSTSCOPE_SLURM_JOB_FORMAT"
# How often Slurm is asked whether the jobs here still run: one squeue call for all of them.
CHECK_SECONDS = 30.0
# A job seen for the first time without a name is asked about sooner, batched with any
# other new job: at most one call this often.
NAME_LOOKUP_SECONDS = 1.0
# Slurm keeps a job's record at least MinJobAge (300 s by default) after it ends, so a job
# that started this recently and that squeue does not list is hidden from us, not gone.
VISIBLE_SECONDS = 60.0
# Only when Slurm cannot be asked: a file older than this is taken as a job whose epilog
# never ran. Longer than most clusters' MaxTime; a site with longer jobs raises it.
MAX_AGE_SECONDS = 7 * 24 * 3600.0
COMMAND_TIMEOUT_SECONDS = 10.0
# A prolog's file is a few hundred bytes; anything this big is not one.
MAX_FILE_BYTES = 1 << 20

_FILE_NAME = re.compile(r"slurm-(\d+)\.job")
# squeue's line for one job: "<job id>|<state>|<name>" (--format=%A|%T|%j, man squeue(1));
# a name holding a newline continues on the next lines.
_SQUEUE_LINE = re.compile(r"(\d+)\|([A-Z_]+)\|(.*)")
# squeue --jobs with a single job id Slurm has forgotten exits 1 with this (22.05); with
# several ids it lists the known ones and exits 0.
_SQUEUE_UNKNOWN_JOB = "Invalid job id specified"
# Job states in which the job no longer runs on a node (man squeue(1), JOB STATE CODES).
# PENDING too: a requeued job waits for a new allocation, and a prolog writes a new file
# if it lands here again. A state not listed here is taken as running (safe side).
ENDED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PENDING",
        "PREEMPTED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESV_DEL_HOLD",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)

FileKey = tuple[int, int, int, int]  # (st_ino, st_size, st_mtime_ns, st_ctime_ns)


class MalformedFile(ValueError):
    """A job file this reader cannot use; the message says why."""


@dataclass(frozen=True, slots=True)
class SlurmRecord:
    """One prolog file, parsed."""

    job: Job
    gpus: tuple[str, ...]  # SLURM_JOB_GPUS, split: GPU indices on this node
    named: bool  # the file carried SLURM_JOB_NAME (newer Slurm, or a site's prolog)


@dataclass(slots=True)
class _File:
    key: FileKey
    record: SlurmRecord | None  # None: malformed or unreadable


def parse_job_file(data: bytes, file_job_id: str, mtime: float) -> SlurmRecord:
    """A prolog file's records as a job; raises MalformedFile naming the problem."""
    if not data:
        raise MalformedFile("empty")
    if not data.endswith(b"\0"):
        raise MalformedFile("does not end with a NUL byte (cut short?)")
    values: dict[str, str] = {}
    for number, raw in enumerate(data[:-1].split(b"\0")):
        name, equals, value = raw.partition(b"=")
        if not equals or not name:
            raise MalformedFile(f"record {number + 1} is not NAME=VALUE")
        # Names are ASCII; a value may hold any byte but NUL (a job name): shown, not kept raw.
        key = name.decode("ascii", "replace")
        if number == 0 and key != FORMAT_KEY:
            raise MalformedFile(f"first record is {key}, not {FORMAT_KEY}")
        values[key] = value.decode("utf-8", "replace")
    if values[FORMAT_KEY] != FORMAT:
        raise MalformedFile(f"format {values[FORMAT_KEY]!r}; this agent reads format {FORMAT}")
    job_id = values.get("SLURM_JOB_ID", "")
    if not job_id.isascii() or not job_id.isdigit():
        raise MalformedFile(f"SLURM_JOB_ID {job_id!r} is not a job id")
    if job_id != file_job_id:
        raise MalformedFile(f"SLURM_JOB_ID {job_id} does not match the file's name")
    gpus = tuple(g.strip() for g in values.get("SLURM_JOB_GPUS", "").split(",") if g.strip())
    job = Job(
        job_id=job_id,
        scheduler=SLURM,
        user=values.get("SLURM_JOB_USER", ""),
        name=values.get("SLURM_JOB_NAME", ""),
        step=values.get("SLURM_STEP_ID", ""),
        nodes=values.get("SLURM_JOB_NODELIST") or values.get("SLURM_NODELIST", ""),
        start_time=_start_time(values, mtime),
    )
    return SlurmRecord(job, gpus, "SLURM_JOB_NAME" in values)


def _start_time(values: Mapping[str, str], mtime: float) -> float:
    # SLURM_JOB_START_TIME is the controller's (later releases); BURSTSCOPE_PROLOG_TIME is
    # when the prolog ran here; the file's mtime is the last resort.
    for key in ("SLURM_JOB_START_TIME", "BURSTSCOPE_PROLOG_TIME"):
        try:
            seconds = float(values[key])
        except (KeyError, ValueError):
            continue
        if math.isfinite(seconds):  # "nan" would make the job ageless
            return seconds
    return mtime


def parse_squeue(output: str) -> dict[str, tuple[str, str]]:
    """``squeue --format=%A|%T|%j`` output as {job id: (state, name)}."""
    jobs: dict[str, tuple[str, str]] = {}
    last: str | None = None
    for line in output.split("\n"):
        match = _SQUEUE_LINE.fullmatch(line)
        if match is not None:
            last = match[1]
            jobs[last] = (match[2], match[3])
        elif last is not None and line:
            state, name = jobs[last]
            jobs[last] = (state, f"{name}\n{line}")
    return jobs


class SlurmJobs:
    """The Slurm jobs running on this node, from the prolog's directory (a JobSource)."""

    name = SLURM

    def __init__(
        self,
        directory: str | os.PathLike[str] = DEFAULT_DIRECTORY,
        *,
        check_seconds: float = CHECK_SECONDS,
        max_age_seconds: float | None = MAX_AGE_SECONDS,
        squeue: str | None = "squeue",
        slurm_conf: str | None = None,
        command_timeout: float = COMMAND_TIMEOUT_SECONDS,
        name_lookup_seconds: float = NAME_LOOKUP_SECONDS,
        clock: Callable[[], float] = time.time,
        background: bool = True,
    ) -> None:
        """``squeue``: the command (looked up on PATH), or None never to ask Slurm (then only
        ``max_age_seconds`` ends a job whose epilog never ran; None: never by age).
        ``slurm_conf``: SLURM_CONF for squeue; None keeps the agent's environment.
        ``background``: False starts no checker thread (the caller calls ``check_once``)."""
        self.directory = os.fspath(directory)
        self.check_seconds = check_seconds
        self.max_age_seconds = max_age_seconds
        self.squeue = squeue
        self.slurm_conf = slurm_conf
        self.command_timeout = command_timeout
        self.name_lookup_seconds = name_lookup_seconds
        self.clock = clock
        # Counters the exporter can show: files skipped (each version once), jobs dropped
        # as stale, squeue calls that gave no answer.
        self.malformed_files = 0
        self.stale_jobs = 0
        self.check_failures = 0
        self._files: dict[str, _File] = {}
        self._claims: list[Claim] = []
        self._directory_missing = False
        self._directory_error: str | None = None
        # Shared with the checker thread, under _lock: what the last answer said.
        self._lock = threading.Lock()
        self._stale: dict[str, FileKey] = {}  # job id -> the file version taken as ended
        self._names: dict[str, str] = {}  # job id -> name from squeue
        self._asked: set[str] = set()  # job ids Slurm was asked about (answered or not)
        self._unnamed: set[str] = set()  # job ids whose file names no job name
        self._held: dict[str, tuple[FileKey, float]] = {}  # what poll saw: key, start time
        self._generation = 0  # bumped by the checker when _stale or _names change
        self._built_generation = -1
        self._wake = threading.Event()
        self._stop = threading.Event()
        if not background:
            self._stop.set()
        self._thread: threading.Thread | None = None
        self._failing: str | None = None  # why squeue gave no answer, while it does not
        # Whether squeue shows this node's jobs: True once it listed one, False when it did
        # not list a job that had just started. Only when True does "not listed" mean ended.
        self._visible: bool | None = None

    # -- the poll path: the watcher's thread, four times a second ----------------------------

    def poll(self) -> list[Claim] | None:
        if self._thread is None and not self._stop.is_set():
            self._start_checker()
        try:
            scan = os.scandir(self.directory)
        except FileNotFoundError:
            # The prolog makes it on the first job after boot (or tmpfiles.d at boot).
            if not self._directory_missing:
                self._directory_missing = True
                _LOG.info("slurm: no job directory %s yet: no jobs", self.directory)
            return self._rebuild_if(self._forget(set(self._files)))
        except OSError as exc:
            if self._directory_error != exc.strerror:
                self._directory_error = exc.strerror
                _LOG.warning("slurm: cannot read %s (%s)", self.directory, exc.strerror)
            return None
        self._directory_missing = False
        self._directory_error = None
        changed = False
        present: set[str] = set()
        with scan:
            for entry in scan:
                if entry.name.startswith("."):
                    continue  # the prolog's file while it is being written
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed by an epilog since the listing
                except OSError as exc:
                    present.add(entry.name)
                    if entry.name not in self._files:
                        changed = True
                        self._malformed(entry.path, exc.strerror)
                        self._files[entry.name] = _File((0, 0, 0, 0), None)
                    continue
                present.add(entry.name)
                key = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
                known = self._files.get(entry.name)
                if known is not None and known.key == key:
                    continue
                changed = True
                self._files[entry.name] = _File(key, self._read(entry.path, entry.name, info))
        changed |= self._forget(set(self._files) - present)
        return self._rebuild_if(changed)

    def _read(self, path: str, name: str, info: os.stat_result) -> SlurmRecord | None:
        """The file's job, or None (skipped; counted and logged unless it just went away)."""
        try:
            return self._load(path, name, info)
        except FileNotFoundError:
            return None  # removed since the stat: the next poll forgets it
        except (OSError, MalformedFile) as exc:
            self._malformed(path, exc.strerror if isinstance(exc, OSError) else str(exc))
            return None

    @staticmethod
    def _load(path: str, name: str, info: os.stat_result) -> SlurmRecord:
        match = _FILE_NAME.fullmatch(name)
        if match is None:
            raise MalformedFile("not a job file's name (slurm-<job id>.job)")
        if not stat.S_ISREG(info.st_mode):
            raise MalformedFile("not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise MalformedFile(f"{info.st_size} bytes, more than a job file's")
        with open(path, "rb") as reader:
            data = reader.read(MAX_FILE_BYTES + 1)
        return parse_job_file(data, match[1], info.st_mtime)

    def _malformed(self, path: str, reason: str | None) -> None:
        self.malformed_files += 1
        _LOG.warning("slurm: skipping %s: %s", path, reason or "unreadable")

    def _forget(self, names: Iterable[str]) -> bool:
        forgotten = False
        for name in names:
            del self._files[name]
            forgotten = True
        return forgotten

    def _rebuild_if(self, changed: bool) -> list[Claim]:
        generation = self._generation  # an int read: atomic, no lock on the fast path
        if changed or generation != self._built_generation:
            self._rebuild()
        return list(self._claims)

    def _rebuild(self) -> None:
        records = {
            record.job.job_id: (state.key, record)
            for state in self._files.values()
            if (record := state.record) is not None
        }
        with self._lock:
            self._built_generation = self._generation
            self._held = {
                job_id: (key, rec.job.start_time) for job_id, (key, rec) in records.items()
            }
            for job_id in list(self._stale):
                if job_id not in records:
                    del self._stale[job_id]  # the epilog came after all, or it was removed
            for job_id in self._asked - records.keys():
                self._asked.discard(job_id)
                self._names.pop(job_id, None)
            claims = []
            self._unnamed = set()
            for job_id, (key, record) in records.items():
                if self._stale.get(job_id) == key:
                    continue
                job = record.job
                if not record.named:
                    self._unnamed.add(job_id)
                    looked_up = self._names.get(job_id, "")
                    job = replace(job, name=looked_up) if looked_up else job
                claims.append(Claim(job, gpus=record.gpus, whole_node=not record.gpus))
            ask = bool(self._unnamed - self._asked)
        self._claims = sorted(claims, key=lambda claim: (len(claim.job.job_id), claim.job.job_id))
        if ask:
            self._wake.set()  # the checker asks Slurm for the new job's name now

    # -- the checker: a background thread, at most one squeue call a second ------------------

    def _start_checker(self) -> None:
        self._thread = threading.Thread(
            target=self._run_checker, name="burstscope-slurm-check", daemon=True
        )
        self._thread.start()

    def _run_checker(self) -> None:
        # Scheduling runs on the monotonic clock; ``clock`` (wall time) only judges ages.
        last_check = time.monotonic()  # the first full check one period after the start
        last_call = float("-inf")
        while not self._stop.is_set():
            self._wake.clear()  # before reading the state: a wake after this is not lost
            with self._lock:
                held = self._live()
                new = bool(self._unnamed - self._asked)
            now = time.monotonic()
            next_full = last_check + self.check_seconds
            next_names = last_call + self.name_lookup_seconds if new else float("inf")
            if now >= next_full and not held:
                last_check = now
            elif now >= min(next_full, next_names):
                last_call = now
                if now >= next_full:
                    last_check = now
                try:
                    self.check_once(held)
                except Exception:  # the checker must outlive a bug: stale jobs would stay
                    _LOG.exception("slurm: checking jobs with Slurm failed")
                continue
            self._wake.wait(max(0.01, min(last_check + self.check_seconds, next_names) - now))

    def check_once(self, held: Mapping[str, tuple[FileKey, float]] | None = None) -> None:
        """Ask Slurm about the jobs held now (the checker's work; tests call it directly)."""
        if held is None:
            with self._lock:
                held = self._live()
        if not held:
            return
        ordered = sorted(held, key=lambda job_id: (len(job_id), job_id))
        answer = self._ask_squeue(ordered)
        if answer is not None:
            self._judge_visibility(ordered, held, answer)
        changed = False
        with self._lock:
            for job_id in ordered:
                key, start_time = held[job_id]
                if self._held.get(job_id, (None, 0.0))[0] != key:
                    continue  # a new file since the question: not this answer's to judge
                reason = self._ended(job_id, answer, start_time)
                if reason is not None and not self._still_there(job_id, key):
                    # The epilog removed it after the last poll: squeue says COMPLETED only
                    # once the epilog has returned, so that order is the normal one, and
                    # the next poll sees the job end. Not stale.
                    continue
                if reason is not None and self._stale.get(job_id) != key:
                    self._stale[job_id] = key
                    self.stale_jobs += 1
                    changed = True
                    _LOG.warning(
                        "slurm: job %s dropped: its epilog never removed %s (%s)",
                        job_id,
                        os.path.join(self.directory, f"slurm-{job_id}.job"),
                        reason,
                    )
                self._asked.add(job_id)  # a failed call too: retried at the next full check
                if answer is not None:
                    name = answer.get(job_id, ("", ""))[1]
                    if name and self._names.get(job_id) != name:
                        self._names[job_id] = name
                        changed = True
            if changed:
                self._generation += 1

    def _still_there(self, job_id: str, key: FileKey) -> bool:
        """Whether this version of the job's file is still in the directory (one stat)."""
        try:
            info = os.stat(os.path.join(self.directory, f"slurm-{job_id}.job"))
        except OSError:
            return False
        return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns) == key

    def _live(self) -> dict[str, tuple[FileKey, float]]:
        """The jobs held and not yet taken as ended (the caller holds the lock)."""
        return {job: seen for job, seen in self._held.items() if self._stale.get(job) != seen[0]}

    def _judge_visibility(
        self,
        ordered: list[str],
        held: Mapping[str, tuple[FileKey, float]],
        answer: Mapping[str, tuple[str, str]],
    ) -> None:
        """Whether a job squeue does not list has ended, or is hidden from the agent's user
        (slurm.conf ``PrivateData=jobs``: squeue then lists only the caller's own jobs)."""
        if any(job_id in answer for job_id in ordered):
            if self._visible is False:
                _LOG.info("slurm: squeue lists this node's jobs again")
            self._visible = True
            return
        now = self.clock()
        young = [job_id for job_id in ordered if now - held[job_id][1] < VISIBLE_SECONDS]
        if young and self._visible is not False:
            self._visible = False
            _LOG.warning(
                "slurm: squeue does not list job %s, which started here %.0f s ago: Slurm "
                "hides jobs from the agent's user (PrivateData=jobs in slurm.conf?); job "
                "names stay empty, and a job whose epilog never ran is dropped %s",
                young[0],
                now - held[young[0]][1],
                self._by_age(),
            )

    def _ended(
        self, job_id: str, answer: Mapping[str, tuple[str, str]] | None, start_time: float
    ) -> str | None:
        """Why the job counts as ended, or None while it runs (or nothing can tell)."""
        if answer is None:
            unknown = "Slurm cannot be asked"
        elif job_id in answer:
            state = answer[job_id][0]
            return f"squeue says {state}" if state in ENDED_STATES else None
        elif self._visible:
            return "squeue no longer lists it"
        else:  # hidden from us, or no job here was ever listed: only its age can tell
            unknown = "squeue does not list it"
        if self.max_age_seconds is None:
            return None
        age = self.clock() - start_time
        if age <= self.max_age_seconds:
            return None
        return (
            f"started {age / 3600:.1f} h ago, past the {self.max_age_seconds / 3600:.1f} h "
            f"max age, and {unknown}"
        )

    def _by_age(self) -> str:
        if self.max_age_seconds is None:
            return "never (no max age)"
        return f"after {self.max_age_seconds / 3600:.1f} h"

    def _ask_squeue(self, job_ids: list[str]) -> dict[str, tuple[str, str]] | None:
        """{job id: (state, name)} for the jobs Slurm knows; None when it cannot be asked."""
        if self.squeue is None:
            return None
        environment = dict(os.environ)
        if self.slurm_conf is not None:
            environment["SLURM_CONF"] = self.slurm_conf
        argv = [
            self.squeue,
            "--noheader",
            "--states=all",
            f"--jobs={','.join(job_ids)}",
            "--format=%A|%T|%j",
        ]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                env=environment,
                timeout=self.command_timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            self._no_answer(f"{self.squeue} took over {self.command_timeout:g} s")
            return None
        except OSError as exc:
            self._no_answer(f"{self.squeue}: {exc.strerror or exc}")
            return None
        output = done.stdout.decode("utf-8", "replace")
        errors = done.stderr.decode("utf-8", "replace").strip()
        if done.returncode != 0:
            if len(job_ids) == 1 and _SQUEUE_UNKNOWN_JOB in errors:
                return self._answered({})  # the one job asked about is long gone
            last = errors.splitlines()[-1] if errors else "no message"
            self._no_answer(f"{self.squeue} exited {done.returncode}: {last}")
            return None
        return self._answered(parse_squeue(output))

    def _answered(self, answer: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
        if self._failing is not None:
            self._failing = None
            _LOG.info("slurm: squeue answers again")
        return answer

    def _no_answer(self, reason: str) -> None:
        self.check_failures += 1
        if self._failing is None:
            _LOG.warning(
                "slurm: cannot ask Slurm which jobs still run (%s): a job whose epilog "
                "never ran is dropped %s",
                reason,
                self._by_age(),
            )
        self._failing = reason

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.command_timeout + 1)
            self._thread = None
