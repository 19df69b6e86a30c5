"""``Connections``: what a WebSocket connection (the Responses API's WebSocket mode) keeps beyond one message, in
the store every container reads (on Lambda the next message of a connection may reach another container).

- the connection itself (``open`` / ``close``), whose caller is the one its handshake established;
- its memory of the responses it made (``remember`` / ``recall``): what a ``previous_response_id`` continuation
  needs even with ``store: false`` (OpenAI: "the server keeps the previous response in the connection's memory").
  A memory is read only through its open connection and only by that connection's caller: another caller, another
  connection (a reconnect) or a closed one reads exactly "none". A lane keeps its last response: continuing one on
  its own lane forgets it (a fork on another lane does not);
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
    await connections.recall("conn_1", "local", "resp_1", deadline)      # Memory([item, …], ""); None for others
    if await connections.claim("conn_1", "", 60, deadline): …             # False while another response runs
"""

from __future__ import annotations

from dataclasses import dataclass

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
CONNECTIONS = "\x00websocket-connections"
"""The owner of connection records (each names its caller, hashed, in its body)."""


def _owner(caller: str | None) -> str:
    return ANONYMOUS if caller is None else caller


def _connection(connection_id: str) -> str:
    return f"ws_{connection_id}"


def _memory(connection_id: str, response_id: str) -> str:
    return f"ws_{connection_id}/{response_id}"


def _lane(connection_id: str, stream_id: str) -> str:
    return f"ws_{connection_id}#{stream_id}"


@dataclass(frozen=True)
class Memory:
    """A response as its connection remembers it: its chain's items, and the lane it was made on."""

    items: list[JSONObject]
    lane: str


class Connections:
    """The ``ConnectionRecords`` of the store (``store.protocol``)."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def open(
        self,
        connection_id: str,
        caller: str | None,
        ttl_seconds: int,
        deadline: Deadline,
        *,
        sealed_caller: str | None = None,
    ) -> None:
        """Record the connection for ``caller`` (kept at most ``ttl_seconds``; opening it again keeps it). The record
        is the connection's (``close`` needs only its id: API Gateway's ``$disconnect`` may carry no identity) and
        holds its caller as the store keys owners, hashed; ``sealed_caller``, when given, is kept as it is (the
        caller sealed by the transport whose later events carry no identity: ``sealed_caller_of``)."""
        core = self.core
        body: JSONObject = {"caller": owner_key(_owner(caller))}
        if sealed_caller is not None:
            body["sealed_caller"] = sealed_caller
        record = core.new_record("connection", body, ttl_seconds)
        await core.call(
            deadline, core.backend.ensure, owner_key(CONNECTIONS), _connection(connection_id), record
        )

    async def sealed_caller_of(self, connection_id: str, deadline: Deadline) -> str | None:
        """The ``sealed_caller`` the open connection was recorded with; None for a closed or expired connection or
        one recorded without."""
        connection = await self.core.read(CONNECTIONS, _connection(connection_id), "connection", deadline)
        sealed = connection.body.get("sealed_caller") if connection is not None else None
        return sealed if isinstance(sealed, str) else None

    async def close(self, connection_id: str, deadline: Deadline) -> None:
        """Forget the connection: its memories cannot be recalled any more (they expire with their TTL)."""
        core = self.core
        await core.call(
            deadline, core.backend.delete, owner_key(CONNECTIONS), _connection(connection_id), core.now()
        )

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
    ) -> None:
        """Keep what continuing ``response_id`` needs: every item of its chain (input and output, oldest first), made
        on ``lane``. ``replacing``: the response it continued on the same lane, forgotten now (a lane's memory is
        its last response; another lane's forks from it are theirs)."""
        core = self.core
        record = core.new_record("memory", {"items": list(items), "lane": lane}, ttl_seconds)
        key = owner_key(_owner(caller))
        # created (not upserted): a chain's items may pass DynamoDB's item limit, which ``create`` splits into parts
        await core.call(deadline, core.backend.create, key, _memory(connection_id, response_id), record, {})
        if replacing is not None:
            await core.call(deadline, core.backend.delete, key, _memory(connection_id, replacing), core.now())

    async def recall(
        self, connection_id: str, caller: str | None, response_id: str, deadline: Deadline
    ) -> Memory | None:
        """What ``remember`` kept for ``response_id`` on this open connection, for this caller; else None."""
        owner = _owner(caller)
        connection = await self.core.read(CONNECTIONS, _connection(connection_id), "connection", deadline)
        if connection is None or connection.body.get("caller") != owner_key(owner):
            return None  # closed, expired, or another caller's: its memory is not theirs to use
        record = await self.core.read(owner, _memory(connection_id, response_id), "memory", deadline)
        if record is None:
            return None
        items, lane = record.body.get("items"), record.body.get("lane")
        if not isinstance(items, list):
            return None
        return Memory(
            [json_object(i) for i in items if isinstance(i, dict)], lane if isinstance(lane, str) else ""
        )

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
