"""OpenTelemetry GenAI spans and metrics for every turn, model call, tool run and decision.

Off unless an OTLP exporter is configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT``, read by
``Settings``): then this module is all that loads, and it imports nothing of OpenTelemetry (cold start unchanged). On,
the turn's typed events become spans (``turn.TurnTrace``), each model of the turn's fallback chain is wrapped in a
``model.TracedModel`` (one ``chat {model}`` CLIENT span per call, a fallback being a failed call followed by the next),
and ``flush()`` sends what is buffered before a Lambda invocation ends.

Usage (``api/turns/serve.py``, the API layer's one hook)::

    events = traced_if_enabled(ctx, chain, lambda chain: run_turn(turn, chain, registry, deadline), conversation_id)

    # the engine alone (tests): a scope (``scope.TurnScope``) says what the trace knows of the request
    events = traced_turn(settings, TurnScope("req-1", headers={"traceparent": ...}), chain, run)
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING

from chatloop.config import Settings, from_environment

if TYPE_CHECKING:
    from chatloop.api.http.context import RequestContext
    from chatloop.engine.events import Event
    from chatloop.providers.chain import FallbackChain
    from chatloop.tracing.scope import TurnScope

__all__ = ["enabled", "flush", "tool_trace_context", "traced_if_enabled", "traced_turn"]


_TOOL_RUNS: ContextVar[Mapping[tuple[str, str], Mapping[str, str]] | None] = ContextVar(
    "chatloop_tool_runs", default=None
)
"""The trace context of each traced tool run under way in this task, by (tool name, arguments): the turn's tracing
sets it as a run's span starts; the runs (in tasks of their own, which copy it) read it."""


def tool_run_key(name: str, arguments: object) -> tuple[str, str]:
    """What tells one run of a batch from another: the engine runs one call per tool and arguments."""
    return name, json.dumps(arguments, sort_keys=True, default=str)


def tool_trace_context(name: str, arguments: Mapping[str, object]) -> dict[str, str]:
    """The W3C trace context (``traceparent``) of the run of ``name`` with ``arguments`` under way, for a tool that
    calls a server (an MCP ``tools/call`` carries it in ``params._meta``); empty when the turn is not traced."""
    runs = _TOOL_RUNS.get()
    return dict(runs.get(tool_run_key(name, arguments), {})) if runs else {}


_INSTALLED: list[bool] = [False]
"""Set while providers installed in-process (a test, the bench) trace every turn (``setup.install``)."""


def enabled(settings: Settings) -> bool:
    """Whether turns are traced: an exporter is configured, or providers were installed in-process."""
    return _INSTALLED[0] or bool(settings.otel_traces_endpoint())


def traced_turn(
    settings: Settings,
    scope: TurnScope,
    chain: FallbackChain,
    run: Callable[[FallbackChain], AsyncIterator[Event]],
) -> AsyncIterator[Event]:
    """``run(chain)``'s events, the turn traced: call only when ``enabled(settings)``."""
    from chatloop.tracing.turn import trace_turn  # the SDK loads with the first traced turn

    return trace_turn(settings, scope, chain, run)


def traced_if_enabled(
    ctx: RequestContext,
    chain: FallbackChain,
    run: Callable[[FallbackChain], AsyncIterator[Event]],
    conversation_id: str | None = None,
) -> AsyncIterator[Event]:
    """``run(chain)``, traced when tracing is on (an exporter configured), as it is otherwise: the one hook of the
    API layer. On Lambda (either mode) the spans are flushed before the turn's stream ends."""
    if not enabled(ctx.settings):
        return run(chain)
    from chatloop.tracing.scope import TurnScope  # a dataclass costs ~0.7 ms to define: not at import

    scope = TurnScope(
        ctx.request_id,
        headers={k: v for k, v in ctx.request.headers.items() if k in _PROPAGATION_HEADERS},
        conversation_id=conversation_id,
        flush=ctx.in_lambda,
        deadline=ctx.deadline,
        lambda_trace_id=_lambda_trace_id(ctx),
    )
    return traced_turn(ctx.settings, scope, chain, run)


def _lambda_trace_id(ctx: RequestContext) -> str | None:
    """The invocation's X-Ray header: the Web Adapter's context (stream mode), else ``_X_AMZN_TRACE_ID``, which the
    Lambda runtime sets for each invocation (buffered mode)."""
    if ctx.invocation is not None:
        return ctx.invocation.xray_trace_id
    return from_environment("_X_AMZN_TRACE_ID") if ctx.in_lambda else None


_PROPAGATION_HEADERS = ("traceparent", "tracestate", "x-amzn-trace-id")


def flush() -> None:
    """Export what is buffered now (nothing to do, and nothing imported, when nothing was ever traced)."""
    setup = sys.modules.get("chatloop.tracing.setup")
    if setup is not None:
        setup.flush_all()
