"""What every event of ``chatloop.engine.events`` shares: its ``EventType`` and the ``Payload`` base giving its SSE
name.

Usage::

    from chatloop.engine.event_base import EventType, Payload

    @dataclass(frozen=True, eq=False)
    class Started(Payload):
        type: ClassVar[EventType] = EventType.STATUS
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import ClassVar

from chatloop.providers.base import ToolCall


class EventType(StrEnum):
    STATUS = "status"
    DELTA = "delta"
    LLM_RESPONSE = "llm_response"
    MESSAGE_COMPLETE = "message_complete"
    TOOL_CALL_START = "tool_call_start"
    TOOL_CALL_RESULT = "tool_call_result"
    APPROVAL_REQUEST = "approval_request"
    DECISION = "decision"
    MODEL_FALLBACK = "model_fallback"
    ERROR = "error"
    DONE = "done"


class Payload:
    """What every event has: its ``type`` and, from it, its ``name``.

    Each event class is ``@dataclass(frozen=True, eq=False)``: frozen, since every renderer shares it; compared by
    identity, since an event is a message, not a value (nothing compares two, and not generating ``__eq__`` and
    ``__hash__`` for 15 classes keeps ~2 ms off every cold start)."""

    type: ClassVar[EventType]

    @property
    def name(self) -> str:
        return self.type.value


def copy_calls(calls: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    """Copies of ``calls`` (the turn may still change their ids)."""
    return tuple(ToolCall(c.id, c.name, c.arguments) for c in calls)
