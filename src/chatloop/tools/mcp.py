"""Tools from MCP servers: listed when a turn first needs them, offered beside the built-in tool, called over
streamable HTTP with the official ``mcp`` SDK (imported here only, on first use: ``import app`` never loads it).

**Naming rule.** A server's tool is offered as ``<label>__<tool>``: the server's label (letters, digits and
hyphens, so the first ``__`` always ends it), two underscores, then the server's own tool name. Characters a
model API refuses in a name (anything but letters, digits, ``_`` and ``-``), and names past 64 characters, are
replaced or cut, and such a name ends with ``_`` and 6 hex digits of the original name's SHA-256, so two tools never
share a name. The name depends on nothing but the label and the tool's name: it is the same after a restart
with the same MCP_SERVERS. Built-in tools have no ``__`` in their names, so an MCP tool never shadows
``execute_javascript``. The description is the server's own text.

Each ``MCPTool`` is a ``Tool`` like any other: the engine budgets it (``TOOL_BUDGETS`` by its offered name, else
MCP_TOOL_BUDGET), guards it against duplicates and loops, caps its message and logs one decision line naming it
and its server (``source``). A call never outlives the request's deadline nor the server's own timeout, and
every failure is a tool error message that says in words what happened.

Usage::

    servers = MCPServers(settings)                       # one per container (the Runtime keeps it)
    listed = await servers.tools_for_turn(deadline)      # tools of every reachable server, and who was skipped
    result = await listed.tools[0].run({"query": "lambda"}, deadline)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from chatloop.config import MCP_PLACEHOLDER, MCPServerConfig, Settings
from chatloop.deadline import Deadline
from chatloop.observability import MCP_METRIC_SERVERS, logger, redact
from chatloop.textsafe import text_safe, text_safe_value
from chatloop.tools.base import ToolResult, fit_tool_message

if TYPE_CHECKING:
    from mcp import Client

T = TypeVar("T")

NAME_SEPARATOR = "__"
MAX_NAME_LENGTH = 64
MAX_EVENT_BYTES = 4 * 1024 * 1024
"""The largest SSE event read from a server (a result of several MB is read, then cut to 16 KiB for the model)."""
FAILURE_RETRY_SECONDS = 30.0
"""A server that failed to list its tools is skipped (with its reason logged) for this long before it is tried
again, so a server that hangs does not cost every turn its listing timeout."""
_SAFE = re.compile(r"[^A-Za-z0-9_-]")
MAX_TOOLS_PER_SERVER = 64
MAX_LIST_PAGES = 10
MAX_DESCRIPTION_CHARS = 2048
MAX_SCHEMA_BYTES = 16 * 1024
"""What one server may put in front of the model: more tools, pages, or larger definitions are dropped (logged), so
a server's definitions cannot grow a request without bound."""
TOOL_ERROR_PREFIX = "the tool reported an error"
"""How a result the server marked ``isError`` begins (the Responses API reports it as a tool execution error)."""


def offered_name(label: str, tool_name: str) -> str:
    """The name a server's tool is offered under (see the module's naming rule).

    >>> offered_name("docs", "search")
    'docs__search'
    >>> offered_name("docs", "read.file")
    'docs__read_file_0ae3f5'
    """
    base = f"{label}{NAME_SEPARATOR}{tool_name}"
    safe = _SAFE.sub("_", base)
    if safe == base and len(base) <= MAX_NAME_LENGTH:
        return base
    digest = hashlib.sha256(tool_name.encode()).hexdigest()[:6]
    return f"{safe[: MAX_NAME_LENGTH - 7]}_{digest}"


class MCPCallError(Exception):
    """A call or listing that failed, said in words (the tool message the model gets, and the logged reason)."""


