"""``Connections``: what a WebSocket connection (the Responses API's WebSocket mode) keeps beyond one message, in
the store every container reads (on Lambda the next message of a connection may reach another container).

- the connection itself (``open`` / ``close``), whose caller is the one its handshake established;
- its memory of the responses it made (``remember`` / ``recall``): what a ``previous_response_id`` continuation
  needs even with ``store: false`` (OpenAI: "the server keeps the previous response in the connection's memory").
  A memory is read only through its open connection and only by that connection's caller: another caller, another
  connection (a reconnect) or a closed one reads exactly "none";
- the one-response-at-a-time claim of a lane (``claim`` / ``release``): one running response per ``stream_id`` of
  a connection (``""``: the connection without ``stream_id``), across containers, since the backend's create is
  conditional.

Everything expires with the connection's longest life (API Gateway's 2-hour limit: WEBSOCKET_MAX_CONNECTION_SECONDS),
given as ``ttl_seconds``. Records live in the same table or file as the rest, under their own kinds
(``connection``, ``memory``, ``lane``) and ids prefixed ``ws_``; nothing here names a caller in clear (owners are
hashed by ``Core``).

Usage::

    connections = Connections(Core(SQLiteBackend(path), ttl_seconds=3600))
    await connections.open("conn_1", "local", 7200, deadline)
    await connections.remember("conn_1", "local", "resp_1", [item, …], 7200, deadline)
    await connections.recall("conn_1", "local", "resp_1", deadline)      # [item, …]; None for any other caller
    if await connections.claim("conn_1", "", 60, deadline): …             # False while another response runs
"""

from __future__ import annotations

from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject, json_object
from chatloop.store.core import Core, owner_key
from chatloop.store.model import StoreUnavailable

ANONYMOUS = "\x00websocket-anonymous"
"""The owner of a connection whose handshake named no caller (never a caller string: ``caller_of`` never makes one
with a NUL). Its memory is still keyed to its connection id, which is server-made and unguessable."""
CLAIM_TRIES = 3
"""A lane given back between a failed create and the read that follows is claimed again, this many times."""
LANES = "\x00websocket-lanes"
"""The owner of lane claims: they belong to a connection, whoever its caller is."""


def _owner(caller: str | None) -> str:
    return ANONYMOUS if caller is None else caller


def _connection(connection_id: str) -> str:
    return f"ws_{connection_id}"


def _memory(connection_id: str, response_id: str) -> str:
    return f"ws_{connection_id}/{response_id}"


def _lane(connection_id: str, stream_id: str) -> str:
    return f"ws_{connection_id}#{stream_id}"


class Connections:
    """The ``ConnectionRecords`` of the store (``store.protocol``)."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def open(
        self, connection_id: str, caller: str | None, ttl_seconds: int, deadline: Deadline
    ) -> None:
        """Record the connection for ``caller`` (kept at most ``ttl_seconds``; opening it again keeps it)."""
        core = self.core
        record = core.new_record("connection", {}, ttl_seconds)
        key = owner_key(_owner(caller))
        await core.call(deadline, core.backend.ensure, key, _connection(connection_id), record)

    async def close(self, connection_id: str, caller: str | None, deadline: Deadline) -> None:
        """Forget the connection: its memories cannot be recalled any more (they expire with their TTL)."""
        core = self.core
        key = owner_key(_owner(caller))
        await core.call(deadline, core.backend.delete, key, _connection(connection_id), core.now())

    async def remember(
        self,
        connection_id: str,
        caller: str | None,
        response_id: str,
        items: list[JSONObject],
        ttl_seconds: int,
        deadline: Deadline,
    ) -> None:
        """Keep what continuing ``response_id`` needs: every item of its chain (input and output, oldest first)."""
        core = self.core
        record = core.new_record("memory", {"items": list(items)}, ttl_seconds)
        key = owner_key(_owner(caller))
        # created (not upserted): a chain's items may pass DynamoDB's item limit, which ``create`` splits into parts
        await core.call(deadline, core.backend.create, key, _memory(connection_id, response_id), record, {})

    async def recall(
        self, connection_id: str, caller: str | None, response_id: str, deadline: Deadline
    ) -> list[JSONObject] | None:
        """The items ``remember`` kept for ``response_id`` on this open connection, for this caller; else None."""
        owner = _owner(caller)
        if await self.core.read(owner, _connection(connection_id), "connection", deadline) is None:
            return None  # closed, expired, or another caller's: its memory is not theirs to use
        record = await self.core.read(owner, _memory(connection_id, response_id), "memory", deadline)
        if record is None:
            return None
        items = record.body.get("items")
        return [json_object(i) for i in items if isinstance(i, dict)] if isinstance(items, list) else None

    async def claim(self, connection_id: str, stream_id: str, ttl_seconds: int, deadline: Deadline) -> bool:
        """Take the lane ``stream_id`` of the connection for one response: True when it was free. The claim lapses
        after ``ttl_seconds`` (a container that died mid-turn does not hold it for ever)."""
        core = self.core
        record = core.new_record("lane", {}, ttl_seconds)
        key, lane = owner_key(LANES), _lane(connection_id, stream_id)
        for _ in range(CLAIM_TRIES):
            try:
                await core.call(deadline, core.backend.create, key, lane, record, {})
            except StoreUnavailable:
                if await core.read(LANES, lane, "lane", deadline) is not None:
                    return False  # taken: a response runs on this lane
                continue  # given back between the two calls: try again
            return True
        raise StoreUnavailable(f"the lane of connection {connection_id} could not be claimed")

    async def release(self, connection_id: str, stream_id: str, deadline: Deadline) -> None:
        """Give the lane back as its response ends."""
        core = self.core
        await core.call(
            deadline, core.backend.delete, owner_key(LANES), _lane(connection_id, stream_id), core.now()
        )
