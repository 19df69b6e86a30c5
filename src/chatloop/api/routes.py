"""The endpoints. Each one validates its input (a clear 4xx and no model call when it is bad), computes the
request's one deadline, runs the engine and renders its events.

Usage (tests and bench drive them through the app)::

    curl -s localhost:8000/chat -d '{"messages": [{"role": "user", "content": "5!"}], "stream": false}'
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from chatloop.api import adapter
from chatloop.api.adapter import Invocation
from chatloop.api.errors import RequestError, from_validation
from chatloop.api.idempotency import STOP_REASON
from chatloop.api.limits import check_message_count, parse_json_body, read_within
from chatloop.api.mcp_items import client_servers, listed_items
from chatloop.api.render import (
    JSONBody,
    chat_summary,
    openai_chunks,
    openai_completion,
    sse_stream,
    with_heartbeats,
)
from chatloop.api.responses import collect_response, conversation_of, echo_of, response_events
from chatloop.api.runtime import CHAIN_ALIAS, Runtime, UnknownModel
from chatloop.api.schemas import (
    ChatBody,
    ClientTool,
    OpenAIChatBody,
    ResponseFormat,
    ResponsesBody,
    ResponsesFunctionTool,
)
from chatloop.deadline import Deadline
from chatloop.engine import Event, EventType, TurnRequest, run_turn
from chatloop.engine.events import Done
from chatloop.engine.messages import ConversationError, normalize_conversation
from chatloop.observability import logger, metrics, record_turn_metrics
from chatloop.providers.catalog import ModelInfo
from chatloop.providers.chain import FallbackChain
from chatloop.secrets import KeysUnavailable
from chatloop.tools.base import ToolRegistry


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


# --- shared steps ---------------------------------------------------------------------------------
async def read_body(request: Request, schema: type[BaseModel], limit: int) -> Any:
    raw = await read_within(request, limit)
    data = parse_json_body(raw, runtime_of(request).settings.max_json_depth)
    if not isinstance(data, dict):
        raise RequestError(400, "invalid_request", "the body must be a JSON object")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise from_validation(exc) from None


def conversation(messages: list[Any], max_messages: int) -> list[dict[str, Any]]:
    check_message_count(messages, max_messages)
    try:
        return normalize_conversation(messages)
    except ConversationError as exc:
        raise RequestError(400, "invalid_messages", str(exc), param="messages") from None


def invocation_of(request: Request) -> Invocation | None:
    """The Lambda Web Adapter's invocation for this request (stream mode, only when the adapter sent it)."""
    return adapter.invocation_of(request)


def request_deadline(request: Request, runtime: Runtime) -> Deadline:
    """One deadline per request: the smaller of the Lambda's remaining time (less a margin) and the timeout."""
    seconds = runtime.settings.request_timeout_seconds
    context = request.scope.get("aws.context")
    margin = runtime.settings.lambda_safety_margin_seconds
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        seconds = min(seconds, context.get_remaining_time_in_millis() / 1000 - margin)
    elif (invocation := invocation_of(request)) is not None:  # stream mode, behind the Web Adapter
        seconds = min(seconds, invocation.seconds_left() - margin)
    return Deadline.after(seconds)


def request_id(request: Request) -> str:
    event = request.scope.get("aws.event") or {}
    context = request.scope.get("aws.context")
    rid = (event.get("requestContext") or {}).get("requestId") or getattr(context, "aws_request_id", None)
    if not rid and (invocation := invocation_of(request)) is not None:
        rid = invocation.request_id
        logger.set_correlation_id(rid)  # no inject_lambda_context under the adapter: one invocation at a time
    return str(rid or uuid.uuid4())


def model_for(runtime: Runtime, requested: str | None, *, openai: bool = False) -> FallbackChain:
    """The turn's chain. A model this server cannot serve is a 400 ``unknown_model`` on /chat, and OpenAI's 404
    ``model_not_found`` on /v1 (listing what it can serve) unless the operator chose the default chain for it
    there (UNKNOWN_MODEL_FALLBACK)."""
    try:
        return runtime.model_for(requested, strict=not (openai and runtime.settings.unknown_model_fallback))
    except UnknownModel as exc:
        status, code = (404, "model_not_found") if openai else (400, "unknown_model")
        raise RequestError(status, code, str(exc), param="model") from None
    except KeysUnavailable as exc:
        raise RequestError(503, "keys_unavailable", str(exc)) from None


