"""The bounded spool: messages wait here, in order, until the broker acknowledges them.

Two implementations of one small interface: ``MemorySpool`` (a deque) and ``SqliteSpool``
(a sqlite3 file, so an agent restart delivers what the previous run could not). Both drop
the oldest messages when full and count them. Only the publisher's event loop thread
touches a spool.
"""

from __future__ import annotations

import os
import sqlite3
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

SPOOL_FILE = "burstscope-mqtt-spool.sqlite3"
SPOOL_MODE = 0o600


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class Spooled:
    id: int  # increasing: the delivery order
    message: Message


class Spool(Protocol):
    dropped: int  # messages dropped because the spool was full, since this run started

    def append(self, messages: list[Message]) -> None: ...

    def peek(self, limit: int) -> list[Spooled]: ...

    def remove_through(self, spool_id: int) -> None: ...

    def __len__(self) -> int: ...

    def close(self) -> None: ...


class MemorySpool:
    """Lost when the process exits; bounded at ``capacity`` messages."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("spool capacity must be at least 1")
        self.capacity = capacity
        self.dropped = 0
        self._items: deque[Spooled] = deque()
        self._next_id = 1

    def append(self, messages: list[Message]) -> None:
        for message in messages:
            self._items.append(Spooled(self._next_id, message))
            self._next_id += 1
        while len(self._items) > self.capacity:
            self._items.popleft()
            self.dropped += 1

    def peek(self, limit: int) -> list[Spooled]:
        return [self._items[i] for i in range(min(limit, len(self._items)))]

    def remove_through(self, spool_id: int) -> None:
        while self._items and self._items[0].id <= spool_id:
            self._items.popleft()

    def __len__(self) -> int:
        return len(self._items)

    def close(self) -> None:
        pass


class SqliteSpool:
    """One table in ``<directory>/burstscope-mqtt-spool.sqlite3``; survives restarts.

    WAL with synchronous=NORMAL: a commit per batch survives a process crash; a power
    loss may lose the last batches, which is the trade every local queue makes.
    """

    def __init__(self, directory: str, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("spool capacity must be at least 1")
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.path = path / SPOOL_FILE
        self.capacity = capacity
        self.dropped = 0
        # Owner only, whatever the umask: event payloads name hosts and ports. SQLite gives
        # the -wal and -shm files the database file's permissions (os_unix.c
        # findCreateFileMode), so creating this one right is enough.
        os.close(os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, SPOOL_MODE))
        os.chmod(self.path, SPOOL_MODE)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS spool ("
            "id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, payload BLOB NOT NULL)"
        )
        self._length = int(self._db.execute("SELECT COUNT(*) FROM spool").fetchone()[0])
        self._trim()

    def append(self, messages: list[Message]) -> None:
        if not messages:
            return
        with self._transaction():
            self._db.executemany(
                "INSERT INTO spool (topic, payload) VALUES (?, ?)",
                [(m.topic, m.payload) for m in messages],
            )
        self._length += len(messages)
        self._trim()

    def _trim(self) -> None:
        excess = self._length - self.capacity
        if excess > 0:
            with self._transaction():
                self._db.execute(
                    "DELETE FROM spool WHERE id IN (SELECT id FROM spool ORDER BY id LIMIT ?)",
                    (excess,),
                )
            self._length -= excess
            self.dropped += excess

    def peek(self, limit: int) -> list[Spooled]:
        rows = self._db.execute(
            "SELECT id, topic, payload FROM spool ORDER BY id LIMIT ?", (limit,)
        ).fetchall()
        return [Spooled(int(i), Message(str(t), bytes(p))) for i, t, p in rows]

    def remove_through(self, spool_id: int) -> None:
        cursor = self._db.execute("DELETE FROM spool WHERE id <= ?", (spool_id,))
        self._length -= max(cursor.rowcount, 0)

    def __len__(self) -> int:
        return self._length

    def close(self) -> None:
        self._db.close()

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN")

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")


def open_spool(directory: str | None, capacity: int) -> Spool:
    return MemorySpool(capacity) if directory is None else SqliteSpool(directory, capacity)
