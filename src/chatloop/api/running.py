"""Work that outlives its client: a stored turn runs to its end (and is stored) whether or not the client that
started it stays, and a stored response's stream can be followed live by another request meanwhile.

Usage::

    events = run_to_the_end(events, finish=store_it, key=(owner, conversation_id))   # /chat in a conversation
    live = live_stream("resp_1", owner)                  # a stored, streamed /v1/responses request
    chunks = followable("resp_1", live, chunks)          # LIVE["resp_1"] follows it until it ends
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def run_to_the_end(
    items: AsyncIterator[T],
    finish: Callable[[list[T]], Awaitable[None]] | None = None,
    key: tuple[str, str] | None = None,
) -> AsyncIterator[T]:
    """``items`` (a turn's events, or a stream's bytes), produced by a task of their own that a client going away
    does not cancel: a stored turn finishes (within its deadline) and ``finish`` stores it before the stream ends,
    so a client that reloads, or reads the record next, finds the answer. The returned iterator only reads what the
    task produces."""
    queue: asyncio.Queue[tuple[T] | None] = asyncio.Queue()

    async def pump() -> None:
        seen: list[T] = []
        try:
            async for item in items:
                seen.append(item)
                queue.put_nowait((item,))
            if finish is not None:
                await finish(
                    seen
                )  # before the stream ends: a client that reads the record next finds the turn
        finally:
            queue.put_nowait(None)

    task = asyncio.get_running_loop().create_task(pump())
    _RUNNING.add(task)  # a strong reference until it is done: the event loop keeps only weak ones
    task.add_done_callback(_RUNNING.discard)
    if key is not None:  # the caller's running turn in a conversation: what POST /chat/stop cancels
        TURNS[key] = task
        task.add_done_callback(lambda done: TURNS.pop(key, None) if TURNS.get(key) is done else None)

    async def read() -> AsyncIterator[T]:
        while (item := await queue.get()) is not None:
            yield item[0]

    return read()


class LiveStream:
    """A stored streamed response while its turn runs in this container: the events sent so far, for a client that
    resumes it (``GET /v1/responses/{id}?stream=true&starting_after=N``) before it is stored whole."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.events: list[dict[str, object]] = []
        self.ended = False
        self._changed = asyncio.Condition()

    def add(self, data: dict[str, object]) -> None:
        self.events.append(data)
        asyncio.get_running_loop().create_task(self._notify())

    async def end(self) -> None:
        self.ended = True
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def after(self, number: int) -> AsyncIterator[dict[str, object]]:
        """Every event after ``number``, then each new one as it is sent, until the response's last."""
        sent = number + 1
        while True:
            while sent < len(self.events):
                yield self.events[sent]
                sent += 1
            if self.ended:
                return
            async with self._changed:
                while not self.ended and len(self.events) <= sent:
                    await self._changed.wait()


LIVE: dict[str, LiveStream] = {}
"""Stored streamed responses whose turn is running in this container, by response id."""


_RUNNING: set[asyncio.Task[None]] = set()
TURNS: dict[tuple[str, str], asyncio.Task[None]] = {}
"""Running ``/chat`` turns of stored conversations in this container, by (caller, conversation id)."""


def live_stream(response_id: str, owner: str) -> LiveStream:
    """A stored response's stream, registered in ``LIVE`` while it runs (a resumed stream follows it): its renderer
    tells it each event (``live.add``), ``followable`` ends it."""
    live = LiveStream(owner)
    LIVE[response_id] = live
    return live


def followable(response_id: str, live: LiveStream, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A stored response's stream (``chunks``), run to its end whether or not its own client stays, and taken out
    of ``LIVE`` once it ended."""

    async def followed() -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            LIVE.pop(response_id, None)
            await live.end()

    return run_to_the_end(followed())
