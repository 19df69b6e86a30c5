"""Running turns in the store: a turn's status and its cancel request, readable and writable from any container.

A *run* is a small record (kind ``run``, id ``run_<key>``) beside what the turn produces: ``key`` is the stored
response's id (``resp_…``) or, for ``/chat``, the conversation's (``conv_…``: one running turn per conversation, each
turn a new ``turn`` id). Its body is a handful of fields, so every change is a compare-and-set on the whole body
(``Backend.swap_body``): a status moves once, whichever copy tries (``queued -> in_progress`` is how a background
worker claims its turn, so a retried or duplicated event never runs it twice), and a cancel request is never lost
to a concurrent status write. A background request's body is kept under the run (its ``input`` list), for the worker
that runs it on another invocation.

A run whose status is still ``queued`` or ``in_progress`` when nothing has written it for longer than the longest a
turn may run (``stale``) is dead: its invocation ended (timed out, crashed, frozen for good) without finishing it.

Usage::

    runs = Runs(store)
    await runs.begin(owner, "resp_1", turn="resp_1", status="queued", deadline=d, request=body)
    claimed = await runs.move(owner, "resp_1", "resp_1", {"queued"}, "in_progress", d)    # None: someone else did
    await runs.cancel(owner, "resp_1", d)                                                  # the running turn ends
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.store.model import Item, Record, StoredEvent
from chatloop.store.service import MAX_EVENTS_READ, Store, owner_key

RunStatus = Literal["queued", "in_progress", "completed", "failed", "cancelled", "incomplete"]
ACTIVE: frozenset[str] = frozenset({"queued", "in_progress"})
"""The statuses of a turn that has not ended (OpenAI's ``ResponseStatus`` values; the rest are terminal)."""
REQUEST_ITEM = "request"
JOURNAL_TTL_SECONDS = 3600
"""How long a ``/chat`` turn's journal is kept: it serves a reload while the turn runs (the conversation keeps the
turn itself), so it goes long before the conversation does."""


@dataclass(frozen=True)
class Run:
    key: str
    turn: str
    """Which turn holds the key now (a conversation's runs are one record, a turn after another)."""
    status: str
    cancel: bool
    """A client asked the turn to end (``POST /chat/stop``, ``POST /v1/responses/{id}/cancel``)."""
    updated_at: float
    """Epoch seconds of the last write (its start, its claim, its end)."""
    background: bool = False

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def stale(self, longest_seconds: float, now: float | None = None) -> bool:
        """Still active, yet unwritten for longer than a turn may run: whatever ran it is gone."""
        return self.active and (now if now is not None else time.time()) - self.updated_at > longest_seconds

    def body(self) -> JSONObject:
        return {
            "turn": self.turn,
            "status": self.status,
            "cancel": self.cancel,
            "updated_at": self.updated_at,
            "background": self.background,
        }

    @classmethod
    def of(cls, key: str, body: JSONObject) -> Run:
        updated = body.get("updated_at")
        return cls(
            key,
            str(body.get("turn", "")),
            str(body.get("status", "")),
            body.get("cancel") is True,
            float(updated) if isinstance(updated, int | float) else 0.0,
            body.get("background") is True,
        )


def run_id(key: str) -> str:
    return f"run_{key}"


class Runs:
    """The runs of ``store`` (the same table or file as everything else it keeps)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def begin(
        self,
        owner: str,
        key: str,
        turn: str,
        status: RunStatus,
        deadline: Deadline,
        request: JSONObject | None = None,
        *,
        background: bool = False,
    ) -> Run:
        """Record a turn that starts (``in_progress``) or waits for a worker (``queued``, with its ``request``).
        A conversation's earlier run under the same key is replaced."""
        run = Run(key, turn, status, False, time.time(), background)
        backend, okey = self.store.backend, owner_key(owner)
        existing = await self.store.call(deadline, backend.read, okey, run_id(key), time.time())
        replaced = existing is not None and existing.kind == "run"
        if replaced and existing is not None:  # a conversation's earlier turn
            swapped = await self.store.call(
                deadline, backend.swap_body, okey, run_id(key), existing.body, run.body(), time.time()
            )
            if swapped:
                return run
        now = time.time()
        record = Record("run", int(now), math.ceil(now + self.store.ttl_seconds), run.body())
        lists = {"input": [Item(REQUEST_ITEM, request)]} if request is not None else {}
        await self.store.call(deadline, backend.create, okey, run_id(key), record, lists)
        return run

    async def get(self, owner: str, key: str, deadline: Deadline) -> Run | None:
        record = await self.store.call(
            deadline, self.store.backend.read, owner_key(owner), run_id(key), time.time()
        )
        return Run.of(key, record.body) if record is not None and record.kind == "run" else None

    async def move(
        self,
        owner: str,
        key: str,
        turn: str | None,
        allowed: Collection[str],
        status: RunStatus,
        deadline: Deadline,
    ) -> Run | None:
        """Move the run of ``turn`` (any turn: None) from one of the ``allowed`` statuses to ``status``, once: the new
        run, or None when it was not in one of them (another copy moved it first), or is another turn's now."""
        return await self._update(
            owner,
            key,
            deadline,
            lambda run: run.status in allowed and turn in (None, run.turn),
            status=status,
        )

    async def cancel(self, owner: str, key: str, deadline: Deadline) -> Run | None:
        """Ask the key's running turn to end: the run as it stands afterwards (None: no run). A run that already
        ended is left as it is (a second cancel is the same as the first)."""
        moved = await self._update(
            owner, key, deadline, lambda run: run.active and not run.cancel, cancel=True
        )
        return moved or await self.get(owner, key, deadline)

    # --- a /chat turn's journal: its events, under a record of the turn's own ------------------------------
    async def open_journal(self, owner: str, turn: str, deadline: Deadline) -> None:
        now = time.time()
        expires = math.ceil(now + min(self.store.ttl_seconds, JOURNAL_TTL_SECONDS))
        record = Record("run", int(now), expires, {"journal": turn})
        await self.store.call(deadline, self.store.backend.create, owner_key(owner), run_id(turn), record, {})

    async def append_events(
        self, owner: str, turn: str, events: Sequence[StoredEvent], deadline: Deadline
    ) -> bool:
        entries = [(e.sequence_number, Item(str(e.sequence_number), e.data)) for e in events]
        return await self.store.call(
            deadline,
            self.store.backend.put_at,
            owner_key(owner),
            run_id(turn),
            "events",
            entries,
            time.time(),
        )

    async def events_after(
        self, owner: str, turn: str, after: int, deadline: Deadline
    ) -> list[StoredEvent] | None:
        rows = await self.store.call(
            deadline,
            self.store.backend.page,
            owner_key(owner),
            run_id(turn),
            "events",
            "asc",
            after,
            MAX_EVENTS_READ,
            time.time(),
        )
        return None if rows is None else [StoredEvent(position, item.body) for position, item in rows]

    async def request_of(self, owner: str, key: str, deadline: Deadline) -> JSONObject | None:
        """The request body a background run was queued with."""
        item = await self.store.call(
            deadline,
            self.store.backend.get_child,
            owner_key(owner),
            run_id(key),
            "input",
            REQUEST_ITEM,
            time.time(),
        )
        return item.body if item is not None else None

    async def _update(
        self, owner: str, key: str, deadline: Deadline, when: Callable[[Run], bool], **changes: str | bool
    ) -> Run | None:
        backend, okey = self.store.backend, owner_key(owner)
        for _ in range(5):  # a concurrent write between the read and the swap: read again
            record = await self.store.call(deadline, backend.read, okey, run_id(key), time.time())
            if record is None or record.kind != "run":
                return None
            run = Run.of(key, record.body)
            if not when(run):
                return None
            new = replace(run, **changes, updated_at=time.time())  # type: ignore[arg-type]
            if await self.store.call(
                deadline, backend.swap_body, okey, run_id(key), record.body, new.body(), time.time()
            ):
                return new
        return None
