"""One deadline per request, passed down to every model call and tool run.

Usage::

    deadline = Deadline.after(28.0)
    deadline.remaining()          # seconds left, never negative
    deadline.cap(5.0)             # min(5.0, remaining): a timeout that never outlives the request
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Deadline:
    at: float
    """A ``time.monotonic()`` instant."""

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + max(0.0, seconds))

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def cap(self, seconds: float) -> float:
        return max(0.0, min(seconds, self.remaining()))

    def earliest(self, seconds: float) -> Deadline:
        """This deadline, or ``seconds`` from now if that comes first."""
        return Deadline(min(self.at, time.monotonic() + seconds))

    def minus(self, seconds: float) -> Deadline:
        """An earlier deadline: used to keep a reserve for the final answer."""
        return Deadline(self.at - seconds)


async def until(
    deadline: Deadline, items: AsyncIterable[T], first: Deadline | None = None
) -> AsyncIterator[T]:
    """``items``, each awaited only until ``deadline`` (the first one until ``first``, when given); then
    ``TimeoutError``.

    Bounds each wait for the next item, never a block that contains a ``yield``: a timeout spanning yields would
    cancel whatever the consumer is doing at that moment (writing a response, say), far from the code that can
    handle it."""
    iterator = aiter(items)
    limit = first or deadline
    try:
        while True:
            try:
                item = await asyncio.wait_for(anext(iterator), timeout=limit.remaining())
            except StopAsyncIteration:
                return
            limit = deadline
            yield item
    finally:
        close = getattr(iterator, "aclose", None) or getattr(iterator, "close", None)
        if close is not None:
            result = close()
            if asyncio.iscoroutine(result):
                await result
