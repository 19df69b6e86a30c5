"""``Store``: the one implementation of ``ConversationStore`` (``protocol.py``): one ``Core`` (a synchronous
``Backend``, SQLite or DynamoDB, run in a worker thread within each call's deadline) and each aggregate over it.

Usage::

    store = Store(SQLiteBackend(path), ttl_seconds=3600)
    conversation = await store.conversations.create("caller", {}, [], deadline)
    await store.conversations.get("someone else", conversation.id, deadline)      # None: not theirs
    await store.runs.cancel("caller", "resp_1", deadline)
    await store.connections.open("conn_1", "caller", 7200, deadline)   # WebSocket mode's connection memory
"""

from __future__ import annotations

from chatloop.store.claims import Claims
from chatloop.store.connections import Connections
from chatloop.store.conversations import Conversations
from chatloop.store.core import MAX_EVENTS_READ, Core, CursorNotFound, owner_key
from chatloop.store.model import Backend
from chatloop.store.protocol import ConversationStore
from chatloop.store.responses import Responses
from chatloop.store.runs import Runs

__all__ = ["MAX_EVENTS_READ", "ConversationStore", "CursorNotFound", "Store", "owner_key"]


class Store:
    """``ConversationStore`` over a ``Backend``; ``ttl_seconds`` from creation for every record and its lists."""

    def __init__(self, backend: Backend, ttl_seconds: int):
        self.core = Core(backend, ttl_seconds)
        self._conversations = Conversations(self.core)
        self._responses = Responses(self.core)
        self._runs = Runs(self.core)
        self._claims = Claims(self.core)
        self._connections = Connections(self.core)

    @property
    def conversations(self) -> Conversations:
        return self._conversations

    @property
    def responses(self) -> Responses:
        return self._responses

    @property
    def runs(self) -> Runs:
        return self._runs

    @property
    def claims(self) -> Claims:
        return self._claims

    @property
    def connections(self) -> Connections:
        return self._connections
