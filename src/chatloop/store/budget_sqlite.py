"""The budget ledger in the embedded store's SQLite file (``CONVERSATION_STORE_PATH``), in its ``records`` table: one
row per caller for its counters (``budget#<owner hash>#usage``, expiring ``KEPT_SECONDS`` after its last write, so
the store's sweep removes an idle caller's) and one for its overrides (``...#limits``, kept).

Every reservation is one ``BEGIN IMMEDIATE`` transaction: the write lock is taken before the counters are read, so
the check and the add are one step for every thread and process sharing the file (the limit holds across
``make run`` workers and test processes alike).

Usage::

    ledger = SQLiteLedger("/tmp/chatloop/conversations.sqlite3")
    held = await ledger.reserve("local", Charge(tokens=500, requests=1), Limits(tokens_per_day=10_000), deadline)
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from chatloop.store.budget import (
    KEPT_SECONDS,
    Charge,
    Clock,
    Counters,
    Held,
    Ledger,
    Limits,
    Periods,
    added,
    budget_key,
    counter_names,
    live_leases,
    refusal,
    settled,
    stale,
    turn_of_lease,
)
from chatloop.store.sqlite import SQLiteBackend

KIND = "budget"
KEPT_FOREVER = 253402300799
"""9999-12-31: an override is kept until it is removed."""


class SQLiteLedger(Ledger):
    def __init__(self, path: str | Path, clock: Clock = time.time):
        self.path = Path(path)
        self.clock = clock
        # The conversation store's own connections and transactions on the same file: one way to open it.
        self._file = SQLiteBackend(self.path)

    def _limits(self, caller: str, timeout: float) -> Limits:
        with self._file._db(timeout) as db:
            body = _read(db, _row(caller, "limits"), self.clock())
        return Limits.from_overrides(body)

    def _set_limits(self, caller: str, overrides: Limits, timeout: float) -> None:
        with self._file._db(timeout, write=True) as db:
            _write(db, _row(caller, "limits"), dict(overrides.as_overrides()), self.clock(), KEPT_FOREVER)

    def _reserve(self, caller: str, charge: Charge, limits: Limits, timeout: float) -> Held:
        with self._file._db(timeout, write=True) as db:
            now = self.clock()
            p = Periods.at(now)
            counters, leases = _state(_read(db, _row(caller, "usage"), now))
            refused = refusal(Counters(counters, leases, p), charge, limits)
            if refused is not None:
                raise refused
            current = set(counter_names(p).values())
            kept = {name: value for name, value in counters.items() if name in current}
            taken = live_leases(leases, now) | ({charge.lease} if charge.lease else set())
            usage = _save(db, caller, kept, added(charge, p), taken, now)
        return Held(charge, p, usage)

    def _settle(self, caller: str, held: Held, actual: Charge, timeout: float) -> Counters:
        with self._file._db(timeout, write=True) as db:
            now = self.clock()
            counters, leases = _state(_read(db, _row(caller, "usage"), now))
            changes = settled(held, actual)
            gone = stale(counters, set(counter_names(Periods.at(now)).values()) | set(changes))
            kept = {name: value for name, value in counters.items() if name not in gone}
            return _save(db, caller, kept, changes, live_leases(leases, now), now)

    def _end_turn(self, caller: str, lease: str, timeout: float) -> None:
        with self._file._db(timeout, write=True) as db:
            now = self.clock()
            counters, leases = _state(_read(db, _row(caller, "usage"), now))
            if counters or leases:
                _save(db, caller, counters, {}, live_leases(leases, now) - {lease}, now)

    def _renew_turn(self, caller: str, lease: str, timeout: float) -> None:
        with self._file._db(timeout, write=True) as db:
            now = self.clock()
            counters, leases = _state(_read(db, _row(caller, "usage"), now))
            turn = turn_of_lease(lease)
            others = {held for held in live_leases(leases, now) if turn_of_lease(held) != turn}
            _save(db, caller, counters, {}, others | {lease}, now)

    def _usage(self, caller: str, timeout: float) -> Counters:
        with self._file._db(timeout) as db:
            now = self.clock()
            counters, leases = _state(_read(db, _row(caller, "usage"), now))
        return Counters(counters, leases, Periods.at(now))


def _save(
    db: sqlite3.Connection,
    caller: str,
    counters: dict[str, int],
    changes: dict[str, int],
    leases: set[str],
    now: float,
) -> Counters:
    """Write the caller's counters (``changes`` added) and leases, kept ``KEPT_SECONDS`` from now."""
    for name, amount in changes.items():
        counters[name] = counters.get(name, 0) + amount
    body: dict[str, object] = {"counters": counters, "leases": sorted(leases)}
    _write(db, _row(caller, "usage"), body, now, int(now) + KEPT_SECONDS)
    return Counters(counters, frozenset(leases), Periods.at(now))


def _row(caller: str, what: str) -> tuple[str, str]:
    key = budget_key(caller)
    return key, f"budget#{key}#{what}"


def _read(db: sqlite3.Connection, row: tuple[str, str], now: float) -> dict[str, object]:
    owner, row_id = row
    found = db.execute(
        "SELECT body FROM records WHERE id = ? AND owner = ? AND expires_at > ?", (row_id, owner, now)
    ).fetchone()
    if found is None:
        return {}
    body = json.loads(found[0])
    return body if isinstance(body, dict) else {}


def _write(
    db: sqlite3.Connection, row: tuple[str, str], body: dict[str, object], now: float, expires: int
) -> None:
    owner, row_id = row
    db.execute(
        "INSERT INTO records (owner, id, kind, created_at, expires_at, body) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET body = excluded.body, expires_at = excluded.expires_at",
        (owner, row_id, KIND, int(now), expires, json.dumps(body, separators=(",", ":"))),
    )


def _state(body: dict[str, object]) -> tuple[dict[str, int], frozenset[str]]:
    counters = body.get("counters")
    leases = body.get("leases")
    return (
        {str(k): int(v) for k, v in counters.items() if isinstance(v, int)}
        if isinstance(counters, dict)
        else {},
        frozenset(str(x) for x in leases) if isinstance(leases, list) else frozenset(),
    )
