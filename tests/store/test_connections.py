"""WebSocket mode's connection memory in the store (issue 44), on both backends (SQLite in a temp file, DynamoDB
through moto): a response's memory is recalled only through its open connection and by its caller, a lane is
taken by one response at a time across copies, and a chain too large for one DynamoDB item is kept whole."""

from __future__ import annotations

import asyncio
import secrets

from tests.support.store import soon

HOURS_2 = 7200


async def test_a_memory_is_recalled_only_on_its_open_connection_by_its_caller(backends):
    connections = backends.store().connections
    items = [{"type": "message", "role": "user", "content": "hi"}]
    await connections.open("c1", "alice", HOURS_2, soon())
    await connections.remember("c1", "alice", "resp_1", items, HOURS_2, soon())
    assert await connections.recall("c1", "alice", "resp_1", soon()) == items
    assert await connections.recall("c1", "bob", "resp_1", soon()) is None  # another caller
    assert await connections.recall("c2", "alice", "resp_1", soon()) is None  # another connection
    assert await connections.recall("c1", "alice", "resp_2", soon()) is None  # a response it did not make
    await connections.close("c1", "alice", soon())
    assert await connections.recall("c1", "alice", "resp_1", soon()) is None  # closed: forgotten


async def test_a_connection_without_a_caller_keeps_its_own_memory(backends):
    connections = backends.store().connections
    await connections.open("c1", None, HOURS_2, soon())
    await connections.remember("c1", None, "resp_1", [{"type": "message"}], HOURS_2, soon())
    assert await connections.recall("c1", None, "resp_1", soon()) == [{"type": "message"}]
    assert await connections.recall("c1", "alice", "resp_1", soon()) is None


async def test_a_lane_runs_one_response_at_a_time_across_copies(backends):
    one, other = backends.store().connections, backends.store().connections
    won = await asyncio.gather(*(c.claim("c1", "", 60, soon()) for c in (one, other, one, other)))
    assert sorted(won) == [False, False, False, True]
    assert await one.claim("c1", "lane-b", 60, soon())  # another stream_id is another lane
    assert not await other.claim("c1", "lane-b", 60, soon())
    await other.release("c1", "", soon())
    assert await one.claim("c1", "", 60, soon())  # given back: the next response takes it


async def test_a_memory_too_large_for_one_item_is_kept_whole(backends):
    connections = backends.store().connections
    items = [
        {"type": "function_call_output", "call_id": f"c{n}", "output": secrets.token_hex(20_000)}
        for n in range(30)
    ]
    await connections.open("c1", "alice", HOURS_2, soon())
    await connections.remember("c1", "alice", "resp_1", items, HOURS_2, soon())
    assert await connections.recall("c1", "alice", "resp_1", soon()) == items
