"""Running a ``/v1/responses`` turn: the Responses API's door into the turn pipeline (``api.turns.pipeline``). Its
input read with what it keeps and continues from (``prepare``: ``stored.prepare``, then ``turn.plan_of``), the
approvals it asks for in items, and its answer (``serve``): streamed or not, stored or not, journaled when a stored
stream (any copy can follow it). A client's request and a background job run the same door; only the client's may
be queued (``later``: ``api.openai.responses.endpoint``).

Usage::

    return await run_door(request, ResponsesDoor(later=queued))        # a client's request
    await run_door(ctx.request, ResponsesDoor(), body)                  # a background job's turn, run now
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.items.mcp import listed_items
from chatloop.api.openai.responses import journaled, stored
from chatloop.api.openai.responses.render import ResponsesRenderer, echo_of
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.openai.responses.turn import ResponsesPlan, plan_of
from chatloop.api.turns.admission import Admission
from chatloop.api.turns.pipeline import Admitted, Door
from chatloop.api.turns.serve import observed_by, serve_turn

if TYPE_CHECKING:
    from chatloop.api.items.objects import CompactionItem, McpListTools
    from chatloop.api.openai.responses.objects import FinishedResponse, ResponseEcho
    from chatloop.engine import Event, TurnRequest
    from chatloop.providers.chain import FallbackChain

Later = Callable[
    [Request, RequestContext, ResponsesPlan, "TurnRequest", "FallbackChain", Admission], Awaitable[Response]
]
"""How a background request is queued instead of run (``endpoint.queued``)."""
Listener = Callable[[dict[str, object]], None]
"""Told of each stream event's data as it is framed."""


def _told(first: Listener, second: Listener | None) -> Listener:
    """One listener telling both."""
    if second is None:
        return first

    def both(event: dict[str, object]) -> None:
        first(event)
        second(event)

    return both


def echo(plan: ResponsesPlan, model: FallbackChain) -> ResponseEcho:
    """The request's settings as its response repeats them."""
    keeping = plan.keeping
    return echo_of(plan.body, model.name, keeping.store is not None, keeping.conversation_id)


class ResponsesDoor(Door[ResponsesBody, ResponsesPlan]):
    """/v1/responses in the turn pipeline. ``later``: queues a ``background`` request (a client's); None runs
    every turn now (a background job's, whose request was queued)."""

    schema = ResponsesBody
    approvals = "ask"
    lists_servers = True

    def __init__(self, later: Later | None = None, listener: Listener | None = None) -> None:
        self.later = later
        self.listener = listener
        """Told of every stream event as it is framed (WebSocket mode sends them as messages: ``api.websocket``)."""

    async def prepare(
        self, request: Request, ctx: RequestContext, body: ResponsesBody, admission: Admission
    ) -> ResponsesPlan:
        keeping = await stored.prepare(request, body)
        return await plan_of(ctx, body, keeping, admission, queues=self._queues(body))

    def _queues(self, body: ResponsesBody) -> bool:
        return bool(body.background) and self.later is not None

    async def queue(
        self,
        request: Request,
        ctx: RequestContext,
        plan: ResponsesPlan,
        turn: TurnRequest,
        model: FallbackChain,
        admission: Admission,
    ) -> Response | None:
        if self.later is None or not self._queues(plan.body):
            return None
        return await self.later(request, ctx, plan, turn, model, admission)

    async def serve(
        self,
        request: Request,
        ctx: RequestContext,
        plan: ResponsesPlan,
        admitted: Admitted,
        events: AsyncIterator[Event],
    ) -> Response:
        """The ``response`` or its event stream, kept as the request asks."""
        body, keeping = plan.body, plan.keeping
        rid, echoed = ctx.request_id, echo(plan, admitted.model)
        # The output opens with these: the compaction the turn starts with, then what each request server offered.
        servers = listed_items(plan.servers, admitted.mcp) if admitted.mcp is not None else []
        listed: list[McpListTools | CompactionItem] = [*plan.compacted, *servers]

        async def keep(response: FinishedResponse, sent: list[dict[str, object]]) -> FinishedResponse:
            return await stored.save(keeping, request, body, response, sent)

        if body.stream and keeping.store is not None and keeping.owner is not None:
            # Stored: the turn runs to its end if the client goes away, journaled so any copy can follow it.
            def renderer_for(journal: Listener) -> ResponsesRenderer:
                return ResponsesRenderer(rid, echoed, keep, _told(journal, self.listener), listed)

            return await journaled.serve(request, body, keeping, renderer_for, events)
        if body.stream:
            # Unstored, but a conversation still gets the turn's items (``store`` is about the response object
            # only), as a JSON answer's does.
            appends = keep if keeping.conversation_id is not None else None
            renderer = ResponsesRenderer(rid, echoed, appends, self.listener, listed)
            return await serve_turn(ctx, renderer, events, stream=True)
        renderer = ResponsesRenderer(rid, echoed, keep, listed=listed, stream=False)
        # Not streamed, the response is still built from the events (its items), not from the summary alone.
        return await serve_turn(ctx, renderer, observed_by(renderer.output.feed, events), stream=False)
