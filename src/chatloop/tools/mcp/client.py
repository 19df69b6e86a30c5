"""One MCP server over streamable HTTP through the ``mcp`` SDK (imported on first use): its tool list, and calls
to its tools, each in a session of its own, bounded in time, every failure an ``MCPCallError`` in words."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

from chatloop.config import MCPServerConfig, under_prefix
from chatloop.observability import logger
from chatloop.pinning import pinned_transport
from chatloop.redaction import redact
from chatloop.textsafe import text_safe, text_safe_value
from chatloop.tools.base import ToolResult, fit_tool_message
from chatloop.tools.mcp.results import describe_result

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import CallToolResult, RequestParamsMeta, Tool

T = TypeVar("T")

MAX_EVENT_BYTES = 4 * 1024 * 1024
"""The largest SSE event read from a server (a result of several MB is read, then cut to 16 KiB for the model)."""
MAX_TOOLS_PER_SERVER = 64
MAX_LIST_PAGES = 10
MAX_DESCRIPTION_CHARS = 2048
MAX_SCHEMA_BYTES = 16 * 1024
"""What one server may put in front of the model: more tools, pages, or larger definitions are dropped (logged), so
a server's definitions cannot grow a request without bound."""


def load_sdk() -> None:
    """Import the ``mcp`` SDK (and its HTTP client): ~1 s the first time in a container, nothing after. Done before
    a listing's timeout starts, so a cold container does not spend its listing time importing."""
    import httpx2  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401


class MCPCallError(Exception):
    """A call or listing that failed, said in words (the tool message the model gets, and the logged reason)."""


@dataclass(frozen=True)
class ListedTool:
    """One tool as the server listed it."""

    name: str
    description: str
    input_schema: dict[str, object]
    """A JSON object schema (``type: object``), its text made safe."""


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
        never leave its allowed URL prefix and connect only to the addresses checked for it (``chatloop.pinning``); the HTTP status of every response is appended to ``statuses`` (the
        SDK reports a refusal without it)."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        prefix = self.config.url_prefix

        async def stay_under_prefix(request: httpx2.Request) -> None:
            if prefix is not None and not under_prefix(str(request.url), prefix):
                raise MCPCallError(
                    "the server redirected outside the allowed URL prefix; the request was not sent"
                )

        async def note_status(response: httpx2.Response) -> None:
            statuses.append(response.status_code)

        known = self.protocol_version
        # A server already listed speaks a known version: a modern one is adopted without the discovery probe.
        mode = known if known in MODERN_PROTOCOL_VERSIONS else "auto"
        pinned = self.config.addresses
        async with httpx2.AsyncClient(
            headers=self._headers,
            timeout=httpx2.Timeout(timeout),
            event_hooks={"request": [stay_under_prefix], "response": [note_status]},
            transport=None if pinned is None else pinned_transport(httpx2.URL(self.config.url).host, pinned),
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

    def _checked(self, tool: Tool) -> ListedTool | None:
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

    async def call(
        self, tool: str, arguments: dict[str, object], timeout: float, meta: dict[str, str] | None = None
    ) -> ToolResult:
        """``meta``: sent as the request's ``params._meta`` (the caller's trace context, ``traceparent``)."""
        started = time.perf_counter()

        async def calling(statuses: list[int]) -> CallToolResult:
            async with self.session(timeout, statuses) as client:
                if meta:
                    return await client.call_tool(tool, arguments, meta=cast("RequestParamsMeta", meta))
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
