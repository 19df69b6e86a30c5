"""Items as a conversation or a stored response keeps them, both ways: input items written as OpenAI's
``ConversationItem`` shapes with new ids (``stored_items``), and kept item bodies read back as input items
(``conversation_history``, ``as_input_items``), which become messages like any input (``api.items.messages``).

Usage::

    stored_items([InputMessage(role="user", content="hi")])      # [Item("msg_…", {"type": "message", …})]
    items = await conversation_history(store, owner, "conv_1", deadline)     # a 404 when it is not the caller's
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from pydantic import TypeAdapter

from chatloop.api.http.errors import RequestError
from chatloop.api.items.approvals import McpApprovalRequestInput, McpApprovalResponseInput
from chatloop.api.items.compaction import CompactionInput
from chatloop.api.items.inputs import (
    CodeInterpreterCallItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputImage,
    InputItem,
    InputMessage,
)
from chatloop.api.items.mcp import McpCallInput, McpListToolsInput
from chatloop.api.items.store import not_found
from chatloop.jsontypes import JSONObject, JSONValue
from chatloop.store.model import Item, Page, PageQuery, new_id

if TYPE_CHECKING:
    from chatloop.deadline import Deadline
    from chatloop.store.protocol import ConversationStore


def stored_items(items: Sequence[InputItem]) -> list[Item]:
    """Input items as OpenAI's ``ConversationItem`` shapes, each with a new unguessable id (a client's own ``id`` is
    not kept). A ``reasoning`` item carries nothing this server uses, and is refused rather than kept empty."""
    stored = []
    for index, item in enumerate(items):
        kept = _stored(item)
        if kept is None:
            raise RequestError(
                400,
                "invalid_request",
                f"items[{index}]: only message, function_call, function_call_output, code_interpreter_call, "
                "mcp_call, mcp_list_tools and mcp_approval_* items are stored",
                param=f"items[{index}]",
            )
        stored.append(Item(*kept))
    return stored


def _stored(item: InputItem) -> tuple[str, JSONObject] | None:
    """One input item's new id and stored shape; None for a kind that is not stored."""
    if isinstance(item, InputMessage):
        item_id = new_id("msg")
        kind = "output_text" if item.role == "assistant" else "input_text"
        part: JSONObject = {"type": kind, "text": item.text()}
        if kind == "output_text":
            part["annotations"] = []
        parts: list[JSONValue] = [part]
        if item.images() and not isinstance(item.content, str):  # kept part by part, images in their place
            parts = [
                p.stored() if isinstance(p, InputImage) else {"type": kind, "text": p.text}
                for p in item.content
            ]
        return item_id, {
            "type": "message",
            "id": item_id,
            "role": item.role,
            "status": "completed",
            "content": parts,
        }
    if isinstance(item, FunctionCallItem):
        item_id = new_id("fc")
        return item_id, {
            "type": "function_call",
            "id": item_id,
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
            "status": "completed",
        }
    if isinstance(item, FunctionCallOutputItem):
        item_id = new_id("fco")
        return item_id, {
            "type": "function_call_output",
            "id": item_id,
            "call_id": item.call_id,
            "output": item.text(),
            "status": "completed",
        }
    return _kept_as_shown(item)


def _kept_as_shown(item: InputItem) -> tuple[str, JSONObject] | None:
    """Items kept as the Responses API showed them, under a new id (an approval request under its own)."""
    if isinstance(item, CodeInterpreterCallItem):  # a sandbox run, as the Responses API showed it
        item_id = new_id("ci")
        body = {**item.model_dump(exclude_none=True), "id": item_id, "container_id": "chatloop-sandbox"}
        body.setdefault("status", "completed")
        return item_id, body
    if isinstance(item, McpCallInput | McpListToolsInput):  # an MCP server's call or listing, as shown
        item_id = new_id("mcp" if isinstance(item, McpCallInput) else "mcpl")
        return item_id, {**item.model_dump(exclude_none=True), "id": item_id}
    if isinstance(item, McpApprovalRequestInput):  # kept under its own (sealed) id: the answer names it
        return new_id("mcpr"), item.model_dump()
    if isinstance(item, CompactionInput):  # kept as it is: only this server can open it
        item_id = new_id("cmp")
        return item_id, {**item.model_dump(exclude_none=True), "id": item_id}
    if isinstance(item, McpApprovalResponseInput):
        item_id = new_id("mcpa")
        return item_id, {**item.model_dump(exclude_none=True), "id": item_id}
    return None


# --- kept items read back as a turn's history ----------------------------------------------------------
HISTORY_PAGE = 100
"""Items read per store call when a whole list is read."""


async def conversation_history(
    store: ConversationStore, owner: str, conversation_id: str, deadline: Deadline
) -> list[InputItem]:
    """The conversation's items, oldest first, as input items (a 404 when the caller has no such conversation)."""

    read = partial(store.conversations.list_items, owner, conversation_id, deadline=deadline)
    items = await all_items(read, PageQuery("asc", HISTORY_PAGE))
    if items is None:
        raise not_found("conversation", conversation_id, param="conversation")
    return as_input_items(items)


async def all_items(
    read: Callable[[PageQuery], Awaitable[Page | None]], query: PageQuery
) -> list[JSONObject] | None:
    """Every item of a list, page after page (``read`` reads one page); None when the record is not there."""

    bodies: list[JSONObject] = []
    while True:
        page = await read(query)
        if page is None:
            return None
        bodies += [item.body for item in page.data]
        if not page.has_more:
            return bodies
        query = replace(query, after=page.last_id)


def as_input_items(bodies: list[JSONObject]) -> list[InputItem]:
    """Stored item bodies as the input items the request schema reads (so they become messages like any input)."""
    return TypeAdapter(
        list[InputItem]
    ).validate_python(
        [
            b
            for b in bodies
            if b.get("type")
            in (
                "message",
                "function_call",
                "function_call_output",
                "code_interpreter_call",
                "mcp_call",
                "mcp_approval_request",  # a call that waited for a person, and their answer (api/turns/approvals.py)
                "mcp_approval_response",
                "compaction",  # the earlier conversation, summarized (api/turns/compaction.py)
            )
        ]
    )
