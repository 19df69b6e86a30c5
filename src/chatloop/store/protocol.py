"""What the API needs of the store, as small protocols by aggregate (conversations, responses, runs, claims) and
``StateStore``, the store that holds one of each (``Store`` in ``service.py`` is the one implementation,
over SQLite or DynamoDB; a test builds a real one, on a temporary SQLite file). The budget ledger is its own
(``store.budget.Ledger``), and so are the idempotency records (``store.idempotency``).

Every method is scoped to ``owner``: another owner's record is None / False, exactly as a missing one.
``StoreUnavailable`` when the store fails or the deadline passes; ``CursorNotFound`` when a page's ``after`` is not
in its list.

Usage::

    async def show(store: StateStore, owner: str, conversation_id: str, deadline: Deadline) -> JSONObject:
        conversation = await store.conversations.get(owner, conversation_id, deadline)
        return conversation.as_object() if conversation else {"error": "not found"}
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal, Protocol

from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.store.connections import Memory
from chatloop.store.core import CursorNotFound
from chatloop.store.model import Conversation, Item, Page, PageQuery, StoredEvent, StoredResponse
from chatloop.store.runs import Run, RunStatus

__all__ = [
    "ClaimRecords",
    "ConnectionRecords",
    "ConversationRecords",
    "CursorNotFound",
    "ResponseRecords",
    "RunRecords",
    "StateStore",
]


class ConversationRecords(Protocol):
    """Conversations and their items (``store.conversations.Conversations``)."""

    async def create(
        self, owner: str, metadata: dict[str, str], items: Sequence[Item], deadline: Deadline
    ) -> Conversation: ...

    async def get(self, owner: str, conversation_id: str, deadline: Deadline) -> Conversation | None: ...

    async def list(self, owner: str, query: PageQuery, deadline: Deadline) -> Page: ...

    async def update(
        self, owner: str, conversation_id: str, metadata: dict[str, str], deadline: Deadline
    ) -> Conversation | None: ...

    async def delete(self, owner: str, conversation_id: str, deadline: Deadline) -> bool: ...

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


class ResponseRecords(Protocol):
    """Stored responses, their input and output items and their stream's events (``store.responses.Responses``)."""

    async def create(
        self,
        owner: str,
        body: JSONObject,
        input_items: Sequence[Item],
        deadline: Deadline,
        output_items: Sequence[Item] = (),
    ) -> StoredResponse: ...

    async def update(
        self, owner: str, response_id: str, body: JSONObject, output_items: Sequence[Item], deadline: Deadline
    ) -> bool: ...

    async def get(self, owner: str, response_id: str, deadline: Deadline) -> StoredResponse | None: ...

    async def delete(self, owner: str, response_id: str, deadline: Deadline) -> bool: ...

    async def list_items(
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


class RunRecords(Protocol):
    """Running turns: their status, their cancel request, a background one's request, a ``/chat`` turn's journal
    (``store.runs.Runs``)."""

    async def begin(
        self,
        owner: str,
        key: str,
        turn: str,
        status: RunStatus,
        deadline: Deadline,
        request: JSONObject | None = None,
        *,
        background: bool = False,
    ) -> Run: ...

    async def get(self, owner: str, key: str, deadline: Deadline) -> Run | None: ...

    async def move(
        self,
        owner: str,
        key: str,
        turn: str | None,
        allowed: Collection[str],
        status: RunStatus,
        deadline: Deadline,
    ) -> Run | None: ...

    async def cancel(self, owner: str, key: str, deadline: Deadline) -> Run | None: ...

    async def open_journal(self, owner: str, turn: str, deadline: Deadline) -> None: ...

    async def append_events(
        self, owner: str, turn: str, events: Sequence[StoredEvent], deadline: Deadline
    ) -> bool: ...

    async def events_after(
        self, owner: str, turn: str, after: int, deadline: Deadline
    ) -> list[StoredEvent] | None: ...

    async def request_of(self, owner: str, key: str, deadline: Deadline) -> JSONObject | None: ...


class ClaimRecords(Protocol):
    """One-time uses (``store.claims.Claims``)."""

    async def claim(self, owner: str, claim_id: str, deadline: Deadline) -> bool: ...

    async def release(self, owner: str, claim_id: str, deadline: Deadline) -> None: ...


class ConnectionRecords(Protocol):
    """WebSocket connections, their memory of the responses they made, and their lanes
    (``store.connections.Connections``)."""

    async def open(
        self,
        connection_id: str,
        caller: str | None,
        ttl_seconds: int,
        deadline: Deadline,
        *,
        sealed_caller: str | None = None,
    ) -> None: ...

    async def sealed_caller_of(self, connection_id: str, deadline: Deadline) -> str | None: ...

    async def close(self, connection_id: str, deadline: Deadline) -> None: ...

    async def remember(
        self,
        connection_id: str,
        caller: str | None,
        response_id: str,
        items: list[JSONObject],
        ttl_seconds: int,
        deadline: Deadline,
        *,
        lane: str = "",
        replacing: str | None = None,
    ) -> None: ...

    async def recall(
        self, connection_id: str, caller: str | None, response_id: str, deadline: Deadline
    ) -> Memory | None: ...

    async def claim(
        self, connection_id: str, stream_id: str, ttl_seconds: int, deadline: Deadline
    ) -> bool: ...

    async def release(self, connection_id: str, stream_id: str, deadline: Deadline) -> None: ...


class StateStore(Protocol):
    """The store the API calls: one of each aggregate, all in one table or file."""

    @property
    def conversations(self) -> ConversationRecords: ...

    @property
    def responses(self) -> ResponseRecords: ...

    @property
    def runs(self) -> RunRecords: ...

    @property
    def claims(self) -> ClaimRecords: ...

    @property
    def connections(self) -> ConnectionRecords: ...
