"""``RateLimitHeaders``: the ASGI middleware that puts an admitted turn's ``x-ratelimit-*`` headers on its response;
``given_back``: a metered turn's events, its budget given back (its concurrent-turn slot, an unused reservation) as
they end: a turn that outlives its response (a stored turn whose client left, a background worker's) holds its slot
until it ends, and one whose events never ran is given back as its response ends.

Light on purpose: every app loads it, and the budget machinery (``api/turns/budgets.py``) only loads when a BUDGET_* limit
is set; it finds the turn's budget where ``budgets.admit`` left it in the ASGI scope.

Usage (in the app)::

    Starlette(routes=..., middleware=[Middleware(RateLimitHeaders)])
"""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from typing import Any, Protocol, TypeVar, runtime_checkable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chatloop.api.http.nosniff import headers_added

TURN_KEY = "chatloop.budget"
"""The admitted turn's budget in the ASGI scope (``budgets.TurnBudget``)."""
STARTED = "chatloop.budget.started"
"""Set when the turn's events start: their end gives the budget back (``given_back``)."""


@runtime_checkable
class AdmittedTurn(Protocol):
    headers: dict[str, str]

    async def finish(self) -> None: ...

    async def give_back_unused(self) -> None:
        """What its first call's reservation left unused, given back now (its slot stays held)."""
        ...


T = TypeVar("T")


async def given_back(scope: MutableMapping[str, Any], events: AsyncIterator[T]) -> AsyncIterator[T]:
    """``events``, then the admitted turn's budget given back (``finish`` gives it back once)."""
    scope[STARTED] = True
    try:
        async for event in events:
            yield event
    finally:
        turn = scope.get(TURN_KEY)
        if isinstance(turn, AdmittedTurn):
            await turn.finish()


class RateLimitHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            turn = scope.get(TURN_KEY)
            if message["type"] == "http.response.start" and isinstance(turn, AdmittedTurn):
                message = headers_added(message, [(k.encode(), v.encode()) for k, v in turn.headers.items()])
            await send(message)

        try:
            await self.app(scope, receive, with_headers)
        finally:
            turn = scope.get(TURN_KEY)
            if isinstance(turn, AdmittedTurn) and not scope.get(
                STARTED
            ):  # its events never ran: nothing else will
                await turn.finish()
