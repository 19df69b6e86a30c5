"""What a turn did: the tool-call records, usage and answering model that ``done`` reports, and the data of
the events that describe model calls, fallbacks and failures.

The loop decides and acts; this module only remembers and describes.

Usage::

    record = TurnRecord()
    record.tool_call(call, "ok", '{"result": 2}')
    record.summary(StopReason.STOP, answer, iterations=2, tool_counts={"execute_javascript": 1}, model="demo:offline")
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chatloop.engine import prompts
from chatloop.engine.events import Event, EventType, StopReason
from chatloop.observability import log_fallback
from chatloop.providers.base import ContextFit, ModelFallback, ModelResponse, ToolCall, Usage
from chatloop.providers.errors import AllModelsFailed, ModelError
from chatloop.providers.textcalls import TextCalls
from chatloop.tools.base import ToolResult


@dataclass
class TurnRecord:
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    """One entry per tool call the model made: ``{id, name, arguments, status, result, reason?}``."""
    usage: Usage = field(default_factory=Usage)
    answered_by: str | None = None
    """The ``provider:model`` of the latest response."""
    last_error: str | None = None
    last_result: str | None = None
    context: ContextFit | None = None
    """How the latest model call's conversation was fitted to its context window."""

    def response(self, response: ModelResponse) -> None:
        self.answered_by = response.model
        self.usage.add(response.usage)

    def tool_result(self, result: ToolResult) -> None:
        """Keep the latest result and error: the fallback text reports them."""
        if result.ok:
            self.last_result = result.content
        else:
            self.last_error = result.error

    def tool_call(
        self,
        call: ToolCall,
        status: str,
        result: str | None,
        reason: str | None = None,
        server: str | None = None,
        server_tool: str | None = None,
    ) -> None:
        entry: dict[str, Any] = {
            "id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "status": status,
            "result": result,
        }
        if reason:
            entry["reason"] = reason
        if server:  # the tool ran on a server (an MCP server's label), under its own name there
            entry["server"] = server
            entry["server_tool"] = server_tool or call.name
        self.tool_calls.append(entry)

    def skipped(self, calls: Iterable[ToolCall], reason: str) -> None:
        for call in calls:
            self.tool_call(call, "skipped", None, reason)

    def fallback_message(self, stop: StopReason, tool_counts: Mapping[str, int]) -> dict[str, Any]:
        """The user-facing answer when no model answer could be had: what was tried and what to do next."""
        text = prompts.fallback_text(stop.value, dict(tool_counts), self.last_error, self.last_result)
        return {"role": "assistant", "content": text}

    def summary(
        self,
        stop: StopReason,
        answer: dict[str, Any],
        *,
        iterations: int,
        tool_counts: Mapping[str, int],
        model: str,
    ) -> dict[str, Any]:
        """The ``done`` event's data (and the /chat JSON body)."""
        return {
            "message": answer,
            "stop_reason": stop.value,
            "iterations": iterations,
            "tool_calls": self.tool_calls,
            "tool_counts": dict(tool_counts),
            "usage": self.usage.as_dict(),
            "model": self.answered_by or model,
            "context": self.context.summary() if self.context else None,
        }


def response_event(response: ModelResponse, iteration: int) -> Event:
    """``llm_response``: what one model call returned."""
    return Event(
        EventType.LLM_RESPONSE,
        {
            "iteration": iteration,
            "model": response.model,
            "content": response.content,
            "tool_calls": [c.to_message() for c in response.tool_calls],
            "finish_reason": response.finish_reason,
            "usage": response.usage.as_dict() if response.usage else None,
        },
    )


def fallback_event(item: ModelFallback) -> Event:
    """``model_fallback``, logged as it is made (every switch is a log line and an event)."""
    log_fallback(item.from_model, item.to_model, item.reason, item.retry_after, item.discard_partial)
    return Event(
        EventType.MODEL_FALLBACK,
        {
            "from": item.from_model,
            "to": item.to_model,
            "reason": item.reason,
            "retry_after": item.retry_after,
            "discard_partial": item.discard_partial,
            "message": item.message,
        },
    )


def error_event(exc: ModelError, **extra: Any) -> Event:
    """``error`` for a model failure (every attempt, when the whole chain failed)."""
    if isinstance(exc, AllModelsFailed):
        attempts = [{"model": a.model, "kind": a.kind, "message": a.message} for a in exc.attempts]
        data = {"code": exc.kind, "message": exc.message, "attempts": attempts, **extra}
        if exc.retry_after is not None:
            data["retry_after"] = round(exc.retry_after, 1)
        return Event(EventType.ERROR, data)
    return Event(EventType.ERROR, {"code": exc.kind, "message": exc.message, "model": exc.model, **extra})


def text_calls_event(found: TextCalls, iteration: int) -> Event:
    """``status: text_tool_calls_recovered``: the model wrote its calls as text and they were recovered."""
    return Event(
        EventType.STATUS,
        {
            "status": "text_tool_calls_recovered",
            "format": found.format,
            "count": len(found.calls),
            "iteration": iteration,
        },
    )
