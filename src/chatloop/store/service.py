"""``Store``: the one implementation of ``ConversationStore`` (the protocol the API uses, in ``protocol.py``;
importable from here too) over a synchronous ``Backend`` (SQLite or DynamoDB) run in a worker thread.

Each call takes the request's ``Deadline``: the backend gets what is left of it as its timeout, and the caller gets
``StoreUnavailable`` when the deadline passes, even if the backend hangs (the worker thread is abandoned, and its
own timeouts end it). The event loop never blocks on the store.

Usage::

    store = Store(SQLiteBackend(path), ttl_seconds=3600)
    conversation = await store.create_conversation("caller", {}, [], deadline)
    await store.get_conversation("someone else", conversation.id, deadline)      # None: not theirs
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal, TypeVar

import anyio
from anyio import to_thread

from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.store.model import (
    Backend,
    Conversation,
    Item,
    ListName,
    Page,
    PageQuery,
    Record,
    StoredEvent,
    StoredResponse,
    StoreUnavailable,
    new_id,
)
from chatloop.store.protocol import ConversationStore, CursorNotFound

__all__ = ["MAX_EVENTS_READ", "ConversationStore", "CursorNotFound", "Store", "owner_key"]

T = TypeVar("T")
MAX_EVENTS_READ = 10_000
"""The most events one replay reads (a response's stream has far fewer)."""


def owner_key(owner: str) -> str:
    """What the backends key records by: a hash, so no caller identity (an API key id, an IAM ARN, a local key) is
    ever stored."""
    return hashlib.sha256(f"chatloop-owner\x00{owner}".encode()).hexdigest()[:40]


class Store:
    """``ConversationStore`` over a ``Backend``; ``ttl_seconds`` from creation for every record and its lists."""

    def __init__(self, backend: Backend, ttl_seconds: int):
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self.backend = backend
        self.ttl_seconds = ttl_seconds

    # --- conversations ----------------------------------------------------------------------------
    async def create_conversation(
        self, owner: str, metadata: dict[str, str], items: Sequence[Item], deadline: Deadline
    ) -> Conversation:
        record = self._new_record("conversation", {"metadata": dict(metadata)})
        conversation_id = new_id("conv")
        lists: dict[ListName, Sequence[Item]] = {"items": list(items)}
        key = owner_key(owner)
        await self._run(deadline, self.backend.create, key, conversation_id, record, lists)
        # Then the owner's index (a conversation left out of it by a failure here is still theirs, by id).
        index = Record("index", record.created_at, record.expires_at, {})
        await self._run(deadline, self.backend.ensure, key, _index_id(key), index)
        entry = Item(conversation_id, {"id": conversation_id}, expires_at=record.expires_at)
        await self._run(
            deadline, self.backend.append, key, _index_id(key), "conversations", [entry], time.time()
        )
        return _conversation(conversation_id, record)

    async def list_conversations(self, owner: str, query: PageQuery, deadline: Deadline) -> Page:
        """The owner's conversations (``conversation`` objects), newest first by default; ``after`` is a
        conversation id. Expired and deleted ones are not listed."""
        key = owner_key(owner)
        listed: list[Item] = []
        has_more = False
        after = query.after
        while len(listed) < query.limit:  # skipping entries whose conversation went away meanwhile
            page = await self._page(
                owner, _index_id(key), "conversations", replace(query, after=after), deadline
            )
            if page is None:
                break
            for entry in page.data:
                conversation = await self.get_conversation(owner, entry.id, deadline)
                if conversation is not None and len(listed) < query.limit:
                    listed.append(Item(entry.id, conversation.as_object()))
            has_more = page.has_more
            if not page.has_more or not page.data:
                break
            after = page.data[-1].id
        return Page(listed, has_more=has_more)

    async def get_conversation(
        self, owner: str, conversation_id: str, deadline: Deadline
    ) -> Conversation | None:
        record = await self._read(owner, conversation_id, "conversation", deadline)
        return _conversation(conversation_id, record) if record else None

    async def update_conversation(
        self, owner: str, conversation_id: str, metadata: dict[str, str], deadline: Deadline
    ) -> Conversation | None:
        record = await self._read(owner, conversation_id, "conversation", deadline)
        if record is None:
            return None
        body = {**record.body, "metadata": dict(metadata)}
        updated = await self._run(
            deadline, self.backend.replace_body, owner_key(owner), conversation_id, body, time.time()
        )
        if not updated:
            return None
        return Conversation(conversation_id, record.created_at, dict(metadata), record.expires_at)

    async def delete_conversation(self, owner: str, conversation_id: str, deadline: Deadline) -> bool:
        if await self._read(owner, conversation_id, "conversation", deadline) is None:
            return False
        key = owner_key(owner)
        deleted = await self._run(deadline, self.backend.delete, key, conversation_id, time.time())
        await self._run(
            deadline,
            self.backend.delete_child,
            key,
            _index_id(key),
            "conversations",
            conversation_id,
            time.time(),
        )
        return deleted

    async def append_items(
        self, owner: str, conversation_id: str, items: Sequence[Item], deadline: Deadline
    ) -> bool:
        if not conversation_id.startswith("conv_"):
            return False
        return await self._run(
            deadline,
            self.backend.append,
            owner_key(owner),
            conversation_id,
            "items",
            list(items),
            time.time(),
        )

    async def list_items(
        self, owner: str, conversation_id: str, query: PageQuery, deadline: Deadline
    ) -> Page | None:
        if not conversation_id.startswith("conv_"):
            return None
        return await self._page(owner, conversation_id, "items", query, deadline)

    async def get_item(
        self, owner: str, conversation_id: str, item_id: str, deadline: Deadline
    ) -> Item | None:
        if not conversation_id.startswith("conv_"):
            return None
        return await self._run(
            deadline, self.backend.get_child, owner_key(owner), conversation_id, "items", item_id, time.time()
        )

    async def delete_item(self, owner: str, conversation_id: str, item_id: str, deadline: Deadline) -> bool:
        if not conversation_id.startswith("conv_"):
            return False
        return await self._run(
            deadline,
            self.backend.delete_child,
            owner_key(owner),
            conversation_id,
            "items",
            item_id,
            time.time(),
        )

    # --- responses --------------------------------------------------------------------------------
    async def create_response(
        self,
        owner: str,
        body: JSONObject,
        input_items: Sequence[Item],
        deadline: Deadline,
        output_items: Sequence[Item] = (),
    ) -> StoredResponse:
        """Store ``body`` (a ``response`` object with its ``resp_`` id), the items of its input and, for a finished
        response, its output items: one write."""
        response_id = str(body["id"])
        if not response_id.startswith("resp_"):
            raise ValueError("a stored response's id starts with resp_")
        record = self._new_record("response", body)
        lists: dict[ListName, Sequence[Item]] = {"input": list(input_items), "output": list(output_items)}
        await self._run(deadline, self.backend.create, owner_key(owner), response_id, record, lists)
        return StoredResponse(response_id, record.created_at, body, record.expires_at)

    async def update_response(
        self,
        owner: str,
        response_id: str,
        body: JSONObject,
        output_items: Sequence[Item],
        deadline: Deadline,
    ) -> bool:
        """Replace the stored ``response`` object (it completed, say) and add its output items."""
        key = owner_key(owner)
        if await self._read(owner, response_id, "response", deadline) is None:
            return False
        if output_items and not await self._run(
            deadline, self.backend.append, key, response_id, "output", list(output_items), time.time()
        ):
            return False
        return await self._run(deadline, self.backend.replace_body, key, response_id, body, time.time())

    async def get_response(self, owner: str, response_id: str, deadline: Deadline) -> StoredResponse | None:
        record = await self._read(owner, response_id, "response", deadline)
        if record is None:
            return None
        return StoredResponse(response_id, record.created_at, record.body, record.expires_at)

    async def delete_response(self, owner: str, response_id: str, deadline: Deadline) -> bool:
        if await self._read(owner, response_id, "response", deadline) is None:
            return False
        return await self._run(deadline, self.backend.delete, owner_key(owner), response_id, time.time())

    async def list_response_items(
        self,
        owner: str,
        response_id: str,
        which: Literal["input", "output"],
        query: PageQuery,
        deadline: Deadline,
    ) -> Page | None:
        if not response_id.startswith("resp_"):
            return None
        return await self._page(owner, response_id, which, query, deadline)

    async def append_events(
        self, owner: str, response_id: str, events: Sequence[StoredEvent], deadline: Deadline
    ) -> bool:
        """Keep a streamed response's events at their sequence numbers (a replay reads them back in order)."""
        if not response_id.startswith("resp_"):
            return False
        entries = [(e.sequence_number, Item(str(e.sequence_number), e.data)) for e in events]
        return await self._run(
            deadline, self.backend.put_at, owner_key(owner), response_id, "events", entries, time.time()
        )

    async def events_after(
        self, owner: str, response_id: str, after: int, deadline: Deadline
    ) -> list[StoredEvent] | None:
        """The stored events whose sequence number is above ``after`` (-1: all), in order. None: no such response."""
        if not response_id.startswith("resp_"):
            return None
        rows = await self._run(
            deadline,
            self.backend.page,
            owner_key(owner),
            response_id,
            "events",
            "asc",
            after,
            MAX_EVENTS_READ,
            time.time(),
        )
        return None if rows is None else [StoredEvent(position, item.body) for position, item in rows]

    # --- shared steps -----------------------------------------------------------------------------
    # --- one-time uses ---------------------------------------------------------------------------
    async def claim(self, owner: str, claim_id: str, deadline: Deadline) -> bool:
        """Record the one use of ``claim_id`` (an answered approval, say): True the first time, False ever after
        (until the store's TTL), across processes: the backend's create is conditional, so of two at once one
        wins."""
        record = self._new_record("claim", {})
        try:
            await self._run(deadline, self.backend.create, owner_key(owner), claim_id, record, {})
        except StoreUnavailable:
            if await self._read(owner, claim_id, "claim", deadline) is not None:
                return False  # it exists: this is a second use
            raise
        return True

    async def release(self, owner: str, claim_id: str, deadline: Deadline) -> None:
        """Give back a use ``claim`` recorded for something that then did not happen (its turn refused before
        anything ran): the next ``claim`` of ``claim_id`` is the first again."""
        if await self._read(owner, claim_id, "claim", deadline) is not None:
            await self._run(deadline, self.backend.delete, owner_key(owner), claim_id, time.time())

    def _new_record(self, kind: Literal["conversation", "response", "claim"], body: JSONObject) -> Record:
        now = time.time()
        return Record(kind, int(now), math.ceil(now + self.ttl_seconds), body)

    async def _read(self, owner: str, record_id: str, kind: str, deadline: Deadline) -> Record | None:
        record = await self._run(deadline, self.backend.read, owner_key(owner), record_id, time.time())
        return record if record is not None and record.kind == kind else None

    async def _page(
        self, owner: str, record_id: str, name: ListName, query: PageQuery, deadline: Deadline
    ) -> Page | None:
        key = owner_key(owner)
        after: int | None = None
        if query.after is not None:
            after = await self._run(
                deadline, self.backend.position_of, key, record_id, name, query.after, time.time()
            )
            if after is None:
                if await self._run(deadline, self.backend.read, key, record_id, time.time()) is None:
                    return None
                raise CursorNotFound(query.after)
        rows = await self._run(
            deadline,
            self.backend.page,
            key,
            record_id,
            name,
            query.order,
            after,
            query.limit + 1,
            time.time(),
        )
        if rows is None:
            return None
        return Page([item for _, item in rows[: query.limit]], has_more=len(rows) > query.limit)

    async def call(self, deadline: Deadline, call: Callable[..., T], *args: object) -> T:
        """A backend operation, bounded by ``deadline`` as every call of the store is: for modules that keep
        records of their own in the same table or file (``store.runs``)."""
        return await self._run(deadline, call, *args)

    async def _run(self, deadline: Deadline, call: Callable[..., T], *args: object) -> T:
        """``call(*args, timeout=…)`` in a worker thread, abandoned (and ``StoreUnavailable``) at the deadline."""
        remaining = deadline.remaining()
        if remaining <= 0:
            raise StoreUnavailable("no time was left for the conversation store")
        try:
            with anyio.fail_after(remaining):
                return await to_thread.run_sync(
                    functools.partial(call, *args, timeout=remaining), abandon_on_cancel=True
                )
        except TimeoutError:
            raise StoreUnavailable(
                f"the conversation store did not answer within {remaining:.1f} s"
            ) from None


def _index_id(key: str) -> str:
    """The record holding an owner's list of conversations (one per owner, keyed by the owner's hash)."""
    return f"idx_{key}"


def _conversation(conversation_id: str, record: Record) -> Conversation:
    stored = record.body.get("metadata")
    metadata = {k: v for k, v in stored.items() if isinstance(v, str)} if isinstance(stored, dict) else {}
    return Conversation(conversation_id, record.created_at, metadata, record.expires_at)
