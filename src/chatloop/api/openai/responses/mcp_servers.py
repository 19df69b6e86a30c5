"""Client-supplied MCP servers on ``/v1/responses`` (OpenAI's hosted ``mcp`` tool): the request's ``mcp`` tools,
checked before any connection is made.

A request's server is accepted only when its ``server_url`` starts with a prefix in MCP_ALLOWED_URLS (at a path
boundary), is not a link-local or cloud-metadata address whatever the list says (the host is resolved once, every
address checked, and the server's connections go to those addresses only), and ``require_approval`` is one of
OpenAI's forms (``api.turns.approvals``). Anything else is a 400 that names the URL or the field, and nothing is sent to
the server.

Usage::

    servers = await client_servers(body.tools, settings)        # [] when the request has no mcp tool
    allowed_prefix("http://127.0.0.1:9000/mcp", ["http://127.0.0.1:9000/"])
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from chatloop.api.http.errors import RequestError
from chatloop.api.turns.approvals import ApprovalRule, approval_rule
from chatloop.config import MCP_LABEL, MCPServerConfig, Settings, under_prefix
from chatloop.netpolicy import NEVER, first_refusal, resolved

DEFAULT_TIMEOUT_SECONDS = 10.0


class ResponsesMcpTool(BaseModel):
    """A client-supplied MCP server (OpenAI's hosted ``mcp`` tool), checked by ``client_servers``.
    Its ``headers`` and ``authorization`` are never echoed back (``exclude``)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["mcp"]
    server_label: StrictStr
    server_url: StrictStr | None = None
    allowed_tools: object = None
    headers: dict[StrictStr, StrictStr] | None = Field(default=None, exclude=True)
    authorization: StrictStr | None = Field(default=None, exclude=True)
    require_approval: object = None
    server_description: StrictStr | None = None
    connector_id: StrictStr | None = None


# --- the request's mcp tools ------------------------------------------------------------------------
async def client_servers(
    tools: Sequence[object] | None,
    settings: Settings,
    reserved: Iterable[str] = (),
    *,
    identified: bool = True,
) -> list[MCPServerConfig]:
    """The request's ``mcp`` tools as servers to list for this turn, each checked (a ``RequestError`` 400 naming
    what is wrong; no connection is made before every check passed). ``reserved``: labels taken by the
    operator's servers; ``identified``: whether the caller has an identity (with none, no server may ask for
    approval: an approval is sealed to its caller, and one sealed to no one would be anyone's)."""
    # Each with its index in the request's whole ``tools`` list, which is what a 400 names.
    requested = [(i, t) for i, t in enumerate(tools or []) if isinstance(t, ResponsesMcpTool)]
    if not requested:
        return []
    prefixes = settings.mcp_url_prefixes()
    taken = set(reserved)
    servers: list[MCPServerConfig] = []
    for i, tool in requested:
        if not identified and approval_rule(tool.require_approval, f"tools[{i}].require_approval").asks():
            raise RequestError(
                400,
                "invalid_request",
                f"tools[{i}].require_approval: approvals need a caller identity (an API key, IAM or an "
                'authorizer) and this request has none; set require_approval to "never", or call with one',
                f"tools[{i}].require_approval",
            )
        servers.append(await _checked_server(tool, f"tools[{i}]", prefixes, taken))
        taken.add(tool.server_label)
    return servers


async def _checked_server(
    tool: ResponsesMcpTool, param: str, prefixes: Sequence[str], taken: set[str]
) -> MCPServerConfig:
    """One request ``mcp`` tool as a server, or the 400 naming its first problem (``taken``: labels in use)."""
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
    if tool.connector_id is not None or not tool.server_url:
        raise RequestError(
            400,
            "unsupported_parameter",
            f"{param}: only server_url is supported (no connectors)",
            f"{param}.server_url",
        )
    approval_rule(tool.require_approval, f"{param}.require_approval")  # a 400 for a shape it cannot read
    prefix = allowed_prefix(tool.server_url, prefixes)
    if prefix is None:
        raise RequestError(
            400,
            "invalid_request",
            f"{param}.server_url {tool.server_url!r} is not allowed on this server (MCP_ALLOWED_URLS)",
            f"{param}.server_url",
        )
    addresses = await checked_addresses(tool.server_url, f"{param}.server_url")
    headers = checked_headers(tool.headers or {}, f"{param}.headers")
    if tool.authorization:
        headers["Authorization"] = f"Bearer {tool.authorization}"
    return MCPServerConfig(
        label=label,
        url=tool.server_url,
        headers=headers,
        allowed_tools=allowed_tool_names(tool.allowed_tools, f"{param}.allowed_tools"),
        timeout_seconds=DEFAULT_TIMEOUT_SECONDS,
        url_prefix=prefix,
        addresses=addresses,
    )


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
        if under_prefix(url, prefix):
            return prefix
    return None


async def checked_addresses(url: str, param: str) -> tuple[str, ...]:
    """Every address ``url``'s host resolves to, resolved once, each checked: a 400 when one is link-local or a
    cloud-metadata address (MCP_ALLOWED_URLS cannot allow them; the policy is ``chatloop.netpolicy``'s, which
    webhooks share). The server's connections go to these addresses only (``chatloop.pinning``), so a name that
    answers differently later (DNS rebinding) reaches nothing that was not checked. A host that does not resolve
    gives no address: the server is skipped when it is listed."""
    host = urlsplit(url).hostname or ""
    addresses = await resolved(host)
    # Loopback and private addresses are MCP_ALLOWED_URLS's to admit (an operator lists them on purpose).
    if first_refusal(host, addresses, allow_private=True) == NEVER:
        raise RequestError(
            400,
            "invalid_request",
            f"{param} {url!r} points at a link-local or metadata address, which is never allowed",
            param,
        )
    return addresses


def allowed_tool_names(value: object, param: str) -> tuple[str, ...] | None:
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


def client_rules(tools: Sequence[object] | None) -> dict[str, ApprovalRule]:
    """Each client MCP server's rule, by its label (already checked by ``mcp_servers.client_servers``)."""
    return {
        t.server_label: approval_rule(t.require_approval, f"tools[{i}].require_approval")
        for i, t in enumerate(tools or [])
        if isinstance(t, ResponsesMcpTool)
    }
