"""The embedded backend: one SQLite file (``CONVERSATION_STORE_PATH``), so ``make run`` keeps conversations with no
setup. WAL mode and a busy timeout from the caller's deadline let several threads (and processes) share it;
appends run in ``BEGIN IMMEDIATE`` transactions, so concurrent appends to one conversation serialise and never
lose an item. Expired rows are filtered out of every read and swept now and then.

Usage::

    backend = SQLiteBackend("/tmp/chatloop/conversations.sqlite3")
    store = Store(backend, ttl_seconds=3600)
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from chatloop.jsontypes import JSONObject
from chatloop.store.model import Item, ListName, Order, Record, StoreUnavailable

SWEEP_EVERY_SECONDS = 600.0
SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    owner TEXT NOT NULL,
    id TEXT NOT NULL PRIMARY KEY,
    kind TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    body TEXT NOT NULL,
    next_position INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS children (
    record_id TEXT NOT NULL,
    list TEXT NOT NULL,
    position INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    body TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (record_id, list, position)
);
CREATE UNIQUE INDEX IF NOT EXISTS children_by_id ON children (record_id, list, item_id);
CREATE INDEX IF NOT EXISTS records_by_expiry ON records (expires_at);
"""


class SQLiteBackend:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._local = threading.local()
        self._ready = False
        self._ready_lock = threading.Lock()
        self._last_sweep = 0.0

    # --- connections ------------------------------------------------------------------------------
    @contextmanager
    def _db(self, timeout: float, write: bool = False) -> Iterator[sqlite3.Connection]:
        """A connection of this worker thread, in a transaction (``IMMEDIATE`` for writes: the write lock first, so
        a read-then-write never races another writer). Every SQLite failure is ``StoreUnavailable``."""
        try:
            connection = self._connection()
            connection.execute(f"PRAGMA busy_timeout = {max(1, int(timeout * 1000))}")
            connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield connection
            except BaseException:
                connection.rollback()
                raise
            connection.commit()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"the conversation store failed ({type(exc).__name__}: {exc})") from None

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            self._prepare()
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=True)
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = NORMAL")
            self._local.connection = connection
        return connection

    def _prepare(self) -> None:
        with self._ready_lock:
            if self._ready:
                return
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                raise sqlite3.OperationalError(f"cannot create {self.path.parent}: {exc.strerror}") from None
            connection = sqlite3.connect(self.path, isolation_level=None)
            try:
                connection.executescript(SCHEMA)
            finally:
                connection.close()
            self.path.chmod(0o600)  # conversations are the user's: not readable by other local accounts
            self._ready = True

    # --- records ----------------------------------------------------------------------------------
    def create(
        self,
        owner: str,
        record_id: str,
        record: Record,
        lists: Mapping[ListName, Sequence[Item]],
        timeout: float,
    ) -> None:
        with self._db(timeout, write=True) as db:
            db.execute(
                "INSERT INTO records (owner, id, kind, created_at, expires_at, body) VALUES (?, ?, ?, ?, ?, ?)",
                (owner, record_id, record.kind, record.created_at, record.expires_at, _dump(record.body)),
            )
            for name, items in lists.items():
                self._insert(db, record_id, name, 0, items, record.expires_at)
                db.execute(
                    "UPDATE records SET next_position = MAX(next_position, ?) WHERE id = ?",
                    (len(items), record_id),
                )
        self._sweep_now_and_then(timeout)

    def ensure(self, owner: str, record_id: str, record: Record, timeout: float) -> None:
        with self._db(timeout, write=True) as db:
            db.execute(
                "INSERT INTO records (owner, id, kind, created_at, expires_at, body) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET expires_at = MAX(expires_at, excluded.expires_at)",
                (owner, record_id, record.kind, record.created_at, record.expires_at, _dump(record.body)),
            )

    def read(self, owner: str, record_id: str, now: float, timeout: float) -> Record | None:
        with self._db(timeout) as db:
            row = db.execute(
                "SELECT kind, created_at, expires_at, body FROM records WHERE id = ? AND owner = ? AND expires_at > ?",
                (record_id, owner, now),
            ).fetchone()
        return Record(row[0], row[1], row[2], json.loads(row[3])) if row else None

    def replace_body(self, owner: str, record_id: str, body: JSONObject, now: float, timeout: float) -> bool:
        with self._db(timeout, write=True) as db:
            cursor = db.execute(
                "UPDATE records SET body = ? WHERE id = ? AND owner = ? AND expires_at > ?",
                (_dump(body), record_id, owner, now),
            )
            return cursor.rowcount == 1

    def swap_body(
        self, owner: str, record_id: str, expected: JSONObject, body: JSONObject, now: float, timeout: float
    ) -> bool:
        with self._db(timeout, write=True) as db:  # IMMEDIATE: no other writer between the read and the write
            row = db.execute(
                "SELECT body FROM records WHERE id = ? AND owner = ? AND expires_at > ?",
                (record_id, owner, now),
            ).fetchone()
            if row is None or json.loads(row[0]) != expected:
                return False
            db.execute("UPDATE records SET body = ? WHERE id = ?", (_dump(body), record_id))
            return True

    def delete(self, owner: str, record_id: str, now: float, timeout: float) -> bool:
        with self._db(timeout, write=True) as db:
            if not _exists(db, owner, record_id, now):
                return False
            db.execute("DELETE FROM children WHERE record_id = ?", (record_id,))
            db.execute("DELETE FROM records WHERE id = ?", (record_id,))
            return True

    # --- lists ------------------------------------------------------------------------------------
    def append(
        self, owner: str, record_id: str, name: ListName, items: Sequence[Item], now: float, timeout: float
    ) -> bool:
        with self._db(timeout, write=True) as db:
            row = db.execute(
                "SELECT next_position, expires_at FROM records WHERE id = ? AND owner = ? AND expires_at > ?",
                (record_id, owner, now),
            ).fetchone()
            if row is None:
                return False
            start, expires_at = row
            self._insert(db, record_id, name, start, items, expires_at)
            db.execute("UPDATE records SET next_position = ? WHERE id = ?", (start + len(items), record_id))
            return True

    def put_at(
        self,
        owner: str,
        record_id: str,
        name: ListName,
        entries: Sequence[tuple[int, Item]],
        now: float,
        timeout: float,
    ) -> bool:
        with self._db(timeout, write=True) as db:
            row = db.execute(
                "SELECT expires_at FROM records WHERE id = ? AND owner = ? AND expires_at > ?",
                (record_id, owner, now),
            ).fetchone()
            if row is None:
                return False
            db.executemany(  # OR IGNORE: an event stored twice (a retried write) is the same event
                "INSERT OR IGNORE INTO children (record_id, list, position, item_id, body, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (record_id, name, position, item.id, _dump(item.body), row[0])
                    for position, item in entries
                ],
            )
            return True

    def page(
        self,
        owner: str,
        record_id: str,
        name: ListName,
        order: Order,
        after_position: int | None,
        limit: int,
        now: float,
        timeout: float,
    ) -> list[tuple[int, Item]] | None:
        direction, compare = ("ASC", ">") if order == "asc" else ("DESC", "<")
        bound = after_position if after_position is not None else (-1 if order == "asc" else 2**62)
        with self._db(timeout) as db:
            if not _exists(db, owner, record_id, now):
                return None
            rows = db.execute(
                f"SELECT position, item_id, body FROM children WHERE record_id = ? AND list = ? "  # noqa: S608
                f"AND position {compare} ? AND expires_at > ? ORDER BY position {direction} LIMIT ?",
                (record_id, name, bound, now, limit),
            ).fetchall()
        return [(position, Item(item_id, json.loads(body))) for position, item_id, body in rows]

    def position_of(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> int | None:
        row = self._child(owner, record_id, name, item_id, now, timeout)
        return row[0] if row else None

    def get_child(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> Item | None:
        row = self._child(owner, record_id, name, item_id, now, timeout)
        return Item(item_id, json.loads(row[1])) if row else None

    def delete_child(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> bool:
        with self._db(timeout, write=True) as db:
            if not _exists(db, owner, record_id, now):
                return False
            cursor = db.execute(
                "DELETE FROM children WHERE record_id = ? AND list = ? AND item_id = ?",
                (record_id, name, item_id),
            )
            return cursor.rowcount == 1

    # --- helpers ----------------------------------------------------------------------------------
    def _child(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> tuple[int, str] | None:
        with self._db(timeout) as db:
            if not _exists(db, owner, record_id, now):
                return None
            row = db.execute(
                "SELECT position, body FROM children WHERE record_id = ? AND list = ? AND item_id = ? "
                "AND expires_at > ?",
                (record_id, name, item_id, now),
            ).fetchone()
        return (row[0], row[1]) if row else None

    @staticmethod
    def _insert(
        db: sqlite3.Connection,
        record_id: str,
        name: ListName,
        start: int,
        items: Sequence[Item],
        expires_at: int,
    ) -> None:
        db.executemany(
            "INSERT INTO children (record_id, list, position, item_id, body, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (record_id, name, start + i, item.id, _dump(item.body), item.expires_at or expires_at)
                for i, item in enumerate(items)
            ],
        )

    def _sweep_now_and_then(self, timeout: float) -> None:
        """Delete what has expired, at most every ``SWEEP_EVERY_SECONDS`` (reads never depend on it)."""
        now = time.time()
        if now - self._last_sweep < SWEEP_EVERY_SECONDS:
            return
        self._last_sweep = now
        with self._db(timeout, write=True) as db:
            db.execute("DELETE FROM children WHERE expires_at <= ?", (now,))
            db.execute("DELETE FROM records WHERE expires_at <= ?", (now,))


def _exists(db: sqlite3.Connection, owner: str, record_id: str, now: float) -> bool:
    row = db.execute(
        "SELECT 1 FROM records WHERE id = ? AND owner = ? AND expires_at > ?", (record_id, owner, now)
    ).fetchone()
    return row is not None


def _dump(body: JSONObject) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))
