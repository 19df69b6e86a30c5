"""``ConversationStore``: what the API needs of the conversation store, as a protocol (``Store`` in ``service.py``
implements it; a test can pass its own), and ``CursorNotFound``, the one error it raises besides
``StoreUnavailable``.

Usage::

    async def show(store: ConversationStore, owner: str, conversation_id: str, deadline: Deadline) -> JSONObject:
        conversation = await store.get_conversation(owner, conversation_id, deadline)
        return conversation.as_object() if conversation else {"error": "not found"}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.store.model import Conversation, Item, Page, PageQuery, StoredEvent, StoredResponse


class CursorNotFound(LookupError):
    """``after`` names no item of the list (a 400 for the client)."""


class ConversationStore(Protocol):
    """What the API needs of the store. Every method is scoped to ``owner``: another owner's record is None / False,
    exactly as a missing one. ``StoreUnavailable`` when the store fails or the deadline passes."""

    async def create_conversation(
        self, owner: str, metadata: dict[str, str], items: Sequence[Item], deadline: Deadline
    ) -> Conversation: ...

    async def get_conversation(
        self, owner: str, conversation_id: str, deadline: Deadline
    ) -> Conversation | None: ...

    async def list_conversations(self, owner: str, query: PageQuery, deadline: Deadline) -> Page: ...

    async def update_conversation(
        self, owner: str, conversation_id: str, metadata: dict[str, str], deadline: Deadline
    ) -> Conversation | None: ...

    async def delete_conversation(self, owner: str, conversation_id: str, deadline: Deadline) -> bool: ...

    async def append_items(
        self, owner: str, conversation_id: str, items: Sequence[Item], deadline: Deadline
    ) -> bool: ...

    async def list_items(
        self, owner: str, conversation_id: str, query: PageQuery, deadline: Deadline
    ) -> Page | None: ...

    async def get_item(
        self, owner: str, conversation_id: str, item_id: str, deadline: Deadline
    ) -> Item | None: ...

    async def delete_item(
        self, owner: str, conversation_id: str, item_id: str, deadline: Deadline
    ) -> bool: ...

    async def create_response(
        self,
        owner: str,
        body: JSONObject,
        input_items: Sequence[Item],
        deadline: Deadline,
        output_items: Sequence[Item] = (),
    ) -> StoredResponse: ...

    async def update_response(
        self,
        owner: str,
        response_id: str,
        body: JSONObject,
        output_items: Sequence[Item],
        deadline: Deadline,
    ) -> bool: ...

    async def get_response(
        self, owner: str, response_id: str, deadline: Deadline
    ) -> StoredResponse | None: ...

    async def delete_response(self, owner: str, response_id: str, deadline: Deadline) -> bool: ...

    async def list_response_items(
        self,
        owner: str,
        response_id: str,
        which: Literal["input", "output"],
        query: PageQuery,
        deadline: Deadline,
    ) -> Page | None: ...

    async def append_events(
        self, owner: str, response_id: str, events: Sequence[StoredEvent], deadline: Deadline
    ) -> bool: ...

    async def events_after(
        self, owner: str, response_id: str, after: int, deadline: Deadline
    ) -> list[StoredEvent] | None: ...

    async def claim(self, owner: str, claim_id: str, deadline: Deadline) -> bool: ...

    async def release(self, owner: str, claim_id: str, deadline: Deadline) -> None: ...
