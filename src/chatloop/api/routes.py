"""The endpoints. Each one validates its input (a clear 4xx and no model call when it is bad), computes the
request's one deadline, runs the engine and renders its events.

Usage (tests and bench drive them through the app)::

    curl -s localhost:8000/chat -d '{"messages": [{"role": "user", "content": "5!"}], "stream": false}'
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from chatloop.api.adapter import Invocation, invocation_from
from chatloop.api.errors import RequestError, from_validation
from chatloop.api.limits import check_message_count, parse_json_body
from chatloop.api.mcp_items import client_servers
from chatloop.api.render import (
    JSONBody,
    chat_summary,
    openai_chunks,
    openai_completion,
    sse_stream,
    with_heartbeats,
)
from chatloop.api.responses import conversation_of, echo_of, response_events, response_object
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
from chatloop.engine.messages import ConversationError, normalize_conversation
from chatloop.observability import logger, metrics, record_turn_metrics
from chatloop.providers.chain import FallbackChain
from chatloop.secrets import KeysUnavailable
from chatloop.tools.base import ToolRegistry


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


# --- shared steps ---------------------------------------------------------------------------------
async def read_body(request: Request, schema: type[BaseModel], limit: int) -> Any:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, "body_too_large", f"the body is larger than {limit} bytes")
    raw = await request.body()
    if len(raw) > limit:
        raise RequestError(413, "body_too_large", f"the body is larger than {limit} bytes")
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
    """The Lambda Web Adapter's invocation for this request (stream mode), parsed once per request."""
    if "chatloop.invocation" not in request.scope:
        request.scope["chatloop.invocation"] = invocation_from(request.headers)
    invocation: Invocation | None = request.scope["chatloop.invocation"]
    return invocation


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


def check_context(model: FallbackChain, messages: list[dict[str, Any]], max_tokens: int | None) -> None:
    """A conversation whose system messages and latest user message alone exceed every model's window cannot be
    answered however it is trimmed: a 413 now, no model call."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last_user is None:
        return
    essential = [m for m in messages[:last_user] if m["role"] == "system"] + [messages[last_user]]
    holds, largest = model.can_hold(essential, max_tokens)
    if not holds:
        raise RequestError(
            413,
            "context_length_exceeded",
            f"messages: the latest user message alone needs more than the largest context window in the chain "
            f"({largest} tokens, the answer's reserve included); shorten it",
            param="messages",
        )


def structured_output(
    runtime: Runtime, model: FallbackChain, requested: ResponseFormat | None, param: str
) -> dict[str, Any] | None:
    """The upstream ``response_format`` for a turn, never silently dropped: models of the chain that cannot honour
    it are skipped for this request (a logged decision); when none can, a 400 ``unsupported_parameter``."""
    response_format = requested.upstream() if requested else None
    if response_format is None:
        return None
    kind = response_format["type"]
    able = [m.name for m in model.models if runtime.catalog.get(m.name).honours(response_format)]
    skipped = [m.name for m in model.models if m.name not in able]
    logger.info(
        f"Structured output decision: format={kind} models={','.join(able) or '-'} "
        f"skipped={','.join(skipped) or '-'} reason={'supported' if able else 'unsupported'}",
        extra={"structured_output": {"format": kind, "models": able, "skipped": skipped}},
    )
    if not able:
        raise RequestError(
            400,
            "unsupported_parameter",
            f"{param}: no model in the chain supports {kind} ({', '.join(skipped)}); "
            "pick one whose catalog entry lists it in response_format",
            param=param,
        )
    return response_format


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
        if event.type is EventType.DONE:
            event = Event(EventType.DONE, {**event.data, "request_id": rid})
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
    messages = conversation(body.messages, runtime.settings.max_messages)
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
    events = observed(run_turn(turn, model, registry, deadline, runtime.settings), request, rid)
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
    messages = conversation(body.messages, runtime.settings.max_messages)
    choice = named_choice(body.tool_choice)
    client_tools = checked_client_tools(runtime, body.tools or [], choice)
    model = model_for(runtime, body.model, openai=True)
    check_context(model, messages, body.max_completion_tokens or body.max_tokens)
    response_format = structured_output(runtime, model, body.response_format, "response_format")
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
    )
    rid = request_id(request)
    deadline = request_deadline(request, runtime)
    registry = await runtime.tools_for_turn(deadline)
    events = observed(run_turn(turn, model, registry, deadline, runtime.settings), request, rid)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return event_stream(openai_chunks(events, rid, include_usage), runtime, rid)
    done, errors = await collect(events)
    if done["stop_reason"] == "all_models_failed":
        raise failed_turn(errors)
    return JSONBody(openai_completion(done, rid), headers={"x-request-id": rid})


async def responses(request: Request) -> Response:
    """OpenAI's Responses API, stateless: the same turn as chat completions, rendered as a ``response``."""
    runtime = runtime_of(request)
    body: ResponsesBody = await read_body(request, ResponsesBody, runtime.settings.max_body_bytes)
    if body.previous_response_id is not None:
        raise RequestError(
            400,
            "unsupported_parameter",
            "previous_response_id: this server is stateless (store is not supported); "
            "send the whole conversation as input items",
            param="previous_response_id",
        )
    messages = conversation(conversation_of(body), runtime.settings.max_messages)
    chat_choice: str | dict[str, Any] | None = None
    if isinstance(body.tool_choice, str):
        chat_choice = body.tool_choice
    elif body.tool_choice is not None:  # the Responses API names a function flat; chat completions nest it
        chat_choice = {"type": "function", "function": {"name": body.tool_choice.name}}
    functions = [t.as_chat_tool() for t in body.tools or [] if isinstance(t, ResponsesFunctionTool)]
    client_tools = checked_client_tools(runtime, functions, chat_choice)
    servers = await client_servers(body.tools, runtime.settings, runtime.mcp_servers_labels())
    model = model_for(runtime, body.model, openai=True)
    check_context(model, messages, body.max_output_tokens)
    try:
        requested_format = body.text.format.as_response_format() if body.text and body.text.format else None
    except ValueError as exc:
        raise RequestError(400, "invalid_request", str(exc), param="text.format") from None
    response_format = structured_output(runtime, model, requested_format, "text.format")
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
    )
    rid = request_id(request)
    echo = echo_of(body, model.name)
    deadline = request_deadline(request, runtime)
    registry = await runtime.tools_for_turn(deadline, servers)
    events = observed(run_turn(turn, model, registry, deadline, runtime.settings), request, rid)
    if body.stream:
        return event_stream(response_events(events, rid, echo), runtime, rid)
    done, errors = await collect(events)
    if done["stop_reason"] == "all_models_failed":
        raise failed_turn(errors)
    return JSONBody(response_object(done, rid, echo), headers={"x-request-id": rid})


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
