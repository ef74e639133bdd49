"""NCCL Inspector dump directories, tailed: every ``<hostname>-pid<pid>.log`` as it appears.

The Inspector's dump thread writes one file per process, ``<NCCL_INSPECTOR_DUMP_DIR>/
<hostname>-pid<pid>.log`` (NVIDIA/nccl ``ext-profiler/inspector/inspector.cc``,
``inspectorDumpThread``: the name is ``gethostname`` and ``getpid``). A directory shared by
several hosts (a network file system) holds every host's files: only those whose name, and
then whose records, say this host are read (``nccl_inspector.same_host``). A training job
that restarts writes new files beside the old ones, and whoever cleans the directory may
delete them while they are read: a file that vanishes is dropped with its reader, a file that
appears gets one, and a directory that does not exist yet is looked for again at every poll
(the job makes it when it starts).

Memory is bounded: each file's reader (``SpanReader``: the records as columns of their spans)
holds at most one incomplete object, at most ``max_files`` files are tailed at once, and a
poll takes at most ``poll_bytes`` from each. Records are handed to the caller and not kept.
Nothing here raises on what it reads: bad objects are the readers' counted skips (by kind),
unreadable directories and files are said once in the log.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from burstscope.collector.collectives.nccl_inspector import (
    DEFAULT_READ_BYTES,
    SpanReader,
    Spans,
    same_host,
)

_LOG = logging.getLogger(__name__)

# inspectorDumpThread's file name: "%s-pid%d.log" of gethostname and getpid.
DUMP_FILE = re.compile(r"^(?P<host>.+)-pid(?P<pid>\d+)\.log$")
# A node runs a process per GPU (8, 16 with a restart beside the old files): this is room
# for many restarts, and bounds the readers' memory (each at most one object, 256 KiB).
DEFAULT_MAX_FILES = 256
# What one poll reads from a file at most: at 1,000 records a second of ~1 KB each, a poll
# every 0.25 s takes 250 KB; this lets a tail that fell behind catch up in a few polls
# without one poll holding megabytes of records.
DEFAULT_POLL_BYTES = 2 * DEFAULT_READ_BYTES
SECOND_NS = 1_000_000_000
OTHER_HOST = "other_host"  # a record another host wrote, in a file named for this one


class DumpDirectoryTail:
    """Tails the Inspector dump files of this host in ``directories``; ``poll`` for news."""

    def __init__(
        self,
        directories: Sequence[str | os.PathLike[str]],
        hostname: str | None = None,
        max_files: int = DEFAULT_MAX_FILES,
        poll_bytes: int = DEFAULT_POLL_BYTES,
    ) -> None:
        if max_files < 1 or poll_bytes < 1:
            raise ValueError("max_files and poll_bytes must be positive")
        self.directories = tuple(Path(d) for d in directories)
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self.max_files = max_files
        self.poll_bytes = poll_bytes
        self.records = 0  # this host's records read
        self._readers: dict[Path, SpanReader] = {}
        # Skips of readers already dropped (their file vanished), so totals never go down.
        self._gone: Counter[str] = Counter()
        # Each directory's modification time when last listed, and the files it held.
        self._listed: dict[Path, tuple[int | None, list[Path]]] = {}
        self._said: set[str] = set()

    @property
    def files(self) -> int:
        """Files tailed now."""
        return len(self._readers)

    @property
    def skipped(self) -> Counter[str]:
        """Objects skipped since the start, by kind (nccl_inspector's MALFORMED, OVERSIZED,
        TRUNCATED, and OTHER_HOST for another host's records in a file named for this one)."""
        total = Counter(self._gone)
        for reader in self._readers.values():
            total.update(reader.skipped)
            total[OTHER_HOST] += reader.other_host
        return total

    def poll(self) -> Spans:
        """This host's records completed since the last poll, file by file."""
        self._follow()
        out: list[Spans] = []
        for reader in list(self._readers.values()):
            taken = 0
            while taken < self.poll_bytes:
                before = reader.position
                spans = reader.read()
                if len(spans):
                    out.append(spans)
                taken += max(0, reader.position - before)
                if reader.caught_up or reader.position == before:
                    break
        spans = Spans.joined(out)
        self.records += len(spans)
        return spans

    def close(self) -> None:
        """Drop every reader (their counts are kept)."""
        for path in list(self._readers):
            self._drop(path)

    def _follow(self) -> None:
        """Readers for files that appeared; none for those that vanished."""
        present: set[Path] = set()
        for directory in self.directories:
            present.update(self._scan(directory))
        for path in [p for p in self._readers if p not in present]:
            _LOG.info("%s is gone: no longer tailed", path)
            self._drop(path)
        for path in sorted(present - self._readers.keys()):
            if len(self._readers) >= self.max_files:
                self._say_once(
                    "max_files",
                    "%d Inspector dump files tailed already: %s and any further ones are not "
                    "read (delete the files of ended runs)",
                    self.max_files,
                    path,
                )
                break
            _LOG.info("tailing NCCL Inspector dump %s", path)
            self._readers[path] = SpanReader(
                path, self.hostname, read_bytes=min(self.poll_bytes, DEFAULT_READ_BYTES)
            )

    def _scan(self, directory: Path) -> list[Path]:
        # A directory whose modification time has not moved lists the same files: a file
        # made, removed or renamed in it moves the time. Only a time older than a second is
        # trusted, so two changes within one tick of the file system's clock, one before the
        # last listing and one after, are still seen.
        try:
            changed = os.stat(directory).st_mtime_ns
        except OSError:
            changed = None
        listed = self._listed.get(directory)
        if (
            listed is not None
            and changed == listed[0]
            and changed is not None
            and time.time_ns() - changed > SECOND_NS
        ):
            return listed[1]
        found = self._list(directory)
        self._listed[directory] = (changed, found)
        return found

    def _list(self, directory: Path) -> list[Path]:
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            self._say_once(
                f"missing {directory}",
                "NCCL Inspector dump directory %s does not exist (yet): looked for at every poll",
                directory,
                level=logging.INFO,
            )
            return []
        except OSError as exc:
            self._say_once(
                f"unreadable {directory}",
                "NCCL Inspector dump directory %s cannot be read (%s): looked for at every poll",
                directory,
                exc.strerror,
            )
            return []
        if f"missing {directory}" in self._said:
            self._said.discard(f"missing {directory}")
            _LOG.info("NCCL Inspector dump directory %s is there now", directory)
        found = []
        for entry in entries:
            match = DUMP_FILE.match(entry.name)
            # Another host's file on a shared file system: not read at all.
            if match is None or not same_host(match["host"], self.hostname):
                continue
            try:
                if not entry.is_file():
                    continue
            except OSError:
                continue
            found.append(Path(entry.path))
        return found

    def _drop(self, path: Path) -> None:
        reader = self._readers.pop(path)
        self._gone.update(reader.skipped)
        self._gone[OTHER_HOST] += reader.other_host

    def _say_once(
        self, about: str, message: str, *args: object, level: int = logging.WARNING
    ) -> None:
        if about not in self._said:
            self._said.add(about)
            _LOG.log(level, message, *args)
