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
from typing import TYPE_CHECKING

import anyio

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.items.store import store_errors
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.turns.checks import body_of
from chatloop.api.turns.pipeline import run_door
from chatloop.api.websocket.door import SocketDoor
from chatloop.api.websocket.messages import ClientEvent, error_event, read_event
from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.observability import logger

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
    claimed: Callable[[], None] | None = None,
) -> None:
    """Answers one client message: a ``response.create`` (the POST /v1/responses body's fields; ``stream``
    implicit, ``background`` refused, optional ``stream_id``) runs one turn through the one pipeline and sends its
    stream events; anything wrong is one spec ``error`` event. Returns when that response has ended (its terminal
    event sent). ``claimed`` is called once the message has taken its lane or been refused one (or failed before):
    a transport that reads messages in order lets the next one try its claim only then."""
    create: ClientEvent | None = None
    try:
        create = read_event(message, runtime.settings)
        with store_errors():  # the store failing (the lane's claim, the memory) is the HTTP route's 503
            await _run(runtime, socket, create, send, deadline, request_id, claimed or _nothing)
    except RequestError as error:
        logger.info(
            "WebSocket message refused",
            extra={"status": error.status, "code": error.code, "param": error.param},
        )
        await send(error_event(error, create.stream_id if create else None))
    except Exception:  # nothing ends the connection: the client hears of it as the HTTP route's 500
        logger.exception("unhandled error in a WebSocket message")
        failed = RequestError(500, "internal_error", "internal error")
        await send(error_event(failed, create.stream_id if create else None))


def _nothing() -> None:
    return None


async def _run(
    runtime: Runtime,
    socket: Socket,
    create: ClientEvent,
    send: Send,
    deadline: Deadline,
    request_id: str,
    claimed: Callable[[], None],
) -> None:
    """The response on its lane: claimed for the turn (an error while another runs there), given back as its
    terminal event goes out (or however it ends)."""
    settings = runtime.settings
    body = body_of(create.body, ResponsesBody)  # the POST's 400 for a bad body, before the lane is taken
    lane = Lane(runtime, socket.connection_id, create.stream_id or "")
    try:
        taken = await lane.claim(deadline)
    finally:
        claimed()
    if not taken:
        raise _in_flight(create.stream_id)
    # A context with no connection: what the handshake established and this message's own inputs.
    ctx = RequestContext(runtime, caller=socket.caller, request_id=request_id, deadline=deadline)
    try:
        door = SocketDoor(
            socket.connection_id,
            socket.caller,
            send,
            create.stream_id,
            ttl_seconds=settings.websocket_max_connection_seconds,
            ending=lane.release,
        )
        await run_door(ctx, door, body)
    finally:
        # A socket gone mid-turn cancels the turn: its lane is given back still, and a turn admitted whose events
        # never ran gives its budget back here (on HTTP the RateLimitHeaders middleware does; a socket has none).
        with anyio.CancelScope(shield=True):
            try:
                await lane.release()
            finally:
                if ctx.turn_budget is not None and not ctx.turn_started:
                    await ctx.turn_budget.finish()


class Lane:
    """One response's hold on its lane of the connection (``store.connections``' claim), given back once: after
    that the lane may already be the next response's."""

    def __init__(self, runtime: Runtime, connection_id: str, stream_id: str) -> None:
        self.connections = runtime.stores.state().connections
        self.store_seconds = runtime.settings.conversation_store_timeout_seconds
        self.connection_id, self.stream_id = connection_id, stream_id
        self.held = False

    async def claim(self, deadline: Deadline) -> bool:
        ttl = int(deadline.remaining()) + LANE_MARGIN_SECONDS
        store_time = deadline.earliest(self.store_seconds)
        self.held = await self.connections.claim(self.connection_id, self.stream_id, ttl, store_time)
        return self.held

    async def release(self) -> None:
        if self.held:
            self.held = False
            await self.connections.release(
                self.connection_id, self.stream_id, Deadline.after(self.store_seconds)
            )


def _in_flight(stream_id: str | None) -> RequestError:
    where = f"on stream_id {stream_id!r}" if stream_id is not None else "on this connection"
    return RequestError(
        400,
        "response_already_in_flight",
        f"a response is already running {where}: wait for its terminal event, or name another stream_id "
        "to run responses side by side",
    )
