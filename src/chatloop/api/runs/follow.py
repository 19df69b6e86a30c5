"""Following a stored response from any container: its stream replayed from the journal, then followed live until
its terminal event; and the response as it stands, a dead turn turned ``failed`` when it is read.

A follower reads the journal with a short poll that backs off while nothing new comes (``POLL_FIRST_SECONDS`` up to
``POLL_MAX_SECONDS``; every read strongly consistent), looks at the response record when nothing has come for a
while (a turn that ended without journaling its end, or died), and stops at its own request's deadline with an
``error`` event saying where to resume (``starting_after``): every stream it sends ends well-formed.

A turn is dead when it is still ``queued``/``in_progress`` and nothing has written it for longer than a turn may run
(``longest``: BACKGROUND_TIMEOUT_SECONDS, at least REQUEST_TIMEOUT_SECONDS): the invocation that ran it timed out or
crashed. Whoever reads it first ends it ``failed`` (``settled``), once, with its terminal event journaled.

Both kinds of running turn are followed the same way (``follow``, over the turn's ``EventLog``): a stored response
(``follow_response``) and a ``/chat`` turn running in a conversation (``follow_chat_turn``); they differ only in what
ends them and in what a follower reads when the journal goes quiet.

Usage (``api.openai.responses.stored``, ``api.chat.threads``)::

    events = await response_log(store, owner, "resp_1").after(4, deadline)  # None: 404
    async for data in follow_response(store, owner, "resp_1", events, 4, ctx.deadline, longest):
        ...
    followed = await follow_chat_turn(store, owner, "conv_1", -1, deadline, ctx.deadline, longest)  # None: 404
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeAlias

from chatloop.api.http.wire import sse_frame
from chatloop.api.runs.journal import (
    CHAT_TERMINAL,
    TERMINAL,
    EventLog,
    chat_turn_log,
    response_log,
    stored_event,
)
from chatloop.api.runs.record import call_deadline
from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.observability import logger
from chatloop.redaction import redact
from chatloop.store.model import StoredEvent, StoredResponse, StoreUnavailable
from chatloop.store.protocol import ConversationStore
from chatloop.store.runs import ACTIVE

if TYPE_CHECKING:
    from chatloop.config import Settings

POLL_FIRST_SECONDS = 0.05
POLL_MAX_SECONDS = 0.5
POLL_BACKOFF = 1.5
RECORD_EVERY_SECONDS = 2.0
"""How long a follower waits on a silent journal before it reads the response record."""
END_MARGIN_SECONDS = 0.5
"""Kept back from the follower's deadline to send its last event."""


Ended: TypeAlias = "Callable[[int], Awaitable[JSONObject | None]]"
"""The event that ends a follower whose journal went quiet: the turn ended without journaling its end, or died
(None: it still runs)."""


async def follow(
    log: EventLog,
    first: Sequence[StoredEvent],
    after: int,
    deadline: Deadline,
    *,
    terminal: frozenset[str] = TERMINAL,
    ended: Ended | None = None,
) -> AsyncIterator[JSONObject]:
    """The events after ``after`` (``first``: those already read), then each new one as the journal gets it, until
    a ``terminal`` one, or the deadline (then an ``error`` event naming where to resume)."""
    events = list(first)
    delay = POLL_FIRST_SECONDS
    quiet_since = time.monotonic()
    while True:
        for event in events:
            after = event.sequence_number
            yield event.data
            if event.data.get("type") in terminal:
                return
        if events:
            delay, quiet_since = POLL_FIRST_SECONDS, time.monotonic()
        else:
            delay = min(delay * POLL_BACKOFF, POLL_MAX_SECONDS)
        if deadline.remaining() < delay + END_MARGIN_SECONDS:
            yield resume_here(after)
            return
        await asyncio.sleep(delay)
        try:
            read_now = await log.after(after, deadline.earliest(call_seconds()))
        except StoreUnavailable as error:
            logger.warning(f"following a turn: the store failed ({error}); trying again")
            events = []
            continue
        if read_now is None:  # deleted meanwhile (or expired)
            yield resume_here(after, "the turn is no longer stored")
            return
        events = read_now
        if not events and ended is not None and time.monotonic() - quiet_since > RECORD_EVERY_SECONDS:
            quiet_since = time.monotonic()
            ending = await ended(after)
            if ending is not None:
                yield ending
                return


def follow_response(
    store: ConversationStore,
    owner: str,
    response_id: str,
    first: Sequence[StoredEvent],
    after: int,
    deadline: Deadline,
    longest: float,
) -> AsyncIterator[JSONObject]:
    """A stored response's events after ``after``, followed to its terminal event (see ``follow``)."""

    async def ended(position: int) -> JSONObject | None:
        return await _ended_unjournaled(store, owner, response_id, position, longest)

    return follow(response_log(store, owner, response_id), first, after, deadline, ended=ended)


