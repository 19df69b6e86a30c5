"""``X-Content-Type-Options: nosniff`` on every response the app sends: pages, assets, JSON, SSE, replays, and
errors that reflect client text (a 404 naming the path), so no browser ever sniffs a body into HTML or script.

One ASGI middleware rather than a header per route; ``error_response`` sets the header too, because Starlette sends
the 500 of an unhandled exception from outside every user middleware.

Usage (in the app)::

    Starlette(routes=..., middleware=[Middleware(NoSniff)])
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = (b"x-content-type-options", b"nosniff")


def headers_added(message: Message, extra: Iterable[tuple[bytes, bytes]]) -> Message:
    """``message`` (an ``http.response.start``) with each of ``extra``'s headers the response does not set itself:
    what a route set wins. The middlewares here (``NoSniff``, ``RateLimitHeaders``) put their headers on with it.

    >>> headers_added({"type": "http.response.start", "headers": [(b"X-A", b"1")]}, [(b"x-a", b"2"), (b"x-b", b"3")])
    {'type': 'http.response.start', 'headers': [(b'X-A', b'1'), (b'x-b', b'3')]}
    """
    headers = list(message.get("headers") or [])
    present = {name.lower() for name, _ in headers}
    headers += [(name, value) for name, value in extra if name not in present]
    return {**message, "headers": headers}


class NoSniff:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = headers_added(message, [HEADER])
            await send(message)

        await self.app(scope, receive, with_header)
