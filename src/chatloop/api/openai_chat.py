"""``POST /v1/chat/completions``: OpenAI's chat completions over the same turn, as a ``chat.completion`` or as
``chat.completion.chunk`` SSE ending in ``data: [DONE]``.

Usage::

    client = openai.OpenAI(base_url="http://localhost:8000/v1", api_key="unused")
    client.chat.completions.create(model="chatloop", messages=[{"role": "user", "content": "5!"}])
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.checks import (
    check_context,
    checked_client_tools,
    conversation,
    model_for,
    model_params,
    named_choice,
    read_body,
    refuse_unsupported,
    structured_output,
)
from chatloop.api.context import RequestContext
from chatloop.api.errors import openai_error
from chatloop.api.schemas import OpenAIChatBody
from chatloop.api.serve import INTERNAL_ERROR, serve_turn, turn_events
from chatloop.api.wire import sse_frame
from chatloop.engine import Event, EventType, TurnRequest

FINISH_REASONS = {"stop": "stop", "length": "length", "tool_calls": "tool_calls"}
EXTENSION_FIELDS = ("stop_reason", "iterations", "tool_calls", "tool_counts", "context", "request_id")
DONE_LINE = "data: [DONE]\n\n"


def finish_reason(stop_reason: str) -> str:
    """OpenAI's finish_reason for a stop reason (guards end a turn with an answer: ``stop``)."""
    return FINISH_REASONS.get(stop_reason, "stop")


def extension(done: dict[str, Any]) -> dict[str, Any]:
    """``x_chatloop``: what the turn did beyond OpenAI's fields (the stop reason, the tool records ...)."""
    return {k: done.get(k) for k in EXTENSION_FIELDS}


def openai_message(done: dict[str, Any]) -> dict[str, Any]:
    message = done["message"]
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or None}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    elif out["content"] is None:
        out["content"] = ""
    return out


def openai_completion(done: dict[str, Any], request_id: str, created: int | None = None) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": done["model"],
        "choices": [
            {
                "index": 0,
                "message": openai_message(done),
                "finish_reason": finish_reason(done["stop_reason"]),
                "logprobs": None,
            }
        ],
        "usage": done["usage"],
        "x_chatloop": extension(done),
    }


class CompletionRenderer:
    """``chat.completion.chunk`` SSE ending in ``data: [DONE]``: the role chunk as the turn starts, each piece of text
    as the model writes it (seams included, so the chunks add up to the answer), the client's tool calls and the
    finish reason at the end. With ``include_usage`` every chunk carries ``usage`` (null until the last), as
    OpenAI's do. Not streamed: a ``chat.completion``."""

    stream_failure_log = "chat.completion.chunk stream failed"
    answers_failure = False

    def __init__(self, request_id: str, include_usage: bool = False) -> None:
        self.request_id = request_id
        self.include_usage = include_usage
        self._finished = False

    async def frames(self, events: AsyncIterator[Event]) -> AsyncIterator[str]:
        created = int(time.time())
        base = {"id": f"chatcmpl-{self.request_id}", "object": "chat.completion.chunk", "created": created}
        model = "unknown"
        usage_field: dict[str, Any] = {"usage": None} if self.include_usage else {}

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: object) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return sse_frame({**base, "model": model, "choices": [choice], **usage_field, **extra})

        started = failed = False
        async for event in events:
            data = event.data
            if event.type is EventType.STATUS and data.get("status") == "started" and not started:
                model = data.get("model") or model
                started = True
                yield chunk({"role": "assistant", "content": ""})
            elif event.type is EventType.MODEL_FALLBACK and data.get("to"):
                model = data["to"]
            elif event.type is EventType.LLM_RESPONSE:
                model = data["model"]
            elif failed:
                continue  # after an error chunk, nothing but [DONE]
            elif event.type is EventType.DELTA:
                yield chunk({"content": data["content"]})
            elif event.type is EventType.ERROR and data.get("code") == "all_models_failed":
                failed = True
                error = openai_error(data["message"], "all_models_failed", "service_unavailable")
                yield sse_frame(error)  # OpenAI clients raise on an error chunk
            elif event.type is EventType.DONE:
                model = data["model"] or model
                message = openai_message(data)
                if message.get("tool_calls"):
                    calls = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
                    yield chunk({"tool_calls": calls})
                yield chunk({}, finish_reason(data["stop_reason"]), x_chatloop=extension(data))
                if self.include_usage:
                    yield sse_frame({**base, "model": model, "choices": [], "usage": data["usage"]})
        self._finished = True
        yield DONE_LINE

    def broken(self) -> str:
        if self._finished:
            return ""
        error = openai_error(INTERNAL_ERROR["message"], "internal_error", "server_error")
        return sse_frame(error) + DONE_LINE

    def observe(self, event: Event) -> None:
        pass

    async def answer(self, done: dict[str, Any]) -> tuple[int, object]:
        return 200, openai_completion(done, self.request_id)


async def chat_completions(request: Request) -> Response:
    ctx = RequestContext.of(request)
    runtime = ctx.runtime
    body = await read_body(request, OpenAIChatBody)
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
    registry = await runtime.tools_for_turn(ctx.deadline)
    events = turn_events(ctx, turn, model, registry)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    renderer = CompletionRenderer(ctx.request_id, include_usage)
    return await serve_turn(ctx, renderer, events, stream=body.stream)