def check_context(
    model: FallbackChain, messages: list[dict[str, Any]], max_tokens: int | None, whole: bool = False
) -> None:
    """A conversation whose system messages and latest user message alone exceed every model's window cannot be
    answered however it is trimmed: a 413 now, no model call. With ``whole`` (trimming disabled: the Responses API's
    ``truncation: disabled``), the whole conversation must fit."""
    if whole:
        needed, param = messages, "input"
        what = "the conversation needs"
        advice = (
            'truncation is disabled; shorten it, or send truncation: "auto" to let the server drop old turns'
        )
    else:
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
        if last_user is None:
            return
        needed = [m for m in messages[:last_user] if m["role"] == "system"] + [messages[last_user]]
        param, what, advice = "messages", "the latest user message alone needs", "shorten it"
    holds, largest = model.can_hold(needed, max_tokens)
    if not holds:
        raise RequestError(
            413,
            "context_length_exceeded",
            f"{param}: {what} more than the largest context window in the chain ({largest} tokens, the answer's "
            f"reserve included); {advice}",
            param=param,
        )


def structured_output(
    runtime: Runtime, model: FallbackChain, requested: ResponseFormat | None, param: str
) -> dict[str, Any] | None:
    """The upstream ``response_format`` for a turn, never silently dropped (see ``_some_model_takes``)."""
    response_format = requested.upstream() if requested else None
    if response_format is None:
        return None
    kind = response_format["type"]
    honours = partial(ModelInfo.honours, response_format=response_format)
    _some_model_takes(runtime, model, honours, "Structured output", f"format={kind}", param)
    return response_format


def model_params(runtime: Runtime, model: FallbackChain, requested: dict[str, Any]) -> dict[str, Any]:
    """The sampling and output parameters a turn sends as they are (``stop``, ``seed``, ``reasoning_effort`` ...),
    never silently dropped (see ``_some_model_takes``)."""
    for name in requested:
        takes = partial(ModelInfo.takes, param=name)
        _some_model_takes(runtime, model, takes, "Parameter", f"param={name}", name)
    return requested


def _some_model_takes(
    runtime: Runtime,
    model: FallbackChain,
    takes: Callable[[ModelInfo], bool | None],
    decision: str,
    subject: str,
    param: str,
) -> None:
    """Which models of the chain can be sent something a request asks for: those whose catalog entry lists it, and
    those whose entry does not say (they are tried; a provider's refusal passes the turn to the next model). The
    others are passed over for the request, a logged decision. When none is left, a 400 ``unsupported_parameter``
    naming ``param``, before any model call."""
    able = [m.name for m in model.models if takes(runtime.catalog.get(m.name)) is not False]
    skipped = [m.name for m in model.models if m.name not in able]
    logger.info(
        f"{decision} decision: {subject} models={','.join(able) or '-'} skipped={','.join(skipped) or '-'} "
        f"reason={'supported' if able else 'unsupported'}",
        extra={
            "model_support": {"decision": decision, "subject": subject, "models": able, "skipped": skipped}
        },
    )
    if not able:
        raise RequestError(
            400,
            "unsupported_parameter",
            f"{param}: no model in the chain supports {subject.partition('=')[2]} ({', '.join(skipped)}); pick one "
            "whose catalog entry lists it",
            param=param,
        )


def refuse_unsupported(body: OpenAIChatBody | ResponsesBody) -> None:
    """The first parameter this server cannot honour, as a 400 naming it (nothing is silently ignored)."""
    refused = body.refusals()
    if refused:
        raise RequestError(400, "unsupported_parameter", str(refused[0]), param=refused[0].param)
    if body.user or body.safety_identifier or body.metadata:  # honoured by being logged with the turn
        logger.info(
            "Request identity",
            extra={"user": body.user, "safety_identifier": body.safety_identifier, "metadata": body.metadata},
        )


def checked_client_tools(runtime: Runtime, tools: list[ClientTool], choice: Any) -> list[dict[str, Any]]:
    """The client's function tools as the model is offered them: none may take a built-in tool's name, and a
    named ``tool_choice`` must name an offered tool."""
    client_tools = [t.schema_for_model() for t in tools]
    builtin = runtime.tool_names()
    clash = sorted({t["function"]["name"] for t in client_tools} & set(builtin))
    if clash:
        raise RequestError(
            400, "invalid_request", f"tools: {clash} clash with the server's built-in tools", "tools"
        )
    offered = set(builtin) | {t["function"]["name"] for t in client_tools}
    if isinstance(choice, dict) and choice["function"]["name"] not in offered:
        raise RequestError(
            400, "invalid_request", "tool_choice names a tool that is not offered", "tool_choice"
        )
    return client_tools


def failed_turn(errors: list[dict[str, Any]]) -> RequestError:
    """Every model failed: 429 with ``retry-after`` while the whole chain cools down after rate limits, else 503."""
    failure = next((e for e in errors if e.get("code") == "all_models_failed"), {})
    detail = failure.get("message", "no model could answer")
    retry_after = failure.get("retry_after")
    if retry_after is not None:
        seconds = str(max(1, math.ceil(retry_after)))
        return RequestError(429, "rate_limit_exceeded", detail, headers={"retry-after": seconds})
    return RequestError(503, "all_models_failed", detail)


