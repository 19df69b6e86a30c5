"""``X-Content-Type-Options: nosniff`` on every response the app sends: pages, assets, JSON, SSE, replays, and
errors that reflect client text (a 404 naming the path), so no browser ever sniffs a body into HTML or script.

One ASGI middleware rather than a header per route; ``error_response`` sets the header too, because Starlette sends
the 500 of an unhandled exception from outside every user middleware.

Usage (in the app)::

    Starlette(routes=..., middleware=[Middleware(NoSniff)])
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = (b"x-content-type-options", b"nosniff")


class NoSniff:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                if not any(name.lower() == HEADER[0] for name, _ in headers):
                    headers.append(HEADER)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_header)
