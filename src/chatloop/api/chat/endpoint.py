"""``POST /chat``: this server's own API. Its events as SSE (every event, ``done`` last) or, with
``stream: false``, the ``done`` summary as a JSON body (a 503 when every model failed).

Usage::

    curl -s localhost:8000/chat -d '{"messages": [{"role": "user", "content": "5!"}], "stream": false}'
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.http.wire import sse_frame
from chatloop.api.runtime import Runtime
from chatloop.api.turns.admission import Admission
from chatloop.api.turns.checks import ChatChoice, conversation
from chatloop.api.turns.images import ImageLimits, chat_images
from chatloop.api.turns.pipeline import Admitted, Door, Plan, run_door
from chatloop.api.turns.schemas import ChatBody
from chatloop.api.turns.serve import INTERNAL_ERROR, serve_turn
from chatloop.engine import Event, StopReason, TurnSummary
from chatloop.engine.events import Done, TurnError
from chatloop.engine.request import function_name
from chatloop.jsontypes import JSONObject

if TYPE_CHECKING:
    from chatloop.api.chat.threads import ChatThread


def chat_body(summary: TurnSummary) -> JSONObject:
    """The /chat JSON body: the ``done`` event's fields, ``context`` and ``request_id`` always present (null when the
    turn has none) and last, in that order."""
    body = summary.wire()
    body["context"] = body.pop("context", None)
    body["request_id"] = body.pop("request_id", None)
    return body


class ChatRenderer:
    """/chat's wire format: ``event: <type>\\ndata: <json>`` per event; ``done`` always last, exactly once."""

    stream_failure_log = "SSE stream failed"

    def __init__(self) -> None:
        self._done = False

    async def frames(self, events: AsyncIterator[Event]) -> AsyncIterator[str]:
        async for event in events:
            self._done = self._done or isinstance(event, Done)
            yield sse_frame(event.data, event=event.name)

    def broken(self) -> str:
        if self._done:
            return ""
        ending: list[Event] = [INTERNAL_ERROR, Done(TurnSummary.failed())]
        return "".join(sse_frame(event.data, event=event.name) for event in ending)

    async def answer(self, summary: TurnSummary, errors: Sequence[TurnError]) -> tuple[int, object]:
        """A turn every model failed is answered too: a 503 whose body says so."""
        status = 503 if summary.stop_reason is StopReason.ALL_MODELS_FAILED else 200
        return status, chat_body(summary)


@dataclass(eq=False, repr=False)  # not compared or printed: only __init__ generated (cold start)
class ChatPlan(Plan):
    body: ChatBody = field(kw_only=True)
    thread: ChatThread | None = None
    """The stored conversation the turn continues (``conversation``), or None."""


class ChatDoor(Door[ChatBody, ChatPlan]):
    """/chat in the turn pipeline: its messages (or a stored conversation's), the built-in tools it names, the
    operator's tools that wait for a person asked for in the conversation, its SSE or JSON answer."""

    schema = ChatBody
    approvals = "ask"
    bare_without_tools = True

    async def prepare(self, ctx: RequestContext, body: ChatBody, admission: Admission) -> ChatPlan:
        settings, thread = ctx.runtime.settings, None
        images = chat_images(body.messages, ImageLimits.of(settings))
        if body.approvals and body.conversation is None:
            raise RequestError(
                400,
                "invalid_request",
                "approvals: answer in the conversation that asked (conversation)",
                "approvals",
            )
        if body.conversation is not None:
            from chatloop.api.chat import (
                threads,  # with the first /chat in a stored conversation (cold start)
            )

            thread = await threads.chat_thread(
                ctx, admission, body.conversation, body.messages, body.approvals or []
            )
            messages = conversation([*thread.history, *body.messages], settings.max_messages)
            messages = await threads.compacted(ctx, thread, messages, body.messages, body.model)
        else:
            messages = conversation(body.messages, settings.max_messages)
        return ChatPlan(
            messages,
            body.tool_choice,
            body,
            body.model,
            body.max_tokens,
            openai=False,
            max_iterations=body.max_iterations,
            approvals=thread.answers if thread else (),
            conversation_id=thread.conversation_id if thread else None,
            images=images,
            body=body,
            thread=thread,
        )

    def tool_names(self, runtime: Runtime, plan: ChatPlan, choice: ChatChoice) -> list[str] | None:
        return tools_for_chat(runtime, plan.body, choice)

    def client_tools(self, runtime: Runtime, plan: ChatPlan, choice: ChatChoice) -> list[JSONObject]:
        return []  # /chat names built-in tools (``tools_for_chat``); it has no client tools

    async def serve(
        self,
        ctx: RequestContext,
        plan: ChatPlan,
        admitted: Admitted,
        events: AsyncIterator[Event],
    ) -> Response:
        if (
            plan.thread is not None
        ):  # a stored conversation's turn runs to its end even when the client goes away
            from chatloop.api.chat import threads

            events = threads.running_turn(ctx, plan.thread, events)
        return await serve_turn(ctx, ChatRenderer(), events, stream=plan.body.stream)


async def chat(request: Request) -> Response:
    return await run_door(RequestContext.of(request), ChatDoor())


def tools_for_chat(runtime: Runtime, body: ChatBody, choice: ChatChoice) -> list[str] | None:
    """The tools a /chat turn may use: None for all of them (the MCP servers' tools included), [] for none."""
    if choice == "none":
        return []
    known = runtime.tools.names()
    names = body.tools
    unknown = [n for n in names or [] if n not in known and not runtime.tools.mcp_name(n)]
    if unknown:
        raise RequestError(
            400, "unknown_tool", f"tools: unknown tool(s) {unknown}; built-in tools: {known}", "tools"
        )
    chosen = function_name(choice) if isinstance(choice, dict) else None
    if (
        chosen is not None
        and chosen not in (names if names is not None else known)
        and not runtime.tools.mcp_name(chosen)
    ):
        raise RequestError(
            400, "invalid_request", "tool_choice names a tool that is not enabled", "tool_choice"
        )
    return names
