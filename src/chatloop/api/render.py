"""Renderers: functions from engine events to bytes (SSE), to the /chat JSON body, and to OpenAI's
``chat.completion`` / ``chat.completion.chunk`` shapes.

Usage::

    async for event in events: yield sse(event)                   # /chat, stream=true
    body = openai_completion(done, request_id="abc", created=1700000000)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

from chatloop.engine.events import Event, EventType
from chatloop.observability import logger, redact
from chatloop.textsafe import text_safe

SUMMARY_FIELDS = (
    "message",
    "stop_reason",
    "iterations",
    "tool_calls",
    "tool_counts",
    "usage",
    "model",
    "context",
    "request_id",
)
FINISH_REASONS = {"stop": "stop", "length": "length", "tool_calls": "tool_calls"}


def dumps(data: Any) -> str:
    # text_safe: a lone surrogate anywhere (it slipped past every edge) must not stop the response mid-way;
    # redact: no configured secret or key-shaped string leaves in any response, whatever produced it.
    return redact(dumps_unredacted(data))


def dumps_unredacted(data: Any) -> str:
    """``dumps`` before redaction, for a renderer that redacts each whole chunk once (several frames at a time)."""
    return text_safe(json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str))


class JSONBody(JSONResponse):
    """Starlette's JSONResponse, rendered so that it can always be encoded."""

    def render(self, content: Any) -> bytes:
        return dumps(content).encode()


def sse(event: Event) -> bytes:
    return f"event: {event.name}\ndata: {dumps(event.data)}\n\n".encode()


HEARTBEAT = b": ping\n\n"
"""An SSE comment: clients ignore it; proxies and API Gateway's idle timeout see bytes flowing."""


async def with_heartbeats(chunks: AsyncIterator[bytes], every: float) -> AsyncIterator[bytes]:
    """``chunks``, plus a ``: ping`` comment whenever nothing was sent for ``every`` seconds (a long model call or
    tool run), so no idle timeout closes a healthy turn.

    The next chunk is awaited as a task and never cancelled by a heartbeat: a timeout that cancelled it would
    cancel whatever the turn was doing at that moment."""
    iterator = aiter(chunks)
    pending: asyncio.Future[bytes] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=every)
            if not done:
                yield HEARTBEAT
                continue
            step, pending = pending, None
            try:
                chunk = step.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        if pending is not None:  # the client went away (or the response was closed) mid-wait: stop the turn
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


INTERNAL_ERROR = {"code": "internal_error", "message": "internal error while sending the response"}


