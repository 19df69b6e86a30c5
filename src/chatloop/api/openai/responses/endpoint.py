"""``POST /v1/responses``: OpenAI's Responses API over the same turn, all of its translation here: input items
become the chat conversation the engine runs (``conversation_of``), the engine's events become a ``response``
object or its event stream (``ResponsesRenderer``, items from ``api.openai.responses.items``). Storing and continuing
responses is ``api.openai.responses.stored``'s; the engine knows nothing of this API.

Usage::

    messages = conversation_of(body)                        # then normalize_conversation(messages)
    renderer = ResponsesRenderer("req-1", echo_of(body, "groq:llama-3.3-70b-versatile"))
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.openai.chat_completions import extension
from chatloop.api.openai.responses.approval_items import (
    McpApprovalRequestInput,
    McpApprovalResponseInput,
    denied_messages,
)
from chatloop.api.openai.responses.items import ResponseEvents, ResponseOutput
from chatloop.api.openai.responses.mcp_items import McpCallInput, listed_items
from chatloop.api.openai.responses.mcp_servers import client_servers
from chatloop.api.openai.responses.schemas import (
    CodeInterpreterCallItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    InputMessage,
    ResponsesBody,
    ResponsesFunctionTool,
)
from chatloop.api.turns.checks import (
    ChatChoice,
    check_context,
    checked_client_tools,
    conversation,
    model_for,
    model_params,
    read_body,
    refuse_unsupported,
    structured_output,
)
from chatloop.api.turns.compaction import CompactionInput
from chatloop.api.turns.serve import INTERNAL_ERROR, budgeted, serve_turn, turn_events
from chatloop.config import MCPServerConfig
from chatloop.engine import Event, TurnRequest, TurnSummary
from chatloop.engine.events import Done, TurnError
from chatloop.engine.messages import Message
from chatloop.jsontypes import JSONObject
from chatloop.providers.base import Usage
from chatloop.providers.chain import FallbackChain
from chatloop.tools.javascript.tool import TOOL_NAME

if TYPE_CHECKING:
    from chatloop.api.openai.responses.objects import (
        CompactionItem,
        FinishedResponse,
        McpListTools,
        OutputItem,
        ResponseEcho,
        ResponseObject,
        ResponseStatus,
        ResponseUsage,
    )

INCOMPLETE = {"length": "max_output_tokens", "iteration_cap": "iteration_cap", "deadline": "deadline"}
"""Stop reasons that leave a response ``incomplete``, and the reason ``incomplete_details`` gives."""


# --- input ---------------------------------------------------------------------------------------------
def conversation_of(
    body: ResponsesBody, history: Sequence[InputItem] = (), answering: frozenset[str] = frozenset()
) -> list[Message]:
    """The chat conversation for ``instructions``, the earlier items a request continues from (``history``: a
    previous response's chain, or a conversation's items) and ``input``: ``developer`` is ``system``, consecutive
    ``function_call`` items join the assistant message before them, ``function_call_output`` is a tool message,
    reasoning items carry nothing this server needs. ``answering``: the approval requests this request answers
    (the turn runs them first)."""
    messages: list[Message] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    return messages + messages_of([*history, *current_items(body)], answering)


def current_items(body: ResponsesBody) -> list[InputItem]:
    """The request's ``input`` as items (a string is one user message)."""
    return [InputMessage(role="user", content=body.input)] if isinstance(body.input, str) else body.input


def messages_of(items: Sequence[InputItem], answering: frozenset[str] = frozenset()) -> list[Message]:
    """Input items (a request's, or stored ones read back) as chat messages. An approval request is no message
    until it is answered: a denial answered earlier is the call and the denial the model was told; an approval
    is the ``mcp_call`` that followed it; the ones in ``answering`` the turn itself adds."""
    messages: list[Message] = []
    requests = {i.id: i for i in items if isinstance(i, McpApprovalRequestInput)}
    for item in items:
        if isinstance(item, InputMessage):
            role = "system" if item.role == "developer" else item.role
            messages.append({"role": role, "content": item.text()})
        elif isinstance(item, FunctionCallItem):
            call = _call(item.call_id, item.name, item.arguments)
            _add_call(messages, call, lambda last: last["role"] == "assistant")
        elif isinstance(item, FunctionCallOutputItem):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
        elif isinstance(
            item, CodeInterpreterCallItem
        ):  # an earlier run, replayed (the Agents SDK sends outputs)
            code = json.dumps({"code": item.code or ""})
            call = _call(item.call_id(), TOOL_NAME, code)
            _add_call(messages, call, lambda last: last["role"] == "assistant" and not last.get("content"))
            messages.append({"role": "tool", "tool_call_id": item.call_id(), "content": item.logs()})
        elif isinstance(item, McpCallInput):  # an earlier MCP call, replayed: the call and its answer
            messages += item.messages()
        elif isinstance(item, CompactionInput):  # it stands for everything before it
            messages = [item.message()]
        elif isinstance(item, McpApprovalResponseInput) and not item.approve:
            request = requests.get(item.approval_request_id)
            if request is not None and request.id not in answering:
                messages += denied_messages(request, item.reason)
    return messages


