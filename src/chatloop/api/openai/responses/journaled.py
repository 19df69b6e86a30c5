"""A stored, streamed ``/v1/responses`` turn as it runs: journaled (``api.runs.journal``), run to its end whether or not
its client stays (``api.runs.running``), stoppable when it is a background one (its cancel request read from the store),
and its record left with its final status however it ends.

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
from chatloop.api.runs.journal import Journal, response_appender
from chatloop.api.runs.record import end_run, watcher
from chatloop.api.runs.running import Stop, Tracked, run_to_the_end, stoppable
from chatloop.api.runs.webhooks import notify
from chatloop.api.turns.serve import serve_turn
from chatloop.engine.events import Event, TurnError
from chatloop.jsontypes import json_object
from chatloop.observability import logger
from chatloop.store.model import StoreUnavailable
from chatloop.store.runs import RunStatus


async def serve(
    request: Request,
    body: ResponsesBody,
    keeping: Keeping,
    renderer_for: Callable[[Callable[[dict[str, object]], None]], ResponsesRenderer],
    events: AsyncIterator[Event],
) -> Response:
    ctx = RequestContext.of(request)
    store, owner = ctx.runtime.conversations(), keeping.owner
    if owner is None:
        raise TypeError("a journaled response is kept for a caller")
    rid = response_id(ctx.request_id)
    worker = ctx.job is not None

    async def begin(first: dict[str, object]) -> None:  # the record, in_progress, before the first events
        response = first.get("response")
        if isinstance(response, dict):
            await store.create_response(owner, json_object(response), input_items(body), ctx.write_deadline())

    # A background turn's record was made when it was queued, with response.queued as event 0.
    append = response_appender(store, owner, rid)
    journal = Journal(append, rid, deadline=ctx.write_deadline, begin=None if worker else begin)
    if worker:
        journal.offset = 1
    keeping.journal = journal
    stop = Stop()
    if worker:
        events = stoppable(events, stop, lambda: [TurnError("cancelled", "the response was cancelled")])

    async def end(stop: Stop) -> None:
        await journal.close()
        status = await _settle_record(ctx, owner, rid, journal)
        if worker:
            await end_run(store, owner, rid, rid, status)
            await notify(ctx.settings, rid, status)

    tracked = Tracked(
        (owner, rid), stop, watch=watcher(store, owner, rid, rid, begin=False) if worker else None, end=end
    )
    renderer = renderer_for(journal.add)
    return await serve_turn(
        ctx,
        renderer,
        events,
        stream=True,
        keep_running=lambda chunks: run_to_the_end(chunks, tracked=tracked),
    )


async def _settle_record(ctx: RequestContext, owner: str, rid: str, journal: Journal) -> RunStatus:
    """The record's final status: what the terminal event says; a failed or cancelled turn (which ``keep`` does not
    store) has its record take that response; no terminal event at all is a failure."""
    terminal = journal.terminal
    response = terminal.get("response") if terminal is not None else None
    status = response.get("status") if isinstance(response, dict) else None
    final: RunStatus = "failed"
    if status == "completed" or status == "incomplete" or status == "cancelled":
        final = status
    if terminal is None or terminal.get("type") == "response.failed":
        conversations = ctx.runtime.conversations()
        try:
            stored = await conversations.get_response(owner, rid, ctx.write_deadline())
            if stored is not None:
                body = {**stored.body, **(response if isinstance(response, dict) else {}), "status": final}
                await conversations.update_response(owner, rid, json_object(body), [], ctx.write_deadline())
        except StoreUnavailable as error:
            logger.warning(f"response {rid}: its end ({final}) was not stored: {error}")
    return final
