"""A turn as a trace, derived from the engine's typed events.

One ``invoke_agent chatloop`` span (INTERNAL) per turn, continuing the request's trace (``traceparent``, else X-Ray's
header); under it the chain's ``chat {model}`` spans (``model.TracedModel``) and one ``execute_tool {tool}`` span per
tool run, from its ``tool_call_start`` to its ``tool_call_result`` (MCP tools with their server, the sandbox's CPU time
and exit in ``chatloop.sandbox.*``). Everything the loop decides is an event of the turn's span: each decision with
the fields of its log line (``chatloop.decision``), fallbacks, context fitting, calls answered without running, and
every guard that tripped (``chatloop.guard``: budget, loop, deadline, iteration cap).

Usage::

    async for event in trace_turn(settings, scope, chain, lambda model: run_turn(turn, model, tools, deadline)):
        ...
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping

from opentelemetry.context import Context
from opentelemetry.propagate import inject
from opentelemetry.propagators.aws import AwsXRayPropagator
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    get_current_span,
    set_span_in_context,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from chatloop.config import Settings
from chatloop.engine.events import (
    ApprovalRequested,
    ContextFitted,
    DecisionMade,
    Done,
    Event,
    FallbackMade,
    Retrying,
    TextCallsRecovered,
    ToolCallResult,
    ToolCallStart,
    ToolsUnavailable,
    TurnError,
)
from chatloop.engine.summary import StopReason
from chatloop.observability import logger
from chatloop.providers.chain import FallbackChain
from chatloop.redaction import redact
from chatloop.tracing import set_tool_trace_context
from chatloop.tracing.content import output_messages
from chatloop.tracing.model import TracedModel, provider_and_model
from chatloop.tracing.scope import TurnScope
from chatloop.tracing.setup import Telemetry, TelemetryUnavailable, telemetry_for

AGENT = "chatloop"
Attributes = dict[str, str | bool | int | float]

GUARD_STOPS = {
    StopReason.TOOL_BUDGET,
    StopReason.LOOP_DETECTED,
    StopReason.DEADLINE,
    StopReason.ITERATION_CAP,
}
"""Stop reasons that are a guard tripping (a ``chatloop.guard`` event when no decision said so already)."""
FAILED_STOPS = {StopReason.ERROR, StopReason.ALL_MODELS_FAILED}
MAX_EVENT_TEXT = 512
"""Characters kept of a string field of an event (a provider's error message, a model-written tool name)."""


def incoming_context(scope: TurnScope) -> Context | None:
    """The trace the request belongs to: its ``traceparent``, else X-Ray's ``X-Amzn-Trace-Id`` (a header, or the
    Lambda invocation's own), else none (a new trace)."""
    headers = {k.lower(): v for k, v in scope.headers.items()}
    if "traceparent" in headers:
        return TraceContextTextMapPropagator().extract(headers)
    xray = headers.get("x-amzn-trace-id") or scope.lambda_trace_id
    if not xray or "Parent=" not in xray:
        return None
    context = AwsXRayPropagator().extract({"X-Amzn-Trace-Id": xray})  # its getter is case-sensitive
    parent = get_current_span(context).get_span_context()
    if not parent.is_valid:
        return None
    # Lambda writes Sampled=0 whenever its own active tracing is off: that is no caller's sampling decision, and
    # honouring it would export nothing. The trace is continued, recorded.
    sampled = SpanContext(
        parent.trace_id, parent.span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    return set_span_in_context(NonRecordingSpan(sampled))


class TurnTrace:
    """The spans of one turn, fed its events in order."""

    def __init__(self, telemetry: Telemetry, scope: TurnScope, chain: FallbackChain) -> None:
        self.telemetry = telemetry
        provider, model_id = provider_and_model(chain.name)
        attributes: Attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider,
            "gen_ai.agent.name": AGENT,
            "gen_ai.request.model": model_id,
            "chatloop.request_id": scope.request_id,
        }
        if scope.conversation_id:
            attributes["gen_ai.conversation.id"] = scope.conversation_id
        self.span: Span = telemetry.tracer.start_span(
            f"invoke_agent {AGENT}",
            context=incoming_context(scope),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self.context = set_span_in_context(self.span)
        self.conversation_id = scope.conversation_id
        self.tools: dict[str, Span] = {}
        self.calls: set[Span] = set()
        """Model calls under way (``TracedModel`` adds and removes them)."""
        self.guards: set[str] = set()
        self.ended = False

    def wrap(self, chain: FallbackChain) -> FallbackChain:
        """The turn's chain (``Runtime.models.for_turn`` makes one per turn) with each member model traced, in place, so
        what the API reads of it after the turn (the model that answered) holds; the chain's logic is untouched. A
        member traced already (a chain reused) is traced for this turn instead, never twice."""
        chain.models = [
            TracedModel(
                m.inner if isinstance(m, TracedModel) else m,
                self.telemetry,
                self.context,
                self.conversation_id,
                self.calls,
            )
            for m in chain.models
        ]
        return chain

    # --- events ------------------------------------------------------------------------------
    def on(self, event: Event) -> None:
        match event:
            case ToolCallStart():
                self._tool_started(event)
            case ToolCallResult():
                self._tool_answered(event)
            case DecisionMade(decision=decision):
                fields: Attributes = {"action": decision.action.value}
                fields.update(_scalars(decision.fields()))
                self.span.add_event("chatloop.decision", fields)
                stop = decision.reason.stop_reason
                if stop is not None:
                    self._guard(stop.value, decision.reason.value, decision.inputs.iteration)
            case FallbackMade():
                self.span.add_event("chatloop.fallback", _scalars(event.data))
            case ContextFitted():
                self.span.add_event("chatloop.context", _scalars(event.data))
            case TextCallsRecovered() | Retrying():
                self.span.add_event(f"chatloop.{event.data['status']}", _scalars(event.data))
            case ApprovalRequested():  # a call that waits for a person (its arguments are content: not here)
                asked = {"id": event.id, "name": event.tool_name, "server": event.server or ""}
                self.span.add_event("chatloop.approval_request", _scalars(asked))
            case ToolsUnavailable(sources=sources):  # e.g. an MCP server that is down: its label, and why
                self.span.add_event("chatloop.tools_unavailable", _scalars(sources))
            case TurnError():
                self.span.add_event("chatloop.error", {"code": event.code, "message": redact(event.message)})
            case Done(summary=summary):
                self._done(summary.stop_reason, summary.iterations, event)
            case _:
                pass

    def _tool_started(self, event: ToolCallStart) -> None:
        attributes: Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.tool_name,
            "gen_ai.tool.call.id": event.id,
            "gen_ai.tool.type": "extension",  # run by the agent, server-side (the conventions' word for it)
        }
        if (
            event.server is not None
        ):  # an MCP server's tool: the MCP client conventions' attributes, and its server
            attributes["mcp.method.name"] = "tools/call"
            attributes["chatloop.mcp.server"] = event.server
            attributes["chatloop.mcp.server_tool"] = event.server_tool or ""
        if self.telemetry.capture_content:
            attributes["gen_ai.tool.call.arguments"] = redact(event.arguments)
        span = self.telemetry.tracer.start_span(
            f"execute_tool {event.tool_name}",
            context=self.context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self.tools[event.id] = span
        if event.server is not None:  # the run's context, for the server it calls (MCP's params._meta)
            carrier: dict[str, str] = {}
            inject(carrier, context=set_span_in_context(span))
            set_tool_trace_context(event.tool_name, _arguments(event.arguments), carrier)

    def _tool_answered(self, event: ToolCallResult) -> None:
        span = self.tools.pop(event.id, None)
        if span is None:  # answered without running (a duplicate, over budget, invalid): an event, not a run
            self.span.add_event("chatloop.tool_call_not_run", _scalars(event.data, skip={"content"}))
            if event.reason == "budget_exhausted":
                self._guard(StopReason.TOOL_BUDGET.value, event.reason, None)
            return
        span.set_attribute("chatloop.tool.status", event.status)
        for key, value in (event.details or {}).items():
            span.set_attribute(key, value)
        if event.status != "ok":
            error = "tool_error" if event.server is not None else _error_kind(event.content)
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        elif self.telemetry.capture_content:
            span.set_attribute("gen_ai.tool.call.result", redact(event.content))
        span.end()

    def _guard(self, guard: str, reason: str, iteration: int | None) -> None:
        if guard in self.guards:
            return
        self.guards.add(guard)
        attributes: Attributes = {"guard": guard, "reason": reason}
        if iteration is not None:
            attributes["iteration"] = iteration
        self.span.add_event("chatloop.guard", attributes)

    def _done(self, stop: StopReason, iterations: int, event: Done) -> None:
        summary = event.summary
        span = self.span
        if stop in GUARD_STOPS:
            self._guard(stop.value, stop.value, iterations)
        span.set_attribute("chatloop.stop_reason", stop.value)
        span.set_attribute("chatloop.iterations", iterations)
        span.set_attribute("gen_ai.usage.input_tokens", summary.usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", summary.usage.completion_tokens)
        if summary.model:
            span.set_attribute("gen_ai.response.model", provider_and_model(summary.model)[1])
        if self.telemetry.capture_content:
            calls = [c.to_message() for c in summary.message.tool_calls or ()]
            span.set_attribute(
                "gen_ai.output.messages", output_messages(summary.message.content, calls, stop.value)
            )
        if stop in FAILED_STOPS:
            span.set_attribute("error.type", stop.value)
            span.set_status(Status(StatusCode.ERROR, stop.value))
        self.end()

    def end(self, stop: StopReason | None = None) -> None:
        """End every span still open (a turn cut short: the client went away, or the turn failed)."""
        if self.ended:
            return
        self.ended = True
        for span in [*self.tools.values(), *self.calls]:
            span.set_attribute("error.type", "cancelled")
            span.set_status(Status(StatusCode.ERROR, "cancelled"))
            span.end()
        self.tools.clear()
        self.calls.clear()
        if stop is not None:
            self.span.set_attribute("chatloop.stop_reason", stop.value)
        self.span.end()


async def trace_turn(
    settings: Settings,
    scope: TurnScope,
    chain: FallbackChain,
    run: Callable[[FallbackChain], AsyncIterator[Event]],
) -> AsyncIterator[Event]:
    """``run``'s events, passed on as they come, the turn traced. With ``scope.flush``, the spans are exported once
    the last event was taken, before the stream (and so the invocation) ends: the client has its ``done`` first."""
    try:
        telemetry = telemetry_for(settings)
    except TelemetryUnavailable:  # logged once where it was found: the turn is answered, untraced
        async for event in _untraced(run(chain)):
            yield event
        return
    trace = TurnTrace(telemetry, scope, chain)
    stop: StopReason | None = None  # set when the turn did not run to its end
    events = run(trace.wrap(chain))
    try:
        async for event in events:
            _safely(trace.on, event)
            yield event
    except (GeneratorExit, asyncio.CancelledError):
        stop = StopReason.CLIENT_DISCONNECTED
        # The turn is closed now (its model call stops), not when it is collected.
        await _close(events)
        raise
    except BaseException:
        stop = StopReason.ERROR
        raise
    finally:
        trace.end(stop)
        if scope.flush and stop is not None:  # no await while the stream is torn down: flushed in place
            _flush(telemetry, scope)
    if scope.flush and telemetry.flush_does_io:
        # An export over the network: the event loop goes on meanwhile (heartbeats, other requests).
        await asyncio.to_thread(_flush, telemetry, scope)
    elif scope.flush:  # in-process exporters (tests, the bench): nothing to wait for, no thread to hop to
        _flush(telemetry, scope)


async def _untraced(events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """``events`` as they are, closed at once when their client goes (its model call stops)."""
    try:
        async for event in events:
            yield event
    except (GeneratorExit, asyncio.CancelledError):
        await _close(events)
        raise


async def _close(events: AsyncIterator[Event]) -> None:
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()


def _safely(handle: Callable[[Event], None], event: Event) -> None:
    """A fault in tracing is logged, never the turn's: the event goes on to the client whatever happened here."""
    try:
        handle(event)
    except Exception:
        logger.exception(f"tracing: the {event.name} event could not be recorded")


def _flush(telemetry: Telemetry, scope: TurnScope) -> None:
    """Export what the turn recorded, within what its request has left (a flush never makes an answer late)."""
    within = None if scope.deadline is None else max(0.0, scope.deadline.remaining() * 1000)
    try:
        telemetry.flush(within)
    except Exception:  # an exporter failing never fails the turn
        logger.exception("tracing: flush failed")


def _scalars(data: Mapping[str, object], skip: frozenset[str] | set[str] = frozenset()) -> Attributes:
    """A flat event record's scalar fields as span attributes (None, lists and objects left out), strings redacted
    and capped: a name a model wrote (a tool it called that does not exist) is no place for a payload."""
    out: Attributes = {}
    for key, value in data.items():
        if key in skip or value is None:
            continue
        if isinstance(value, str):
            out[key] = redact(value)[:MAX_EVENT_TEXT]
        elif isinstance(value, bool | int | float):
            out[key] = value
    return out


def _arguments(raw: str) -> object:
    """A call's arguments as the tool gets them (the engine runs only calls whose arguments are a JSON object)."""
    try:
        return json.loads(raw or "{}")
    except ValueError:
        return raw


def _error_kind(content: str) -> str:
    """A failed run's error class (``TimeoutError``, ``CPULimitError`` ...) from its ``{"error": "Kind: ..."}``."""
    try:
        error = json.loads(content).get("error")
    except (ValueError, AttributeError):
        return "tool_error"
    if not isinstance(error, str):
        return "tool_error"
    kind = error.split(":", 1)[0].strip()
    return kind if kind.isidentifier() and len(kind) <= 64 else "tool_error"
