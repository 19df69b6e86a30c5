"""MCP_SERVERS' entries for ``chatloop.config``: the typed server entry, its JSON parsed and checked, and the URL
prefix rule client-supplied servers are held to.

Usage::

    from chatloop.config import MCPServerConfig, parse_mcp_servers, under_prefix
    parse_mcp_servers('[{"label": "docs", "url": "http://127.0.0.1:9000/mcp"}]')[0].url
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from chatloop.config_env import ConfigError


@dataclass(frozen=True)
class MCPServerConfig:
    """One MCP server the operator configured (an entry of MCP_SERVERS), or one a client sent (/v1/responses)."""

    label: str
    """Letters, digits and hyphens (no underscore): the prefix of its tools' offered names, ``<label>__<tool>``."""
    url: str
    """The streamable HTTP endpoint (conventionally ``.../mcp``)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Sent with every request; values may hold ``${NAME}`` placeholders, filled from the environment or the
    provider-keys secret when the server is first used. Never logged."""
    allowed_tools: tuple[str, ...] | None = None
    """The server's tool names offered to the model; None: all of them."""
    timeout_seconds: float = 10.0
    """A call to one of its tools ends after this long (and never outlives the request)."""
    url_prefix: str | None = None
    """Client-supplied servers: every request, redirects included, must stay under this prefix."""
    addresses: tuple[str, ...] | None = None
    """Client-supplied servers: the addresses the host resolved to when they were checked; every connection goes
    to one of them and the name is never resolved again (empty: it did not resolve). None: resolved as usual."""


MCP_LABEL = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,31}$")
MCP_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_MCP_KEYS = {"label", "url", "headers", "allowed_tools", "timeout_seconds"}


def parse_mcp_servers(raw: str) -> tuple[MCPServerConfig, ...]:
    """MCP_SERVERS as typed entries; anything unusable is a ``ConfigError`` naming MCP_SERVERS.

    >>> parse_mcp_servers('[{"label": "docs", "url": "http://127.0.0.1:9000/mcp"}]')[0].label
    'docs'
    """
    try:
        value = json.loads(raw)
    except ValueError:
        raise ConfigError("MCP_SERVERS is not valid JSON (a list of server objects)") from None
    if not isinstance(value, list):
        raise ConfigError("MCP_SERVERS must be a JSON list of server objects")
    servers: list[MCPServerConfig] = []
    for i, entry in enumerate(value):
        where = f"MCP_SERVERS[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be an object")
        unknown = sorted(set(entry) - _MCP_KEYS)
        if unknown:
            raise ConfigError(f"{where} has unknown keys {unknown}; allowed: {sorted(_MCP_KEYS)}")
        label, url = entry.get("label"), entry.get("url")
        if not isinstance(label, str) or not MCP_LABEL.match(label):
            raise ConfigError(
                f"{where}.label must be 1-32 letters, digits or hyphens, starting with a letter (no underscore)"
            )
        if label in {s.label for s in servers}:
            raise ConfigError(f"{where}.label {label!r} is used twice")
        if not isinstance(url, str) or not re.match(r"^https?://[^/?#]+", url):
            raise ConfigError(f"{where}.url must be an http(s) URL")
        headers = entry.get("headers") or {}
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ConfigError(f"{where}.headers must be an object of strings")
        allowed = entry.get("allowed_tools")
        if allowed is not None and (
            not isinstance(allowed, list) or not all(isinstance(t, str) and t for t in allowed)
        ):
            raise ConfigError(f"{where}.allowed_tools must be a list of tool names")
        timeout = entry.get("timeout_seconds", 10.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 300:
            raise ConfigError(f"{where}.timeout_seconds must be a number of seconds above 0, at most 300")
        servers.append(
            MCPServerConfig(
                label=label,
                url=url,
                headers=dict(headers),
                allowed_tools=tuple(allowed) if allowed is not None else None,
                timeout_seconds=float(timeout),
            )
        )
    return tuple(servers)


def under_prefix(url: str, prefix: str) -> bool:
    """Whether ``url`` falls under the MCP_ALLOWED_URLS ``prefix`` at a boundary (``http://a.example/team`` admits
    ``http://a.example/team/mcp``, never ``http://a.example/teamx`` or ``http://a.example/team:1``): for the URL a
    request names and for every request its connection makes (redirects).

    >>> under_prefix("http://a.example/team/mcp", "http://a.example/team")
    True
    >>> under_prefix("http://a.example:81/", "http://a.example")
    False
    """
    if not url.startswith(prefix):
        return False
    rest = url[len(prefix) :]
    return prefix.endswith("/") or rest == "" or rest[0] in "/?#"
