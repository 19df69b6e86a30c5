"""A running stored response's events, written to the store while they are produced, so that any container can
read the response as it stands and follow its stream (``api.runs.follow``).

The renderer tells the journal each event as it frames it (``Journal.add``, synchronous: the stream never waits for
the store). One writer task appends them in batches: what gathered within ``FLUSH_SECONDS`` of the first event of a
batch, or ``FLUSH_EVENTS`` events, or at once for the terminal event; a failed batch is tried again with the next
one. The first batch is preceded by the response record itself (``begin``: the ``in_progress`` response and its
input items), so a ``GET`` finds the response as soon as its first events can be read.

Events are numbered by the renderer from 0; ``offset`` shifts them (a background response's journal begins with
``response.queued``, written when it was queued, so its worker's events start at 1).

A running turn's events have one of two homes, behind one API (``EventLog``: ``append`` a batch, read what came
``after`` a number): a stored response's own events (``response_log``), or a ``/chat`` turn's, under a journal
record of the turn's own (``chat_turn_log``). Nothing else in ``api`` writes or reads a journal.

Usage::

    log = response_log(store, owner, "resp_1")
    journal = Journal(log.append, "resp_1", deadline=ctx.write_deadline, begin=create)
    renderer = ResponsesRenderer(rid, echo, keep, listener=journal.add)
    ...
    await journal.close()                                   # the rest written, the writer ended
    events = await log.after(4, deadline)                   # what a follower reads (None: the journal is gone)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chatloop.deadline import Deadline
from chatloop.jsontypes import json_object
from chatloop.observability import logger
from chatloop.store.model import StoredEvent, StoreUnavailable
from chatloop.store.protocol import StateStore

if TYPE_CHECKING:
    from chatloop.store.protocol import RunRecords

Append = Callable[[list[StoredEvent], Deadline], Awaitable[object]]
"""Writes a batch of events where the journal keeps them."""
Read = Callable[[int, Deadline], Awaitable[list[StoredEvent] | None]]
"""The journal's events after a sequence number (None: the journal is gone)."""

FLUSH_SECONDS = 0.15
"""How long an event may wait for others to share its write (measured: bench/fleet.py; a follower's delay is this
plus its poll interval)."""
FLUSH_EVENTS = 64
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
"""The events that end a stored response's journal."""
CHAT_TERMINAL = frozenset({"done"})
"""The event that ends a ``/chat`` turn's journal."""


@dataclass
class JournalStats:
    writes: int = 0
    events: int = 0
    failed_writes: int = 0


@dataclass(frozen=True)
class EventLog:
    """Where one running turn's events are kept: ``append`` writes a batch (each event under its number), ``after``
    reads those after a number, in order (None: the journal is gone, deleted or expired)."""

    name: str
    append: Append
    after: Read


def response_log(store: StateStore, owner: str, response_id: str) -> EventLog:
    """A stored response's events (kept with the response, deleted with it)."""

    async def append(batch: list[StoredEvent], deadline: Deadline) -> object:
        return await store.responses.append_events(owner, response_id, batch, deadline)

    async def after(position: int, deadline: Deadline) -> list[StoredEvent] | None:
        return await store.responses.events_after(owner, response_id, position, deadline)

    return EventLog(response_id, append, after)


def chat_turn_log(runs: RunRecords, owner: str, turn: str) -> EventLog:
    """A ``/chat`` turn's events, under the turn's own journal record (``RunRecords.open_journal``: kept an hour; the
    conversation keeps the turn itself)."""

    async def append(batch: list[StoredEvent], deadline: Deadline) -> object:
        return await runs.append_events(owner, turn, batch, deadline)

    async def after(position: int, deadline: Deadline) -> list[StoredEvent] | None:
        return await runs.events_after(owner, turn, position, deadline)

    return EventLog(turn, append, after)


