"""``POST /v1/responses``: OpenAI's Responses API over the same turn as the other endpoints, through the turn
pipeline (``api.turns.pipeline``) and its door (``api.openai.responses.run``: its input read by ``turn``, its output
rendered by ``render``, stored and continued by ``stored``); a ``background`` request is queued instead, and a
worker runs it later as a job (``api.openai.responses.background``). The engine knows nothing of this API.

Usage (the route, in api/app.py)::

    Route("/v1/responses", idempotent(lazy("openai.responses.endpoint", "responses")), methods=["POST"])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.openai.responses.background import queue, queueable
from chatloop.api.openai.responses.run import ResponsesDoor, echo
from chatloop.api.turns.admission import Admission
from chatloop.api.turns.pipeline import run_door

if TYPE_CHECKING:
    from chatloop.api.openai.responses.turn import ResponsesPlan
    from chatloop.engine import TurnRequest
    from chatloop.providers.chain import FallbackChain


async def responses(request: Request) -> Response:
    """OpenAI's Responses API: the same turn as chat completions, rendered as a ``response``; stored, and continued
    from a stored response or a conversation, by ``api.openai.responses.stored``."""
    return await run_door(RequestContext.of(request), ResponsesDoor(later=queued))


async def queued(
    ctx: RequestContext,
    plan: ResponsesPlan,
    turn: TurnRequest,
    model: FallbackChain,
    admission: Admission,
) -> Response:
    """A background request queued: a worker runs it. Admitted as a plain turn is, before anything is queued (a 429
    now, not a record that fails later); if it is not queued after all, the admission gives back what it took."""
    queueable(plan.keeping)  # a 400 first: bad input is not counted
    await admission.queue_slot(turn, model, ctx.runtime.tools.registry())
    return await queue(ctx, plan.body, plan.keeping, echo(plan, model))
