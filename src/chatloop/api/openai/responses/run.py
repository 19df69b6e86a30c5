"""Running a ``/v1/responses`` turn: the request read and checked (``checked``: the body, what it keeps and
continues from, the turn, its chain, its MCP servers, the compaction it starts with), then served (``respond``):
streamed or not, stored or not, journaled when a stored stream (any copy can follow it). The client's request and a
background worker's run the same code; only the client's may be queued (``api.openai.responses.endpoint``).

Usage::

    asked = await checked(request)             # a 4xx or 503 before any model call
    return await respond(request, asked)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.items.mcp import listed_items
from chatloop.api.openai.responses import journaled, stored
from chatloop.api.openai.responses.mcp_servers import client_rules
from chatloop.api.openai.responses.render import ResponsesRenderer, echo_of
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.openai.responses.turn import turn_of
from chatloop.api.turns import approvals
from chatloop.api.turns.checks import read_body, refuse_unsupported
from chatloop.api.turns.serve import budgeted, observed_by, serve_turn, turn_events
from chatloop.config import MCPServerConfig
from chatloop.engine import TurnRequest
from chatloop.providers.chain import FallbackChain

if TYPE_CHECKING:
    from chatloop.api.items.objects import CompactionItem, McpListTools
    from chatloop.api.openai.responses.objects import FinishedResponse, ResponseEcho


@dataclass
class Asked:
    """A checked ``/v1/responses`` request: what it asks for, and what it keeps and continues from."""

    body: ResponsesBody
    keeping: stored.Keeping
    turn: TurnRequest
    model: FallbackChain
    servers: list[MCPServerConfig]
    compacted: list[CompactionItem]
    echo: ResponseEcho


async def checked(request: Request) -> Asked:
    """The request read, its history read and every check passed (a 4xx or 503 before any model call otherwise)."""
    ctx = RequestContext.of(request)
    body = await read_body(request, ResponsesBody)
    refuse_unsupported(body)
    keeping = await stored.prepare(request, body)
    turn, model, servers, compacted = await turn_of(ctx, body, keeping.history)
    echo = echo_of(body, model.name, keeping.store is not None, keeping.conversation_id)
    return Asked(body, keeping, turn, model, servers, compacted, echo)


async def respond(request: Request, asked: Asked) -> Response:
    """The turn run and answered: its tools (the request's MCP servers' too), the approvals it waits for, the
    caller's budget, then the ``response`` or its event stream, kept as the request asks."""
    ctx = RequestContext.of(request)
    runtime, body, keeping, turn, model = ctx.runtime, asked.body, asked.keeping, asked.turn, asked.model
    rid, echo = ctx.request_id, asked.echo
    mcp = await runtime.tools.mcp_for_turn(ctx.deadline, asked.servers)
    registry = runtime.tools.registry().with_tools(mcp.tools, mcp.skipped)
    await approvals.ask_for(ctx, turn, registry, mcp.tools, client_rules(body.tools), asked.servers)
    # The output opens with these: the compaction the turn starts with, then what each request server offered.
    listed: list[McpListTools | CompactionItem] = [*asked.compacted, *listed_items(asked.servers, mcp)]
    metered = await budgeted(ctx, turn, model, registry)
    events = turn_events(ctx, turn, model, registry, keeping.conversation_id, metered=metered)

    async def keep(response: FinishedResponse, sent: list[dict[str, object]]) -> FinishedResponse:
        return await stored.save(keeping, request, body, response, sent)

    if body.stream and keeping.store is not None and keeping.owner is not None:
        # Stored: the turn runs to its end if the client goes away, journaled so any copy can follow it.
        def renderer_for(listener: Callable[[dict[str, object]], None]) -> ResponsesRenderer:
            return ResponsesRenderer(rid, echo, keep, listener, listed)

        return await journaled.serve(request, body, keeping, renderer_for, events)
    if body.stream:
        # Unstored, but a conversation still gets the turn's items (``store`` is about the response object only),
        # as a JSON answer's does.
        appends = keep if keeping.conversation_id is not None else None
        renderer = ResponsesRenderer(rid, echo, appends, listed=listed)
        return await serve_turn(ctx, renderer, events, stream=True)
    renderer = ResponsesRenderer(rid, echo, keep, listed=listed, stream=False)
    # Not streamed, the response is still built from the events (its items), not from the summary alone.
    return await serve_turn(ctx, renderer, observed_by(renderer.output.feed, events), stream=False)
