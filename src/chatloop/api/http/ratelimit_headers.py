"""``RateLimitHeaders``: the ASGI middleware that puts an admitted turn's ``x-ratelimit-*`` headers on its response;
``given_back``: a metered turn's events, its budget given back (its concurrent-turn slot, an unused reservation) as
they end: a turn that outlives its response (a stored turn whose client left, a background worker's) holds its slot
until it ends, and one whose events never ran is given back as its response ends.

Light on purpose: every app loads it, and the budget machinery (``api/turns/budgets.py``) only loads when a BUDGET_* limit
is set; it finds the turn's budget where ``budgets.admit`` left it: on the request's context (``turn_budget``).

Usage (in the app)::

    Starlette(routes=..., middleware=[Middleware(RateLimitHeaders)])
"""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from typing import Any, TypeVar

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chatloop.api.http.context import SCOPE_KEY, AdmittedTurn, RequestContext
from chatloop.api.http.nosniff import headers_added

__all__ = ["AdmittedTurn", "RateLimitHeaders", "given_back"]


T = TypeVar("T")


async def given_back(ctx: RequestContext, events: AsyncIterator[T]) -> AsyncIterator[T]:
    """``events``, then the admitted turn's budget given back (``finish`` gives it back once)."""
    ctx.turn_started = True
    try:
        async for event in events:
            yield event
    finally:
        if ctx.turn_budget is not None:
            # shielded: a turn cancelled (its client gone) still gives its slot back now, not at the lease's end
            with anyio.CancelScope(shield=True):
                await ctx.turn_budget.finish()


def _context(scope: MutableMapping[str, Any]) -> RequestContext | None:
    """The request's context, when the app made one (a request that reached no endpoint has none)."""
    context = scope.get(SCOPE_KEY)
    return context if isinstance(context, RequestContext) else None


class RateLimitHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            context = _context(scope)
            turn = context.turn_budget if context is not None else None
            if message["type"] == "http.response.start" and turn is not None:
                message = headers_added(message, [(k.encode(), v.encode()) for k, v in turn.headers.items()])
            await send(message)

        try:
            await self.app(scope, receive, with_headers)
        finally:
            context = _context(scope)
            if context is not None and context.turn_budget is not None and not context.turn_started:
                await context.turn_budget.finish()  # its events never ran: nothing else will
