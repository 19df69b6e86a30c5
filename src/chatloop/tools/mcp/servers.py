"""The operator's MCP servers for the life of the container, and the tools one turn may use from them and from a
request's own servers."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chatloop.config import MCP_PLACEHOLDER, MCPServerConfig, Settings
from chatloop.deadline import Deadline
from chatloop.observability import MCP_METRIC_SERVERS, logger
from chatloop.redaction import register_secret
from chatloop.secrets import load_named_secrets
from chatloop.tools.base import ToolResult, fit_tool_message
from chatloop.tools.mcp.client import ListedTool, Listing, MCPCallError, MCPServer, load_sdk
from chatloop.tools.mcp.naming import offered_name
from chatloop.tracing import tool_trace_context

SENSITIVE_HEADER = re.compile(r"authorization|cookie|key|token|secret|password|auth", re.IGNORECASE)
"""Header names whose values are redacted everywhere (any log line or response), not only from the server's results."""
FAILURE_RETRY_SECONDS = 30.0
"""A server that failed to list its tools is skipped (with its reason logged) for this long before it is tried
again, so a server that hangs does not cost every turn its listing timeout."""


class MCPTool:
    """One server's tool, as the engine offers it (the ``Tool`` protocol, with ``source`` and ``default_cap``)."""

    def __init__(self, server: MCPServer, listed: ListedTool, default_cap: int):
        self.server = server
        self.name = offered_name(server.label, listed.name)
        self.description = listed.description
        self.parameters = listed.input_schema
        self.source = server.label
        """The server's label: logged on the decision line and carried by the tool-call events."""
        self.source_name = listed.name
        """The tool's own name on its server (what an ``mcp_call`` item names)."""
        self.default_cap = default_cap

    async def run(self, arguments: dict[str, Any], deadline: Deadline) -> ToolResult:
        timeout = deadline.cap(self.server.config.timeout_seconds)
        if timeout <= 0.05:
            message = f"MCP server {self.server.label!r} was not called: no time left in this request"
            return ToolResult(content=fit_tool_message({"error": message}), ok=False, error=message)
        # Traced, the call carries its span's context (the MCP conventions: in params._meta) so the server's own
        # spans join the turn's trace.
        return await self.server.call(
            self.source_name, arguments, timeout, tool_trace_context(self.name, arguments)
        )


@dataclass
class TurnTools:
    """The MCP tools one turn may use, and the servers skipped for it (label -> reason)."""

    tools: list[MCPTool] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def by_server(self) -> dict[str, list[MCPTool]]:
        grouped: dict[str, list[MCPTool]] = {}
        for tool in self.tools:
            grouped.setdefault(tool.source, []).append(tool)
        return grouped


SecretsLoader = Callable[[Settings, Iterable[str]], dict[str, str]]


