"""Running a ``/v1/responses`` turn: the Responses API's door into the turn pipeline (``api.turns.pipeline``). Its
input read with what it keeps and continues from (``prepare``: ``stored.prepare``, then ``turn.plan_of``), the
approvals it asks for in items, and its answer (``serve``): streamed or not, stored or not, journaled when a stored
stream (any copy can follow it). A client's request and a background job run the same door; only the client's may
be queued (``later``: ``api.openai.responses.endpoint``).

Usage::

    return await run_door(RequestContext.of(request), ResponsesDoor(later=queued))   # a client's request
    await run_door(RequestContext.for_job(runtime, job), ResponsesDoor(), body)      # a background job's, run now
    async for event in door.serve_events(ctx, plan, admitted, events): ...           # a door of another transport
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.http.wire import sse_data
from chatloop.api.items.mcp import listed_items
from chatloop.api.openai.responses import journaled, stored
from chatloop.api.openai.responses.render import ResponsesRenderer, echo_of
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.openai.responses.turn import ResponsesPlan, plan_of
from chatloop.api.turns.admission import Admission
from chatloop.api.turns.pipeline import Admitted, Door
from chatloop.api.turns.serve import event_stream, observed_by, serve_turn, turn_chunks

if TYPE_CHECKING:
    from chatloop.api.items.objects import CompactionItem, McpListTools
    from chatloop.api.openai.responses.objects import FinishedResponse, ResponseEcho
    from chatloop.engine import Event, TurnRequest
    from chatloop.providers.chain import FallbackChain

Later = Callable[
    [RequestContext, ResponsesPlan, "TurnRequest", "FallbackChain", Admission], Awaitable[Response]
]
"""How a background request is queued instead of run (``endpoint.queued``)."""


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

    def __init__(self, later: Later | None = None) -> None:
        self.later = later

    async def prepare(self, ctx: RequestContext, body: ResponsesBody, admission: Admission) -> ResponsesPlan:
        keeping = await stored.prepare(ctx, body)
        return await plan_of(ctx, body, keeping, admission, queues=self._queues(body))

    def _queues(self, body: ResponsesBody) -> bool:
        return bool(body.background) and self.later is not None

    async def queue(
        self,
        ctx: RequestContext,
        plan: ResponsesPlan,
        turn: TurnRequest,
        model: FallbackChain,
        admission: Admission,
    ) -> Response | None:
        if self.later is None or not self._queues(plan.body):
            return None
        return await self.later(ctx, plan, turn, model, admission)

    async def serve(
        self,
        ctx: RequestContext,
        plan: ResponsesPlan,
        admitted: Admitted,
        events: AsyncIterator[Event],
    ) -> Response:
        """The ``response`` or its event stream, kept as the request asks."""
        if plan.body.stream:
            return event_stream(self._stream(ctx, plan, admitted, events), ctx)
        rendering = _Rendering(ctx, plan, admitted)
        renderer = ResponsesRenderer(
            rendering.rid, rendering.echoed, rendering.keep, listed=rendering.listed, stream=False
        )
        # Not streamed, the response is still built from the events (its items), not from the summary alone.
        return await serve_turn(ctx, renderer, observed_by(renderer.output.feed, events), stream=False)

    def serve_events(
        self,
        ctx: RequestContext,
        plan: ResponsesPlan,
        admitted: Admitted,
        events: AsyncIterator[Event],
    ) -> AsyncIterator[dict[str, object]]:
        """The turn's stream events as the dicts its SSE frames carry (redacted), kept and journaled as a streamed
        request's are, whatever the body's ``stream``: for a door that sends each event elsewhere (a WebSocket)."""
        return sse_data(self._stream(ctx, plan, admitted, events))

    def _stream(
        self, ctx: RequestContext, plan: ResponsesPlan, admitted: Admitted, events: AsyncIterator[Event]
    ) -> AsyncIterator[bytes]:
        body, keeping = plan.body, plan.keeping
        rendering = _Rendering(ctx, plan, admitted)
        rid, echoed, keep, listed = rendering.rid, rendering.echoed, rendering.keep, rendering.listed
        if keeping.store is not None and keeping.owner is not None:
            # Stored: the turn runs to its end if the client goes away, journaled so any copy can follow it.
            def renderer_for(listener: Callable[[dict[str, object]], None]) -> ResponsesRenderer:
                return ResponsesRenderer(rid, echoed, keep, listener, listed)

            return journaled.stream(ctx, body, keeping, renderer_for, events)
        # Unstored, but a conversation still gets the turn's items (``store`` is about the response object only),
        # as a JSON answer's does.
        appends = keep if keeping.conversation_id is not None else None
        return turn_chunks(ResponsesRenderer(rid, echoed, appends, listed=listed), events)


class _Rendering:
    """What every answer of one turn is rendered with: its id, the request's settings echoed, how it is kept, and
    the items its output opens with (the compaction it starts with, then what each request server offered)."""

    def __init__(self, ctx: RequestContext, plan: ResponsesPlan, admitted: Admitted) -> None:
        self.rid, self.echoed = ctx.request_id, echo(plan, admitted.model)
        servers = listed_items(plan.servers, admitted.mcp) if admitted.mcp is not None else []
        self.listed: list[McpListTools | CompactionItem] = [*plan.compacted, *servers]
        self.ctx, self.plan = ctx, plan

    async def keep(self, response: FinishedResponse, sent: list[dict[str, object]]) -> FinishedResponse:
        return await stored.save(self.plan.keeping, self.ctx, self.plan.body, response, sent)
