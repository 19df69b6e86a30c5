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

from starlette.requests import Request
from starlette.responses import Response

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.http.wire import JSONBody
from chatloop.api.items.store import (
    CONVERSATION_ID,
    ITEM_ID,
    not_found,
    page_query,
    refuse_include,
    store_context,
    store_errors,
)
from chatloop.api.items.stored import stored_items
from chatloop.api.openai.conversations.schemas import ConversationCreate, ConversationUpdate, ItemsCreate
from chatloop.api.turns.checks import read_body
from chatloop.store.service import CursorNotFound


# --- the endpoints --------------------------------------------------------------------------------
async def create_conversation(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    body = await read_body(RequestContext.of(request), ConversationCreate)
    items = stored_items(body.items or [])
    with store_errors():
        conversation = await store.conversations.create(owner, body.metadata or {}, items, deadline)
    return JSONBody(conversation.as_object())


async def list_conversations(request: Request) -> Response:
    """The caller's conversations, newest first (``order``, ``limit``, ``after`` a conversation id): not part of
    OpenAI's API, which lists none; the chat page lists them."""
    store, owner, deadline = store_context(request)
    query = page_query(request, CONVERSATION_ID, "a conversation id (conv_…)")
    with store_errors():
        page = await store.conversations.list(owner, query, deadline)
    return JSONBody(page.as_object())


async def retrieve_conversation(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    conversation_id = _conversation_id(request)
    with store_errors():
        conversation = await store.conversations.get(owner, conversation_id, deadline)
    if conversation is None:
        raise not_found("conversation", conversation_id)
    return JSONBody(conversation.as_object())


async def update_conversation(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    conversation_id = _conversation_id(request)
    body = await read_body(RequestContext.of(request), ConversationUpdate)
    with store_errors():
        conversation = await store.conversations.update(owner, conversation_id, body.metadata or {}, deadline)
    if conversation is None:
        raise not_found("conversation", conversation_id)
    return JSONBody(conversation.as_object())


async def delete_conversation(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    conversation_id = _conversation_id(request)
    with store_errors():
        deleted = await store.conversations.delete(owner, conversation_id, deadline)
    if not deleted:
        raise not_found("conversation", conversation_id)
    return JSONBody({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


async def list_items(request: Request) -> Response:
    store, owner, deadline = store_context(request)
    conversation_id = _conversation_id(request)
    query = page_query(request)
    with store_errors():
        try:
            page = await store.conversations.list_items(owner, conversation_id, query, deadline)
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
    refuse_include(request)
    body = await read_body(RequestContext.of(request), ItemsCreate)
    items = stored_items(body.items)
    with store_errors():
        added = await store.conversations.append_items(owner, conversation_id, items, deadline)
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
    refuse_include(request)
    with store_errors():
        item = await store.conversations.get_item(owner, conversation_id, item_id, deadline)
    if item is None:
        raise not_found("item", item_id)
    return JSONBody(item.body)


async def delete_item(request: Request) -> Response:
    """OpenAI answers a deleted item with the conversation it was in."""
    store, owner, deadline = store_context(request)
    conversation_id, item_id = _conversation_id(request), _item_id(request)
    with store_errors():
        deleted = await store.conversations.delete_item(owner, conversation_id, item_id, deadline)
        conversation = await store.conversations.get(owner, conversation_id, deadline) if deleted else None
    if conversation is None:
        raise not_found("item", item_id)
    return JSONBody(conversation.as_object())


# --- path parameters ---------------------------------------------------------------------------
def _conversation_id(request: Request) -> str:
    value = str(request.path_params["conversation_id"])
    if not CONVERSATION_ID.fullmatch(value):
        raise RequestError(
            400, "invalid_request", "conversation_id: not a conversation id (conv_…)", param="conversation_id"
        )
    return value


def _item_id(request: Request) -> str:
    value = str(request.path_params["item_id"])
    if not ITEM_ID.fullmatch(value):
        raise RequestError(400, "invalid_request", "item_id: not an item id (msg_…)", param="item_id")
    return value