@dataclass(frozen=True)
class ListedTool:
    """One tool as the server listed it."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class Listing:
    tools: list[ListedTool]
    protocol_version: str | None
    at: float


class MCPServer:
    """One server: its configuration with the header values filled in, and calls to it.

    Header values are kept here only: they are sent to the server and used to redact what it returns, never
    logged, put in an event or a response, or shown to the model."""

    def __init__(self, config: MCPServerConfig, headers: dict[str, str]):
        self.config = config
        self.label = config.label
        self._headers = headers
        self._secrets = sorted({v for v in headers.values() if v}, key=len, reverse=True)
        self.protocol_version: str | None = None

    def redact(self, text: str) -> str:
        """``text`` without this server's header values (nor any registered secret)."""
        for secret in self._secrets:
            text = text.replace(secret, "[REDACTED]")
        return redact(text)

    @asynccontextmanager
    async def session(self, timeout: float, statuses: list[int]) -> AsyncIterator[Client]:
        """A connected client for one listing or call. A client-supplied server's requests (redirects included)
        never leave its allowed URL prefix; the HTTP status of every response is appended to ``statuses`` (the
        SDK reports a refusal without it)."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        prefix = self.config.url_prefix

        async def stay_under_prefix(request: httpx2.Request) -> None:
            if prefix is not None and not str(request.url).startswith(prefix):
                raise MCPCallError(
                    "the server redirected outside the allowed URL prefix; the request was not sent"
                )

        async def note_status(response: httpx2.Response) -> None:
            statuses.append(response.status_code)

        hooks: dict[str, list[Callable[[Any], Awaitable[None]]]] = {
            "request": [stay_under_prefix],
            "response": [note_status],
        }
        known = self.protocol_version
        # A server already listed speaks a known version: a modern one is adopted without the discovery probe.
        mode = known if known in MODERN_PROTOCOL_VERSIONS else "auto"
        async with httpx2.AsyncClient(
            headers=self._headers, timeout=httpx2.Timeout(timeout), event_hooks=hooks
        ) as http:
            transport = streamable_http_client(
                self.config.url, http_client=http, max_sse_event_size=MAX_EVENT_BYTES
            )
            async with Client(transport, mode=mode, read_timeout_seconds=timeout, cache=None) as client:
                yield client

    async def list_tools(self, timeout: float) -> Listing:
        async def listing(statuses: list[int]) -> Listing:
            async with self.session(timeout, statuses) as client:
                tools: list[ListedTool] = []
                cursor: str | None = None
                for _ in range(MAX_LIST_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools += filter(None, (self._checked(t) for t in page.tools))
                    cursor = page.next_cursor
                    if not cursor:
                        break
                if len(tools) > MAX_TOOLS_PER_SERVER:
                    logger.warning(
                        f"MCP server lists too many tools: server={self.label} listed={len(tools)} "
                        f"offered={MAX_TOOLS_PER_SERVER}"
                    )
                return Listing(tools[:MAX_TOOLS_PER_SERVER], client.protocol_version, time.monotonic())

        listed = await self._bounded(listing, timeout, "listing its tools")
        self.protocol_version = listed.protocol_version
        return listed

    def _checked(self, tool: Any) -> ListedTool | None:
        """A listed tool as offered: its text made safe and its description capped; a tool whose schema is not an
        object schema of reasonable size is left out (logged)."""
        name = text_safe(str(tool.name))
        schema = text_safe_value(tool.input_schema) if isinstance(tool.input_schema, dict) else None
        if not name or schema is None or schema.get("type", "object") != "object":
            logger.warning(
                f"MCP tool not offered: server={self.label} tool={name[:80]} reason=invalid_schema"
            )
            return None
        if len(json.dumps(schema, ensure_ascii=False).encode()) > MAX_SCHEMA_BYTES:
            logger.warning(
                f"MCP tool not offered: server={self.label} tool={name[:80]} reason=schema_too_large"
            )
            return None
        description = text_safe(tool.description or "")[:MAX_DESCRIPTION_CHARS]
        return ListedTool(name, description, {"type": "object", **schema})

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> ToolResult:
        started = time.perf_counter()

        async def calling(statuses: list[int]) -> Any:
            async with self.session(timeout, statuses) as client:
                return await client.call_tool(tool, arguments)

        try:
            result = await self._bounded(calling, timeout, f"running {tool}")
            content, ok, error = describe_result(result, self.redact)
        except MCPCallError as exc:
            message = self.redact(str(exc))
            content, ok, error = fit_tool_message({"error": message}), False, message
        return ToolResult(
            content=content, ok=ok, error=error, duration_ms=(time.perf_counter() - started) * 1000
        )

    async def _bounded(self, work: Callable[[list[int]], Awaitable[T]], timeout: float, doing: str) -> T:
        """``work`` within ``timeout`` seconds, every failure an ``MCPCallError`` in words."""
        statuses: list[int] = []
        try:
            async with asyncio.timeout(timeout):
                return await work(statuses)
        except TimeoutError:
            raise MCPCallError(
                f"MCP server {self.label!r} timed out after {timeout:.1f} s while {doing}"
            ) from None
        except MCPCallError as exc:
            raise MCPCallError(self.redact(str(exc))) from None
        except Exception as exc:  # the SDK wraps transport errors in exception groups
            refused = [s for s in statuses if s >= 400]
            status = f" (HTTP {refused[-1]})" if refused else ""
            reason = self.redact(_reason(exc))  # an HTTP client's error may quote a header value
            raise MCPCallError(f"MCP server {self.label!r} failed while {doing}: {reason}{status}") from None


def _reason(exc: BaseException) -> str:
    """The innermost error of ``exc``, in words, without its traceback (and never a header: redacted after)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPCallError):
        return str(exc)
    try:
        import httpx2
    except ImportError:  # pragma: no cover - the SDK depends on it
        httpx2 = None  # type: ignore[assignment]
    if httpx2 is not None:
        if isinstance(exc, httpx2.ConnectError):
            return "could not connect (the server is down or unreachable)"
        if isinstance(exc, httpx2.HTTPStatusError):
            return f"the server answered HTTP {exc.response.status_code}"
        if isinstance(exc, httpx2.TimeoutException):
            return "timed out"
    from mcp import MCPError
    from pydantic import ValidationError

    if isinstance(exc, MCPError):
        return f"the server answered with an error: {exc.message}"
    if isinstance(exc, ValidationError):
        return "the server's answer was malformed (not a valid MCP result)"
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def describe_result(result: Any, clean: Callable[[str], str]) -> tuple[str, bool, str | None]:
    """``(tool message, ok, error)`` from a ``CallToolResult``: text blocks as they are, other blocks (images,
    audio, resources) described in words, ``isError`` results as errors, everything cleaned of secrets and fitted
    to 16 KiB."""
    try:
        blocks = list(result.content)
        is_error = bool(result.is_error)
        structured = result.structured_content
    except AttributeError:
        message = "the MCP server's result was malformed (no content)"
        return fit_tool_message({"error": message}), False, message
    parts = [_describe_block(b) for b in blocks]
    text = "\n".join(p for p in parts if p)
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False, default=str)
    text = clean(text_safe(text))
    if is_error:
        message = f"{TOOL_ERROR_PREFIX}: {text or 'no details given'}"
        return fit_tool_message({"error": message}), False, message[:500]
    return fit_tool_message({"result": text}), True, None


