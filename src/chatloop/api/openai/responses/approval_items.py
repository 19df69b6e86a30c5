"""OpenAI's approval items on ``/v1/responses``: the ``mcp_approval_request`` output item a call that waits for a
person becomes (streamed as OpenAI streams it: ``response.output_item.added``, then ``.done``), and the
``mcp_approval_request`` / ``mcp_approval_response`` items a client sends back as input.

The server's own tools are asked for under one label of their own, ``BUILTIN_LABEL`` (an underscore: never an MCP
server's label), so ``execute_javascript`` needs no protocol of its own.

Usage::

    item = approval_request_item(event)          # {"type": "mcp_approval_request", "id": "mcpr_…", ...}
    frames = whole_item_frames(emit, item, index)
    McpApprovalRequestInput.model_validate(item).offered_name()      # "docs__create_page"
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from chatloop.engine.prompts import denied
from chatloop.jsontypes import JSONObject
from chatloop.tools.mcp import offered_name

if TYPE_CHECKING:
    from chatloop.api.openai.responses.mcp_items import Emit
    from chatloop.api.openai.responses.objects import CompactionItem, McpApprovalRequest
    from chatloop.engine.events import ApprovalRequested
    from chatloop.engine.messages import Message

BUILTIN_LABEL = "chatloop_builtin"
"""The ``server_label`` of an approval request for one of the server's own tools (``execute_javascript``)."""
MAX_REASON_CHARS = 1000


def approval_request_item(event: ApprovalRequested) -> McpApprovalRequest:
    """The ``mcp_approval_request`` item of an ``approval_request`` event."""
    return {
        "id": event.id,
        "type": "mcp_approval_request",
        "server_label": event.server or BUILTIN_LABEL,
        "name": event.server_tool or event.tool_name,
        "arguments": event.arguments,
    }


def whole_item_frames(emit: Emit, item: McpApprovalRequest | CompactionItem, index: int) -> list[str]:
    """How OpenAI streams an item that is whole when it is known (an approval request, a compaction): added,
    then done."""
    return [
        emit("response.output_item.added", output_index=index, item=dict(item)),
        emit("response.output_item.done", output_index=index, item=dict(item)),
    ]


class McpApprovalRequestInput(BaseModel):
    """An ``mcp_approval_request`` item from an earlier response (its id is sealed: ``api.turns.approvals``)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["mcp_approval_request"]
    id: Annotated[StrictStr, Field(min_length=1, max_length=256)]
    server_label: StrictStr
    name: StrictStr
    arguments: StrictStr

    def offered_name(self) -> str:
        """The name the tool is offered under (what the call was made with)."""
        return self.name if self.server_label == BUILTIN_LABEL else offered_name(self.server_label, self.name)


def denied_messages(request: McpApprovalRequestInput, reason: str | None) -> list[Message]:
    """A call a person denied, as the model was told of it: the call, and the denial as its tool message."""
    name = request.offered_name()
    call: JSONObject = {
        "id": request.id,
        "type": "function",
        "function": {"name": name, "arguments": request.arguments},
    }
    content = json.dumps({"error": denied(reason)}, ensure_ascii=False)
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": request.id, "name": name, "content": content},
    ]


class McpApprovalResponseInput(BaseModel):
    """A person's answer to an approval request."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["mcp_approval_response"]
    approval_request_id: Annotated[StrictStr, Field(min_length=1, max_length=256)]
    approve: StrictBool
    reason: Annotated[StrictStr, Field(max_length=MAX_REASON_CHARS)] | None = None
    id: StrictStr | None = None
