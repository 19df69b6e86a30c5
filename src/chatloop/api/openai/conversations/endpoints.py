"""``/v1/conversations``: OpenAI's Conversations API over the conversation store, in OpenAI's shapes (openai-python
``types/conversations/``): ``conversation``, ``conversation.deleted``, a ``list`` of items.

Everything is the caller's own (``caller_of``): another caller's conversation or item is exactly a 404, as a
missing one. A malformed id is a 400; a store that fails or does not answer within
``CONVERSATION_STORE_TIMEOUT_SECONDS`` (and the request's deadline) is a 503.

Usage (the routes, in api/app.py)::

    POST   /v1/conversations                          {"items": [...], "metadata": {...}}
    GET    /v1/conversations/{id}                     POST it {"metadata": {...}} to update; DELETE it
    GET    /v1/conversations/{id}/items?order=asc&limit=20&after=msg_…
    POST   /v1/conversations/{id}/items               {"items": [...]} (up to 20)
    GET    /v1/conversations/{id}/items/{item_id}     DELETE it too
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.http.wire import JSONBody
from chatloop.api.turns.checks import read_body
from chatloop.observability import logger

if TYPE_CHECKING:
    from chatloop.api.openai.responses.schemas import InputItem
    from chatloop.deadline import Deadline
    from chatloop.jsontypes import JSONObject
    from chatloop.store.model import Page, PageQuery
    from chatloop.store.service import ConversationStore

# The store, its values and the request bodies are imported by the first conversations request (cold start).
CONVERSATION_ID = re.compile(r"^conv_[A-Za-z0-9]{1,128}$")
ITEM_ID = re.compile(r"^[a-z]{2,8}_[A-Za-z0-9]{1,128}$")


# --- the endpoints --------------------------------------------------------------------------------
async def create_conversation(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    from chatloop.api.openai.conversations.items import ConversationCreate, stored_items

    body = await read_body(request, ConversationCreate)
    items = stored_items(body.items or [])
    with store_errors():
        conversation = await store.create_conversation(owner, body.metadata or {}, items, deadline)
    return JSONBody(conversation.as_object())


async def list_conversations(request: Request) -> Response:
    """The caller's conversations, newest first (``order``, ``limit``, ``after`` a conversation id): not part of
    OpenAI's API, which lists none; the chat page lists them."""
    store, owner, deadline = store_context(request)
    query = page_query(request, CONVERSATION_ID)
    with store_errors():
        page = await store.list_conversations(owner, query, deadline)
    return JSONBody(page.as_object())