def _call(call_id: str, name: str, arguments: str) -> JSONObject:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _add_call(messages: list[Message], call: JSONObject, joins: Callable[[Message], bool]) -> None:
    """``call`` added to the last message when ``joins`` it (an assistant message's calls), else as a new assistant
    message that calls it."""
    last = messages[-1] if messages else None
    if last is not None and joins(last):
        calls = last.get("tool_calls")
        if isinstance(calls, list):
            calls.append(call)
        else:
            last["tool_calls"] = [call]
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def echo_of(
    body: ResponsesBody, model: str, stored: bool = False, conversation: str | None = None
) -> ResponseEcho:
    """The request's settings, as a response object repeats them; ``model`` is the one the turn starts with (the
    finished response names the one that answered)."""
    text_format = (
        body.text.format.model_dump(by_alias=True, exclude_none=True)
        if body.text and body.text.format
        else None
    )
    choice = body.tool_choice
    return {
        "model": model,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "parallel_tool_calls": True if body.parallel_tool_calls is None else body.parallel_tool_calls,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "tool_choice": choice.model_dump()
        if choice is not None and not isinstance(choice, str)
        else choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
        "text": {
            "format": text_format or {"type": "text"},
            "verbosity": body.text.verbosity if body.text else None,
        },
        "metadata": body.metadata or {},
        "truncation": body.truncation or "disabled",
        "max_tool_calls": body.max_tool_calls,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
        "user": body.user,
        "safety_identifier": body.safety_identifier,
        "prompt_cache_key": body.prompt_cache_key,
        "service_tier": body.service_tier or "auto",
        "top_logprobs": body.top_logprobs or 0,
        "background": bool(body.background),
        "store": stored,
        "previous_response_id": body.previous_response_id,
        "conversation": {"id": conversation} if conversation else None,
    }


# --- output ------------------------------------------------------------------------------------------
def _skeleton(request_id: str, echo: ResponseEcho, created: int) -> ResponseObject:
    return {
        "id": f"resp_{request_id}",
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "output": [],
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "truncation": "disabled",
        "usage": None,
        "user": None,
        **echo,
    }


def _usage(usage: Usage) -> ResponseUsage:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def response_object(
    summary: TurnSummary,
    request_id: str,
    echo: ResponseEcho,
    output: list[OutputItem],
    created: int | None = None,
) -> FinishedResponse:
    """The finished ``response``: ``incomplete`` (with its reason) when the turn stopped on the output-token cap, the
    iteration cap or the deadline; the stop reason and tool records under ``x_chatloop``."""
    body = _skeleton(request_id, echo, created or int(time.time()))
    reason = INCOMPLETE.get(summary.stop_reason)
    status: ResponseStatus = "incomplete" if reason else "completed"
    return {  # the skeleton's keys keep their places; x_chatloop comes last
        **body,
        "model": summary.model or echo["model"],
        "status": status,
        "incomplete_details": {"reason": reason} if reason else None,
        "output": output,
        "usage": _usage(summary.usage),
        "x_chatloop": extension(summary),
    }


Keep: TypeAlias = "Callable[[FinishedResponse, list[dict[str, object]]], Awaitable[FinishedResponse]]"
"""Stores a finished response (and its stream's events) and returns it as it should be shown."""