def named_choice(choice: Any) -> dict[str, Any] | str | None:
    return choice.model_dump() if isinstance(choice, BaseModel) else choice


async def observed(events: AsyncIterator[Event], request: Request, rid: str) -> AsyncIterator[Event]:
    """The turn's events, with the request id on ``done`` and metrics recorded from them."""
    seen: list[Event] = []
    async for event in events:
        if isinstance(event, Done):
            event = Done(event.summary.with_request_id(rid))
            request.scope[STOP_REASON] = event.summary.stop_reason.value  # a failed stream is not stored
        seen.append(event)
        yield event
    behind_adapter = invocation_of(request) is not None
    if behind_adapter:  # the handler counts requests under Mangum; behind the adapter, the turn does
        metrics.add_metric(name="Requests", unit="Count", value=1)
    record_turn_metrics(seen, in_lambda="aws.context" in request.scope or behind_adapter)
    if behind_adapter:  # no log_metrics decorator around a long-running server: flush per request
        metrics.flush_metrics()


async def collect(events: AsyncIterator[Event]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``done`` summary and the ``error`` events of a turn."""
    done: dict[str, Any] = {}
    errors: list[dict[str, Any]] = []
    async for event in events:
        if event.type is EventType.DONE:
            done = event.data
        elif event.type is EventType.ERROR:
            errors.append(event.data)
    return done, errors


# --- endpoints ------------------------------------------------------------------------------------
async def chat(request: Request) -> Response:
    runtime = runtime_of(request)
    body: ChatBody = await read_body(request, ChatBody, runtime.settings.max_body_bytes)
    thread = None
    if body.conversation is not None:
        from chatloop.api import stored

        thread = await stored.chat_thread(request, body.conversation, body.messages)
    messages = conversation(
        [*(thread.history if thread else []), *body.messages], runtime.settings.max_messages
    )
    choice = named_choice(body.tool_choice)
    tool_names = tools_for_chat(runtime, body, choice)
    model = model_for(runtime, body.model)
    check_context(model, messages, body.max_tokens)
    turn = TurnRequest(
        messages=messages,
        tool_names=tool_names,
        tool_choice=None if choice == "none" else choice,
        parallel_tool_calls=body.parallel_tool_calls,
        temperature=body.temperature,
        top_p=body.top_p,
        max_tokens=body.max_tokens,
        max_iterations=body.max_iterations,
    )
    rid = request_id(request)
    deadline = request_deadline(request, runtime)
    registry = await runtime.tools_for_turn(deadline) if tool_names != [] else ToolRegistry()
    events = observed(run_turn(turn, model, registry, deadline, runtime.limits), request, rid)
    if thread is not None:  # a stored conversation's turn runs to its end even when the client goes away
        from chatloop.api import stored

        async def keep(seen: list[Event]) -> None:
            await stored.save_chat_turn(request, thread, body.messages, seen)

        events = stored.ended_when_stopped(
            stored.run_to_the_end(events, keep, key=(thread.owner, thread.conversation_id))
        )
    if body.stream:
        return event_stream(sse_stream(events), runtime, rid)
    done, _ = await collect(events)
    status = 503 if done["stop_reason"] == "all_models_failed" else 200
    return JSONBody(chat_summary(done), status_code=status, headers={"x-request-id": rid})


def tools_for_chat(runtime: Runtime, body: ChatBody, choice: Any) -> list[str] | None:
    """The tools a /chat turn may use: None for all of them (the MCP servers' tools included), [] for none."""
    if choice == "none":
        return []
    known = runtime.tool_names()
    names = body.tools
    unknown = [n for n in names or [] if n not in known and not runtime.mcp_name(n)]
    if unknown:
        raise RequestError(
            400, "unknown_tool", f"tools: unknown tool(s) {unknown}; built-in tools: {known}", "tools"
        )
    chosen = choice["function"]["name"] if isinstance(choice, dict) else None
    if (
        chosen is not None
        and chosen not in (names if names is not None else known)
        and not runtime.mcp_name(chosen)
    ):
        raise RequestError(
            400, "invalid_request", "tool_choice names a tool that is not enabled", "tool_choice"
        )
    return names


async def chat_completions(request: Request) -> Response:
    runtime = runtime_of(request)
    body: OpenAIChatBody = await read_body(request, OpenAIChatBody, runtime.settings.max_body_bytes)
    refuse_unsupported(body)
    messages = conversation(body.messages, runtime.settings.max_messages)
    choice = named_choice(body.tool_choice)
    client_tools = checked_client_tools(runtime, body.tools or [], choice)
    model = model_for(runtime, body.model, openai=True)
    check_context(model, messages, body.max_completion_tokens or body.max_tokens)
    response_format = structured_output(runtime, model, body.response_format, "response_format")
    params = model_params(runtime, model, body.forwarded())
    no_tools = choice == "none"
    turn = TurnRequest(
        messages=messages,
        tool_names=[] if no_tools else None,
        client_tools=[] if no_tools else client_tools,
        tool_choice=None if choice == "none" else choice,
        parallel_tool_calls=body.parallel_tool_calls,
        temperature=body.temperature,
        top_p=body.top_p,
        max_tokens=body.max_completion_tokens or body.max_tokens,
        response_format=response_format,
        model_params=params,
    )
    rid = request_id(request)
    deadline = request_deadline(request, runtime)
    registry = await runtime.tools_for_turn(deadline)
    events = observed(run_turn(turn, model, registry, deadline, runtime.limits), request, rid)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return event_stream(openai_chunks(events, rid, include_usage), runtime, rid)
    done, errors = await collect(events)
    if done["stop_reason"] == "all_models_failed":
        raise failed_turn(errors)
    return JSONBody(openai_completion(done, rid), headers={"x-request-id": rid})


async def responses(request: Request) -> Response:
    """OpenAI's Responses API: the same turn as chat completions, rendered as a ``response``; stored, and continued
    from a stored response or a conversation, by ``api.stored``."""
    from chatloop.api import stored  # the store and its schemas load with the first Responses request

    runtime = runtime_of(request)
    body: ResponsesBody = await read_body(request, ResponsesBody, runtime.settings.max_body_bytes)
    refuse_unsupported(body)
    keeping = await stored.prepare(request, body)
    messages = conversation(conversation_of(body, keeping.history), runtime.settings.max_messages)
    chat_choice: str | dict[str, Any] | None = None
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
    )
    rid = request_id(request)
    echo = echo_of(body, model.name, keeping.store is not None, keeping.conversation_id)
    deadline = request_deadline(request, runtime)
    mcp = await runtime.mcp_for_turn(deadline, servers)
    registry = runtime.registry().with_tools(mcp.tools, mcp.skipped)
    listed = listed_items(servers, mcp)  # mcp_list_tools items: what each of the request's servers offered
    events = observed(run_turn(turn, model, registry, deadline, runtime.limits), request, rid)

    async def keep(response: dict[str, Any], sent: list[dict[str, Any]]) -> dict[str, Any]:
        return await stored.save(keeping, request, body, response, sent)

    if body.stream and keeping.store is not None and keeping.owner is not None:
        # Stored: the turn runs to its end if the client goes away, and can be followed live meanwhile.
        def chunks(listener: Callable[[dict[str, Any]], None]) -> AsyncIterator[bytes]:
            return response_events(events, rid, echo, keep, listener, listed)

        return event_stream(stored.followable(f"resp_{rid}", keeping.owner, chunks), runtime, rid)
    if body.stream:
        return event_stream(response_events(events, rid, echo, listed=listed), runtime, rid)
    response, errors = await collect_response(events, rid, echo, listed)
    if response["x_chatloop"]["stop_reason"] == "all_models_failed":
        raise failed_turn(errors)
    response = await keep(response, [])
    return JSONBody(response, headers={"x-request-id": rid})


def event_stream(chunks: AsyncIterator[bytes], runtime: Runtime, rid: str) -> StreamingResponse:
    return StreamingResponse(
        with_heartbeats(chunks, runtime.settings.sse_heartbeat_seconds),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-request-id": rid},
    )


def model_object(model_id: str) -> dict[str, Any]:
    owner = "chatloop" if model_id == CHAIN_ALIAS else model_id.partition(":")[0]
    return {"id": model_id, "object": "model", "created": 0, "owned_by": owner}


def available_models(runtime: Runtime) -> list[str]:
    try:
        return runtime.available_models()
    except KeysUnavailable as exc:
        raise RequestError(503, "keys_unavailable", str(exc)) from None


async def list_models(request: Request) -> Response:
    """The ids a client may pass as ``model``, in OpenAI's list shape (the chain's alias and entries first)."""
    ids = available_models(runtime_of(request))
    return JSONBody({"object": "list", "data": [model_object(i) for i in ids]})


async def retrieve_model(request: Request) -> Response:
    model_id = request.path_params["model_id"]
    ids = available_models(runtime_of(request))
    if model_id not in ids:
        raise RequestError(
            404, "model_not_found", f"unknown model {model_id!r}; available: {ids}", param="model"
        )
    return JSONBody(model_object(model_id))


async def health(request: Request) -> Response:
    runtime = runtime_of(request)
    return JSONBody(
        {
            "status": "ok",
            "version": runtime.settings.version,
            "model_chain": runtime.describe_chain(),
            "tools": runtime.tool_names(),
            "max_iterations": runtime.settings.max_iterations,
        }
    )
