"""``POST /v1/responses``: OpenAI's Responses API over the same turn as the other endpoints. The request is checked
and its turn run by ``api.openai.responses.run`` (its input read by ``turn``, its output rendered by ``render``,
stored and continued by ``stored``); a ``background`` request is queued instead, and a worker runs it later
(``api.openai.responses.background``). The engine knows nothing of this API.

Usage (the route, in api/app.py)::

    Route("/v1/responses", idempotent(lazy("openai.responses.endpoint", "responses")), methods=["POST"])
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.openai.responses.background import queue, queueable
from chatloop.api.openai.responses.run import checked, respond
from chatloop.api.turns.approvals import release
from chatloop.api.turns.serve import admitted_to_queue
from chatloop.api.turns.worker import is_worker


async def responses(request: Request) -> Response:
    """OpenAI's Responses API: the same turn as chat completions, rendered as a ``response``; stored, and continued
    from a stored response or a conversation, by ``api.openai.responses.stored``."""
    asked = await checked(request)
    if asked.body.background and not is_worker(request):  # queued: a worker runs it
        ctx = RequestContext.of(request)
        queueable(asked.keeping)  # a 400 first: bad input is not counted
        # Admitted as a plain turn is, before anything is queued: a 429 now, not a record that fails later.
        admitted = await admitted_to_queue(ctx, asked.turn, asked.model, ctx.runtime.tools.registry())
        try:
            return await queue(request, asked.body, asked.keeping, asked.echo)
        except Exception as error:  # not queued, or its worker not started: nothing ran, nothing stays held
            if admitted is not None:
                await admitted.finish()
            if isinstance(error, RequestError):  # the answers are not used up
                await release(ctx, asked.turn.approvals)
            raise
    return await respond(request, asked)
