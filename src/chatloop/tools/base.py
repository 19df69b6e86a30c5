"""The Tool protocol and the registry the engine offers tools from.

Usage::

    registry = ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    registry.schemas(["execute_javascript"])     # OpenAI tool definitions for a model request
    result = await registry.get("execute_javascript").run({"code": "1+1"}, deadline)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from chatloop.deadline import Deadline


@dataclass
class ToolResult:
    content: str
    """The tool message content sent back to the model (a JSON string for built-in tools)."""
    ok: bool
    """True when the tool produced a usable result (no error)."""
    error: str | None = None
    duration_ms: float = 0.0


@runtime_checkable
class Tool(Protocol):
    """A tool the engine may offer. Read-only members, so a class attribute (a constant schema) satisfies them."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments."""
        ...

    async def run(self, arguments: dict[str, Any], deadline: Deadline) -> ToolResult: ...


def tool_schema(tool: Tool) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()):
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def schemas(self, names: Iterable[str]) -> list[dict[str, Any]]:
        return [tool_schema(self._tools[n]) for n in names if n in self._tools]
