"""The engine's own limits: what an operator sets for the tool loop, handed in by whoever runs the turn.

The engine knows no ``Settings``: the API builds one ``EngineLimits`` from its settings (``api.runtime``), tests build
them directly.

Usage::

    limits = EngineLimits(max_iterations=4, tool_caps={"execute_javascript": 3})
    run_turn(request, model, registry, Deadline.after(28), limits)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EngineLimits:
    max_iterations: int = 10
    """Model calls per user turn, the final answer included; a request may ask for fewer, never more."""
    deadline_reserve_seconds: float = 4.0
    """Time kept back from tool work so the model can still answer."""
    substantive_answer_chars: int = 200
    """Content longer than this, sent with tool calls, is taken as the answer."""
    legacy_syntax_reminders: int = 2
    """Reminders sent when a model writes a tool call as text that cannot be run."""
    system_prompt_guidance: bool = True
    """Add the offered tools' own guidance (``Tool.guidance``) to the system prompt."""
    tool_caps: Mapping[str, int] = field(default_factory=dict)
    """Runs per tool per turn, by tool name (a tool's own ``default_cap`` applies where none is given)."""
    log_content: bool = False
    """Put message text and tool arguments in the decision log record (off: it can hold personal data)."""
