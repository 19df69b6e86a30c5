"""The Tool protocol and the registry the engine offers tools from.

Usage::

    registry = ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    registry.schemas(["execute_javascript"])     # OpenAI tool definitions for a model request
    result = await registry.get("execute_javascript").run({"code": "1+1"}, deadline)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject


@dataclass
class ToolResult:
    content: str
    """The tool message content sent back to the model (a JSON string for built-in tools)."""
    ok: bool
    """True when the tool produced a usable result (no error)."""
    error: str | None = None
    duration_ms: float = 0.0
    details: dict[str, str | int | float | bool] = dataclasses.field(default_factory=dict)
    """How the run went, for its trace span (the sandbox: ``chatloop.sandbox.cpu_ms``, ``...exit``)."""


@runtime_checkable
class Tool(Protocol):
    """A tool the engine may offer. Read-only members, so a class attribute (a constant schema) satisfies them.

    A tool may also declare its own policy, as class attributes the engine reads (``tool_policy``), so the engine
    never needs to know a tool by name:

    - ``answered_once_succeeded = True``: its first success answers the question: it is withdrawn for the rest of
      the turn, and a later call to it is answered without running (``js_already_succeeded``);
    - ``guidance = "..."``: a sentence for the system prompt on when and how to use it;
    - ``default_cap = 3``: runs per turn unless the operator's TOOL_BUDGETS names it;
    - ``source = "label"``: it runs elsewhere (an MCP server), named in its events and the decision log line.
    """

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments. ``Any``, not ``JSONObject``: a schema written as a class-level literal is
        inferred as ``dict[str, object]``, which a ``dict[str, JSONValue]`` would refuse."""
        ...

    async def run(self, arguments: JSONObject, deadline: Deadline) -> ToolResult: ...


def tool_source(tool: Tool) -> str | None:
    """Where a tool runs, when elsewhere than this process: a tool may declare a ``source`` (an MCP server's
    label, say), which the decision log line and the tool-call events carry."""
    source = getattr(tool, "source", None)
    return source if isinstance(source, str) and source else None


@dataclass(frozen=True)
class ToolPolicy:
    """What a tool declares about how the engine treats it (see ``Tool``)."""

    answered_once_succeeded: bool = False
    guidance: str | None = None


def tool_policy(tool: Tool) -> ToolPolicy:
    """The policy ``tool`` declares; a tool that declares none gets the defaults."""
    answered_once = getattr(tool, "answered_once_succeeded", False)
    guidance = getattr(tool, "guidance", None)
    return ToolPolicy(
        answered_once_succeeded=answered_once is True,
        guidance=guidance if isinstance(guidance, str) and guidance else None,
    )


def tool_schema(tool: Tool) -> JSONObject:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = (), unavailable: Mapping[str, str] | None = None):
        self._tools: dict[str, Tool] = {}
        self.unavailable: dict[str, str] = dict(unavailable or {})
        """Sources whose tools could not be had for this turn (an MCP server's label -> why): the turn reports them."""
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def schemas(self, names: Iterable[str]) -> list[JSONObject]:
        return [tool_schema(self._tools[n]) for n in names if n in self._tools]

    def answered_once(self, names: Iterable[str]) -> frozenset[str]:
        """Those of ``names`` whose first success answers the question (``answered_once_succeeded``)."""
        return frozenset(
            n for n in names if n in self._tools and tool_policy(self._tools[n]).answered_once_succeeded
        )

    def guidance(self, names: Iterable[str]) -> list[str]:
        """The system-prompt guidance the tools ``names`` declare, in their order."""
        policies = [tool_policy(self._tools[n]) for n in names if n in self._tools]
        return [p.guidance for p in policies if p.guidance]

    def source(self, name: str) -> str | None:
        """The ``source`` of tool ``name`` (see ``tool_source``), or None."""
        tool = self._tools.get(name)
        return tool_source(tool) if tool is not None else None

    def origin(self, name: str) -> dict[str, str]:
        """Where tool ``name`` runs, for its events: ``{"server": <source>, "server_tool": <its name there>}`` for a
        tool with a ``source`` (and a ``source_name``), else nothing."""
        tool = self._tools.get(name)
        source = tool_source(tool) if tool is not None else None
        if source is None:
            return {}
        source_name = getattr(tool, "source_name", None)
        return {"server": source, "server_tool": source_name if isinstance(source_name, str) else name}

    def caps(self, configured: Mapping[str, int]) -> dict[str, int]:
        """Executions per tool per turn: ``configured`` (TOOL_BUDGETS) first, then a tool's own
        ``default_cap`` when it declares one (MCP tools do).

        >>> ToolRegistry().caps({"execute_javascript": 3})
        {'execute_javascript': 3}
        """
        caps = dict(configured)
        for name, tool in self._tools.items():
            default = getattr(tool, "default_cap", None)
            if name not in caps and isinstance(default, int) and default > 0:
                caps[name] = default
        return caps

    def with_tools(self, tools: Iterable[Tool], unavailable: Mapping[str, str] | None = None) -> ToolRegistry:
        """A new registry holding this one's tools and ``tools`` (a turn's MCP tools beside the built-in), and the
        sources that were ``unavailable`` for the turn."""
        return ToolRegistry([*self._tools.values(), *tools], {**self.unavailable, **(unavailable or {})})


MAX_TOOL_MESSAGE_BYTES = 16 * 1024
"""A tool message sent to the model is at most this long (UTF-8, as serialised), whatever the tool returned."""


def cap_tool_message(content: str, limit: int = MAX_TOOL_MESSAGE_BYTES) -> str:
    """Any tool's message, at most ``limit`` bytes (UTF-8): the engine applies it to every tool result, whatever the
    tool; a JSON tool fits its own payload first (``fit_tool_message``), so this only cuts what a tool left too long.

    >>> len(cap_tool_message("é" * 20_000).encode()) <= 16 * 1024
    True
    """
    if len(content.encode()) <= limit:
        return content
    note = f"… [cut: the tool's message was {len(content.encode())} bytes]"
    return content.encode()[: limit - len(note.encode())].decode("utf-8", "ignore") + note


def fit_tool_message(payload: JSONObject, limit: int = MAX_TOOL_MESSAGE_BYTES) -> str:
    """``payload`` as JSON of at most ``limit`` bytes: the console ``output`` is cut first, then the ``result``
    (as its JSON text), then the ``error``; each cut field ends with "…" and a ``<field>_truncated`` flag says so.

    >>> len(fit_tool_message({"result": "x" * 100_000, "output": "y" * 100_000}).encode()) <= 16 * 1024
    True
    """
    text = json.dumps(payload, ensure_ascii=False)
    if len(text.encode()) <= limit:
        return text
    fitted = dict(payload)
    for field in ("output", "result", "error"):
        if field not in fitted:
            continue
        value = fitted[field]
        value_text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        while True:
            over = len(json.dumps(fitted, ensure_ascii=False).encode()) - limit
            if over <= 0:
                return json.dumps(fitted, ensure_ascii=False)
            if not value_text:
                break
            # Cut by the overflow, at least a quarter: escapes and multi-byte characters make bytes exceed characters.
            value_text = value_text[: max(0, min(len(value_text) - over, len(value_text) * 3 // 4))]
            fitted[field] = value_text + "…"
            fitted.setdefault(f"{field}_truncated", True)
    return json.dumps({"error": "OutputLimitError: the tool's message was too large", "output": ""})
