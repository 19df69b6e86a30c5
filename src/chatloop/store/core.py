"""``Core``: the steps every aggregate of the store shares (conversations, responses, runs, claims): a ``Backend``
called in a worker thread within the request's deadline, records stamped with the store's TTL, reads that see only
a record of the kind asked for, pages with their cursor, and the event lists that responses and runs journal.

Each call takes the request's ``Deadline``: the backend gets what is left of it as its timeout, and the caller gets
``StoreUnavailable`` when the deadline passes, even if the backend hangs (the worker thread is abandoned, and its
own timeouts end it). The event loop never blocks on the store.

Usage::

    core = Core(SQLiteBackend(path), ttl_seconds=3600)
    record = await core.read("alice", "conv_…", "conversation", deadline)        # None: missing, or not alice's
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import anyio
from anyio import to_thread

from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.store.model import (
    Backend,
    Item,
    ListName,
    Page,
    PageQuery,
    Record,
    RecordKind,
    StoredEvent,
    StoreUnavailable,
)

__all__ = ["MAX_EVENTS_READ", "Core", "CursorNotFound", "owner_key"]

T = TypeVar("T")
MAX_EVENTS_READ = 10_000
"""The most events one replay reads (a response's stream has far fewer)."""


class CursorNotFound(LookupError):
    """``after`` names no item of the list (a 400 for the client)."""


def owner_key(owner: str) -> str:
    """What the backends key records by: a hash, so no caller identity (an API key id, an IAM ARN, a local key) is
    ever stored."""
    return hashlib.sha256(f"chatloop-owner\x00{owner}".encode()).hexdigest()[:40]


class Core:
    """A ``Backend`` and the TTL (seconds from creation) of every record kept in it."""

    def __init__(self, backend: Backend, ttl_seconds: int):
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self.backend = backend
        self.ttl_seconds = ttl_seconds

    def now(self) -> float:
        """The store's clock, epoch seconds (every record's times and every read's "now" come from here)."""
        return time.time()

    def new_record(self, kind: RecordKind, body: JSONObject, ttl_seconds: int | None = None) -> Record:
        """A record created now, expiring after ``ttl_seconds`` (default: the store's)."""
        now = self.now()
        ttl = self.ttl_seconds if ttl_seconds is None else ttl_seconds
        return Record(kind, int(now), math.ceil(now + ttl), body)

    async def read(self, owner: str, record_id: str, kind: RecordKind, deadline: Deadline) -> Record | None:
        """The owner's record of that id, if it is of ``kind`` (anything else reads as missing)."""
        record = await self.call(deadline, self.backend.read, owner_key(owner), record_id, self.now())
        return record if record is not None and record.kind == kind else None

    async def page(
        self, owner: str, record_id: str, name: ListName, query: PageQuery, deadline: Deadline
    ) -> Page | None:
        """A page of the record's list ``name``; None: no such record. ``CursorNotFound``: ``after`` is not in it."""
        key = owner_key(owner)
        after: int | None = None
        if query.after is not None:
            after = await self.call(
                deadline, self.backend.position_of, key, record_id, name, query.after, self.now()
            )
            if after is None:
                if await self.call(deadline, self.backend.read, key, record_id, self.now()) is None:
                    return None
                raise CursorNotFound(query.after)
        rows = await self.call(
            deadline,
            self.backend.page,
            key,
            record_id,
            name,
            query.order,
            after,
            query.limit + 1,
            self.now(),
        )
        if rows is None:
            return None
        return Page([item for _, item in rows[: query.limit]], has_more=len(rows) > query.limit)

    async def put_events(
        self, owner: str, record_id: str, events: Sequence[StoredEvent], deadline: Deadline
    ) -> bool:
        """Keep events at their sequence numbers under the record (False: no such record)."""
        entries = [(e.sequence_number, Item(str(e.sequence_number), e.data)) for e in events]
        return await self.call(
            deadline, self.backend.put_at, owner_key(owner), record_id, "events", entries, self.now()
        )

    async def events_after(
        self, owner: str, record_id: str, after: int, deadline: Deadline
    ) -> list[StoredEvent] | None:
        """The record's events whose sequence number is above ``after`` (-1: all), in order. None: no record."""
        rows = await self.call(
            deadline,
            self.backend.page,
            owner_key(owner),
            record_id,
            "events",
            "asc",
            after,
            MAX_EVENTS_READ,
            self.now(),
        )
        return None if rows is None else [StoredEvent(position, item.body) for position, item in rows]

    async def call(self, deadline: Deadline, call: Callable[..., T], *args: object) -> T:
        """``call(*args, timeout=…)`` in a worker thread, abandoned (and ``StoreUnavailable``) at the deadline."""
        remaining = deadline.remaining()
        if remaining <= 0:
            raise StoreUnavailable("no time was left for the conversation store")
        try:
            with anyio.fail_after(remaining):
                return await to_thread.run_sync(
                    functools.partial(call, *args, timeout=remaining), abandon_on_cancel=True
                )
        except TimeoutError:
            raise StoreUnavailable(
                f"the conversation store did not answer within {remaining:.1f} s"
            ) from None
