"""The job watcher: polls the job sources off the 1 ms path and publishes one ``JobTable``.

A thread in the agent's main process, like the slow poller: each poll asks every source for
its claims (Slurm's prolog files, the kubelet), maps them to ports through the topology
only when they changed, and swaps in a new immutable table that every output reads. A
source that cannot be read this time keeps its previous claims (a kubelet restart is not
every job ending); a source that raises is counted and logged once, and polled again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from burstscope.collector.jobs.model import (
    EMPTY_TABLE,
    Claim,
    Holding,
    Job,
    JobSource,
    JobTable,
)
from burstscope.collector.threads import name_os_thread

_LOG = logging.getLogger(__name__)

# Four polls a second: a job is picked up within 250 ms of its prolog's write plus one
# poll, well inside the second the issue promises, at a cost of one scandir per poll.
POLL_SECONDS = 0.25

Resolve = Callable[[Sequence[Claim]], tuple[list[Job], list[Holding]]]
Listener = Callable[[int, JobTable, JobTable], None]


class JobWatcher:
    """Polls ``sources`` every ``poll_seconds``; ``table()`` is the answer in force."""

    def __init__(
        self,
        sources: Sequence[JobSource],
        resolve: Resolve,
        poll_seconds: float = POLL_SECONDS,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.sources = tuple(sources)
        self.resolve = resolve
        self.poll_seconds = poll_seconds
        self.clock = clock
        # Called with (wall-clock ns, table before, table after) on every change, in the
        # watcher's thread: the trace's side table, the log.
        self.listeners: list[Listener] = []
        # (logging level, line) said by start(): how the sources were set up, so nothing is
        # logged by an agent whose start fails later (a bad MQTT password is one line).
        self.start_notes: list[tuple[int, str]] = []
        self.polls = 0
        self.failures: dict[str, int] = {source.name: 0 for source in self.sources}
        self._claims: dict[str, tuple[Claim, ...]] = {source.name: () for source in self.sources}
        self._table = EMPTY_TABLE
        self._failing: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def table(self) -> JobTable:
        """The jobs in force now (a reference swap: no lock needed to read it)."""
        return self._table

    def poll_once(self) -> bool:
        """Ask every source once; True when the table changed."""
        self.polls += 1
        changed = False
        for source in self.sources:
            claims = self._poll(source)
            if claims is None:
                continue
            ordered = tuple(sorted(claims, key=lambda claim: claim.job.job_id))
            if ordered != self._claims[source.name]:
                self._claims[source.name] = ordered
                changed = True
        if not changed:
            return False
        everything = [claim for claims in self._claims.values() for claim in claims]
        try:
            jobs, holdings = self.resolve(everything)
        except Exception:  # a topology bug must not stop attribution for good
            _LOG.exception(
                "jobs: mapping %d job(s) to ports failed; keeping the last", len(everything)
            )
            return False
        after = JobTable.build(jobs, holdings)
        before, self._table = self._table, after
        if after == before:
            return False
        self._log_change(before, after)
        now = self.clock()
        for listener in self.listeners:
            try:
                listener(now, before, after)
            except Exception:  # one failing output (a full disk) keeps the others going
                _LOG.exception("jobs: a listener failed on a job change")
        return True

    def _poll(self, source: JobSource) -> list[Claim] | None:
        try:
            claims = source.poll()
        except Exception as exc:  # counted, logged once per failing spell
            self.failures[source.name] += 1
            if source.name not in self._failing:
                self._failing.add(source.name)
                _LOG.warning(
                    "jobs: %s cannot be read (%s); keeping its last jobs", source.name, exc
                )
            return None
        if claims is None:
            self.failures[source.name] += 1
            return None
        if source.name in self._failing:
            self._failing.discard(source.name)
            _LOG.info("jobs: %s readable again", source.name)
        return claims

    @staticmethod
    def _log_change(before: JobTable, after: JobTable) -> None:
        old = {job.job_id: job for job in before.jobs}
        new = {job.job_id: job for job in after.jobs}
        for job_id in sorted(new.keys() - old.keys()):
            job = new[job_id]
            ports = after.holdings_of(job_id)
            _LOG.info(
                "jobs: %s job %s started here (user %s, name %s): %d port(s)%s",
                job.scheduler,
                job_id,
                job.user or "-",
                job.name or "-",
                len(ports),
                "".join(f" {h.device}/{h.port}({h.role},{h.rule})" for h in ports[:16]),
            )
        for job_id in sorted(old.keys() - new.keys()):
            _LOG.info("jobs: %s job %s ended here", old[job_id].scheduler, job_id)

    def start(self) -> None:
        for level, line in self.start_notes:
            _LOG.log(level, "%s", line)
        self.poll_once()
        self._thread = threading.Thread(target=self._run, name="burstscope-jobs", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        name_os_thread()
        while not self._stop.wait(self.poll_seconds):
            try:
                self.poll_once()
            except Exception:  # never let the thread die: attribution would freeze silently
                _LOG.exception("jobs: poll failed; polling on")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        for source in self.sources:
            try:
                source.close()
            except Exception:
                _LOG.exception("jobs: closing %s failed", source.name)