async def retrieve_conversation(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    conversation_id = _conversation_id(request)
    with store_errors():
        conversation = await store.get_conversation(owner, conversation_id, deadline)
    if conversation is None:
        raise not_found("conversation", conversation_id)
    return JSONBody(conversation.as_object())


async def update_conversation(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    conversation_id = _conversation_id(request)
    from chatloop.api.openai.conversations.items import ConversationUpdate

    body = await read_body(request, ConversationUpdate)
    with store_errors():
        conversation = await store.update_conversation(owner, conversation_id, body.metadata or {}, deadline)
    if conversation is None:
        raise not_found("conversation", conversation_id)
    return JSONBody(conversation.as_object())


async def delete_conversation(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    conversation_id = _conversation_id(request)
    with store_errors():
        deleted = await store.delete_conversation(owner, conversation_id, deadline)
    if not deleted:
        raise not_found("conversation", conversation_id)
    return JSONBody({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


async def list_items(request: Request) -> Response:
    from chatloop.store.service import CursorNotFound

    store, owner, deadline = store_context(request)
    conversation_id = _conversation_id(request)
    query = page_query(request)
    with store_errors():
        try:
            page = await store.list_items(owner, conversation_id, query, deadline)
        except CursorNotFound:
            raise RequestError(
                400, "invalid_request", f"after: no item {query.after!r} in this conversation", param="after"
            ) from None
    if page is None:
        raise not_found("conversation", conversation_id)
    return JSONBody(page.as_object())


async def create_items(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    conversation_id = _conversation_id(request)
    _refuse_include(request)
    from chatloop.api.openai.conversations.items import ItemsCreate, stored_items

    body = await read_body(request, ItemsCreate)
    items = stored_items(body.items)
    with store_errors():
        added = await store.append_items(owner, conversation_id, items, deadline)
    if not added:
        raise not_found("conversation", conversation_id)
    return JSONBody(
        {
            "object": "list",
            "data": [item.body for item in items],
            "first_id": items[0].id,
            "last_id": items[-1].id,
            "has_more": False,
        }
    )


async def retrieve_item(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    conversation_id, item_id = _conversation_id(request), _item_id(request)
    _refuse_include(request)
    with store_errors():
        item = await store.get_item(owner, conversation_id, item_id, deadline)
    if item is None:
        raise not_found("item", item_id)
    return JSONBody(item.body)


async def delete_item(request: Request) -> Response:
    """OpenAI answers a deleted item with the conversation it was in."""
    store, owner, deadline = store_context(request)
    conversation_id, item_id = _conversation_id(request), _item_id(request)
    with store_errors():
        deleted = await store.delete_item(owner, conversation_id, item_id, deadline)
        conversation = await store.get_conversation(owner, conversation_id, deadline) if deleted else None
    if conversation is None:
        raise not_found("item", item_id)
    return JSONBody(conversation.as_object())


# --- shared steps ---------------------------------------------------------------------------------
def store_context(request: Request) -> tuple[ConversationStore, str, Deadline]:
    ctx = RequestContext.of(request)
    owner = ctx.caller
    if owner is None:
        raise RequestError(
            401, "unauthenticated", "this request names no caller (no API key id or IAM identity)"
        )
    return ctx.runtime.conversations(), owner, ctx.store_deadline()


def page_query(request: Request, ids: re.Pattern[str] | None = None) -> PageQuery:
    """``order`` (asc/desc, default desc), ``limit`` (1-100, default 20) and ``after`` (an item id): OpenAI's list
    parameters, each checked (a 400 naming it)."""
    params = request.query_params
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise RequestError(400, "invalid_request", "order: must be 'asc' or 'desc'", param="order")
    raw_limit = params.get("limit", "20")
    if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= 100:
        raise RequestError(400, "invalid_request", "limit: must be an integer from 1 to 100", param="limit")
    after = params.get("after")
    if after is not None and not (ids or ITEM_ID).match(after):
        raise RequestError(400, "invalid_request", "after: not an item id", param="after")
    _refuse_include(request)
    from chatloop.store.model import PageQuery

    return PageQuery(order="asc" if order == "asc" else "desc", limit=int(raw_limit), after=after)


def _refuse_include(request: Request) -> None:
    if [value for value in request.query_params.getlist("include") if value]:
        raise RequestError(
            400, "invalid_request", "include: no additional output data is kept for items", param="include"
        )


def _conversation_id(request: Request) -> str:
    value = str(request.path_params["conversation_id"])
    if not CONVERSATION_ID.match(value):
        raise RequestError(
            400, "invalid_request", "conversation_id: not a conversation id (conv_…)", param="conversation_id"
        )
    return value


def _item_id(request: Request) -> str:
    value = str(request.path_params["item_id"])
    if not ITEM_ID.match(value):
        raise RequestError(400, "invalid_request", "item_id: not an item id (msg_…)", param="item_id")
    return value


def not_found(what: str, identifier: str, param: str | None = None) -> RequestError:
    """The same answer for a missing, expired, deleted or another caller's record: nothing confirms it exists."""
    return RequestError(404, "not_found", f"No {what} found with id '{identifier}'.", param=param)


@contextmanager
def store_errors() -> Iterator[None]:
    """``StoreUnavailable`` -> a 503 in OpenAI's error shape (logged with the store's reason, which names no
    secret)."""
    from chatloop.store.model import StoreUnavailable

    try:
        yield
    except StoreUnavailable as error:
        logger.warning(f"conversation store unavailable: {error}")
        raise RequestError(
            503, "store_unavailable", "the conversation store is unavailable; try again shortly"
        ) from None


# --- a conversation as a turn's history (/v1/responses and /chat turns in a conversation) --------------------------
HISTORY_PAGE = 100
"""Items read per store call when a whole list is read."""


def conversation_id_of(value: str | dict[str, object]) -> str:
    conversation_id = value.get("id") if isinstance(value, dict) else value
    if not isinstance(conversation_id, str) or not CONVERSATION_ID.match(conversation_id):
        raise RequestError(
            400, "invalid_request", "conversation: not a conversation id (conv_…)", param="conversation"
        )
    return conversation_id


async def conversation_history(
    store: ConversationStore, owner: str, conversation_id: str, deadline: Deadline
) -> list[InputItem]:
    """The conversation's items, oldest first, as input items (a 404 when the caller has no such conversation)."""
    from chatloop.store.model import PageQuery

    read = partial(store.list_items, owner, conversation_id, deadline=deadline)
    items = await all_items(read, PageQuery("asc", HISTORY_PAGE))
    if items is None:
        raise not_found("conversation", conversation_id, param="conversation")
    return as_input_items(items)


async def all_items(
    read: Callable[[PageQuery], Awaitable[Page | None]], query: PageQuery
) -> list[JSONObject] | None:
    """Every item of a list, page after page (``read`` reads one page); None when the record is not there."""
    from dataclasses import replace

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
    from pydantic import TypeAdapter

    from chatloop.api.openai.responses.schemas import InputItem

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
