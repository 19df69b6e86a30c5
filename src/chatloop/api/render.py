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
import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from starlette.responses import JSONResponse

from chatloop.engine.events import (
    Delta,
    Done,
    Event,
    EventType,
    FallbackMade,
    LlmResponse,
    Started,
    TurnError,
)
from chatloop.engine.summary import TurnSummary
from chatloop.observability import SecretHold, logger, redact
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


_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"}
_LINE_BREAK = re.compile("[\u2028\u2029\u0085]")


def dumps_unredacted(data: Any) -> str:
    """``dumps`` before redaction, for a renderer that redacts each whole chunk once (several frames at a time).

    U+2028, U+2029 and U+0085 are escaped: JSON allows them raw, but a client that splits an SSE body into lines
    the way ``str.splitlines`` does would cut a ``data:`` line there and could read what follows as a new frame."""
    text = text_safe(json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str))
    if text.isascii():
        return text
    return _LINE_BREAK.sub(lambda m: _LINE_BREAKS[m.group()], text)


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
        async for event in held_secrets(events):
            done = done or event.type is EventType.DONE
            yield sse(event)
    except Exception:
        logger.exception("SSE stream failed")
        if not done:
            yield sse(TurnError(INTERNAL_ERROR["code"], INTERNAL_ERROR["message"]))
            yield sse(Done(TurnSummary.failed()))


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


async def held_secrets(events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """The turn's events with their ``delta`` text redacted as one stream: a secret a model writes across several
    deltas is held until it can be redacted whole (``SecretHold``), then released; anything else releases what is
    held first, so no text is lost or reordered."""
    hold = SecretHold()
    last: Delta | None = None
    async for event in events:
        if isinstance(event, Delta):
            if event.seam:
                yield from_hold(hold.flush(), last)
            last = event
            text = hold.feed(event.content)
            if text:
                yield replace(event, content=text)
            continue
        rest = hold.flush()
        if rest:
            yield from_hold(rest, last)
        yield event
    rest = hold.flush()
    if rest:
        yield from_hold(rest, last)


def from_hold(text: str, last: Delta | None) -> Delta:
    return Delta(text, last.iteration if last else 0)


async def _openai_chunks(
    events: AsyncIterator[Event], request_id: str, include_usage: bool
) -> AsyncIterator[bytes]:
    """``chat.completion.chunk`` SSE ending in ``data: [DONE]``: the role chunk as the turn starts, each piece of text
    as the model writes it (seams included, so the chunks add up to the answer), the client's tool calls and the
    finish reason at the end. With ``include_usage`` every chunk carries ``usage`` (null until the last), as
    OpenAI's do."""
    created = int(time.time())
    base = {"id": f"chatcmpl-{request_id}", "object": "chat.completion.chunk", "created": created}
    model = "unknown"
    usage_field: dict[str, Any] = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        body = {
            **base,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **usage_field,
            **extra,
        }
        return f"data: {dumps(body)}\n\n".encode()

    started = failed = False
    async for event in held_secrets(events):
        if isinstance(event, Started) and not started:
            model = event.model or model
            started = True
            yield chunk({"role": "assistant", "content": ""})
        elif isinstance(event, FallbackMade) and event.to_model:
            model = event.to_model
        elif isinstance(event, LlmResponse):
            model = event.model
        elif failed:
            continue  # after an error chunk, nothing but [DONE]
        elif isinstance(event, Delta):
            yield chunk({"content": event.content})
        elif isinstance(event, TurnError) and event.code == "all_models_failed":
            failed = True
            error = openai_error(event.message, "all_models_failed", "service_unavailable")
            yield f"data: {dumps(error)}\n\n".encode()  # OpenAI clients raise on an error chunk
        elif isinstance(event, Done):
            data = event.data
            model = event.summary.model or model
            message = openai_message(data)
            if message.get("tool_calls"):
                calls = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
                yield chunk({"tool_calls": calls})
            yield chunk({}, finish_reason(event.summary.stop_reason.value), x_chatloop=extension(data))
            if include_usage:
                body = {**base, "model": model, "choices": [], "usage": data["usage"]}
                yield f"data: {dumps(body)}\n\n".encode()
    yield DONE_LINE
