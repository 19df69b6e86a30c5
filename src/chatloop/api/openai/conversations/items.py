"""The Conversations API's request bodies, and input items as a conversation stores them (OpenAI's
``ConversationItem`` shapes, each with a new unguessable id). Imported on the first conversations request, not at
start (cold start).

Usage::

    body = ConversationCreate.model_validate({"items": [{"role": "user", "content": "hi"}]})
    stored_items(body.items or [])          # [Item("msg_…", {"type": "message", "id": "msg_…", …})]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from chatloop.api.http.errors import RequestError
from chatloop.api.openai.responses.approval_items import McpApprovalRequestInput, McpApprovalResponseInput
from chatloop.api.openai.responses.mcp_items import McpCallInput, McpListToolsInput
from chatloop.api.openai.responses.schemas import (
    CodeInterpreterCallItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    InputMessage,
)
from chatloop.api.turns.compaction import CompactionInput
from chatloop.jsontypes import JSONObject
from chatloop.store.model import Item, new_id

MAX_ITEMS_AT_ONCE = 20
"""OpenAI: "You may add up to 20 items at a time"."""

Metadata = Annotated[
    dict[Annotated[StrictStr, Field(max_length=64)], Annotated[StrictStr, Field(max_length=512)]],
    Field(max_length=16),
]
"""OpenAI's metadata: at most 16 pairs, keys of at most 64 characters, values of at most 512."""


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    items: Annotated[list[InputItem], Field(max_length=MAX_ITEMS_AT_ONCE)] | None = None
    metadata: Metadata | None = None


class ConversationUpdate(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    metadata: Metadata | None


class ItemsCreate(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    items: Annotated[list[InputItem], Field(min_length=1, max_length=MAX_ITEMS_AT_ONCE)]


def stored_items(items: Sequence[InputItem]) -> list[Item]:
    """Input items as OpenAI's ``ConversationItem`` shapes, each with a new unguessable id (a client's own ``id`` is
    not kept). A ``reasoning`` item carries nothing this server uses, and is refused rather than kept empty."""
    stored = []
    for index, item in enumerate(items):
        if isinstance(item, InputMessage):
            item_id = new_id("msg")
            kind = "output_text" if item.role == "assistant" else "input_text"
            part: JSONObject = {"type": kind, "text": item.text()}
            if kind == "output_text":
                part["annotations"] = []
            body: JSONObject = {
                "type": "message",
                "id": item_id,
                "role": item.role,
                "status": "completed",
                "content": [part],
            }
        elif isinstance(item, FunctionCallItem):
            item_id = new_id("fc")
            body = {
                "type": "function_call",
                "id": item_id,
                "call_id": item.call_id,
                "name": item.name,
                "arguments": item.arguments,
                "status": "completed",
            }
        elif isinstance(item, FunctionCallOutputItem):
            item_id = new_id("fco")
            body = {
                "type": "function_call_output",
                "id": item_id,
                "call_id": item.call_id,
                "output": item.text(),
                "status": "completed",
            }
        elif isinstance(item, CodeInterpreterCallItem):  # a sandbox run, as the Responses API showed it
            item_id = new_id("ci")
            body = {**item.model_dump(exclude_none=True), "id": item_id, "container_id": "chatloop-sandbox"}
            body.setdefault("status", "completed")
        elif isinstance(item, McpCallInput | McpListToolsInput):  # an MCP server's call or listing, as shown
            item_id = new_id("mcp" if isinstance(item, McpCallInput) else "mcpl")
            body = {**item.model_dump(exclude_none=True), "id": item_id}
        elif isinstance(item, McpApprovalRequestInput):  # kept under its own (sealed) id: the answer names it
            item_id = new_id("mcpr")
            body = item.model_dump()
        elif isinstance(item, CompactionInput):  # kept as it is: only this server can open it
            item_id = new_id("cmp")
            body = {**item.model_dump(exclude_none=True), "id": item_id}
        elif isinstance(item, McpApprovalResponseInput):
            item_id = new_id("mcpa")
            body = {**item.model_dump(exclude_none=True), "id": item_id}
        else:
            raise RequestError(
                400,
                "invalid_request",
                f"items[{index}]: only message, function_call, function_call_output, code_interpreter_call, "
                "mcp_call, mcp_list_tools and mcp_approval_* items are stored",
                param=f"items[{index}]",
            )
        stored.append(Item(item_id, body))
    return stored