async def follow_chat_turn(
    store: ConversationStore,
    owner: str,
    conversation_id: str,
    after: int,
    deadline: Deadline,
    until: Deadline,
    longest: float,
) -> AsyncIterator[JSONObject] | None:
    """The events after ``after`` of the caller's turn running in a conversation, followed until ``done`` (or
    ``until``); None when none runs there (not one, or a dead one: unwritten for longer than ``longest``). The
    store's reads are made now, within ``deadline``; a store that fails raises ``StoreUnavailable``."""
    runs = store.runs
    run = await runs.get(owner, conversation_id, deadline)
    if run is None:
        return None
    log = chat_turn_log(runs, owner, run.turn)
    first = await log.after(after, deadline)
    if not run.active or run.stale(longest):
        return None
    turn = run.turn

    async def ended(position: int) -> JSONObject | None:  # the turn ended (or died) without journaling done
        now = await runs.get(owner, conversation_id, call_deadline())
        if now is not None and now.turn == turn and now.active:
            return None
        return {"type": "error", "code": "turn_ended", "message": "the turn ended; read the conversation"}

    return follow(log, first or [], after, until, terminal=CHAT_TERMINAL, ended=ended)


def call_seconds() -> float:
    return call_deadline().remaining()


def resume_here(after: int, why: str = "this stream reached its time limit") -> JSONObject:
    """The ``error`` event a follower ends with when the response has not ended: where to resume it."""
    return {
        "type": "error",
        "sequence_number": after,
        "code": "stream_interrupted",
        "message": f"{why}; the response goes on: resume with starting_after={after}",
        "param": None,
    }


async def _ended_unjournaled(
    store: ConversationStore, owner: str, response_id: str, after: int, longest: float
) -> JSONObject | None:
    """The terminal event of a response that ended without one in the journal (its last write failed, or it died and
    this read turned it ``failed``); None while it runs."""
    try:
        stored = await settled(store, owner, response_id, longest, call_deadline())
    except StoreUnavailable:
        return None
    if stored is None or stored.body.get("status") in ACTIVE:
        return None
    try:  # its terminal event may have been journaled meanwhile
        late = await response_log(store, owner, response_id).after(after, call_deadline())
    except StoreUnavailable:
        late = None
    for event in late or []:
        if event.data.get("type") in TERMINAL:
            return event.data
    return terminal_event(stored.body, after + 1)


def terminal_event(body: JSONObject, number: int) -> JSONObject:
    status = body.get("status")
    kind = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(str(status))
    return {"type": kind or "response.failed", "sequence_number": number, "response": body}


async def settled(
    store: ConversationStore, owner: str, response_id: str, longest: float, deadline: Deadline
) -> StoredResponse | None:
    """The stored response as it stands; a dead turn (see the module docstring) is ended ``failed`` first."""
    stored = await store.responses.get(owner, response_id, deadline)
    if stored is None or stored.body.get("status") not in ACTIVE:
        return stored
    runs = store.runs
    run = await runs.get(owner, response_id, deadline)
    last_write = run.updated_at if run is not None else float(stored.created_at)
    if time.time() - last_write <= longest:
        return stored
    if run is not None:
        moved = await runs.move(owner, response_id, None, ACTIVE, "failed", deadline)
        if moved is None:  # another reader (or the turn itself, just now) settled it
            return await store.responses.get(owner, response_id, deadline)
    error: JSONObject = {
        "code": "server_error",
        "message": "the turn stopped without finishing (its invocation timed out)",
    }
    logger.warning(f"response {response_id}: a dead turn, ended failed when read")
    return await end_response(store, owner, response_id, stored, "failed", deadline, error=error)


async def end_response(
    store: ConversationStore,
    owner: str,
    response_id: str,
    stored: StoredResponse,
    status: str,
    deadline: Deadline,
    error: JSONObject | None = None,
) -> StoredResponse:
    """End a response that did not end itself (cancelled while queued, or dead): its record takes ``status`` and
    its journal the terminal event, numbered after the last one."""
    body = {**stored.body, "status": status, "error": error}
    await store.responses.update(owner, response_id, body, [], deadline)
    log = response_log(store, owner, response_id)
    events = await log.after(-1, deadline) or []
    number = events[-1].sequence_number + 1 if events else 0
    await log.append([stored_event(terminal_event(body, number))], deadline)
    return StoredResponse(stored.id, stored.created_at, body, stored.expires_at)


def longest_turn(settings: Settings) -> float:
    """How long a turn may run at most: a stored turn still running after it is dead."""
    return max(settings.background_timeout_seconds, settings.request_timeout_seconds)


async def replay(
    events: Iterable[Mapping[str, object]] | AsyncIterator[Mapping[str, object]],
) -> AsyncIterator[bytes]:
    """Kept events as the SSE bytes a follower is sent (each redacted once, as a live stream's chunks are)."""
    if isinstance(events, AsyncIterator):
        async for data in events:
            yield redact(sse_frame(data, event=str(data["type"]))).encode()
        return
    for data in events:
        yield redact(sse_frame(data, event=str(data["type"]))).encode()