def _describe_block(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in {"image", "audio"}:
        size = len(getattr(block, "data", "") or "") * 3 // 4
        return f"[{kind} returned by the tool: {getattr(block, 'mime_type', '?')}, about {size} bytes, not shown]"
    if kind == "resource_link":
        return f"[resource link: {block.uri}{f' ({block.name})' if getattr(block, 'name', None) else ''}]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f"[resource {resource.uri}]\n{text}"
        size = len(getattr(resource, "blob", "") or "") * 3 // 4
        mime = getattr(resource, "mime_type", None) or "binary"
        return f"[resource {resource.uri}: {mime}, about {size} bytes, not shown]"
    return f"[a {kind or 'malformed'} block the tool returned, not shown]"


class MCPTool:
    """One server's tool, as the engine offers it (the ``Tool`` protocol, with ``source`` and ``default_budget``)."""

    def __init__(self, server: MCPServer, listed: ListedTool, default_budget: int):
        self.server = server
        self.name = offered_name(server.label, listed.name)
        self.description = listed.description
        self.parameters = listed.input_schema
        self.source = server.label
        """The server's label: logged on the decision line and carried by the tool-call events."""
        self.source_name = listed.name
        """The tool's own name on its server (what an ``mcp_call`` item names)."""
        self.default_budget = default_budget

    async def run(self, arguments: dict[str, Any], deadline: Deadline) -> ToolResult:
        timeout = deadline.cap(self.server.config.timeout_seconds)
        if timeout <= 0.05:
            message = f"MCP server {self.server.label!r} was not called: no time left in this request"
            return ToolResult(content=fit_tool_message({"error": message}), ok=False, error=message)
        return await self.server.call(self.source_name, arguments, timeout)


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
                tool = MCPTool(server, listed, self.settings.mcp_tool_budget)
                if tool.name in names:
                    logger.warning(
                        f"MCP tool not offered: server={config.label} tool={tool.name} reason=name_taken"
                    )
                    continue
                names.add(tool.name)
                turn.tools.append(tool)
        return turn

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
        if cached:
            self._listings[config.label] = listing
            self._failures.pop(config.label, None)
        return server, listing

    async def _server(self, config: MCPServerConfig) -> MCPServer:
        """The operator's server with its header placeholders filled (once per container)."""
        server = self._servers.get(config.label)
        if server is None:
            server = MCPServer(config, await self._filled_headers(config))
            self._servers[config.label] = server
        return server

    async def _filled_headers(self, config: MCPServerConfig) -> dict[str, str]:
        names = {n for v in config.headers.values() for n in MCP_PLACEHOLDER.findall(v)}
        if not names:
            return dict(config.headers)
        loader = self._secrets_loader
        if loader is None:
            from chatloop.secrets import load_named_secrets

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
