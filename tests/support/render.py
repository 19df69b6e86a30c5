"""A renderer on its own, as the renderer tests drive one (tests/api/chat/test_render_chat.py, tests/api/openai/test_render_chat_completions.py,
tests/api/openai/responses/test_render_responses.py): typed engine events in, the bytes a client reads out.

Usage::

    body = stream(ChatRenderer(), [Started("groq:m"), Delta("Hel", 1), Done(summary)])  # the guarded stream
    own = rendered(ChatRenderer(), [Started("groq:m"), Delta("Hel", 1), Done(summary)])  # its own frames
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable

from chatloop.api.turns.serve import guarded
from chatloop.engine.events import Event


async def _events(events: Iterable[Event], fail: bool) -> AsyncIterator[Event]:
    for event in events:
        yield event
    if fail:
        raise RuntimeError("the turn broke")


def stream(renderer, events: Iterable[Event], fail: bool = False) -> str:
    """What the client reads: ``events`` through ``renderer`` and the guarded stream (redaction, the terminal
    event when the turn breaks: ``fail`` raises after the last event)."""

    async def read() -> bytes:
        return b"".join([chunk async for chunk in guarded(renderer, _events(events, fail))])

    return asyncio.run(read()).decode()


def rendered(renderer, events: Iterable[Event]) -> str:
    """The renderer's own frames, before the guarded stream (no redaction hold: another test's registered secret
    may hold back a piece of a delta there)."""

    async def read() -> str:
        return "".join([frame async for frame in renderer.frames(_events(events, fail=False))])

    return asyncio.run(read())
