"""What a turn ended with: ``StopReason``, the ``DecisionReason`` behind each step, and the ``TurnSummary``.

The ``TurnSummary`` is the typed result of a turn (the payload of its ``done`` event); ``wire()`` is the ``done`` dict
clients see (and /chat's JSON body). Fields only metrics need (fallbacks, text-call recoveries, per-call durations)
are on the summary but not on the wire.

Usage::

    summary = TurnSummary.failed("Stopped.", StopReason.CLIENT_DISCONNECTED)
    summary.wire()["stop_reason"]                     # "client_disconnected"
    summary.with_request_id("req-1").wire()["request_id"]
    DecisionReason.RESULT_LOOP.stop_reason            # StopReason.LOOP_DETECTED
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from chatloop.jsontypes import JSONObject, JSONValue
from chatloop.providers.base import ContextFit, ToolCall, Usage


class StopReason(StrEnum):
    STOP = "stop"
    """The model answered."""
    LENGTH = "length"
    """The model's answer hit max_tokens."""
    TOOL_CALLS = "tool_calls"
    """The model called a client-defined tool (/v1/chat/completions): the client runs it."""
    ITERATION_CAP = "iteration_cap"
    DEADLINE = "deadline"
    LOOP_DETECTED = "loop_detected"
    TOOL_BUDGET = "tool_budget"
    ALL_MODELS_FAILED = "all_models_failed"
    BUDGET = "budget"
    """The caller's budget refused a model call mid-turn (or its store failed, closed): the answer so far stands."""
    APPROVAL_REQUIRED = "approval_required"
    """A call of a tool that needs a person's approval first: the turn ends asking for it (``approval_request``
    events); a later request with the answer runs it, or tells the model it was denied."""
    CLIENT_DISCONNECTED = "client_disconnected"
    """The client went away mid-turn: the turn stopped at its next step (logged; nobody reads a done event)."""
    ERROR = "error"


class DecisionReason(StrEnum):
    """Every reason ``policy.decide()`` gives (the ``reason=`` of the decision log line). A reason that ends tool use
    because a guard tripped names its stop reason (``stop_reason``); the others leave the stop to the answer."""

    EXECUTE = "execute"
    NO_TOOL_CALLS = "no_tool_calls"
    SUBSTANTIVE_ANSWER = "substantive_answer"
    ITERATION_CAP = "iteration_cap"
    TOOLS_WITHDRAWN = "tools_withdrawn"
    DEADLINE = "deadline"
    RESULT_LOOP = "result_loop"
    DUPLICATE_LOOP = "duplicate_loop"
    DUPLICATE_CALL = "duplicate_call"
    JS_ALREADY_SUCCEEDED = "js_already_succeeded"
    BUDGET_EXHAUSTED = "budget_exhausted"
    INVALID_TOOL_CALLS = "invalid_tool_calls"
    LEGACY_SYNTAX = "legacy_syntax"
    NOT_AN_ANSWER = "not_an_answer"
    EMPTY_REPLY = "empty_reply"
    CLIENT_TOOLS = "client_tools"
    CLIENT_TOOL_REQUIRED = "client_tool_required"
    APPROVAL_REQUIRED = "approval_required"
    """A call needs a person's approval: the turn ends asking for it."""
    APPROVED = "approved"
    DENIED = "denied"
    """A turn resumed with the answers to its approval requests: approved calls run, denied ones are answered with
    the denial (and its reason); ``approved`` when any ran."""

    @property
    def stop_reason(self) -> StopReason | None:
        """The guard this reason is, as the turn's stop reason; None when it is no guard."""
        return _GUARD_STOPS.get(self)


_GUARD_STOPS = {
    DecisionReason.DUPLICATE_LOOP: StopReason.LOOP_DETECTED,
    DecisionReason.RESULT_LOOP: StopReason.LOOP_DETECTED,
    DecisionReason.BUDGET_EXHAUSTED: StopReason.TOOL_BUDGET,
    DecisionReason.DEADLINE: StopReason.DEADLINE,
    DecisionReason.ITERATION_CAP: StopReason.ITERATION_CAP,
}