class ResponsesRenderer:
    """A ``response``, or its event stream. The stream always ends with its terminal event: ``response.completed``,
    ``response.incomplete`` or ``response.failed`` (after an ``error`` event when something broke mid-way). With
    ``keep``, the finished response is stored before its terminal event goes out (read-after-write holds)."""

    stream_failure_log = "response event stream failed"
    answers_failure = False
    observes = True

    def __init__(
        self,
        request_id: str,
        echo: ResponseEcho,
        keep: Keep | None = None,
        listener: Callable[[dict[str, object]], None] | None = None,
        listed: Sequence[McpListTools | CompactionItem] = (),
        *,
        stream: bool = True,
    ) -> None:
        self.request_id, self.echo, self.keep = request_id, echo, keep
        self.created = int(time.time())
        self.emit = ResponseEvents(record=keep is not None and stream, listener=listener)
        self.output = ResponseOutput(request_id, self.emit, listed)
        if not stream:  # the stream lists them after response.created; a response object just holds them
            self.output.start()

    async def frames(self, events: AsyncIterator[Event]) -> AsyncIterator[str]:
        """The events, framed. ``response.created`` goes out at once; frames that become known together leave as
        one chunk (fewer writes through the heartbeat wrapper and the socket)."""
        emit, output = self.emit, self.output
        started = _skeleton(self.request_id, self.echo, self.created)
        head = [emit("response.created", response=started), emit("response.in_progress", response=started)]
        yield "".join(head + output.start())
        async for event in events:
            if isinstance(event, TurnError) and event.code in ("all_models_failed", "cancelled"):
                # OpenAI names no event for a cancelled response: it ends as a failed one does, status cancelled
                yield emit("response.failed", response=self._failed(event.message, event.code == "cancelled"))
                return
            if isinstance(event, Done):
                frames = output.finish(event.summary.message.tool_calls or ())
                final = response_object(event.summary, self.request_id, self.echo, output.items, self.created)
                kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
                if self.keep is not None:
                    # The terminal event is stored as it will be sent: numbered next, with the rest.
                    number = len(emit.recorded or [])
                    terminal: dict[str, object] = {"type": kind, "sequence_number": number, "response": final}
                    final = await self.keep(final, [*(emit.recorded or []), terminal])
                yield "".join([*frames, emit(kind, response=final)])
                return
            frames = output.feed(event)
            if frames:
                yield "".join(frames)

    def broken(self) -> str:
        if self.emit.ended:
            return ""
        error = self.emit("error", code=INTERNAL_ERROR.code, message=INTERNAL_ERROR.message, param=None)
        return error + self.emit("response.failed", response=self._failed(INTERNAL_ERROR.message))

    def _failed(self, message: str, cancelled: bool = False) -> ResponseObject:
        failed = _skeleton(self.request_id, self.echo, self.created)
        if cancelled:
            failed["status"] = "cancelled"
        else:
            failed.update({"status": "failed", "error": {"code": "server_error", "message": message}})
        return failed

    def observe(self, event: Event) -> None:
        self.output.feed(event)

    async def answer(self, summary: TurnSummary) -> tuple[int, object]:
        self.output.finish(summary.message.tool_calls or ())
        response = response_object(summary, self.request_id, self.echo, self.output.items)
        if self.keep is not None:
            response = await self.keep(response, [])
        return 200, response


# --- the endpoint ------------------------------------------------------------------------------------------


