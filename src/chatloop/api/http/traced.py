"""A turn traced as the request that asked for it: the one hook of the API layer into ``chatloop.tracing``.

What the trace knows of the request (its id, the propagation headers, the Lambda invocation's X-Ray header, the
deadline, whether to flush before the response ends) is read here, from the request's context, into a
``tracing.scope.TurnScope``; the tracing package knows no HTTP.

Usage (``api/turns/serve.py``)::

    events = traced_if_enabled(ctx, chain, lambda chain: run_turn(turn, chain, registry, deadline), conversation_id)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from chatloop import tracing
from chatloop.api.http.context import RequestContext
from chatloop.config import from_environment

if TYPE_CHECKING:
    from chatloop.engine.events import Event
    from chatloop.providers.chain import FallbackChain

PROPAGATION_HEADERS = ("traceparent", "tracestate", "x-amzn-trace-id")


def traced_if_enabled(
    ctx: RequestContext,
    chain: FallbackChain,
    run: Callable[[FallbackChain], AsyncIterator[Event]],
    conversation_id: str | None = None,
) -> AsyncIterator[Event]:
    """``run(chain)``, traced when tracing is on (an exporter configured), as it is otherwise. On Lambda (either
    mode) the spans are flushed before the turn's stream ends."""
    if not tracing.enabled(ctx.settings):
        return run(chain)
    from chatloop.tracing.scope import TurnScope  # a dataclass costs ~0.7 ms to define: not at import
    from chatloop.tracing.turn import trace_turn  # the SDK loads with the first traced turn

    scope = TurnScope(
        ctx.request_id,
        headers={k: v for k, v in _headers(ctx) if k in PROPAGATION_HEADERS},
        conversation_id=conversation_id,
        flush=ctx.in_lambda,
        deadline=ctx.deadline,
        lambda_trace_id=_lambda_trace_id(ctx),
    )
    return trace_turn(ctx.settings, scope, chain, run)


def _headers(ctx: RequestContext) -> list[tuple[str, str]]:
    """The connection's headers (none for a job's turn, which has no connection)."""
    return list(ctx.connection.headers.items()) if ctx.connection is not None else []


def _lambda_trace_id(ctx: RequestContext) -> str | None:
    """The invocation's X-Ray header: the Web Adapter's context (stream mode), else ``_X_AMZN_TRACE_ID``, which the
    Lambda runtime sets for each invocation (buffered mode)."""
    if ctx.invocation is not None:
        return ctx.invocation.xray_trace_id
    return from_environment("_X_AMZN_TRACE_ID") if ctx.in_lambda else None
