"""Work that outlives its client: a stored turn runs to its end (and is stored) whether or not the client that
started it stays, and it can be asked to stop from any container.

A running turn is watched for a stop (``POST /chat/stop``, ``POST /v1/responses/{id}/cancel``) in two ways: a
request to the same process sets its ``Stop`` at once (``STOPS``); a request to any other copy writes a cancel
request on the turn's run in the store (``store.runs``), which ``watch`` reads every ``CANCEL_POLL_SECONDS`` while
the turn runs. Either way ``stoppable`` ends the turn's events where they are (the model call or tool run in flight
is cancelled, nothing further is billed) with the endings its API gives a stopped turn, so every stream still ends
with its terminal event.

Usage::

    stop = Stop()
    events = stoppable(turn_events, stop, ending=lambda: [TurnError("stopped", "…"), Done(…)])
    chunks = run_to_the_end(events, finish=store_it, tracked=Tracked((owner, "conv_1"), stop, watch=poll))
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from chatloop.observability import logger

T = TypeVar("T")
CANCEL_POLL_SECONDS = 0.4
"""How often a running turn reads its run for a cancel request (one strongly consistent read each): a stop from
another container ends the turn within this, plus the store's latency."""


@dataclass
class Stop:
    """A running turn's stop: set by a stop request in this process, or by ``watch`` finding one in the store."""

    requested: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self) -> None:
        self.requested.set()

    @property
    def is_set(self) -> bool:
        return self.requested.is_set()


@dataclass
class Tracked:
    """A running turn others may stop: its key (owner, conversation or response id), its ``Stop``, and what the
    process does meanwhile (``watch``: read the store for a cancel request) and afterwards (``end``: record it)."""

    key: tuple[str, str]
    stop: Stop
    watch: Callable[[Stop], Coroutine[Any, Any, None]] | None = None
    end: Callable[[Stop], Awaitable[None]] | None = None


STOPS: dict[tuple[str, str], Stop] = {}
"""The stops of the turns running in this process, by (owner, conversation or response id)."""
_RUNNING: set[asyncio.Task[None]] = set()


def keep_task(task: asyncio.Task[None]) -> asyncio.Task[None]:
    """A strong reference to ``task`` until it is done (the event loop keeps only weak ones)."""
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)
    return task


def run_to_the_end(
    items: AsyncIterator[T],
    finish: Callable[[list[T]], Awaitable[None]] | None = None,
    tracked: Tracked | None = None,
) -> AsyncIterator[T]:
    """``items`` (a turn's events, or a stream's bytes), produced by a task of their own that a client going away
    does not cancel: a stored turn finishes (within its deadline) and ``finish`` stores it before the stream ends,
    so a client that reloads, or reads the record next, finds the answer. The returned iterator only reads what the
    task produces."""
    queue: asyncio.Queue[tuple[T] | None] = asyncio.Queue()

    async def pump() -> None:
        seen: list[T] = []
        watcher = None
        if tracked is not None and tracked.watch is not None:
            watcher = keep_task(asyncio.get_running_loop().create_task(tracked.watch(tracked.stop)))
        try:
            async for item in items:
                seen.append(item)
                queue.put_nowait((item,))
            if finish is not None:
                await finish(
                    seen
                )  # before the stream ends: a client that reads the record next finds the turn
        finally:
            if watcher is not None:
                watcher.cancel()
            if tracked is not None:
                if STOPS.get(tracked.key) is tracked.stop:
                    del STOPS[tracked.key]
                if tracked.end is not None:
                    try:
                        await tracked.end(tracked.stop)
                    except Exception:
                        logger.exception("a running turn's end was not recorded")
            queue.put_nowait(None)

    if tracked is not None:
        STOPS[tracked.key] = tracked.stop
    keep_task(asyncio.get_running_loop().create_task(pump()))

    async def read() -> AsyncIterator[T]:
        while (item := await queue.get()) is not None:
            yield item[0]

    return read()


async def stoppable(events: AsyncIterator[T], stop: Stop, ending: Callable[[], list[T]]) -> AsyncIterator[T]:
    """``events`` until ``stop`` is set: then the step in flight (a model call, a tool run) is cancelled and
    ``ending()`` closes the stream (its API's terminal events)."""
    iterator = aiter(events)
    stopped = asyncio.ensure_future(stop.requested.wait())
    try:
        while True:
            step = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({step, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if step in done:
                try:
                    item = step.result()
                except StopAsyncIteration:
                    return
                yield item
                continue
            step.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await step
            logger.info("a running turn was stopped by its client")
            for item in ending():
                yield item
            return
    finally:
        stopped.cancel()
        close = getattr(iterator, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()


def stop_here(key: tuple[str, str]) -> bool:
    """Stop the turn of ``key`` if it runs in this process (the fast path: no store round trip)."""
    stop = STOPS.get(key)
    if stop is None:
        return False
    stop()
    return True
