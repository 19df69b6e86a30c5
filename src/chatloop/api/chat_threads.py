"""``/chat`` in a stored conversation: the conversation a request continues, the turn appended to it when it ends,
and ``POST /chat/stop``, the one way to end such a turn early (it outlives its client, see ``api.running``).

Usage (``api.chat``)::

    thread = await chat_thread(request, "conv_…", body.messages)   # 4xx/503 before any model call
    events = ended_when_stopped(run_to_the_end(events, keep, key=(thread.owner, thread.conversation_id)))
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.context import RequestContext
from chatloop.api.conversations import conversation_history, conversation_id_of, store_context, store_errors
from chatloop.api.errors import RequestError
from chatloop.api.running import TURNS
from chatloop.api.wire import JSONBody
from chatloop.engine.events import Done, Event, TurnError
from chatloop.engine.messages import Message
from chatloop.engine.summary import StopReason, TurnSummary
from chatloop.observability import logger

if TYPE_CHECKING:
    from chatloop.api.approval_items import McpApprovalResponseInput
    from chatloop.api.response_types import CompactionItem
    from chatloop.api.schemas import ChatApproval
    from chatloop.engine.approvals import ApprovalAnswer


@dataclass
class ChatThread:
    """A ``/chat`` turn inside a stored conversation: whose it is, and the messages that came before it."""

    owner: str
    conversation_id: str
    history: list[Message]
    new: list[dict[str, object]]
    """The request's new messages (user or system), appended to the conversation with the answer."""
    answers: tuple[ApprovalAnswer, ...] = ()
    """Answers to the conversation's approval requests the turn runs first (``api.approvals``)."""
    answer_items: tuple[McpApprovalResponseInput, ...] = ()
    """Those answers as the items appended to the conversation (a denial stays the model's history)."""
    compaction: CompactionItem | None = None
    """The compaction the turn started with (COMPACTION_THRESHOLD_TOKENS): appended before the turn's output."""


async def chat_thread(
    request: Request, conversation: str, new: list[object], approvals: Sequence[ChatApproval] = ()
) -> ChatThread:
    """The conversation a ``/chat`` request continues (a 4xx or 503 before any model call when it cannot be had).
    With a conversation the client sends only what is new: user (or system) messages, and answers to its
    approval requests (each checked as ``api.approvals`` checks them)."""
    from chatloop.api.approval_items import McpApprovalResponseInput
    from chatloop.api.approvals import answers_of
    from chatloop.api.compaction import open_items
    from chatloop.api.responses import messages_of

    messages = [m for m in new if isinstance(m, dict) and m.get("role") in ("user", "system")]
    if len(messages) != len(new):
        raise RequestError(
            400,
            "invalid_messages",
            "messages: with a conversation, send only the new user message(s); the earlier turns are on the server",
            param="messages",
        )
    store, owner, deadline = store_context(request)
    conversation_id = conversation_id_of(conversation)
    with store_errors():
        items = await conversation_history(store, owner, conversation_id, deadline)
    given = tuple(McpApprovalResponseInput.model_validate(a.as_item()) for a in approvals)
    ctx = RequestContext.of(request)
    await open_items(ctx, items)  # a compaction item stands for what came before it
    answers = await answers_of(ctx, [*items, *given], len(items))
    history = messages_of([*items, *given], answers.ids)
    return ChatThread(owner, conversation_id, history, messages, answers.answers, given)


async def ended_when_stopped(events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """``events``, closed with an ``error`` and a ``done`` when the turn was stopped (``POST /chat/stop``) before its
    own ``done``: every stream ends with its terminal event."""
    done = False
    async for event in events:
        done = done or isinstance(event, Done)
        yield event
    if not done:
        yield TurnError("stopped", "the turn was stopped by its client")
        yield Done(TurnSummary.failed("Stopped.", StopReason.CLIENT_DISCONNECTED))


async def stop_chat(request: Request) -> Response:
    """``POST /chat/stop {"conversation": "conv_…"}``: stop the caller's turn running in that conversation (the
    page's Stop button). A stored conversation's turn outlives its client, so that a reload finds the answer; a Stop
    is the one way to end it early. A stopped turn is not stored (the conversation stays as it was). ``stopped`` says
    whether a turn was running here (behind a load balancer of several containers, the one that runs it)."""
    from chatloop.api.checks import read_body
    from chatloop.api.schemas import StopBody

    body = await read_body(request, StopBody)
    _, owner, _ = store_context(request)
    conversation_id = conversation_id_of(body.conversation)
    task = TURNS.get((owner, conversation_id))
    running = task is not None and not task.done()
    if task is not None and running:
        task.cancel()
        logger.info(f"turn stopped by its client: conversation={conversation_id}")
    return JSONBody({"conversation": conversation_id, "stopped": running})


async def save_chat_turn(request: Request, thread: ChatThread, events: list[Event]) -> None:
    """Append the turn to its conversation: the new messages, each sandbox run (a ``code_interpreter_call`` item,
    as the Responses API shows it) and the answer. A turn every model failed leaves the conversation as it was (a
    retry sends the same message again); a store that fails is logged, the answer was already sent."""
    from chatloop.api.conversation_items import stored_items
    from chatloop.api.response_items import ResponseEvents, ResponseOutput
    from chatloop.api.response_schemas import InputMessage
    from chatloop.jsontypes import json_object
    from chatloop.store.model import Item, StoreUnavailable, new_id

    done = next((e.summary for e in events if isinstance(e, Done)), None)
    if done is None or done.stop_reason in (StopReason.ALL_MODELS_FAILED, StopReason.ERROR):
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
    ctx = RequestContext.of(request)
    deadline = ctx.write_deadline()
    try:
        await ctx.runtime.conversations().append_items(
            thread.owner, thread.conversation_id, [*inputs, *outputs], deadline
        )
    except StoreUnavailable as error:
        logger.warning(f"conversation {thread.conversation_id}: the turn was not stored: {error}")
