"""A stored, streamed ``/v1/responses`` turn as it runs: the Responses API's side of the one running turn
(``api.runs.turn.response_turn``): journaled, run to its end whether or not its client stays, stoppable when it is a
background one (its cancel request read from the store), and its record left with its final status however it ends.

Usage (``api.openai.responses.run``)::

    return await serve(request, body, keeping, lambda listener: ResponsesRenderer(..., listener), events)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext, response_id
from chatloop.api.openai.responses.render import ResponsesRenderer
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.openai.responses.stored import Keeping, input_items
from chatloop.api.runs.turn import response_turn
from chatloop.api.turns.serve import serve_turn
from chatloop.engine.events import Event, TurnError


async def serve(
    request: Request,
    body: ResponsesBody,
    keeping: Keeping,
    renderer_for: Callable[[Callable[[dict[str, object]], None]], ResponsesRenderer],
    events: AsyncIterator[Event],
) -> Response:
    ctx = RequestContext.of(request)
    store, owner = ctx.runtime.stores.conversations(), keeping.owner
    if owner is None:
        raise TypeError("a journaled response is kept for a caller")
    rid = response_id(ctx.request_id)
    worker = ctx.job is not None
    running = response_turn(
        store,
        owner,
        rid,
        background=worker,
        inputs=lambda: input_items(body),
        deadline=ctx.write_deadline,
        settings=ctx.settings,
    )
    keeping.journal = running.journal
    if worker:  # only a background response can be cancelled (OpenAI)
        events = running.stoppable(events, lambda: [TurnError("cancelled", "the response was cancelled")])
    if running.journal is None:
        raise TypeError("a stored response's turn is journaled")
    renderer = renderer_for(running.journal.add)
    return await serve_turn(ctx, renderer, events, stream=True, keep_running=running.run)
