"""A stored, streamed ``/v1/responses`` turn as it runs: the Responses API's side of the one running turn
(``api.runs.turn.response_turn``): journaled, run to its end whether or not its client stays, stoppable when its run
was recorded before it started (a background one's: its cancel request read from the store), and its record left
with its final status however it ends.

Usage (``api.openai.responses.run``)::

    chunks = stream(ctx, body, keeping, lambda listener: ResponsesRenderer(..., listener), events)
    return event_stream(chunks, ctx)        # or sse_data(chunks): the events, for another transport
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from chatloop.api.http.context import RequestContext, response_id
from chatloop.api.openai.responses.render import ResponsesRenderer
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.openai.responses.stored import Keeping, input_items
from chatloop.api.runs.turn import response_turn
from chatloop.api.turns.serve import turn_chunks
from chatloop.engine.events import Event, TurnError


def stream(
    ctx: RequestContext,
    body: ResponsesBody,
    keeping: Keeping,
    renderer_for: Callable[[Callable[[dict[str, object]], None]], ResponsesRenderer],
    events: AsyncIterator[Event],
) -> AsyncIterator[bytes]:
    """The turn's stream (redacted SSE chunks), produced to its end by a task of its own and journaled; a turn
    whose run was recorded when it was queued (``ctx.prior.recorded``: a background one's) continues that record
    and can be cancelled."""
    store, owner = ctx.runtime.stores.conversations(), keeping.owner
    if owner is None:
        raise TypeError("a journaled response is kept for a caller")
    rid = response_id(ctx.request_id)
    recorded = ctx.prior.recorded
    running = response_turn(
        store,
        owner,
        rid,
        background=recorded,
        inputs=lambda: input_items(body),
        deadline=ctx.write_deadline,
        settings=ctx.settings,
    )
    keeping.journal = running.journal
    if recorded:  # only a background response can be cancelled (OpenAI)
        events = running.stoppable(events, lambda: [TurnError("cancelled", "the response was cancelled")])
    if running.journal is None:
        raise TypeError("a stored response's turn is journaled")
    renderer = renderer_for(running.journal.add)
    return turn_chunks(renderer, events, keep_running=running.run)
