"""``/chat`` in a stored conversation: the conversation a request continues, the turn appended to it when it ends,
and ``POST /chat/stop``, the one way to end such a turn early (it outlives its client, see ``api.runs.running``).

The turn's run is recorded in the store (``run_<conversation id>``, ``in_progress``, written beside the turn, never
before its first token), so a stop sent to any copy reaches it: the copy that runs it stops it at once, any other
writes a cancel request that the running copy reads within ``running.CANCEL_POLL_SECONDS``.

Its events are journaled as they go (``run_<turn id>``, written beside the stream), so ``GET /chat/follow`` on any
copy replays and follows the running turn: the page reloaded mid-answer shows the answer as it is written.

Usage (``api.chat.endpoint``)::

    thread = await chat_thread(request, admission, "conv_…", body.messages)   # 4xx/503 before any model call
    events = running_turn(request, thread, events)                  # runs to its end; stoppable from any copy
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.http.query import Query
from chatloop.api.http.wire import JSONBody, sse_frame
from chatloop.api.items.approvals import McpApprovalResponseInput
from chatloop.api.items.inputs import InputMessage
from chatloop.api.items.messages import messages_of
from chatloop.api.items.output import ResponseEvents, ResponseOutput
from chatloop.api.items.store import (
    conversation_id_of,
    owned_store,
    starting_after,
    store_context,
    store_errors,
)
from chatloop.api.items.stored import conversation_history, stored_items
from chatloop.api.runs.follow import follow_chat_turn
from chatloop.api.runs.journal import Journal
from chatloop.api.runs.turn import ask_to_stop, chat_turn, stop_here
from chatloop.api.turns import compaction
from chatloop.api.turns.checks import conversation, read_body
from chatloop.api.turns.schemas import ChatApproval, StopBody
from chatloop.api.turns.serve import held_secrets
from chatloop.engine.approvals import ApprovalAnswer
from chatloop.engine.events import Done, Event, TurnError
from chatloop.engine.messages import Message
from chatloop.engine.summary import StopReason, TurnSummary
from chatloop.jsontypes import json_object
from chatloop.observability import logger
from chatloop.redaction import redact
from chatloop.store.model import Item, StoreUnavailable, new_id

if TYPE_CHECKING:
    from chatloop.api.items.objects import CompactionItem
    from chatloop.api.turns.admission import Admission


@dataclass
class ChatThread:
    """A ``/chat`` turn inside a stored conversation: whose it is, and the messages that came before it."""

    owner: str
    conversation_id: str
    history: list[Message]
    new: list[dict[str, object]]
    """The request's new messages (user or system), appended to the conversation with the answer."""
    answers: tuple[ApprovalAnswer, ...] = ()
    """Answers to the conversation's approval requests the turn runs first (``api.turns.approvals``)."""
    answer_items: tuple[McpApprovalResponseInput, ...] = ()
    """Those answers as the items appended to the conversation (a denial stays the model's history)."""
    compaction: CompactionItem | None = None
    """The compaction the turn started with (COMPACTION_THRESHOLD_TOKENS): appended before the turn's output."""


async def chat_thread(
    ctx: RequestContext,
    admission: Admission,
    conversation: str,
    new: list[object],
    approvals: Sequence[ChatApproval] = (),
) -> ChatThread:
    """The conversation a ``/chat`` request continues (a 4xx or 503 before any model call when it cannot be had).
    With a conversation the client sends only what is new: user (or system) messages, and answers to its
    approval requests (each checked as ``api.turns.approvals`` checks them)."""
    messages = [m for m in new if isinstance(m, dict) and m.get("role") in ("user", "system")]
    if len(messages) != len(new):
        raise RequestError(
            400,
            "invalid_messages",
            "messages: with a conversation, send only the new user message(s); the earlier turns are on the server",
            param="messages",
        )
    store, owner, deadline = owned_store(ctx)
    conversation_id = conversation_id_of(conversation)
    with store_errors():
        items = await conversation_history(store, owner, conversation_id, deadline)
    given = tuple(McpApprovalResponseInput.model_validate(a.as_item()) for a in approvals)
    await compaction.open_items(ctx, items)  # a compaction item stands for what came before it
    answers = await admission.claim([*items, *given], len(items))
    history = messages_of([*items, *given], answers.ids)
    return ChatThread(owner, conversation_id, history, messages, answers.answers, given)


async def compacted(
    ctx: RequestContext, thread: ChatThread, messages: list[Message], new: list[object], model: str | None
) -> list[Message]:
    """The thread's conversation, compacted instead of trimmed when it is estimated past
    COMPACTION_THRESHOLD_TOKENS (docs/conversations.md): the summary, then the request's new messages; the compaction item is
    appended to the conversation with the turn. A budget that refuses the summary's call is a 429 before anything
    ran: the thread's approval answers are not used up (``api.turns.admission`` gives them back)."""
    threshold = ctx.runtime.settings.compaction_threshold_tokens
    if not threshold:
        return messages
    summary = await compaction.past(ctx, messages, threshold, model, openai=False)  # refused: see admission
    if summary is None:
        return messages
    thread.compaction = summary[0]
    return conversation([summary[1].message(), *new], ctx.runtime.settings.max_messages)


