"""``Conversations``: conversations and their items, each conversation listed in its owner's index (one ``index``
record per owner, keyed by the owner's hash), on whichever backend the ``Core`` holds.

Usage::

    conversations = Conversations(Core(SQLiteBackend(path), ttl_seconds=3600))
    conversation = await conversations.create("alice", {"topic": "x"}, [item], deadline)
    page = await conversations.list_items("alice", conversation.id, PageQuery(order="asc"), deadline)
    await conversations.get("bob", conversation.id, deadline)                      # None: not bob's
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from chatloop.deadline import Deadline
from chatloop.store.core import Core, owner_key
from chatloop.store.model import Conversation, Item, ListName, Page, PageQuery, Record, new_id


class Conversations:
    """The ``ConversationRecords`` of the store (``store.protocol``): every method scoped to ``owner``."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def create(
        self, owner: str, metadata: dict[str, str], items: Sequence[Item], deadline: Deadline
    ) -> Conversation:
        core = self.core
        record = core.new_record("conversation", {"metadata": dict(metadata)})
        conversation_id = new_id("conv")
        lists: dict[ListName, Sequence[Item]] = {"items": list(items)}
        key = owner_key(owner)
        await core.call(deadline, core.backend.create, key, conversation_id, record, lists)
        # Then the owner's index (a conversation left out of it by a failure here is still theirs, by id).
        index = Record("index", record.created_at, record.expires_at, {})
        await core.call(deadline, core.backend.ensure, key, _index_id(key), index)
        entry = Item(conversation_id, {"id": conversation_id}, expires_at=record.expires_at)
        await core.call(
            deadline, core.backend.append, key, _index_id(key), "conversations", [entry], core.now()
        )
        return _conversation(conversation_id, record)

    async def list(self, owner: str, query: PageQuery, deadline: Deadline) -> Page:
        """The owner's conversations (``conversation`` objects), newest first by default; ``after`` is a
        conversation id. Expired and deleted ones are not listed."""
        key = owner_key(owner)
        listed: list[Item] = []
        has_more = False
        after = query.after
        while len(listed) < query.limit:  # skipping entries whose conversation went away meanwhile
            page = await self.core.page(
                owner, _index_id(key), "conversations", replace(query, after=after), deadline
            )
            if page is None:
                break
            for entry in page.data:
                conversation = await self.get(owner, entry.id, deadline)
                if conversation is not None and len(listed) < query.limit:
                    listed.append(Item(entry.id, conversation.as_object()))
            has_more = page.has_more
            if not page.has_more or not page.data:
                break
            after = page.data[-1].id
        return Page(listed, has_more=has_more)

    async def get(self, owner: str, conversation_id: str, deadline: Deadline) -> Conversation | None:
        record = await self.core.read(owner, conversation_id, "conversation", deadline)
        return _conversation(conversation_id, record) if record else None

    async def update(
        self, owner: str, conversation_id: str, metadata: dict[str, str], deadline: Deadline
    ) -> Conversation | None:
        core = self.core
        record = await core.read(owner, conversation_id, "conversation", deadline)
        if record is None:
            return None
        body = {**record.body, "metadata": dict(metadata)}
        updated = await core.call(
            deadline, core.backend.replace_body, owner_key(owner), conversation_id, body, core.now()
        )
        if not updated:
            return None
        return Conversation(conversation_id, record.created_at, dict(metadata), record.expires_at)

    async def delete(self, owner: str, conversation_id: str, deadline: Deadline) -> bool:
        core = self.core
        if await core.read(owner, conversation_id, "conversation", deadline) is None:
            return False
        key = owner_key(owner)
        deleted = await core.call(deadline, core.backend.delete, key, conversation_id, core.now())
        await core.call(
            deadline,
            core.backend.delete_child,
            key,
            _index_id(key),
            "conversations",
            conversation_id,
            core.now(),
        )
        return deleted

    async def append_items(
        self, owner: str, conversation_id: str, items: Sequence[Item], deadline: Deadline
    ) -> bool:
        if not conversation_id.startswith("conv_"):
            return False
        core = self.core
        return await core.call(
            deadline,
            core.backend.append,
            owner_key(owner),
            conversation_id,
            "items",
            list(items),
            core.now(),
        )

    async def list_items(
        self, owner: str, conversation_id: str, query: PageQuery, deadline: Deadline
    ) -> Page | None:
        if not conversation_id.startswith("conv_"):
            return None
        return await self.core.page(owner, conversation_id, "items", query, deadline)

    async def get_item(
        self, owner: str, conversation_id: str, item_id: str, deadline: Deadline
    ) -> Item | None:
        if not conversation_id.startswith("conv_"):
            return None
        core = self.core
        return await core.call(
            deadline, core.backend.get_child, owner_key(owner), conversation_id, "items", item_id, core.now()
        )

    async def delete_item(self, owner: str, conversation_id: str, item_id: str, deadline: Deadline) -> bool:
        if not conversation_id.startswith("conv_"):
            return False
        core = self.core
        return await core.call(
            deadline,
            core.backend.delete_child,
            owner_key(owner),
            conversation_id,
            "items",
            item_id,
            core.now(),
        )


def _index_id(key: str) -> str:
    """The record holding an owner's list of conversations (one per owner, keyed by the owner's hash)."""
    return f"idx_{key}"


def _conversation(conversation_id: str, record: Record) -> Conversation:
    stored = record.body.get("metadata")
    metadata = {k: v for k, v in stored.items() if isinstance(v, str)} if isinstance(stored, dict) else {}
    return Conversation(conversation_id, record.created_at, metadata, record.expires_at)
