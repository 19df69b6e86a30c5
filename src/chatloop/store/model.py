"""The store's values (conversations, items, stored responses, pages), its one error, its ids, and the small
synchronous ``Backend`` protocol that SQLite and DynamoDB each implement.

A backend knows *records* (a conversation or a response: a JSON body, a creation time and an expiry) and, under
each record, ordered *lists* of items (``items`` of a conversation; ``input``, ``output`` and ``events`` of a
response). Positions in a list only grow; an item is found by its id or listed from a position. Everything a
backend stores carries its record's expiry, and everything is keyed by the owner, so another owner's records do
not exist for it.

Usage::

    new_id("conv")                                   # 'conv_' + 48 hex digits (192 random bits)
    PageQuery(order="asc", limit=20, after="msg_…")
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from chatloop.jsontypes import JSONObject

ListName = Literal["items", "input", "output", "events", "conversations"]
"""``items``: a conversation's items. ``input`` / ``output``: a response's input and output items. ``events``: a
streamed response's events, at the position of their ``sequence_number``. ``conversations``: an owner's index of
their conversations (each entry expiring with its conversation)."""
Order = Literal["asc", "desc"]
RecordKind = Literal["conversation", "response", "index", "run", "claim", "connection", "memory", "lane"]
RECORD_KINDS: tuple[RecordKind, ...] = (
    "conversation",
    "response",
    "index",
    "run",
    "claim",
    "connection",
    "memory",
    "lane",
)
"""``claim``: a one-time use recorded (an approval answered), so a second use is told apart (``Store.claims``).
``connection``, ``memory``, ``lane``: a WebSocket connection, its memory of a response, a running response's lane
(``Store.connections``)."""
ID_RANDOM_BYTES = 24
"""192 bits: an id is never guessed, and never collides."""


class StoreUnavailable(Exception):
    """The store failed or did not answer in time (a 503 for the client); the message names no secret."""


def record_kind(text: str) -> RecordKind | None:
    """``text`` as a ``RecordKind`` (what a backend reads back as a plain string), or None when it names none."""
    return next((kind for kind in RECORD_KINDS if kind == text), None)


def new_id(prefix: str) -> str:
    """An unguessable id with an OpenAI-like prefix: ``new_id("conv")`` -> ``conv_6f1c…`` (48 hex digits)."""
    return f"{prefix}_{secrets.token_hex(ID_RANDOM_BYTES)}"


@dataclass(frozen=True)
class Item:
    """One entry of a list: its id and its body as the API shows it (the body's ``id`` is the same id)."""

    id: str
    body: JSONObject
    expires_at: int | None = field(default=None, compare=False)
    """When this entry expires, if before its record (an index entry, with its conversation); None when read."""


@dataclass(frozen=True)
class Record:
    """What a backend keeps for a conversation or a response (its lists aside)."""

    kind: RecordKind
    created_at: int
    expires_at: int
    """Epoch seconds; the record and its lists read as missing from then on."""
    body: JSONObject = field(default_factory=dict)


@dataclass(frozen=True)
class Conversation:
    id: str
    created_at: int
    metadata: dict[str, str]
    expires_at: int

    def as_object(self) -> JSONObject:
        """OpenAI's ``Conversation`` (openai-python ``types/conversations/conversation.py``)."""
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": dict(
                self.metadata
            ),  # a JSON object of its own (dict[str, str] is not one to the checker)
        }


@dataclass(frozen=True)
class StoredResponse:
    id: str
    created_at: int
    body: dict[str, Any]
    """The ``response`` object as it was last stored (values untyped: the API reads its ``output`` list by key
    and splices it into the next request's input, where a ``JSONObject`` would need narrowing)."""
    expires_at: int


@dataclass(frozen=True)
class StoredEvent:
    """One event of a streamed response, as it was sent (``data["sequence_number"] == sequence_number``)."""

    sequence_number: int
    data: JSONObject


@dataclass(frozen=True)
class PageQuery:
    """A list request's ``order``, ``limit`` (1-100) and ``after`` (an item id), OpenAI's defaults."""

    order: Order = "desc"
    limit: int = 20
    after: str | None = None


@dataclass(frozen=True)
class Page:
    data: list[Item]
    has_more: bool

    @property
    def first_id(self) -> str | None:
        return self.data[0].id if self.data else None

    @property
    def last_id(self) -> str | None:
        return self.data[-1].id if self.data else None

    def as_object(self) -> JSONObject:
        """OpenAI's list shape (``ConversationItemList``, ``ResponseItemList``)."""
        return {
            "object": "list",
            "data": [item.body for item in self.data],
            "first_id": self.first_id,
            "last_id": self.last_id,
            "has_more": self.has_more,
        }


class Backend(Protocol):
    """Synchronous storage, called in a worker thread. ``owner`` is already a hash; ``now`` is epoch seconds (a float)
    (records with ``expires_at <= now`` do not exist); ``timeout`` is what is left of the caller's deadline. Failures
    of the storage itself raise ``StoreUnavailable``."""

    def create(
        self,
        owner: str,
        record_id: str,
        record: Record,
        lists: Mapping[ListName, Sequence[Item]],
        timeout: float,
    ) -> None: ...

    def ensure(self, owner: str, record_id: str, record: Record, timeout: float) -> None:
        """Create the record if it is not there; if it is, keep it, with the later of the two expiries."""
        ...

    def read(self, owner: str, record_id: str, now: float, timeout: float) -> Record | None: ...

    def replace_body(
        self, owner: str, record_id: str, body: JSONObject, now: float, timeout: float
    ) -> bool: ...

    def delete(self, owner: str, record_id: str, now: float, timeout: float) -> bool: ...

    def swap_body(
        self, owner: str, record_id: str, expected: JSONObject, body: JSONObject, now: float, timeout: float
    ) -> bool:
        """Replace the body only if it still is ``expected`` (compare-and-set: a running turn's status moves
        once, whichever copy tries). False: it changed meanwhile, or no record."""
        ...

    def append(
        self, owner: str, record_id: str, name: ListName, items: Sequence[Item], now: float, timeout: float
    ) -> bool:
        """Add ``items`` after the list's last position; safe against concurrent appends. False: no record."""
        ...

    def put_at(
        self,
        owner: str,
        record_id: str,
        name: ListName,
        entries: Sequence[tuple[int, Item]],
        now: float,
        timeout: float,
    ) -> bool:
        """Store each item at the given position (a stream event at its sequence number). False: no record."""
        ...

    def page(
        self,
        owner: str,
        record_id: str,
        name: ListName,
        order: Order,
        after_position: int | None,
        limit: int,
        now: float,
        timeout: float,
    ) -> list[tuple[int, Item]] | None:
        """Up to ``limit`` items after ``after_position`` in ``order``, with their positions. None: no record."""
        ...

    def position_of(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> int | None: ...

    def get_child(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> Item | None: ...

    def delete_child(
        self, owner: str, record_id: str, name: ListName, item_id: str, now: float, timeout: float
    ) -> bool: ...
