"""``SocketDoor``: the Responses API's door (``api.openai.responses.run.ResponsesDoor``) with WebSocket mode's two
differences, and nothing else: a ``previous_response_id`` is first looked up in the connection's own memory (so a
``store: false`` response can be continued, sending only the new input), and the stream's events go to the socket
as messages (each event's data, tagged with the request's ``stream_id``) instead of SSE frames. Everything else
(the checks, approvals, compaction, budgets, tracing, storing and journaling a ``store: true`` response) is the
HTTP route's, run by the one pipeline (``api.turns.pipeline.run_door``), and the events are the door's own
(``ResponsesDoor.serve_events``: the dicts its SSE frames carry, redacted as they leave).

Before a response's terminal event goes out, the connection remembers it (``store.connections``: every item of its
chain), so the client's next ``response.create`` can continue it at once, on whichever copy it reaches.

Usage (``api.websocket.session``)::

    await run_door(ctx, SocketDoor(connection_id, caller, send, stream_id, ttl_seconds=7200), body)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.items.store import store_errors
from chatloop.api.items.stored import as_input_items, stored_items
from chatloop.api.openai.responses import stored
from chatloop.api.openai.responses.run import ResponsesDoor
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.openai.responses.turn import ResponsesPlan, plan_of
from chatloop.api.turns.admission import Admission
from chatloop.api.turns.pipeline import Admitted
from chatloop.jsontypes import JSONObject, json_object
from chatloop.observability import logger
from chatloop.store.model import StoreUnavailable

if TYPE_CHECKING:
    from chatloop.engine import Event

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
Send = Callable[[JSONObject], Awaitable[None]]
"""One server event to the client (a dict that becomes one text message)."""


class SocketDoor(ResponsesDoor):
    """/v1/responses over a WebSocket connection: one ``response.create`` is one turn through the pipeline."""

    def __init__(
        self,
        connection_id: str,
        caller: str | None,
        send: Send,
        stream_id: str | None,
        *,
        ttl_seconds: int,
        ending: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(later=None)
        self.connection_id, self.caller, self.send = connection_id, caller, send
        self.stream_id, self.ttl_seconds = stream_id, ttl_seconds
        self.ending = ending
        """Called just before the terminal event goes out (the session gives the lane back: the client may send
        its next ``response.create`` as soon as it has that event)."""
        self.history: list[JSONObject] = []
        """The chain the turn continues (stored item shapes): what the connection remembers, with the turn's own."""
        self.body: ResponsesBody | None = None

    async def prepare(self, ctx: RequestContext, body: ResponsesBody, admission: Admission) -> ResponsesPlan:
        """The HTTP route's ``prepare``, but a ``previous_response_id`` this connection remembers is continued from
        its memory (``store`` or not); any other is read from the stored responses, as on HTTP (a 404 when there is
        none)."""
        self.body = body
        remembered = await self._recalled(ctx, body)
        if remembered is not None:  # the rest of the request decided as on HTTP, without the stored chain
            keeping = await stored.prepare(ctx, body.model_copy(update={"previous_response_id": None}))
            keeping.history = as_input_items(remembered)
            self.history = remembered
        else:
            keeping = await stored.prepare(ctx, body)
            self.history = [item.body for item in stored_items(keeping.history)]
        return await plan_of(ctx, body, keeping, admission, queues=False)

    async def _recalled(self, ctx: RequestContext, body: ResponsesBody) -> list[JSONObject] | None:
        if body.previous_response_id is None or body.conversation is not None:
            return None  # with a conversation it is the HTTP route's 400
        connections = ctx.runtime.stores.conversations().connections
        with store_errors():
            return await connections.recall(
                self.connection_id, self.caller, body.previous_response_id, ctx.store_deadline()
            )

    async def serve(
        self, ctx: RequestContext, plan: ResponsesPlan, admitted: Admitted, events: AsyncIterator[Event]
    ) -> Response:
        """The HTTP route's stream (kept and journaled as there, redacted as it leaves), each event sent as a
        message as it comes, tagged with the lane's ``stream_id``. Nothing is left to answer over HTTP."""
        async for event in self.serve_events(ctx, plan, admitted, events):
            if event.get("type") in TERMINAL:
                await self._remember(ctx, event)  # before the client can ask to continue it
                if self.ending is not None:
                    await self.ending()
            message = json_object(event)
            if self.stream_id is not None:
                message["stream_id"] = self.stream_id
            await self.send(message)
        return Response(status_code=204)

    async def _remember(self, ctx: RequestContext, terminal: dict[str, object]) -> None:
        """The response's chain kept in the connection's memory (logged, not fatal, when the store fails: a
        continuation then gets the not-found error)."""
        response = terminal.get("response")
        if not isinstance(response, dict) or self.body is None:
            return
        output = response.get("output")
        outputs = [json_object(o) for o in output if isinstance(o, dict)] if isinstance(output, list) else []
        inputs = [item.body for item in stored.input_items(self.body)]
        connections = ctx.runtime.stores.conversations().connections
        try:
            await connections.remember(
                self.connection_id,
                self.caller,
                str(response.get("id")),
                [*self.history, *inputs, *outputs],
                self.ttl_seconds,
                ctx.write_deadline(),
            )
        except StoreUnavailable as error:
            logger.warning(f"response {response.get('id')} not remembered by its connection: {error}")