def running_turn(
    ctx: RequestContext, thread: ChatThread, events: AsyncIterator[Event]
) -> AsyncIterator[Event]:
    """The turn's events, run to the end (and stored by ``save_chat_turn``) whether or not the client stays,
    journaled (a reloaded page follows it on any copy: ``GET /chat/follow``), and ended with an ``error`` and a
    ``done`` when a client stops it (``POST /chat/stop``, on any copy)."""
    store = ctx.runtime.stores.conversations()

    def stopped() -> list[Event]:
        return [
            TurnError("stopped", "the turn was stopped by its client"),
            Done(TurnSummary.failed("Stopped.", StopReason.CLIENT_DISCONNECTED)),
        ]

    async def keep(seen: list[Event]) -> None:
        await save_chat_turn(ctx, thread, seen)

    running = chat_turn(store, thread.owner, thread.conversation_id)
    stoppable = running.stoppable(held_secrets(events), stopped)
    journal = running.journal
    return running.run(_journaled(stoppable, journal) if journal else stoppable, keep)


async def _journaled(events: AsyncIterator[Event], journal: Journal) -> AsyncIterator[Event]:
    """``events``, each told to the journal as ``{"type": name, "sequence_number": n, "data": …}``."""
    number = 0
    async for event in events:
        journal.add({"type": event.name, "sequence_number": number, "data": event.data})
        number += 1
        yield event


async def follow_chat(request: Request) -> Response:
    """``GET /chat/follow?conversation=conv_…&starting_after=N``: the caller's turn running in that conversation,
    wherever it runs: its events (``/chat``'s, ``id:`` their number) from the journal, then live until ``done``. A
    404 when none runs (the page then reads the stored answer)."""
    store, owner, deadline = store_context(request)
    query = Query(request, known=("conversation", "starting_after"))
    conversation_id = conversation_id_of(query.one("conversation") or "")
    after = starting_after(query)
    ctx = RequestContext.of(request)
    longest = ctx.settings.request_timeout_seconds
    with store_errors():
        events = await follow_chat_turn(store, owner, conversation_id, after, deadline, ctx.deadline, longest)
    if events is None:
        raise RequestError(404, "not_found", f"no turn is running in conversation {conversation_id}")

    async def frames() -> AsyncIterator[bytes]:
        async for entry in events:
            data = entry.get("data")
            shown = data if isinstance(data, dict) else {k: v for k, v in entry.items() if k != "type"}
            frame = f"id: {entry.get('sequence_number')}\n" + sse_frame(shown, event=str(entry["type"]))
            yield redact(frame).encode()

    return StreamingResponse(frames(), media_type="text/event-stream", headers={"cache-control": "no-cache"})


async def stop_chat(request: Request) -> Response:
    """``POST /chat/stop {"conversation": "conv_…"}``: stop the caller's turn running in that conversation (the
    page's Stop button). A stored conversation's turn outlives its client, so that a reload finds the answer; a Stop
    is the one way to end it early. A stopped turn is not stored (the conversation stays as it was). ``stopped`` says
    whether a turn was running, on whichever copy runs it."""
    body = await read_body(RequestContext.of(request), StopBody)
    store, owner, deadline = store_context(request)
    conversation_id = conversation_id_of(body.conversation)
    stopped = stop_here((owner, conversation_id))
    if not stopped:  # running on another copy (or none): ask it through the store
        with store_errors():
            run = await ask_to_stop(store, owner, conversation_id, deadline)
        settings = RequestContext.of(request).settings
        stopped = run is not None and run.active and not run.stale(settings.request_timeout_seconds)
    if stopped:
        logger.info(f"turn stopped by its client: conversation={conversation_id}")
    return JSONBody({"conversation": conversation_id, "stopped": stopped})


async def save_chat_turn(ctx: RequestContext, thread: ChatThread, events: list[Event]) -> None:
    """Append the turn to its conversation: the new messages, each sandbox run (a ``code_interpreter_call`` item,
    as the Responses API shows it) and the answer. A turn every model failed leaves the conversation as it was (a
    retry sends the same message again); a store that fails is logged, the answer was already sent."""
    done = next((e.summary for e in events if isinstance(e, Done)), None)
    not_kept = (StopReason.ALL_MODELS_FAILED, StopReason.ERROR, StopReason.CLIENT_DISCONNECTED)
    if done is None or done.stop_reason in not_kept:  # failed, or stopped by its client
        return
    output = ResponseOutput(new_id("turn").removeprefix("turn_"), ResponseEvents())
    for event in events:
        if not isinstance(event, Done):
            output.feed(event)
    output.finish()
    inputs = stored_items(
        [
            *[InputMessage.model_validate({"role": m["role"], "content": m["content"]}) for m in thread.new],
            *thread.answer_items,
        ]
    )
    outputs = [Item(i["id"], json_object(i)) for i in output.items]
    if thread.compaction is not None:  # it stands for everything before it, the new message included
        outputs.insert(0, Item(thread.compaction["id"], json_object(thread.compaction)))
    deadline = ctx.write_deadline()
    try:
        await ctx.runtime.stores.conversations().conversations.append_items(
            thread.owner, thread.conversation_id, [*inputs, *outputs], deadline
        )
    except StoreUnavailable as error:
        logger.warning(f"conversation {thread.conversation_id}: the turn was not stored: {error}")