class Journal:
    def __init__(
        self,
        append: Append,
        response_id: str,
        *,
        deadline: Callable[[], Deadline],
        begin: Callable[[dict[str, object]], Awaitable[None]] | None = None,
        offset: int = 0,
        terminal: frozenset[str] = TERMINAL,
        flush_seconds: float | None = None,
        flush_events: int | None = None,
    ) -> None:
        self.append, self.response_id = append, response_id
        self.deadline, self.begin, self.offset, self.terminal_types = deadline, begin, offset, terminal
        self.flush_seconds = FLUSH_SECONDS if flush_seconds is None else flush_seconds
        self.flush_events = FLUSH_EVENTS if flush_events is None else flush_events
        self.stats = JournalStats()
        self.began = asyncio.Event()
        """Set once the response record exists (or could not be made): what is stored after the turn waits for
        it."""
        self.made = begin is None
        """Whether the response record was made before the turn's end (by ``begin``, or before the journal, as a
        background response's is when queued): if it is gone at the end, it was deleted, and deletion wins."""
        self.terminal: dict[str, object] | None = None
        """The terminal event, once the renderer framed it."""
        self._pending: list[StoredEvent] = []
        self._first: dict[str, object] | None = None
        self._have = asyncio.Event()
        self._urgent = asyncio.Event()
        self._closed = False
        self._writer: asyncio.Task[None] | None = None
        if begin is None:
            self.began.set()

    def add(self, data: dict[str, object]) -> None:
        """One event, as the renderer framed it (its ``sequence_number`` shifted by ``offset``)."""
        number = data["sequence_number"]
        if not isinstance(number, int):
            raise TypeError(f"an event's sequence_number is {number!r}")
        shifted = {**data, "sequence_number": number + self.offset}
        if self._first is None:
            self._first = shifted
        self._pending.append(StoredEvent(number + self.offset, json_object(shifted)))
        self._have.set()
        if data.get("type") in self.terminal_types:
            self.terminal = shifted
        if data.get("type") in self.terminal_types or len(self._pending) >= self.flush_events:
            self._urgent.set()
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def close(self) -> None:
        """Write what is left and end the writer (a turn's stream calls it when it ends, however it ends)."""
        self._closed = True
        self._urgent.set()
        self._have.set()
        if self._writer is not None:
            await self._writer
        self.began.set()

    async def _write(self) -> None:
        if self.begin is not None and self._first is not None:
            try:
                await self.begin(self._first)
                self.made = True
            except StoreUnavailable as error:
                logger.warning(f"response {self.response_id}: not journaled, the store failed: {error}")
                self._closed = True
            finally:
                self.began.set()
        while True:
            await self._have.wait()
            if not self._urgent.is_set():
                # Gather what comes within the flush interval into one write.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._urgent.wait(), self.flush_seconds)
            batch, self._pending = self._pending, []
            self._have.clear()
            self._urgent.clear()
            if batch and not await self._append(batch):
                self._pending[:0] = batch  # tried again with the next batch
            if self._closed and not self._pending:
                return

    async def _append(self, batch: list[StoredEvent]) -> bool:
        started = time.perf_counter()
        try:
            await self.append(batch, self.deadline())
        except StoreUnavailable as error:
            self.stats.failed_writes += 1
            logger.warning(f"response {self.response_id}: {len(batch)} journal events not written: {error}")
            return self._closed  # at the end nothing is tried again: the stream itself is over
        self.stats.writes += 1
        self.stats.events += len(batch)
        logger.debug(
            f"journal {self.response_id}: {len(batch)} events in {(time.perf_counter() - started) * 1000:.1f} ms"
        )
        return True


def stored_event(data: Mapping[str, object]) -> StoredEvent:
    """A sent event as the store keeps it, under its ``sequence_number``."""
    number = data["sequence_number"]
    if not isinstance(number, int):
        raise TypeError(f"an event's sequence_number is {number!r}")
    return StoredEvent(number, json_object(data))
