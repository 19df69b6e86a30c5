"""OpenTelemetry GenAI spans and metrics for every turn, model call, tool run and decision.

Off unless an OTLP exporter is configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT``, read by
``Settings``): then this module is all that loads, and it imports nothing of OpenTelemetry (cold start unchanged). On,
the turn's typed events become spans (``turn.TurnTrace``), each model of the turn's fallback chain is wrapped in a
``model.TracedModel`` (one ``chat {model}`` CLIENT span per call, a fallback being a failed call followed by the next),
and ``flush()`` sends what is buffered before a Lambda invocation ends.

This package's ``__init__`` is what every import of it runs (an MCP call reads ``tool_trace_context``), so it holds
only what needs nothing above it: whether turns are traced, the trace context of tool runs, and ``flush``. The API
layer's one hook is ``api/http/traced.traced_if_enabled``; the engine alone is traced by ``turn.trace_turn``.

Usage::

    if enabled(settings): ...                          # an exporter configured, or providers installed in-process
    headers = tool_trace_context("docs__search", {"q": "x"})   # the run's traceparent, for an MCP call
    flush()                                            # before a Lambda invocation ends
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from contextvars import ContextVar

from chatloop.config import Settings

__all__ = ["enabled", "flush", "mark_installed", "set_tool_trace_context", "tool_trace_context"]


_TOOL_RUNS: ContextVar[Mapping[tuple[str, str], Mapping[str, str]] | None] = ContextVar(
    "chatloop_tool_runs", default=None
)
"""The trace context of each traced tool run under way in this task, by (tool name, arguments): the turn's tracing
sets it as a run's span starts; the runs (in tasks of their own, which copy it) read it."""


def _run_key(name: str, arguments: object) -> tuple[str, str]:
    """What tells one run of a batch from another: the engine runs one call per tool and arguments."""
    return name, json.dumps(arguments, sort_keys=True, default=str)


def set_tool_trace_context(name: str, arguments: object, carrier: Mapping[str, str]) -> None:
    """The run of ``name`` with ``arguments`` is under way in span ``carrier`` (its W3C trace context): the turn's
    tracing (``turn.TurnTrace``) calls it as the run's span starts; the run reads it (``tool_trace_context``)."""
    _TOOL_RUNS.set({**(_TOOL_RUNS.get() or {}), _run_key(name, arguments): carrier})


def tool_trace_context(name: str, arguments: Mapping[str, object]) -> dict[str, str]:
    """The W3C trace context (``traceparent``) of the run of ``name`` with ``arguments`` under way, for a tool that
    calls a server (an MCP ``tools/call`` carries it in ``params._meta``); empty when the turn is not traced."""
    runs = _TOOL_RUNS.get()
    return dict(runs.get(_run_key(name, arguments), {})) if runs else {}


_INSTALLED: list[bool] = [False]
"""Set while providers installed in-process (a test, the bench) trace every turn (``setup.install``)."""


def mark_installed(installed: bool) -> None:
    """Providers were installed in-process (``setup.install``), or uninstalled: every turn is traced meanwhile."""
    _INSTALLED[0] = installed


def enabled(settings: Settings) -> bool:
    """Whether turns are traced: an exporter is configured, or providers were installed in-process."""
    return _INSTALLED[0] or bool(settings.otel_traces_endpoint())


def flush() -> None:
    """Export what is buffered now (nothing to do, and nothing imported, when nothing was ever traced)."""
    setup = sys.modules.get("chatloop.tracing.setup")
    if setup is not None:
        setup.flush_all()
