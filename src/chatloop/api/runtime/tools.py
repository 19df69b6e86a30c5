"""``Tools``: the container's tools: the built-in ``execute_javascript`` (its sandbox built on first use, its spare
Deno process started once the turn's first model call is in flight) and the MCP servers' tools (listed when a turn
first needs them, cached for the container's life).

Usage::

    tools = Tools(Settings.from_env())
    registry = await tools.for_turn(deadline)              # the built-in tool and the MCP servers' tools
    tools.names()                                          # the built-in tools' names, without starting the sandbox
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from chatloop.config import MCPServerConfig, Settings
from chatloop.deadline import Deadline
from chatloop.providers.warmup import when_in_flight
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool, JavaScriptSandbox
from chatloop.tools.javascript.tool import TOOL_NAME as JAVASCRIPT_TOOL

if TYPE_CHECKING:
    from chatloop.tools.mcp import MCPServers, TurnTools

BUILTIN_TOOLS = (JAVASCRIPT_TOOL,)


class Tools:
    """The registry and the MCP servers, for the life of the container (``settings`` may be swapped by the runtime
    that holds it)."""

    def __init__(self, settings: Settings, registry: ToolRegistry | None = None):
        self.settings = settings
        self._registry = registry
        self._mcp: MCPServers | None = None
        self._lock = threading.Lock()

    def registry(self) -> ToolRegistry:
        with self._lock:
            if self._registry is None:
                sandbox = JavaScriptSandbox(
                    memory_mb=self.settings.js_memory_mb,
                    max_concurrency=self.settings.sandbox_concurrency(),
                    prespawn=self.settings.js_prespawn,
                )
                # Its spare Deno process (~40 ms of CPU to start) starts once the first model call waits on the
                # network, rather than competing with the turn for the CPU before it (a third of a core at 512 MB).
                when_in_flight(sandbox.warm)
                self._registry = ToolRegistry([ExecuteJavaScriptTool(sandbox)])
            return self._registry

    def prime(self) -> None:
        """Build the registry (the sandbox without its process) and, when MCP servers are configured, load the
        ``mcp`` SDK (the servers are listed on first use): what a SnapStart snapshot may hold."""
        self.registry()
        if self.settings.mcp_servers:
            from chatloop.tools.mcp.client import load_sdk

            load_sdk()
            self.mcp_servers()

    def mcp_servers(self) -> MCPServers:
        """The operator's MCP servers (MCP_SERVERS), their tool lists cached for the container's life."""
        if self._mcp is None:
            from chatloop.tools.mcp import MCPServers

            self._mcp = MCPServers(self.settings)
        return self._mcp

    async def mcp_for_turn(
        self, deadline: Deadline, client_servers: Sequence[MCPServerConfig] = ()
    ) -> TurnTools:
        """The MCP tools one turn may use (MCP_SERVERS' and a request's own ``client_servers``), listed when a turn
        first needs them; a server that is down or slow is skipped for the turn, with its reason logged."""
        from chatloop.tools.mcp import TurnTools

        if not self.settings.mcp_servers and not client_servers:
            return TurnTools()
        return await self.mcp_servers().tools_for_turn(deadline, client_servers, taken=self.names())

    async def for_turn(
        self, deadline: Deadline, client_servers: Sequence[MCPServerConfig] = ()
    ) -> ToolRegistry:
        """The registry of one turn: the built-in tool, then every MCP tool reachable for it."""
        registry = self.registry()
        if not self.settings.mcp_servers and not client_servers:
            return registry
        turn = await self.mcp_for_turn(deadline, client_servers)
        return registry.with_tools(turn.tools, turn.skipped)

    def mcp_labels(self) -> list[str]:
        """The labels of the operator's MCP servers: a request's own server may not take one."""
        return [c.label for c in self.settings.mcp_servers]

    def mcp_name(self, name: str) -> bool:
        """Whether ``name`` has the shape of a configured MCP server's tool (``<label>__<tool>``): a request may
        name one before the server's tools are listed."""
        label, sep, tool = name.partition("__")
        return bool(sep and tool) and label in {c.label for c in self.settings.mcp_servers}

    def names(self) -> list[str]:
        """The built-in tools, without starting the sandbox."""
        return self._registry.names() if self._registry is not None else list(BUILTIN_TOOLS)
