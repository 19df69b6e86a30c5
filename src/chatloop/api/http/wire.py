"""Bytes on the wire: JSON as every response writes it, one SSE framing helper, and heartbeats.

Usage::

    text = dumps({"a": 1})                              # compact, text-safe, redacted
    frame = sse_frame({"a": 1}, event="delta")          # 'event: delta\\ndata: {"a":1}\\n\\n' (not yet redacted)
    return JSONBody({"status": "ok"})
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator

from starlette.responses import JSONResponse

from chatloop.redaction import redact
from chatloop.textsafe import text_safe

_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"}
_LINE_BREAK = re.compile("[\u2028\u2029\u0085]")


def dumps(data: object) -> str:
    # text_safe: a lone surrogate anywhere (it slipped past every edge) must not stop the response mid-way;
    # redact: no configured secret or key-shaped string leaves in any response, whatever produced it.
    return redact(dumps_unredacted(data))


def dumps_unredacted(data: object) -> str:
    """``dumps`` before redaction, for a stream that redacts each whole chunk once (``api.turns.serve``).

    U+2028, U+2029 and U+0085 are escaped: JSON allows them raw, but a client that splits an SSE body into lines
    the way ``str.splitlines`` does would cut a ``data:`` line there and could read what follows as a new frame."""
    text = text_safe(json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str))
    if text.isascii():
        return text
    return _LINE_BREAK.sub(lambda m: _LINE_BREAKS[m.group()], text)


def sse_frame(data: object, event: str | None = None) -> str:
    """One Server-Sent Event: ``event: <event>`` (when named) and one ``data:`` line of JSON. Not redacted: the
    stream that sends it redacts each chunk as it leaves (``api.turns.serve.guarded``)."""
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {dumps_unredacted(data)}\n\n"


async def sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, object]]:
    """The JSON objects of a stream's ``data:`` lines, in order: the events an SSE stream sends (its chunks whole
    frames, redacted as they leave: ``api.turns.serve.turn_chunks``), for a transport that sends each one as it is
    (a WebSocket message each).

    Usage::

        async for event in sse_data(turn_chunks(renderer, events)):   # {"type": "response.created", …}
            await send(event)
    """
    async for chunk in chunks:
        for frame in chunk.decode().split("\n\n"):
            for line in frame.split("\n"):
                if line.startswith("data: "):
                    data = json.loads(line.removeprefix("data: "))
                    if isinstance(data, dict):
                        yield data


class JSONBody(JSONResponse):
    """Starlette's JSONResponse, rendered so that it can always be encoded."""

    def render(self, content: object) -> bytes:
        return dumps(content).encode()


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
