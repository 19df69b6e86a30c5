"""WebSocket mode's core, whichever transport carries the socket: ``answer`` takes one client message and answers
it on the socket. Locally the Starlette route (``api.websocket.route``) calls it for each message; on Lambda the
API Gateway WebSocket API's ``$default`` route does (``api.websocket.lambda_*``), with a ``Send`` that posts to the
connection.

A ``response.create`` (``api.websocket.messages``) runs one turn through the one pipeline
(``api.turns.pipeline.run_door`` with the Responses API's door, ``api.websocket.door.SocketDoor``) and its stream
events are sent as they come; anything wrong is one ``error`` event carrying the POST's own error (the same code,
message and param), and the socket stays usable. One response runs at a time on a connection unless the client
names a ``stream_id`` (a lane): a second ``response.create`` while one runs is an ``error``
(``response_already_in_flight``), across copies, through the store's lane claim (``store.connections``).

Usage::

    socket = Socket(connection_id="conn_…", caller=caller_of(handshake))
    await answer(runtime, socket, text, send, deadline=Deadline.after(28), request_id=str(uuid.uuid4()))
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from chatloop.api.http.context import SCOPE_KEY, RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.turns.checks import body_of
from chatloop.api.turns.pipeline import run_door
from chatloop.api.websocket.door import SocketDoor
from chatloop.api.websocket.messages import ClientEvent, error_event, read_event
from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.observability import logger
from chatloop.store.model import StoreUnavailable

if TYPE_CHECKING:
    from chatloop.api.runtime import Runtime

__all__ = ["Send", "Socket", "answer"]

Send = Callable[[JSONObject], Awaitable[None]]
"""One server event to the client (a dict that becomes one text message)."""
LANE_MARGIN_SECONDS = 30
"""A lane's claim outlives its turn's deadline by this much (a copy that died mid-turn frees it then)."""


@dataclass(frozen=True)
class Socket:
    """One WebSocket connection, whichever transport carries it."""

    connection_id: str
    """API Gateway's ``connectionId`` on Lambda; a server-made id locally."""
    caller: str | None
    """The caller established at connect time (``caller_of`` on the handshake / ``$connect``)."""


async def answer(
    runtime: Runtime,
    socket: Socket,
    message: str | bytes,
    send: Send,
    *,
    deadline: Deadline,
    request_id: str,
) -> None:
    """Answers one client message: a ``response.create`` (the POST /v1/responses body's fields; ``stream``
    implicit, ``background`` refused, optional ``stream_id``) runs one turn through the one pipeline and sends its
    stream events; anything wrong is one spec ``error`` event. Returns when that response has ended (its terminal
    event sent)."""
    create: ClientEvent | None = None
    try:
        create = read_event(message, runtime.settings)
        await _run(runtime, socket, create, send, deadline, request_id)
    except RequestError as error:
        logger.info(
            "WebSocket message refused",
            extra={"status": error.status, "code": error.code, "param": error.param},
        )
        await send(error_event(error, create.stream_id if create else None))
    except StoreUnavailable as error:  # the lane's claim: the store failed
        logger.warning(f"conversation store unavailable: {error}")
        refused = RequestError(503, "store_unavailable", "the conversation store is unavailable; try again")
        await send(error_event(refused, create.stream_id if create else None))


async def _run(
    runtime: Runtime, socket: Socket, create: ClientEvent, send: Send, deadline: Deadline, request_id: str
) -> None:
    """The response on its lane: claimed for the turn (an error while another runs there), given back after."""
    settings = runtime.settings
    body = body_of(create.body, ResponsesBody)  # the POST's 400 for a bad body, before the lane is taken
    lane = create.stream_id or ""
    connections = runtime.stores.conversations().connections
    claim_deadline = deadline.earliest(settings.conversation_store_timeout_seconds)
    ttl = int(deadline.remaining()) + LANE_MARGIN_SECONDS
    if not await connections.claim(socket.connection_id, lane, ttl, claim_deadline):
        raise _in_flight(create.stream_id)
    try:
        door = SocketDoor(
            socket.connection_id,
            socket.caller,
            send,
            create.stream_id,
            ttl_seconds=settings.websocket_max_connection_seconds,
        )
        await run_door(turn_request(runtime, socket, deadline, request_id), door, body)
    finally:
        await connections.release(
            socket.connection_id, lane, Deadline.after(settings.conversation_store_timeout_seconds)
        )


def _in_flight(stream_id: str | None) -> RequestError:
    where = f"on stream_id {stream_id!r}" if stream_id is not None else "on this connection"
    return RequestError(
        400,
        "response_already_in_flight",
        f"a response is already running {where}: wait for its terminal event, or name another stream_id "
        "to run responses side by side",
    )


def turn_request(runtime: Runtime, socket: Socket, deadline: Deadline, request_id: str) -> Request:
    """The request one ``response.create`` runs as: a ``POST /v1/responses`` with no headers and no body (what the
    parts that read a request see), whose context carries the socket's caller, the turn's deadline and its request
    id (the response's id is ``resp_`` + it)."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/responses",
        "raw_path": b"/v1/responses",
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": None,
        "server": None,
        "app": SimpleNamespace(state=SimpleNamespace(runtime=runtime)),
    }
    request = Request(scope)
    context = scope[SCOPE_KEY] = RequestContext(request)
    # Worked out once per request elsewhere, from the request; here the socket and the turn say them.
    context.__dict__.update(caller=socket.caller, deadline=deadline, request_id=request_id)
    return request
