"""WebSocket mode of the Responses API (``wss://…/v1/responses``): ``session.answer`` answers one client message
on a socket, whichever transport carries it (``session``: transport-neutral; ``messages``: client events and error
events; ``door``: the Responses door over a socket; ``route``: the local Starlette route under uvicorn). The Lambda
transport (API Gateway's WebSocket API) is built on ``session`` too. The cheap checks ``src/app.py`` asks of
every Lambda event live here (``handles``), so ``import app`` does not load the transport's event reader
(``apigw``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

Kind = Literal["connect", "message", "disconnect"]
EVENT_TYPES: dict[str, Kind] = {"CONNECT": "connect", "MESSAGE": "message", "DISCONNECT": "disconnect"}
WORKER_KEY = "chatloop_websocket"
"""A turn's asynchronous invocation (``lambda_transport``): ``{"chatloop_websocket": {"connection_id", "caller",
"endpoint", "request_id", "job", "message"}}``, ``message`` the client's ``response.create``, its secrets sealed."""


def is_websocket_event(event: object) -> bool:
    """Whether a Lambda event comes from an API Gateway WebSocket API (cheap: ``src/app.py`` asks it first)."""
    if not isinstance(event, Mapping):
        return False
    context = event.get("requestContext")
    return isinstance(context, Mapping) and context.get("eventType") in EVENT_TYPES


def is_worker_event(event: object) -> bool:
    """Whether a Lambda event is this function's own asynchronous invocation of a WebSocket turn."""
    return (
        isinstance(event, Mapping)
        and isinstance(event.get(WORKER_KEY), Mapping)
        and "requestContext" not in event  # a client's event through an API never is
    )


def handles(event: object) -> bool:
    """Whether an event is WebSocket mode's (a route's, or a turn's invocation): ``src/app.py`` asks it first."""
    return is_websocket_event(event) or is_worker_event(event)
