"""The output items that report MCP tools on ``/v1/responses`` (``mcp_list_tools``, ``mcp_call``), their stream
events, and the same items read back when a client sends them as input. The request's own servers are checked by
``api.openai.responses.mcp_servers``.

Usage::

    list_tools_item("docs", tools)                              # {"type": "mcp_list_tools", ...}
    call_item("call_1", "search", '{"q": "x"}', "docs", '{"result": "..."}', ok=True)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, StrictStr

from chatloop.config import MCPServerConfig
from chatloop.engine.approvals import APPROVAL_ID_PREFIX
from chatloop.jsontypes import JSONObject, JSONValue
from chatloop.tools.mcp import TOOL_ERROR_PREFIX, offered_name

if TYPE_CHECKING:
    from chatloop.api.openai.responses.objects import (
        McpCall,
        McpCallStatus,
        McpListTools,
        McpProtocolError,
        McpToolExecutionError,
    )
    from chatloop.engine.events import ToolCallResult, ToolCallStart
    from chatloop.engine.messages import Message
    from chatloop.tools.mcp import MCPTool, TurnTools


# --- output items ------------------------------------------------------------------------------------
def list_tools_item(
    server_label: str, tools: Iterable[MCPTool], error: str | None = None, item_id: str | None = None
) -> McpListTools:
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
    status: McpCallStatus | None = None,
    approval_request_id: str | None = None,
) -> McpCall:
    """OpenAI's ``mcp_call`` output item for one call: ``name`` is the server's own tool name, ``content`` the
    tool message the model got (``{"result": ...}`` or ``{"error": ...}``); None while the call is running;
    ``approval_request_id``: the approval request a person answered before it ran."""
    output: str | None = None
    error: McpToolExecutionError | McpProtocolError | None = None
    if content is not None:
        parsed: JSONValue
        try:
            parsed = json.loads(content)
        except ValueError:
            parsed = {"result": content}
        body: JSONObject = parsed if isinstance(parsed, dict) else {"result": parsed}
        if ok and "error" not in body:
            result = body.get("result", "")
            output = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        else:
            message = str(body.get("error") or "the call failed")
            if message.startswith(TOOL_ERROR_PREFIX):
                error = {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": message}]}
            else:
                error = {"type": "mcp_protocol_error", "code": -32603, "message": message}
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
        "approval_request_id": approval_request_id,
    }


Emit = Callable[..., str]
"""Frames one Responses stream event: ``emit(kind, **fields)`` (the renderer's numbered framer)."""


def started_call_item(start: ToolCallStart) -> McpCall:
    """The ``mcp_call`` item of a ``tool_call_start`` event of a tool that runs on a server (in progress)."""
    if start.server is None:
        raise ValueError(f"{start.tool_name} does not run on an MCP server")
    # A call a person approved runs under the approval request's id (``engine.approvals``).
    approved = start.id if start.id.startswith(APPROVAL_ID_PREFIX) else None
    return call_item(
        start.id,
        start.server_tool or start.tool_name,
        start.arguments,
        start.server,
        None,
        ok=False,
        approval_request_id=approved,
    )


def finish_call_item(item: McpCall, result: ToolCallResult) -> None:
    """``item`` completed (or failed) from its ``tool_call_result`` event."""
    finished = call_item(
        item["id"],
        item["name"],
        item["arguments"],
        item["server_label"],
        result.content,
        result.status == "ok",
        approval_request_id=item["approval_request_id"],
    )
    # Set in place: the item keeps its keys' order, and the response's ``output`` holds it.
    item["output"], item["error"], item["status"] = finished["output"], finished["error"], finished["status"]


def call_started_frames(emit: Emit, item: McpCall, index: int) -> list[str]:
    """A call's stream events as it starts, in OpenAI's order: the item added with empty ``arguments``,
    ``response.mcp_call.in_progress``, then its arguments (pydantic-ai 1.x builds them from the deltas)."""
    where = {"item_id": item["id"], "output_index": index}
    return [
        emit("response.output_item.added", output_index=index, item={**item, "arguments": ""}),
        emit("response.mcp_call.in_progress", **where),
        emit("response.mcp_call_arguments.delta", **where, delta=item["arguments"]),
        emit("response.mcp_call_arguments.done", **where, arguments=item["arguments"]),
    ]


def call_finished_frames(emit: Emit, item: McpCall, index: int) -> list[str]:
    """A call's stream events as it ends: ``response.mcp_call.completed`` (or ``.failed``), the item done."""
    where = {"item_id": item["id"], "output_index": index}
    kind = "response.mcp_call.completed" if item["status"] == "completed" else "response.mcp_call.failed"
    return [emit(kind, **where), emit("response.output_item.done", output_index=index, item=dict(item))]


def list_tools_frames(emit: Emit, item: McpListTools, index: int) -> list[str]:
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


def listed_items(servers: Sequence[MCPServerConfig], turn: TurnTools) -> list[McpListTools]:
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
    tools: list[dict[str, object]] = []
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
    error: object = None
    status: StrictStr | None = None
    approval_request_id: StrictStr | None = None

    def messages(self) -> list[Message]:
        """An assistant message calling ``<server_label>__<name>`` and the tool message that answered it."""
        name = offered_name(self.server_label, self.name)
        call: JSONObject = {
            "id": self.id,
            "type": "function",
            "function": {"name": name, "arguments": self.arguments},
        }
        if self.output is not None and not self.error:
            content = json.dumps({"result": self.output}, ensure_ascii=False)
        else:
            content = json.dumps({"error": _error_text(self.error)}, ensure_ascii=False)
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": self.id, "name": name, "content": content},
        ]


def _error_text(error: object) -> str:
    if isinstance(error, str) and error:
        return error
    if isinstance(error, dict):
        if isinstance(error.get("message"), str):
            return str(error["message"])
        texts = [c.get("text") for c in error.get("content") or [] if isinstance(c, dict)]
        if any(texts):
            return " ".join(t for t in texts if isinstance(t, str))
    return "the call failed"
