"""``RateLimitHeaders``: the ASGI middleware that puts an admitted turn's ``x-ratelimit-*`` headers on its response
and, just before the response's last bytes go, gives its budget back (its concurrent-turn slot, an unused
reservation).

Light on purpose: every app loads it, and the budget machinery (``api/budgets.py``) only loads when a BUDGET_* limit
is set; it finds the turn's budget where ``budgets.admit`` left it in the ASGI scope.

Usage (in the app)::

    Starlette(routes=..., middleware=[Middleware(RateLimitHeaders)])
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

TURN_KEY = "chatloop.budget"
"""The admitted turn's budget in the ASGI scope (``budgets.TurnBudget``)."""


@runtime_checkable
class AdmittedTurn(Protocol):
    headers: dict[str, str]

    async def finish(self) -> None: ...


class RateLimitHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        finished = False

        async def finish() -> None:
            nonlocal finished
            turn = scope.get(TURN_KEY)
            if isinstance(turn, AdmittedTurn) and not finished:
                finished = True
                await turn.finish()

        async def with_headers(message: Message) -> None:
            turn = scope.get(TURN_KEY)
            if message["type"] == "http.response.start" and isinstance(turn, AdmittedTurn):
                headers = list(message.get("headers") or [])
                present = {name.lower() for name, _ in headers}
                headers += [
                    (k.encode(), v.encode()) for k, v in turn.headers.items() if k.encode() not in present
                ]
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                # Before the last bytes go: once its response is sent, Lambda may freeze the container (stream mode).
                await finish()
            await send(message)

        try:
            await self.app(scope, receive, with_headers)
        finally:
            await finish()  # a response that never ended (an error, a client gone)
