"""Client-supplied MCP servers on ``/v1/responses`` (OpenAI's hosted ``mcp`` tool) and the output items that report
them: checks that run before any connection, ``mcp_list_tools`` / ``mcp_call`` item builders, and the same items
read back when a client sends them as input.

A request's server is accepted only when its ``server_url`` starts with a prefix in MCP_ALLOWED_URLS (at a path
boundary), is not a link-local or cloud-metadata address whatever the list says (the host's addresses are looked
up first), and ``require_approval`` is ``"never"`` (approvals do not exist here yet). Anything else is a 400 that
names the URL or the field, and nothing is sent to the server.

Usage::

    servers = await client_servers(body.tools, settings)        # [] when the request has no mcp tool
    list_tools_item("docs", tools)                              # {"type": "mcp_list_tools", ...}
    call_item("call_1", "search", '{"q": "x"}', "docs", '{"result": "..."}', ok=True)
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, StrictStr

from chatloop.api.errors import RequestError
from chatloop.config import MCP_LABEL, MCPServerConfig, Settings
from chatloop.tools.mcp import TOOL_ERROR_PREFIX, offered_name

DEFAULT_TIMEOUT_SECONDS = 10.0
RESOLVE_TIMEOUT_SECONDS = 1.0
METADATA_ADDRESSES = (
    "169.254.169.254",  # AWS, GCP, Azure, ...
    "169.254.170.2",  # ECS task metadata
    "fd00:ec2::254",  # AWS IMDS over IPv6
    "100.100.100.200",  # Alibaba Cloud
)


# --- the request's mcp tools ------------------------------------------------------------------------
async def client_servers(
    tools: Sequence[Any] | None, settings: Settings, reserved: Iterable[str] = ()
) -> list[MCPServerConfig]:
    """The request's ``mcp`` tools as servers to list for this turn, each checked (a ``RequestError`` 400 naming
    what is wrong; no connection is made before every check passed). ``reserved``: labels taken by the
    operator's servers."""
    requested = [t for t in tools or [] if getattr(t, "type", None) == "mcp"]
    if not requested:
        return []
    prefixes = settings.mcp_url_prefixes()
    taken = set(reserved)
    servers: list[MCPServerConfig] = []
    for i, tool in enumerate(requested):
        param = f"tools[{i}]"
        label = tool.server_label
        if not MCP_LABEL.match(label):
            raise RequestError(
                400,
                "invalid_request",
                f"{param}.server_label must be 1-32 letters, digits or hyphens, starting with a letter",
                f"{param}.server_label",
            )
        if label in taken:
            raise RequestError(
                400,
                "invalid_request",
                f"{param}.server_label {label!r} is already in use",
                f"{param}.server_label",
            )
        taken.add(label)
        if tool.connector_id is not None or not tool.server_url:
            raise RequestError(
                400,
                "unsupported_parameter",
                f"{param}: only server_url is supported (no connectors)",
                f"{param}.server_url",
            )
        if tool.require_approval != "never":
            raise RequestError(
                400,
                "unsupported_parameter",
                f"{param}.require_approval: approvals are not supported by this server; "
                'send "require_approval": "never"',
                f"{param}.require_approval",
            )
        prefix = allowed_prefix(tool.server_url, prefixes)
        if prefix is None:
            raise RequestError(
                400,
                "invalid_request",
                f"{param}.server_url {tool.server_url!r} is not allowed on this server (MCP_ALLOWED_URLS)",
                f"{param}.server_url",
            )
        await refuse_internal_addresses(tool.server_url, f"{param}.server_url")
        headers = checked_headers(tool.headers or {}, f"{param}.headers")
        if tool.authorization:
            headers["Authorization"] = f"Bearer {tool.authorization}"
        servers.append(
            MCPServerConfig(
                label=label,
                url=tool.server_url,
                headers=headers,
                allowed_tools=allowed_tool_names(tool.allowed_tools, f"{param}.allowed_tools"),
                timeout_seconds=DEFAULT_TIMEOUT_SECONDS,
                url_prefix=prefix,
            )
        )
    return servers


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
_RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "mcp-session-id"}


def checked_headers(headers: dict[str, str], param: str) -> dict[str, str]:
    """The request's headers for its server: valid names, no control characters in values, none the transport
    owns (a 400 naming the header, never its value)."""
    for name, value in headers.items():
        if not _HEADER_NAME.match(name) or name.lower() in _RESERVED_HEADERS:
            raise RequestError(400, "invalid_request", f"{param}: header {name[:64]!r} is not allowed", param)
        if len(value) > 8192 or any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value):
            raise RequestError(
                400,
                "invalid_request",
                f"{param}: the value of header {name!r} is not a valid header value",
                param,
            )
    return dict(headers)


