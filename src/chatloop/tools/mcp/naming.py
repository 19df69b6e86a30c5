"""The names MCP tools are offered under (the rule is in the package's docstring)."""

from __future__ import annotations

import hashlib
import re

NAME_SEPARATOR = "__"
MAX_NAME_LENGTH = 64
_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def offered_name(label: str, tool_name: str) -> str:
    """The name a server's tool is offered under (see the module's naming rule).

    >>> offered_name("docs", "search")
    'docs__search'
    >>> offered_name("docs", "read.file")
    'docs__read_file_dd32cd'
    """
    base = f"{label}{NAME_SEPARATOR}{tool_name}"
    safe = _SAFE.sub("_", base)
    if safe == base and len(base) <= MAX_NAME_LENGTH:
        return base
    digest = hashlib.sha256(tool_name.encode()).hexdigest()[:6]
    return f"{safe[: MAX_NAME_LENGTH - 7]}_{digest}"