class MCPServers:
    """The operator's servers (MCP_SERVERS) for the life of the container: their tool lists cached for
    MCP_TOOLS_TTL_SECONDS, a failed server skipped for ``FAILURE_RETRY_SECONDS``."""

    def __init__(self, settings: Settings, secrets_loader: SecretsLoader | None = None):
        self.settings = settings
        self._secrets_loader = secrets_loader
        self._servers: dict[str, MCPServer] = {}
        self._listings: dict[str, Listing] = {}
        self._failures: dict[str, tuple[float, str]] = {}
        MCP_METRIC_SERVERS.update(self.labels())

    @property
    def configured(self) -> bool:
        return bool(self.settings.mcp_servers)

    def labels(self) -> list[str]:
        return [c.label for c in self.settings.mcp_servers]

    async def tools_for_turn(
        self, deadline: Deadline, extra: Sequence[MCPServerConfig] = (), taken: Iterable[str] = ()
    ) -> TurnTools:
        """Every usable tool of the operator's servers and of ``extra`` (a request's own servers, listed for it
        and never cached), listed concurrently within MCP_LIST_TIMEOUT_SECONDS and the deadline's reserve; a
        server that fails is skipped with its reason logged. ``taken`` names no tool may shadow."""
        load_sdk()  # once per container (~1 s), before the listing's clock starts
        timeout = min(
            self.settings.mcp_list_timeout_seconds,
            max(0.0, deadline.remaining() - self.settings.deadline_reserve_seconds),
        )
        own = len(self.settings.mcp_servers)
        configs = [*self.settings.mcp_servers, *extra]
        outcomes = await asyncio.gather(
            *(self._listing(c, timeout, cached=i < own) for i, c in enumerate(configs))
        )
        turn = TurnTools()
        names = set(taken)
        for config, outcome in zip(configs, outcomes, strict=True):
            if isinstance(outcome, str):
                turn.skipped[config.label] = outcome
                logger.warning(
                    f"MCP server skipped for this turn: server={config.label} reason={outcome}",
                    extra={"mcp_server": {"server": config.label, "reason": outcome}},
                )
                continue
            server, listing = outcome
            for listed in listing.tools:
                if config.allowed_tools is not None and listed.name not in config.allowed_tools:
                    continue
                tool = MCPTool(server, listed, self.settings.mcp_tool_limit)
                if tool.name in names:
                    logger.warning(
                        f"MCP tool not offered: server={config.label} tool={tool.name} reason=name_taken"
                    )
                    continue
                names.add(tool.name)
                turn.tools.append(tool)
        return turn

    @staticmethod
    def _say_what_is_missing(config: MCPServerConfig, listing: Listing) -> None:
        """A server that lists no tools (one behind an authorization it did not get, say), or an ``allowed_tools``
        naming tools the server does not have, is a warning, not a silent empty list."""
        listed = {t.name for t in listing.tools}
        absent = sorted(set(config.allowed_tools or ()) - listed)
        if not listed or absent:
            logger.warning(
                f"MCP server offers fewer tools than configured: server={config.label} listed={len(listed)} "
                f"allowed_but_absent={','.join(absent) or '-'}",
                extra={"mcp_server": {"server": config.label, "listed": len(listed), "absent": absent}},
            )

    async def _listing(
        self, config: MCPServerConfig, timeout: float, cached: bool
    ) -> tuple[MCPServer, Listing] | str:
        """The server and its tools, or why it is skipped."""
        now = time.monotonic()
        if cached:
            listing = self._listings.get(config.label)
            if listing is not None and now - listing.at < self.settings.mcp_tools_ttl_seconds:
                return self._servers[config.label], listing
            failure = self._failures.get(config.label)
            if failure is not None and now < failure[0]:
                return f"{failure[1]} (not retried for {failure[0] - now:.0f} s)"
        if timeout <= 0.05:
            return "no time left in this request to list its tools"
        try:
            server = await self._server(config) if cached else MCPServer(config, dict(config.headers))
            listing = await server.list_tools(timeout)
        except MCPCallError as exc:
            reason = str(exc)
            if cached:
                self._failures[config.label] = (time.monotonic() + FAILURE_RETRY_SECONDS, reason)
            return reason
        self._say_what_is_missing(config, listing)  # once per listing, not once per turn
        if cached:
            self._listings[config.label] = listing
            self._failures.pop(config.label, None)
        return server, listing

    async def _server(self, config: MCPServerConfig) -> MCPServer:
        """The operator's server with its header placeholders filled (once per container)."""
        server = self._servers.get(config.label)
        if server is None:
            headers = await self._filled_headers(config)
            for name, value in headers.items():  # a token written straight into MCP_SERVERS is a secret too
                if SENSITIVE_HEADER.search(name):
                    register_secret(value)
            server = MCPServer(config, headers)
            self._servers[config.label] = server
        return server

    async def _filled_headers(self, config: MCPServerConfig) -> dict[str, str]:
        names = {n for v in config.headers.values() for n in MCP_PLACEHOLDER.findall(v)}
        if not names:
            return dict(config.headers)
        loader = self._secrets_loader
        if loader is None:
            loader = load_named_secrets
        try:
            values = await asyncio.to_thread(loader, self.settings, sorted(names))
        except Exception as exc:
            raise MCPCallError(f"its header values could not be read ({type(exc).__name__})") from None
        missing = sorted(names - set(values))
        if missing:
            raise MCPCallError(
                f"its headers name {', '.join(missing)}, set in neither the environment nor the provider-keys secret"
            )
        return {k: MCP_PLACEHOLDER.sub(lambda m: values[m.group(1)], v) for k, v in config.headers.items()}


def quiet_sdk_loggers() -> None:
    """The SDK and its HTTP client log every request at INFO (URLs included): keep them to warnings."""
    for name in ("mcp", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)


quiet_sdk_loggers()