def calls_json(calls: Iterable[ToolCall]) -> list[JSONValue]:
    """Tool calls as an assistant message holds them."""
    return [c.to_message() for c in calls]


def usage_json(usage: Usage) -> JSONObject:
    return {**usage.as_dict()}


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call the model made and what became of it (``done``'s ``tool_calls`` entries)."""

    id: str
    name: str
    arguments: str
    status: str
    """``ok``, ``error`` (it ran and failed, or could not run) or ``skipped``."""
    result: str | None
    reason: str | None = None
    """Why it was skipped or not run (a decision reason, ``duplicate``, ``client_tools_pending`` ...)."""
    server: str | None = None
    """The label of the server it ran on (an MCP server), under ``server_tool``, its name there."""
    server_tool: str | None = None
    duration_ms: float | None = None
    """How long it ran (calls that ran only; not on the wire: metrics read it)."""

    def wire(self) -> JSONObject:
        entry: JSONObject = {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "status": self.status,
            "result": self.result,
        }
        if self.reason:
            entry["reason"] = self.reason
        if self.server:
            entry["server"] = self.server
            entry["server_tool"] = self.server_tool or self.name
        return entry


@dataclass(frozen=True)
class AssistantMessage:
    """The turn's answer: its text, and the calls to client tools it ends with (/v1 client tools)."""

    content: str
    tool_calls: tuple[ToolCall, ...] | None = None

    def wire(self) -> JSONObject:
        if self.tool_calls is None:
            return {"role": "assistant", "content": self.content}
        return {"role": "assistant", "tool_calls": calls_json(self.tool_calls), "content": self.content}


@dataclass(frozen=True)
class Fallback:
    """A model switch, as metrics count it."""

    from_model: str
    reason: str


@dataclass(frozen=True)
class TurnSummary:
    message: AssistantMessage
    stop_reason: StopReason
    iterations: int = 0
    tool_calls: tuple[ToolCallRecord, ...] = ()
    tool_counts: Mapping[str, int] = field(default_factory=dict)
    """Runs per tool name."""
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    """The ``provider:model`` that answered last (or the chain's name when none did)."""
    context: ContextFit | None = None
    """How the latest model call's conversation was fitted to its context window."""
    request_id: str | None = None
    fallbacks: tuple[Fallback, ...] = ()
    """Every model switch of the turn (metrics only)."""
    text_call_recoveries: Mapping[str, int] = field(default_factory=dict)
    """Tool calls recovered from text, by format (metrics only)."""
    reports_context: bool = True
    """A turn that ran reports its ``context`` (None included); a failed summary has no such key."""

    @classmethod
    def failed(
        cls,
        text: str = "I could not finish this answer because of an internal error. Please ask again.",
        stop: StopReason = StopReason.ERROR,
    ) -> TurnSummary:
        """The summary of a turn that did not end on its own (it failed, or was stopped)."""
        return cls(AssistantMessage(text), stop, reports_context=False)

    def with_request_id(self, request_id: str) -> TurnSummary:
        """A copy that names the request (set by the API, which knows it)."""
        # A copy of the fields with one changed: replace() would run __init__ over all of them (per request, ~4 us).
        copy = object.__new__(TurnSummary)
        copy.__dict__.update(self.__dict__, request_id=request_id)
        return copy

    @property
    def durations_ms(self) -> dict[str, float]:
        """How long each call that ran took, by call id."""
        return {c.id: c.duration_ms for c in self.tool_calls if c.duration_ms is not None}

    def wire(self) -> JSONObject:
        """The ``done`` event's data (and the /chat JSON body)."""
        done: JSONObject = {
            "message": self.message.wire(),
            "stop_reason": self.stop_reason.value,
            "iterations": self.iterations,
            "tool_calls": [c.wire() for c in self.tool_calls],
            "tool_counts": dict(self.tool_counts),
            "usage": usage_json(self.usage),
            "model": self.model,
        }
        if self.reports_context:
            done["context"] = self.context.summary() if self.context else None
        if self.request_id is not None:
            done["request_id"] = self.request_id
        return done