async def responses(request: Request) -> Response:
    """OpenAI's Responses API: the same turn as chat completions, rendered as a ``response``; stored, and continued
    from a stored response or a conversation, by ``api.openai.responses.stored``."""
    # the store and its schemas load with the first Responses request
    from chatloop.api.openai.responses import stored
    from chatloop.api.runs import journaled
    from chatloop.api.runs.background import is_worker, queue
    from chatloop.api.turns import approvals

    ctx = RequestContext.of(request)
    runtime = ctx.runtime
    body = await read_body(request, ResponsesBody)
    refuse_unsupported(body)
    keeping = await stored.prepare(request, body)
    turn, model, servers, compacted = await turn_of(ctx, body, keeping.history)
    rid = ctx.request_id
    echo = echo_of(body, model.name, keeping.store is not None, keeping.conversation_id)
    if body.background and not is_worker(request):  # queued: a worker runs it (api.runs.background)
        try:
            return await queue(request, body, keeping, echo)
        except (
            RequestError
        ):  # not queued, or its worker not started: nothing ran, the answers are not used up
            await approvals.release(ctx, turn.approvals)
            raise
    mcp = await runtime.mcp_for_turn(ctx.deadline, servers)
    registry = runtime.registry().with_tools(mcp.tools, mcp.skipped)
    await approvals.ask_for(ctx, turn, registry, mcp.tools, approvals.client_rules(body.tools))
    # The output opens with these: the compaction the turn starts with, then what each request server offered.
    listed: list[McpListTools | CompactionItem] = [*compacted, *listed_items(servers, mcp)]
    metered = await budgeted(ctx, turn, model, registry)
    events = turn_events(ctx, turn, model, registry, keeping.conversation_id, metered=metered)

    async def keep(response: FinishedResponse, sent: list[dict[str, object]]) -> FinishedResponse:
        return await stored.save(keeping, request, body, response, sent)

    if body.stream and keeping.store is not None and keeping.owner is not None:
        # Stored: the turn runs to its end if the client goes away, journaled so any copy can follow it.
        def renderer_for(listener: Callable[[dict[str, object]], None]) -> ResponsesRenderer:
            return ResponsesRenderer(rid, echo, keep, listener, listed)

        return await journaled.serve(request, body, keeping, renderer_for, events)
    if body.stream:
        # Unstored, but a conversation still gets the turn's items (``store`` is about the response object only),
        # as a JSON answer's does.
        appends = keep if keeping.conversation_id is not None else None
        renderer = ResponsesRenderer(rid, echo, appends, listed=listed)
        return await serve_turn(ctx, renderer, events, stream=True)
    renderer = ResponsesRenderer(rid, echo, keep, listed=listed, stream=False)
    return await serve_turn(ctx, renderer, events, stream=False)


async def turn_of(
    ctx: RequestContext, body: ResponsesBody, history: Sequence[InputItem]
) -> tuple[TurnRequest, FallbackChain, list[MCPServerConfig], list[CompactionItem]]:
    """The turn a request asks for, its chain, its own MCP servers and the compaction item it starts with (when its
    conversation was past the threshold), every check passed (a 4xx before any model call otherwise)."""
    from chatloop.api.turns import compaction
    from chatloop.api.turns.approvals import answers_of

    runtime = ctx.runtime
    items = [*history, *current_items(body)]
    await compaction.open_items(ctx, items)
    answers = await answers_of(ctx, items, len(history))
    messages = conversation(conversation_of(body, history, answers.ids), runtime.settings.max_messages)
    try:
        compacted = await compaction.when_past_threshold(ctx, body, messages, bool(history))
    except RequestError:  # the summary's call refused by the budget: nothing ran, the answers are not used up
        from chatloop.api.turns.approvals import release

        await release(ctx, answers.answers)
        raise
    if compacted is not None:  # the summary stands for it all; the request's newest question follows it
        messages = conversation(
            compaction.continued(body, compacted[1], answers.ids), runtime.settings.max_messages
        )
    chat_choice: ChatChoice = None
    if isinstance(body.tool_choice, str):
        chat_choice = body.tool_choice
    elif body.tool_choice is not None:  # the Responses API names a function flat; chat completions nest it
        chat_choice = {"type": "function", "function": {"name": body.tool_choice.name}}
    functions = [t.as_chat_tool() for t in body.tools or [] if isinstance(t, ResponsesFunctionTool)]
    client_tools = checked_client_tools(runtime, functions, chat_choice)
    servers = await client_servers(body.tools, runtime.settings, runtime.mcp_servers_labels())
    model = model_for(runtime, body.model, openai=True)
    trimming = body.truncation == "auto"  # OpenAI's default is "disabled": refuse what does not fit
    check_context(model, messages, body.max_output_tokens, whole=not trimming)
    try:
        requested_format = body.text.format.as_response_format() if body.text and body.text.format else None
    except ValueError as exc:
        raise RequestError(400, "invalid_request", str(exc), param="text.format") from None
    response_format = structured_output(runtime, model, requested_format, "text.format")
    params = model_params(runtime, model, body.forwarded())
    no_tools = chat_choice == "none"
    turn = TurnRequest(
        messages=messages,
        tool_names=[] if no_tools else None,
        client_tools=[] if no_tools else client_tools,
        tool_choice=None if no_tools else chat_choice,
        parallel_tool_calls=body.parallel_tool_calls,
        temperature=body.temperature,
        top_p=body.top_p,
        max_tokens=body.max_output_tokens,
        response_format=response_format,
        model_params=params,
        max_tool_calls=body.max_tool_calls,
        allow_trimming=trimming,
        approvals=answers.answers,
    )
    return turn, model, servers, [compacted[0]] if compacted else []
