"""The store, by aggregate: what must outlive a request (conversations and their items, stored responses with their
input and output items and their stream events, running turns, one-time claims), a small protocol per aggregate,
each over one backend of two.

- ``SQLiteBackend`` (``store/sqlite.py``): a file at ``CONVERSATION_STORE_PATH``, the default, so ``make run``
  keeps conversations with no setup.
- ``DynamoDBBackend`` (``store/dynamodb.py``): one table when ``CONVERSATION_TABLE_NAME`` is set (deployed).

Modules: ``model`` (the values and the ``Backend`` protocol), ``protocol`` (what the API calls: a small protocol
per aggregate, and ``StateStore``, one of each), ``core`` (the steps they share: a backend call within the
deadline, records with their TTL, pages, event lists), one module per aggregate (``conversations``, ``responses``,
``runs``, ``claims``, ``connections``: WebSocket mode's connections, memory and lanes), ``service`` (``Store``: the aggregates over one backend), ``sqlite``, and ``dynamodb`` (the
operations) with ``dynamodb_layout`` (how records map to table items) and ``dynamodb_client`` (the client and its
errors). The budget ledger (``budget``) and the idempotency records (``idempotency``) are aggregates of their own.

Every record belongs to an owner (the caller): a read by another owner is exactly "not found". Every record
expires ``CONVERSATION_TTL_SECONDS`` after it was created (its items with it), and an expired record reads as
missing on both backends whether or not it was swept. Ids are unguessable (``conv_`` + 192 random bits).

Spend limits by caller (``budget``) live in the same file or table: ``open_ledger`` opens their ledger.

Usage::

    ledger = open_ledger(settings)                            # only when a BUDGET_* limit is set
    store = open_store(settings)                              # lazily, once per container
    conversation = await store.conversations.create(owner, {"topic": "x"}, [item], deadline)
    page = await store.conversations.list_items(owner, conversation.id, PageQuery(order="asc", limit=20), deadline)
    await store.runs.cancel(owner, "resp_1", deadline)       # store.responses, store.claims likewise
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from chatloop.store.model import (
    Conversation,
    Item,
    ListName,
    Page,
    PageQuery,
    StoredEvent,
    StoredResponse,
    StoreUnavailable,
    new_id,
)
from chatloop.store.service import StateStore, Store

if TYPE_CHECKING:
    from chatloop.config import Settings
    from chatloop.store.budget import Clock, Ledger  # the budget's modules load only with its ledger

__all__ = [
    "Conversation",
    "Item",
    "ListName",
    "Page",
    "PageQuery",
    "StateStore",
    "Store",
    "StoreUnavailable",
    "StoredEvent",
    "StoredResponse",
    "new_id",
    "open_ledger",
    "open_store",
]


def open_store(settings: Settings) -> Store:
    """The store the settings name: DynamoDB when ``CONVERSATION_TABLE_NAME`` is set, else the SQLite file (boto3
    is imported only in the first case)."""
    if settings.conversation_table_name:
        from chatloop.store.dynamodb import DynamoDBBackend

        return Store(DynamoDBBackend(settings.conversation_table_name), settings.conversation_ttl_seconds)
    from chatloop.store.sqlite import SQLiteBackend

    return Store(SQLiteBackend(settings.store_path()), settings.conversation_ttl_seconds)


def open_ledger(settings: Settings, clock: Clock = time.time) -> Ledger:
    """The budget ledger in the conversation store's table or file (boto3 imported only for DynamoDB)."""
    if settings.conversation_table_name:
        from chatloop.store.budget_dynamodb import DynamoDBLedger

        return DynamoDBLedger(settings.conversation_table_name, clock)
    from chatloop.store.budget_sqlite import SQLiteLedger

    return SQLiteLedger(settings.store_path(), clock)
