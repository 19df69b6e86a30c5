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

    runs = store.runs                                       # Runs(Core(backend, ttl_seconds)) of the store
    await runs.begin(owner, "resp_1", turn="resp_1", status="queued", deadline=d, request=body)
    claimed = await runs.move(owner, "resp_1", "resp_1", {"queued"}, "in_progress", d)    # None: someone else did
    await runs.cancel(owner, "resp_1", d)                                                  # the running turn ends
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.store.core import Core, owner_key
from chatloop.store.model import Item, StoredEvent

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
    """The ``RunRecords`` of the store (``store.protocol``): in the same table or file as everything else it keeps."""

    def __init__(self, core: Core) -> None:
        self.core = core

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
        core, okey = self.core, owner_key(owner)
        run = Run(key, turn, status, False, core.now(), background)
        existing = await core.read(owner, run_id(key), "run", deadline)
        if existing is not None:  # a conversation's earlier turn
            swapped = await core.call(
                deadline, core.backend.swap_body, okey, run_id(key), existing.body, run.body(), core.now()
            )
            if swapped:
                return run
        record = core.new_record("run", run.body())
        lists = {"input": [Item(REQUEST_ITEM, request)]} if request is not None else {}
        await core.call(deadline, core.backend.create, okey, run_id(key), record, lists)
        return run

    async def get(self, owner: str, key: str, deadline: Deadline) -> Run | None:
        record = await self.core.read(owner, run_id(key), "run", deadline)
        return Run.of(key, record.body) if record is not None else None

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
        core = self.core
        record = core.new_record("run", {"journal": turn}, min(core.ttl_seconds, JOURNAL_TTL_SECONDS))
        await core.call(deadline, core.backend.create, owner_key(owner), run_id(turn), record, {})

    async def append_events(
        self, owner: str, turn: str, events: Sequence[StoredEvent], deadline: Deadline
    ) -> bool:
        return await self.core.put_events(owner, run_id(turn), events, deadline)

    async def events_after(
        self, owner: str, turn: str, after: int, deadline: Deadline
    ) -> list[StoredEvent] | None:
        return await self.core.events_after(owner, run_id(turn), after, deadline)

    async def request_of(self, owner: str, key: str, deadline: Deadline) -> JSONObject | None:
        """The request body a background run was queued with."""
        core = self.core
        item = await core.call(
            deadline,
            core.backend.get_child,
            owner_key(owner),
            run_id(key),
            "input",
            REQUEST_ITEM,
            core.now(),
        )
        return item.body if item is not None else None

    async def _update(
        self, owner: str, key: str, deadline: Deadline, when: Callable[[Run], bool], **changes: str | bool
    ) -> Run | None:
        core, okey = self.core, owner_key(owner)
        for _ in range(5):  # a concurrent write between the read and the swap: read again
            record = await core.read(owner, run_id(key), "run", deadline)
            if record is None:
                return None
            run = Run.of(key, record.body)
            if not when(run):
                return None
            new = replace(run, **changes, updated_at=core.now())  # type: ignore[arg-type]
            if await core.call(
                deadline, core.backend.swap_body, okey, run_id(key), record.body, new.body(), core.now()
            ):
                return new
        return None
