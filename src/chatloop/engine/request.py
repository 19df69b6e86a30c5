"""What one user turn asks of the engine.

Usage::

    request = TurnRequest(messages=normalize_conversation(raw_messages), tool_names=["execute_javascript"])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chatloop.engine.messages import Message
from chatloop.jsontypes import JSONObject

if TYPE_CHECKING:
    from chatloop.engine.approvals import ApprovalAnswer
    from chatloop.providers.base import ToolCall


def function_name(tool: Mapping[str, object]) -> str | None:
    """The function name of an OpenAI tool or named tool choice (``{"type": "function", "function": {"name": ...}}``).

    >>> function_name({"type": "function", "function": {"name": "final_answer"}})
    'final_answer'
    """
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


@dataclass
class TurnRequest:
    messages: list[Message]
    """A conversation already checked by ``messages.normalize_conversation``."""
    tool_names: list[str] | None = None
    """Built-in tools enabled for this turn; None: all registered tools; []: none (plan mode)."""
    client_tools: list[JSONObject] = field(default_factory=list)
    """OpenAI function tools the client runs itself: a call to one ends the turn."""
    tool_choice: str | JSONObject | None = None
    """Sent on the first model call of the turn. When it requires a client tool (``required`` or a client tool's
    name, with client tools offered), it holds to the end: the turn's last model call offers the client's tools with
    this choice again, so the turn ends with a call to one of them (OpenAI's contract)."""
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_iterations: int | None = None
    """Lowered to the server's MAX_ITERATIONS when larger."""
    response_format: JSONObject | None = None
    """Structured output (``json_object`` / ``json_schema``), sent on every model call of the turn: any of them may
    be the one that answers."""
    model_params: JSONObject = field(default_factory=dict)
    """Further sampling and output parameters (``stop``, ``seed``, penalties, ``reasoning_effort`` ...), sent on every
    model call as they are; models whose catalog entry does not take one are passed over for the turn."""
    max_tool_calls: int | None = None
    """A cap on the server's own tool runs this turn (the Responses API's ``max_tool_calls``)."""
    allow_trimming: bool = True
    """False (the Responses API's ``truncation: disabled``): a conversation no model can hold is refused, not
    trimmed."""
    approval_required: frozenset[str] = frozenset()
    """Tools (by offered name) whose calls wait for a person's approval (``engine.approvals``)."""
    approvals: tuple[ApprovalAnswer, ...] = ()
    """A person's answers to earlier approval requests: run (or denied) before the turn's first model call."""
    approval_id: Callable[[ToolCall], str] | None = None
    """Makes the id of an approval request for a call (the API seals it to its caller); None: a random id."""

    def requires_client_tool(self) -> bool:
        """Whether ``tool_choice`` obliges the turn to end with a call to a client tool."""
        names = self.client_tool_names()
        if not names:
            return False
        if self.tool_choice == "required":
            return True
        return isinstance(self.tool_choice, dict) and function_name(self.tool_choice) in names

    def client_tool_names(self) -> set[str]:
        return {name for t in self.client_tools if (name := function_name(t)) is not None}
