"""Events a turn yields: one frozen dataclass per payload, ``Event`` their union.

Renderers (SSE, JSON, OpenAI) are functions of these events; tests read them directly. Every event has a class-level
``type`` (an ``EventType``), a ``name`` (the SSE event name) and ``data``, the wire dict /chat's SSE sends (built once,
on first read). Events are snapshots: they copy what they report, so the turn may go on changing its own objects.

Usage::

    async for event in run_turn(...):
        match event:
            case Delta(content=text):
                print(text, end="")
            case Done(summary=summary):
                print(summary.stop_reason)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from chatloop.engine.event_base import EventType, Payload, copy_calls
from chatloop.engine.model_events import FailedAttempt, FallbackMade, TurnError
from chatloop.engine.policy import Decision
from chatloop.engine.summary import StopReason, TurnSummary, calls_json, usage_json
from chatloop.jsontypes import JSONObject
from chatloop.providers.base import ContextFit, ModelResponse, ToolCall, Usage
from chatloop.providers.textcall_formats import TextCalls

__all__ = [
    "ApprovalRequested",
    "ContextFitted",
    "DecisionMade",
    "Delta",
    "Done",
    "Event",
    "EventType",
    "FailedAttempt",
    "FallbackMade",
    "LlmResponse",
    "MessageComplete",
    "Retrying",
    "Started",
    "StopReason",
    "TextCallsRecovered",
    "ToolCallResult",
    "ToolCallStart",
    "ToolsUnavailable",
    "TurnError",
]


# --- status ------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Started(Payload):
    """The turn started: the model (chain) it asks and the tools it may offer."""

    type: ClassVar[EventType] = EventType.STATUS
    model: str
    tools: tuple[str, ...] = ()

    @cached_property
    def data(self) -> JSONObject:
        return {"status": "started", "model": self.model, "tools": list(self.tools)}


@dataclass(frozen=True, eq=False)
class ToolsUnavailable(Payload):
    """Tool sources (an MCP server's label) that could not be had for this turn, and why."""

    type: ClassVar[EventType] = EventType.STATUS
    sources: Mapping[str, str]

    @cached_property
    def data(self) -> JSONObject:
        return {"status": "tools_unavailable", "sources": dict(self.sources)}


@dataclass(frozen=True, eq=False)
class Retrying(Payload):
    """The model wrote a tool call as text it could not be run from: it is reminded and asked again."""

    type: ClassVar[EventType] = EventType.STATUS
    reminder: int
    reason: str = "legacy_syntax_reminder"

    @cached_property
    def data(self) -> JSONObject:
        return {"status": "retrying", "reason": self.reason, "reminder": self.reminder}


@dataclass(frozen=True, eq=False)
class TextCallsRecovered(Payload):
    """The model wrote its calls as text and they were recovered."""

    type: ClassVar[EventType] = EventType.STATUS
    format: str
    count: int
    iteration: int

    @classmethod
    def of(cls, found: TextCalls, iteration: int) -> TextCallsRecovered:
        return cls(found.format, len(found.calls), iteration)

    @cached_property
    def data(self) -> JSONObject:
        return {
            "status": "text_tool_calls_recovered",
            "format": self.format,
            "count": self.count,
            "iteration": self.iteration,
        }


@dataclass(frozen=True, eq=False)
class ContextFitted(Payload):
    """The conversation was trimmed, or models were passed over, to fit a context window."""

    type: ClassVar[EventType] = EventType.STATUS
    fit: ContextFit
    iteration: int

    @cached_property
    def data(self) -> JSONObject:
        return {"status": f"context_{self.fit.action}", "iteration": self.iteration, **self.fit.summary()}


# --- the model's text and responses ---------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Delta(Payload):
    """Text shown to the user; ``seam``: the blank line between two model calls' texts."""

    type: ClassVar[EventType] = EventType.DELTA
    content: str
    iteration: int
    seam: bool = False

    @cached_property
    def data(self) -> JSONObject:
        data: JSONObject = {"content": self.content, "iteration": self.iteration}
        if self.seam:
            data["seam"] = True
        return data


@dataclass(frozen=True, eq=False)
class LlmResponse(Payload):
    """What one model call returned."""

    type: ClassVar[EventType] = EventType.LLM_RESPONSE
    iteration: int
    model: str
    content: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    usage: Usage | None

    @classmethod
    def of(cls, response: ModelResponse, iteration: int) -> LlmResponse:
        usage = response.usage
        copied = Usage(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) if usage else None
        return cls(
            iteration,
            response.model,
            response.content,
            copy_calls(response.tool_calls),
            response.finish_reason,
            copied,
        )

    @cached_property
    def data(self) -> JSONObject:
        return {
            "iteration": self.iteration,
            "model": self.model,
            "content": self.content,
            "tool_calls": calls_json(self.tool_calls),
            "finish_reason": self.finish_reason,
            "usage": usage_json(self.usage) if self.usage else None,
        }


@dataclass(frozen=True, eq=False)
class MessageComplete(Payload):
    """An assistant message is complete: one that called tools (with its ``iteration``), or the turn's answer."""

    type: ClassVar[EventType] = EventType.MESSAGE_COMPLETE
    content: str
    tool_calls: tuple[ToolCall, ...] | None = None
    iteration: int | None = None
    """Set on a message that called the server's tools (it is part of the conversation, not the answer)."""

    @cached_property
    def data(self) -> JSONObject:
        calls = None if self.tool_calls is None else calls_json(self.tool_calls)
        if self.iteration is not None:
            return {
                "role": "assistant",
                "content": self.content,
                "tool_calls": calls,
                "iteration": self.iteration,
            }
        if calls is None:
            return {"role": "assistant", "content": self.content}
        return {"role": "assistant", "tool_calls": calls, "content": self.content}


# --- tools ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class _ToolCallOf(Payload):
    """A call of one tool: the fields ``tool_call_start`` and ``approval_request`` share."""

    id: str
    tool_name: str
    """The tool's name (``name`` is the event's, as on every event)."""
    arguments: str
    server: str | None = None
    """The label of the server the tool runs on (an MCP server), and ``server_tool``, its name there."""
    server_tool: str | None = None

    @cached_property
    def data(self) -> JSONObject:
        data: JSONObject = {"id": self.id, "name": self.tool_name, "arguments": self.arguments}
        if self.server is not None:
            data["server"] = self.server
            data["server_tool"] = self.server_tool
        return data


@dataclass(frozen=True, eq=False)
class ToolCallStart(_ToolCallOf):
    type: ClassVar[EventType] = EventType.TOOL_CALL_START


@dataclass(frozen=True, eq=False)
class ToolCallResult(Payload):
    """A call's tool message: its result (``duration_ms`` when it ran) or why it did not run (``reason``)."""

    type: ClassVar[EventType] = EventType.TOOL_CALL_RESULT
    id: str
    tool_name: str
    status: str
    content: str
    server: str | None = None
    server_tool: str | None = None
    duration_ms: float | None = None
    reason: str | None = None
    details: Mapping[str, str | int | float | bool] | None = None
    """What the tool reported of its run for traces (``chatloop.sandbox.cpu_ms`` ...); not sent to clients."""

    @cached_property
    def data(self) -> JSONObject:
        data: JSONObject = {
            "id": self.id,
            "name": self.tool_name,
            "status": self.status,
            "content": self.content,
        }
        if self.server is not None:
            data["server"] = self.server
            data["server_tool"] = self.server_tool
        if self.duration_ms is not None:
            data["duration_ms"] = round(self.duration_ms, 1)
        if self.reason:
            data["reason"] = self.reason
        return data


@dataclass(frozen=True, eq=False)
class ApprovalRequested(_ToolCallOf):
    """A call that waits for a person's approval (the turn ends after it): ``id`` is what the answer names."""

    type: ClassVar[EventType] = EventType.APPROVAL_REQUEST


# --- decisions, fallbacks, failures ---------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class DecisionMade(Payload):
    """The logged decision on one model response; ``tools``: (name, server) of its calls when one runs elsewhere."""

    type: ClassVar[EventType] = EventType.DECISION
    decision: Decision
    tools: tuple[tuple[str, str | None], ...] | None = None

    @cached_property
    def data(self) -> JSONObject:
        fields = self.decision.fields()
        if self.tools is not None:
            fields["tools"] = [{"name": name, "server": server} for name, server in self.tools]
        return fields


@dataclass(frozen=True, eq=False)
class Done(Payload):
    """The turn's last event: its ``TurnSummary``."""

    type: ClassVar[EventType] = EventType.DONE
    summary: TurnSummary

    @cached_property
    def data(self) -> JSONObject:
        return self.summary.wire()


Event = (
    Started
    | ToolsUnavailable
    | Retrying
    | TextCallsRecovered
    | ContextFitted
    | Delta
    | LlmResponse
    | MessageComplete
    | ToolCallStart
    | ToolCallResult
    | ApprovalRequested
    | DecisionMade
    | FallbackMade
    | TurnError
    | Done
)
"""Every event a turn yields."""