def allowed_prefix(url: str, prefixes: Sequence[str]) -> str | None:
    """The MCP_ALLOWED_URLS prefix ``url`` falls under, or None. A prefix matches at a boundary only
    (``http://a.example`` never admits ``http://a.example.evil.test``), and a URL carrying credentials
    (``user@host``) never matches.

    >>> allowed_prefix("http://127.0.0.1:9000/mcp", ["http://127.0.0.1:9000/"])
    'http://127.0.0.1:9000/'
    >>> allowed_prefix("http://127.0.0.1:9001/mcp", ["http://127.0.0.1:9000"]) is None
    True
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return None
    if parts.scheme not in {"http", "https"} or not parts.hostname or "@" in parts.netloc:
        return None
    for prefix in prefixes:
        if not url.startswith(prefix):
            continue
        rest = url[len(prefix) :]
        if prefix.endswith("/") or rest == "" or rest[0] in "/?#":
            return prefix
    return None


async def refuse_internal_addresses(url: str, param: str) -> None:
    """A 400 when ``url``'s host is, or resolves to, a link-local or cloud-metadata address (MCP_ALLOWED_URLS
    cannot allow them). A host that does not resolve passes: the connection fails and the server is skipped."""
    import ipaddress
    import socket

    host = urlsplit(url).hostname or ""
    addresses: set[str] = {host}
    try:
        ipaddress.ip_address(host)
    except ValueError:
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT_SECONDS
            )
            addresses |= {str(info[4][0]) for info in infos}
        except (OSError, TimeoutError):
            pass
    for address in addresses:
        if internal_address(address):
            raise RequestError(
                400,
                "invalid_request",
                f"{param} {url!r} points at a link-local or metadata address, which is never allowed",
                param,
            )


def internal_address(text: str) -> bool:
    """Link-local (169.254.0.0/16, fe80::/10, IPv4-mapped too) or a cloud metadata address.

    >>> internal_address("169.254.169.254"), internal_address("127.0.0.1"), internal_address("::ffff:169.254.1.1")
    (True, False, True)
    """
    import ipaddress  # only when a request names an MCP server

    try:
        address = ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_link_local or address in {ipaddress.ip_address(a) for a in METADATA_ADDRESSES}


def allowed_tool_names(value: Any, param: str) -> tuple[str, ...] | None:
    """``allowed_tools`` as a list of names (or OpenAI's ``{"tool_names": [...]}`` filter); None: every tool."""
    if value is None:
        return None
    if isinstance(value, dict) and set(value) <= {"tool_names"}:
        value = value.get("tool_names")
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise RequestError(
        400,
        "invalid_request",
        f'{param} must be a list of tool names or {{"tool_names": [...]}} (read_only filters are not supported)',
        param,
    )


# --- output items ------------------------------------------------------------------------------------
def list_tools_item(
    server_label: str, tools: Iterable[Any], error: str | None = None, item_id: str | None = None
) -> dict[str, Any]:
    """OpenAI's ``mcp_list_tools`` output item: the server's tools under their own names (``tools`` are
    ``MCPTool``s: ``source_name``, ``description``, ``parameters``), or the ``error`` that kept it from listing."""
    return {
        "id": item_id or f"mcpl_{uuid.uuid4().hex}",
        "type": "mcp_list_tools",
        "server_label": server_label,
        "tools": [
            {
                "name": t.source_name,
                "description": t.description,
                "input_schema": t.parameters,
                "annotations": None,
            }
            for t in tools
        ],
        "error": error,
    }


def call_item(
    call_id: str,
    name: str,
    arguments: str,
    server_label: str,
    content: str | None,
    ok: bool,
    status: Literal["completed", "failed", "in_progress"] | None = None,
) -> dict[str, Any]:
    """OpenAI's ``mcp_call`` output item for one call: ``name`` is the server's own tool name, ``content`` the
    tool message the model got (``{"result": ...}`` or ``{"error": ...}``); None while the call is running."""
    output: str | None = None
    error: dict[str, Any] | None = None
    if content is not None:
        try:
            body = json.loads(content)
        except ValueError:
            body = {"result": content}
        body = body if isinstance(body, dict) else {"result": body}
        if ok and "error" not in body:
            result = body.get("result", "")
            output = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        else:
            message = str(body.get("error") or "the call failed")
            error = (
                {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": message}]}
                if message.startswith(TOOL_ERROR_PREFIX)
                else {"type": "mcp_protocol_error", "code": -32603, "message": message}
            )
    return {
        "id": call_id if call_id.startswith("mcp_") else f"mcp_{call_id}",
        "type": "mcp_call",
        "server_label": server_label,
        "name": name,
        "arguments": arguments,
        "output": output,
        "error": error,
        "status": status
        or ("in_progress" if content is None else "completed" if error is None else "failed"),
        "approval_request_id": None,
    }


Emit = Callable[..., str]
"""Frames one Responses stream event: ``emit(kind, **fields)`` (the renderer's numbered framer)."""


def started_call_item(start: dict[str, Any]) -> dict[str, Any]:
    """The ``mcp_call`` item of a ``tool_call_start`` event of a tool that runs on a server (in progress)."""
    return call_item(
        start["id"],
        start.get("server_tool") or start["name"],
        start["arguments"],
        start["server"],
        None,
        ok=False,
    )


def finish_call_item(item: dict[str, Any], result: dict[str, Any]) -> None:
    """``item`` completed (or failed) from its ``tool_call_result`` event."""
    finished = call_item(
        item["id"],
        item["name"],
        item["arguments"],
        item["server_label"],
        result["content"],
        result["status"] == "ok",
    )
    item.update(output=finished["output"], error=finished["error"], status=finished["status"])


def call_started_frames(emit: Emit, item: dict[str, Any], index: int) -> list[str]:
    """A call's stream events as it starts: the item added, its arguments, ``response.mcp_call.in_progress``."""
    where = {"item_id": item["id"], "output_index": index}
    return [
        emit("response.output_item.added", output_index=index, item=dict(item)),
        emit("response.mcp_call_arguments.delta", **where, delta=item["arguments"]),
        emit("response.mcp_call_arguments.done", **where, arguments=item["arguments"]),
        emit("response.mcp_call.in_progress", **where),
    ]


def call_finished_frames(emit: Emit, item: dict[str, Any], index: int) -> list[str]:
    """A call's stream events as it ends: ``response.mcp_call.completed`` (or ``.failed``), the item done."""
    where = {"item_id": item["id"], "output_index": index}
    kind = "response.mcp_call.completed" if item["status"] == "completed" else "response.mcp_call.failed"
    return [emit(kind, **where), emit("response.output_item.done", output_index=index, item=dict(item))]


def list_tools_frames(emit: Emit, item: dict[str, Any], index: int) -> list[str]:
    """An ``mcp_list_tools`` item's stream events: added, in progress, completed (or failed), done."""
    where = {"item_id": item["id"], "output_index": index}
    listing = {**item, "tools": []}
    kind = "response.mcp_list_tools.failed" if item["error"] else "response.mcp_list_tools.completed"
    return [
        emit("response.output_item.added", output_index=index, item=listing),
        emit("response.mcp_list_tools.in_progress", **where),
        emit(kind, **where),
        emit("response.output_item.done", output_index=index, item=dict(item)),
    ]


def listed_items(servers: Sequence[MCPServerConfig], turn: Any) -> list[dict[str, Any]]:
    """One ``mcp_list_tools`` item per client-supplied server of the request, in its order: the tools it offered
    this turn (a ``TurnTools``), or why it could not list them."""
    by_server = turn.by_server()
    return [
        list_tools_item(s.label, by_server.get(s.label, []), error=turn.skipped.get(s.label)) for s in servers
    ]


# --- the same items, sent back as input -------------------------------------------------------------
class McpListToolsInput(BaseModel):
    """An ``mcp_list_tools`` item from an earlier response: what a server offered then, nothing the model needs
    now (this turn lists the servers again); a conversation keeps it as it was."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["mcp_list_tools"]
    server_label: StrictStr = ""
    tools: list[dict[str, Any]] = []
    error: StrictStr | None = None


class McpCallInput(BaseModel):
    """An ``mcp_call`` item from an earlier response, read back as the tool call and tool message it was."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["mcp_call"]
    id: StrictStr
    server_label: StrictStr
    name: StrictStr
    arguments: StrictStr
    output: StrictStr | None = None
    error: Any = None
    status: StrictStr | None = None

    def messages(self) -> list[dict[str, Any]]:
        """An assistant message calling ``<server_label>__<name>`` and the tool message that answered it."""
        name = offered_name(self.server_label, self.name)
        call = {"id": self.id, "type": "function", "function": {"name": name, "arguments": self.arguments}}
        if self.output is not None and not self.error:
            content = json.dumps({"result": self.output}, ensure_ascii=False)
        else:
            content = json.dumps({"error": _error_text(self.error)}, ensure_ascii=False)
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": self.id, "name": name, "content": content},
        ]


def _error_text(error: Any) -> str:
    if isinstance(error, str) and error:
        return error
    if isinstance(error, dict):
        if isinstance(error.get("message"), str):
            return str(error["message"])
        texts = [c.get("text") for c in error.get("content") or [] if isinstance(c, dict)]
        if any(texts):
            return " ".join(t for t in texts if isinstance(t, str))
    return "the call failed"
