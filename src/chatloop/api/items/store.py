"""The conversation store from a request: the caller's store (``store_context``), its failures as a 503
(``store_errors``), the one 404 for what is missing or another caller's (``not_found``), and OpenAI's list and
resume parameters (``page_query``, ``starting_after``, read through ``api.http.query``). Shared by every route that
reads or writes kept state: conversations, stored responses, background responses, ``/chat`` threads and approvals.

Usage::

    store, owner, deadline = store_context(request)          # 401 when the request names no caller
    with store_errors():                                     # StoreUnavailable -> 503
        conversation = await store.conversations.get(owner, "conv_1", deadline)
    if conversation is None:
        raise not_found("conversation", "conv_1")
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from starlette.requests import Request

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.http.query import Query
from chatloop.observability import logger
from chatloop.store.model import Order, PageQuery, StoreUnavailable

if TYPE_CHECKING:
    from chatloop.deadline import Deadline
    from chatloop.store.service import ConversationStore

CONVERSATION_ID = re.compile(r"^conv_[A-Za-z0-9]{1,128}$")
ITEM_ID = re.compile(r"^[a-z]{2,8}_[A-Za-z0-9_-]{1,128}$")
"""Every item id this server hands out: ``msg_<hex>`` and the like, and a function call's ``fc_`` + the model's call id
(``call_text_…``, ``call_…``, Bedrock's ``tooluse_…``: underscores and hyphens), which a client sends back as
``after`` when it pages, and as ``item_id``."""
RESPONSE_ID = re.compile(r"^resp_[A-Za-z0-9_-]{1,128}$")


def store_context(request: Request) -> tuple[ConversationStore, str, Deadline]:
    """The conversation store, the owner of the records it reads and writes (the caller: a 401 when the request
    names none) and the deadline of one store call."""
    return owned_store(RequestContext.of(request))


def owned_store(ctx: RequestContext) -> tuple[ConversationStore, str, Deadline]:
    """``store_context`` for a turn's context (an HTTP request's, a job's, a WebSocket message's)."""
    caller = ctx.caller
    if caller is None:
        raise RequestError(
            401, "unauthenticated", "this request names no caller (no API key id or IAM identity)"
        )
    return (
        ctx.runtime.stores.conversations(),
        caller,
        ctx.store_deadline(),
    )  # the caller's records: it owns them


LIST_PARAMETERS = ("order", "limit", "after", "include")
"""The query parameters of OpenAI's list endpoints (``include`` as the SDKs send it, ``include[]``, too)."""
ORDERS: tuple[Order, ...] = ("asc", "desc")
LIMIT_DEFAULT, LIMIT_MAX = 20, 100
STARTING_AFTER_MAX = 2**31 - 1
"""``starting_after``'s highest value: past any journal's length, within every store's integers."""


def page_query(request: Request, ids: re.Pattern[str] = ITEM_ID, what: str = "an item id") -> PageQuery:
    """``order`` (asc/desc, default desc), ``limit`` (1-100, default 20) and ``after`` (an id matching ``ids``,
    ``what`` names it): OpenAI's list parameters, each checked (a 400 naming it; ``api.http.query``)."""
    query = Query(request, known=LIST_PARAMETERS)
    order = query.choice("order", ORDERS, default="desc")
    limit = query.integer("limit", default=LIMIT_DEFAULT, low=1, high=LIMIT_MAX)
    after = query.identifier("after", ids, what)
    _no_include(query)
    return PageQuery(order=order, limit=limit, after=after)


def refuse_include(request: Request) -> None:
    """``include``: OpenAI's extra output data, which no kept item has (a 400 naming it). The route's only query
    parameter."""
    _no_include(Query(request, known=("include",)))


def _no_include(query: Query) -> None:
    if [value for value in query.values("include") if value]:
        raise RequestError(
            400, "invalid_request", "include: no additional output data is kept for items", param="include"
        )


def starting_after(query: Query) -> int:
    """``starting_after``: the sequence number of the event a stream resumes after, from -1 (the default: before
    the first event) to ``STARTING_AFTER_MAX`` (a 400 naming it otherwise)."""
    return query.integer("starting_after", default=-1, low=-1, high=STARTING_AFTER_MAX)


def not_found(what: str, identifier: str, param: str | None = None) -> RequestError:
    """The same answer for a missing, expired, deleted or another caller's record: nothing confirms it exists."""
    return RequestError(404, "not_found", f"No {what} found with id '{identifier}'.", param=param)


@contextmanager
def store_errors() -> Iterator[None]:
    """``StoreUnavailable`` -> a 503 in OpenAI's error shape (logged with the store's reason, which names no
    secret)."""
    try:
        yield
    except StoreUnavailable as error:
        logger.warning(f"conversation store unavailable: {error}")
        raise RequestError(
            503, "store_unavailable", "the conversation store is unavailable; try again shortly"
        ) from None


def conversation_id_of(value: str | dict[str, object]) -> str:
    """A request's ``conversation`` (an id, or ``{"id": …}``) checked: a 400 naming it when it is not one."""
    conversation_id = value.get("id") if isinstance(value, dict) else value
    if not isinstance(conversation_id, str) or not CONVERSATION_ID.fullmatch(conversation_id):
        raise RequestError(
            400, "invalid_request", "conversation: not a conversation id (conv_…)", param="conversation"
        )
    return conversation_id


def checked_id(response_id: str) -> str:
    """A response id from a path checked: a 400 naming it when it is not one (``resp_…``)."""
    if not RESPONSE_ID.fullmatch(response_id):
        raise RequestError(
            400, "invalid_request", "response_id: not a response id (resp_…)", param="response_id"
        )
    return response_id
