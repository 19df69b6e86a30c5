"""Events a turn yields, and the reasons a turn stops.

Renderers (SSE, JSON, OpenAI) are functions of these events; tests read them directly.

Usage::

    async for event in run_turn(...):
        if event.type is EventType.DONE:
            print(event.data["stop_reason"])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    STATUS = "status"
    DELTA = "delta"
    LLM_RESPONSE = "llm_response"
    MESSAGE_COMPLETE = "message_complete"
    TOOL_CALL_START = "tool_call_start"
    TOOL_CALL_RESULT = "tool_call_result"
    DECISION = "decision"
    MODEL_FALLBACK = "model_fallback"
    ERROR = "error"
    DONE = "done"


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
    CLIENT_DISCONNECTED = "client_disconnected"
    """The client went away mid-turn: the turn stopped at its next step (logged; nobody reads a done event)."""
    ERROR = "error"


@dataclass(frozen=True)
class Event:
    type: EventType
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.type.value