async def sse_stream(events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    """/chat's SSE: every event, and whatever fails on the way, a last ``error`` and ``done``: the stream always
    ends with ``done``."""
    done = False
    try:
        async for event in events:
            done = done or event.type is EventType.DONE
            yield sse(event)
    except Exception:
        logger.exception("SSE stream failed")
        if not done:
            yield sse(Event(EventType.ERROR, INTERNAL_ERROR))
            yield sse(Event(EventType.DONE, _failed_summary()))


def _failed_summary() -> dict[str, Any]:
    text = "I could not finish this answer because of an internal error. Please ask again."
    return {
        "message": {"role": "assistant", "content": text},
        "stop_reason": "error",
        "iterations": 0,
        "tool_calls": [],
        "tool_counts": {},
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "model": None,
    }


def chat_summary(done: dict[str, Any]) -> dict[str, Any]:
    """The /chat JSON body: the same fields as the ``done`` event."""
    return {k: done.get(k) for k in SUMMARY_FIELDS}


def finish_reason(stop_reason: str) -> str:
    """OpenAI's finish_reason for a stop reason (guards end a turn with an answer: ``stop``)."""
    return FINISH_REASONS.get(stop_reason, "stop")


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


def extension(done: dict[str, Any]) -> dict[str, Any]:
    keys = ("stop_reason", "iterations", "tool_calls", "tool_counts", "context", "request_id")
    return {k: done.get(k) for k in keys}


def openai_error(
    message: str, code: str, kind: str = "invalid_request_error", param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


DONE_LINE = b"data: [DONE]\n\n"


async def openai_chunks(
    events: AsyncIterator[Event], request_id: str, include_usage: bool
) -> AsyncIterator[bytes]:
    """``chat.completion.chunk`` SSE that always ends in ``data: [DONE]``: whatever fails on the way, an error chunk
    in OpenAI's shape, then ``[DONE]``."""
    finished = False
    try:
        async for chunk in _openai_chunks(events, request_id, include_usage):
            finished = chunk == DONE_LINE
            yield chunk
    except Exception:
        logger.exception("chat.completion.chunk stream failed")
        if not finished:
            error = openai_error(INTERNAL_ERROR["message"], "internal_error", "server_error")
            yield f"data: {dumps(error)}\n\n".encode()
            yield DONE_LINE


@dataclass(frozen=True)
class ReplyText:
    """Text of the reply, released once the decision on its model call says it is the answer."""

    text: str
    model: str


@dataclass(frozen=True)
class ReplyEnd:
    """The turn's ``done`` summary: its message holds the reply's client tool calls, if any."""

    done: dict[str, Any]


@dataclass(frozen=True)
class ReplyFailed:
    """Every model failed: the ``error`` event's data. Nothing but the stream's end follows."""

    error: dict[str, Any]


async def final_reply(events: AsyncIterator[Event]) -> AsyncIterator[ReplyText | ReplyEnd | ReplyFailed]:
    """The OpenAI APIs' view of a turn: only the final assistant message, as it becomes known.

    Text is held per model call and released once the decision on that call says it is the answer (a call that
    ends in tool calls, a reminder, or text discarded by a fallback releases nothing). Both OpenAI renderers
    (chat completion chunks and Responses API events) are drawn from this one projection."""
    model = "unknown"
    pending: list[str] = []
    failed = False
    async for event in events:
        data = event.data
        if event.type is EventType.DELTA:
            pending.append(data["content"])
        elif event.type is EventType.MODEL_FALLBACK and data.get("discard_partial"):
            pending.clear()
        elif event.type is EventType.LLM_RESPONSE:
            model = data["model"]
        elif event.type is EventType.DECISION:
            if data["action"] == "answer":
                for text in pending:
                    yield ReplyText(text, model)
            pending.clear()
        elif event.type is EventType.ERROR and data.get("code") == "all_models_failed":
            failed = True
            yield ReplyFailed(data)
        elif event.type is EventType.DONE and not failed:
            yield ReplyEnd(data)


async def _openai_chunks(
    events: AsyncIterator[Event], request_id: str, include_usage: bool
) -> AsyncIterator[bytes]:
    """``chat.completion.chunk`` SSE ending in ``data: [DONE]``, over ``final_reply``."""
    created = int(time.time())
    base = {"id": f"chatcmpl-{request_id}", "object": "chat.completion.chunk", "created": created}
    model = "unknown"

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        body = {
            **base,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return f"data: {dumps(body)}\n\n".encode()

    started = False
    async for part in final_reply(events):
        if isinstance(part, ReplyText):
            model = part.model
            if not started:
                yield chunk({"role": "assistant", "content": ""})
                started = True
            yield chunk({"content": part.text})
        elif isinstance(part, ReplyFailed):
            error = openai_error(part.error["message"], "all_models_failed", "service_unavailable")
            yield f"data: {dumps(error)}\n\n".encode()  # OpenAI clients raise on an error chunk
        else:
            data = part.done
            model = data["model"]
            message = openai_message(data)
            if not started:
                yield chunk({"role": "assistant", "content": ""})
            if message.get("tool_calls"):
                calls = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
                yield chunk({"tool_calls": calls})
            elif not started and message.get("content"):
                yield chunk({"content": message["content"]})  # e.g. the fallback text
            yield chunk({}, finish_reason(data["stop_reason"]), x_chatloop=extension(data))
            if include_usage:
                yield f"data: {dumps({**base, 'model': model, 'choices': [], 'usage': data['usage']})}\n\n".encode()
    yield DONE_LINE
