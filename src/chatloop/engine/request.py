"""What one user turn asks of the engine.

Usage::

    request = TurnRequest(messages=normalize_conversation(raw_messages), tool_names=["execute_javascript"])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TurnRequest:
    messages: list[dict[str, Any]]
    """A conversation already checked by ``messages.normalize_conversation``."""
    tool_names: list[str] | None = None
    """Built-in tools enabled for this turn; None: all registered tools; []: none (plan mode)."""
    client_tools: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI function tools the client runs itself: a call to one ends the turn."""
    tool_choice: str | dict[str, Any] | None = None
    """Sent only when set, and only on the first model call of the turn."""
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_iterations: int | None = None
    """Lowered to the server's MAX_ITERATIONS when larger."""
    response_format: dict[str, Any] | None = None
    """Structured output (``json_object`` / ``json_schema``), sent on every model call of the turn: any of them may
    be the one that answers."""

    def client_tool_names(self) -> set[str]:
        return {t["function"]["name"] for t in self.client_tools}
