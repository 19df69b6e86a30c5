"""Tools from MCP servers: listed when a turn first needs them, offered beside the built-in tool, called over
streamable HTTP with the official ``mcp`` SDK (imported by ``client`` only, on first use: ``import app`` never loads it).

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

from chatloop.tools.mcp.client import (
    MAX_DESCRIPTION_CHARS,
    MAX_LIST_PAGES,
    MAX_SCHEMA_BYTES,
    MAX_TOOLS_PER_SERVER,
    ListedTool,
    Listing,
    MCPCallError,
    MCPServer,
)
from chatloop.tools.mcp.naming import NAME_SEPARATOR, offered_name
from chatloop.tools.mcp.results import TOOL_ERROR_PREFIX, describe_result
from chatloop.tools.mcp.servers import FAILURE_RETRY_SECONDS, MCPServers, MCPTool, TurnTools

__all__ = [
    "FAILURE_RETRY_SECONDS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_LIST_PAGES",
    "MAX_SCHEMA_BYTES",
    "MAX_TOOLS_PER_SERVER",
    "NAME_SEPARATOR",
    "TOOL_ERROR_PREFIX",
    "ListedTool",
    "Listing",
    "MCPCallError",
    "MCPServer",
    "MCPServers",
    "MCPTool",
    "TurnTools",
    "describe_result",
    "offered_name",
]
