"""The conversation store: one suite, run against both backends (SQLite in a temp file, DynamoDB through moto
in-process), plus one end-to-end run against a moto server over HTTP and the store down or hanging."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.server import ThreadedMotoServer

from chatloop.deadline import Deadline
from chatloop.store import Item, PageQuery, Store, StoredEvent, StoreUnavailable, new_id
from chatloop.store.dynamodb import PART_BYTES, DynamoDBBackend, create_table
from chatloop.store.service import CursorNotFound
from chatloop.store.sqlite import SQLiteBackend
from tests.support.aws import FAKE_CREDENTIALS
from tests.support.store import DAY, TABLE, soon


def message(text: str, role: str = "user") -> Item:
    item_id = new_id("msg")
    kind = "output_text" if role == "assistant" else "input_text"
    return Item(
        item_id,
        {
            "type": "message",
            "id": item_id,
            "role": role,
            "status": "completed",
            "content": [{"type": kind, "text": text}],
        },
    )


def noise(size: int) -> str:
    """Incompressible text: hex of random bytes, ``size`` characters."""
    return secrets.token_hex(size // 2 + 1)[:size]


# --- the suite, on both backends ------------------------------------------------------------------
async def test_a_conversation_round_trip(backends):
    store = backends.store()
    first, second = message("hello"), message("hi there", "assistant")
    created = await store.conversations.create("alice", {"topic": "demo"}, [first, second], soon())
    assert created.id.startswith("conv_") and len(created.id) == len("conv_") + 48
    got = await store.conversations.get("alice", created.id, soon())
    assert got is not None and got.as_object() == {
        "id": created.id,
        "object": "conversation",
        "created_at": created.created_at,
        "metadata": {"topic": "demo"},
    }
    page = await store.conversations.list_items("alice", created.id, PageQuery(order="asc"), soon())
    assert page is not None and [i.body for i in page.data] == [first.body, second.body]
    updated = await store.conversations.update("alice", created.id, {"topic": "changed"}, soon())
    assert updated is not None and updated.metadata == {"topic": "changed"}
    assert (await store.conversations.get("alice", created.id, soon())).metadata == {"topic": "changed"}
    assert await store.conversations.delete("alice", created.id, soon()) is True
    assert await store.conversations.get("alice", created.id, soon()) is None
    assert await store.conversations.list_items("alice", created.id, PageQuery(), soon()) is None
    assert await store.conversations.delete("alice", created.id, soon()) is False


async def test_another_owner_finds_nothing_and_changes_nothing(backends):
    store = backends.store()
    item = message("mine")
    conversation = await store.conversations.create("alice", {"k": "v"}, [item], soon())
    cid = conversation.id
    assert await store.conversations.get("mallory", cid, soon()) is None
    assert await store.conversations.list_items("mallory", cid, PageQuery(), soon()) is None
    assert await store.conversations.get_item("mallory", cid, item.id, soon()) is None
    assert await store.conversations.update("mallory", cid, {"k": "stolen"}, soon()) is None
    assert await store.conversations.append_items("mallory", cid, [message("injected")], soon()) is False
    assert await store.conversations.delete_item("mallory", cid, item.id, soon()) is False
    assert await store.conversations.delete("mallory", cid, soon()) is False
    # ... and the owner's conversation is as it was.
    assert (await store.conversations.get("alice", cid, soon())).metadata == {"k": "v"}
    page = await store.conversations.list_items("alice", cid, PageQuery(), soon())
    assert [i.id for i in page.data] == [item.id]


async def test_lists_honour_order_limit_and_after(backends):
    store = backends.store()
    items = [message(f"m{i}") for i in range(7)]
    cid = (await store.conversations.create("alice", {}, items[:3], soon())).id
    assert await store.conversations.append_items("alice", cid, items[3:], soon())
    ids = [i.id for i in items]

    async def page(**query: Any):
        result = await store.conversations.list_items("alice", cid, PageQuery(**query), soon())
        assert result is not None
        return [i.id for i in result.data], result.has_more, result.first_id, result.last_id

    assert await page(order="asc", limit=3) == (ids[:3], True, ids[0], ids[2])
    assert await page(order="asc", limit=3, after=ids[2]) == (ids[3:6], True, ids[3], ids[5])
    assert await page(order="asc", limit=3, after=ids[5]) == (ids[6:], False, ids[6], ids[6])
    assert await page(order="asc", limit=3, after=ids[6]) == ([], False, None, None)
    assert (await page())[0] == ids[::-1]  # OpenAI's default: desc, 20
    assert await page(order="desc", limit=2, after=ids[4]) == ([ids[3], ids[2]], True, ids[3], ids[2])
    assert await page(order="desc", limit=5, after=ids[1]) == ([ids[0]], False, ids[0], ids[0])
    with pytest.raises(CursorNotFound):
        await store.conversations.list_items("alice", cid, PageQuery(after="msg_unknown"), soon())


async def test_an_owner_lists_their_own_conversations_newest_first(backends):
    store = backends.store()
    mine = [await store.conversations.create("alice", {"n": str(i)}, [], soon()) for i in range(5)]
    await store.conversations.create("bob", {"n": "bob's"}, [], soon())
    listed = await store.conversations.list("alice", PageQuery(), soon())
    assert [c.id for c in listed.data] == [c.id for c in reversed(mine)] and not listed.has_more
    assert listed.data[0].body == mine[-1].as_object()
    await store.conversations.update("alice", mine[3].id, {"n": "renamed"}, soon())
    assert await store.conversations.delete("alice", mine[2].id, soon())
    first = await store.conversations.list("alice", PageQuery(limit=2), soon())
    assert [c.body["metadata"]["n"] for c in first.data] == ["4", "renamed"] and first.has_more
    rest = await store.conversations.list("alice", PageQuery(limit=2, after=first.last_id), soon())
    assert [c.id for c in rest.data] == [mine[1].id, mine[0].id] and not rest.has_more
    oldest = await store.conversations.list("alice", PageQuery(order="asc", limit=1), soon())
    assert oldest.data[0].id == mine[0].id
    assert [
        c.body["metadata"] for c in (await store.conversations.list("bob", PageQuery(), soon())).data
    ] == [{"n": "bob's"}]
    assert (await store.conversations.list("carol", PageQuery(), soon())).data == []


async def test_an_item_is_read_and_deleted_by_id(backends):
    store = backends.store()
    items = [message("a"), message("b"), message("c")]
    cid = (await store.conversations.create("alice", {}, items, soon())).id
    got = await store.conversations.get_item("alice", cid, items[1].id, soon())
    assert got == items[1]
    assert await store.conversations.delete_item("alice", cid, items[1].id, soon()) is True
    assert await store.conversations.get_item("alice", cid, items[1].id, soon()) is None
    assert await store.conversations.delete_item("alice", cid, items[1].id, soon()) is False
    page = await store.conversations.list_items("alice", cid, PageQuery(order="asc"), soon())
    assert [i.id for i in page.data] == [items[0].id, items[2].id]


async def test_everything_expires_with_its_record_whether_or_not_it_was_swept(backends, monkeypatch):
    """The store's clock (``time.time()`` in chatloop.store.core) is the test's: the record is read back within
    its one second however busy the machine, and read again past its expiry without waiting for it."""
    import chatloop.store.core as core

    clock = [time.time()]
    monkeypatch.setattr(core, "time", SimpleNamespace(time=lambda: clock[0]))
    store = backends.store(ttl_seconds=1)
    item = message("short-lived")
    before = clock[0]
    cid = (await store.conversations.create("alice", {}, [item], soon())).id
    assert await store.conversations.get_item("alice", cid, item.id, soon()) == item
    rows = backends.raw_rows()
    # Every stored row carries the expiry, in epoch seconds, about TTL after creation.
    assert rows and all(before + 1 <= r["expires_at"] <= before + 3 for r in rows)
    clock[0] = max(r["expires_at"] for r in rows) + 0.05
    assert await store.conversations.get("alice", cid, soon()) is None
    assert await store.conversations.list_items("alice", cid, PageQuery(), soon()) is None
    assert await store.conversations.get_item("alice", cid, item.id, soon()) is None
    assert await store.conversations.append_items("alice", cid, [message("late")], soon()) is False
    assert (await store.conversations.list("alice", PageQuery(), soon())).data == []
    assert len(backends.raw_rows()) == len(rows)  # still there: nobody swept them, and they read as missing


async def test_a_500_kb_conversation_round_trips_whole(backends):
    store = backends.store()
    items = [message(noise(10_000)) for _ in range(50)]  # 500 KB of incompressible text
    cid = (await store.conversations.create("alice", {}, items[:20], soon())).id
    for start in range(20, 50, 10):
        assert await store.conversations.append_items("alice", cid, items[start : start + 10], soon())
    page = await store.conversations.list_items("alice", cid, PageQuery(order="asc", limit=100), soon())
    assert page is not None and not page.has_more
    assert [i.body for i in page.data] == [i.body for i in items]
    assert sum(len(json.dumps(i.body)) for i in page.data) > 500_000


async def test_a_single_560_kb_item_is_stored_and_read_back_whole(backends):
    store = backends.store()
    big = message(noise(560_000))
    cid = (await store.conversations.create("alice", {}, [message("before")], soon())).id
    assert await store.conversations.append_items("alice", cid, [big, message("after")], soon())
    assert await store.conversations.get_item("alice", cid, big.id, soon()) == big
    page = await store.conversations.list_items("alice", cid, PageQuery(order="desc", limit=2), soon())
    assert page.data[1] == big and page.has_more
    if backends.kind == "dynamodb":  # more than DynamoDB's 400 KB item limit: it went in parts
        parts = [r for r in backends.raw_rows() if r["sk"].startswith("items#000000000001#")]
        assert len(parts) == -(-len(json.dumps(big.body)) // PART_BYTES) >= 2
    assert await store.conversations.delete_item("alice", cid, big.id, soon())
    assert await store.conversations.get_item("alice", cid, big.id, soon()) is None


async def test_concurrent_appends_lose_nothing(backends):
    store = backends.store()
    cid = (await store.conversations.create("alice", {}, [], soon())).id
    batches = [[message(f"writer {w} item {i}") for i in range(4)] for w in range(8)]
    results = await asyncio.gather(
        *(store.conversations.append_items("alice", cid, b, soon(30)) for b in batches)
    )
    assert all(results)
    page = await store.conversations.list_items("alice", cid, PageQuery(order="asc", limit=100), soon())
    stored = [i.id for i in page.data]
    assert sorted(stored) == sorted(i.id for b in batches for i in b) and len(stored) == 32
    for batch in batches:  # each append's items stay together, in their order
        positions = [stored.index(i.id) for i in batch]
        assert positions == list(range(positions[0], positions[0] + len(batch)))


async def test_concurrent_appends_from_threads_lose_nothing(backends):
    """Threads, each with its own event loop: what several requests of one container (or processes) do."""
    store = backends.store()
    cid = (await store.conversations.create("alice", {}, [], soon())).id
    batches = [[message(f"thread {w} item {i}") for i in range(12)] for w in range(6)]
    errors: list[BaseException] = []

    def writer(batch: list[Item]) -> None:
        async def one_by_one() -> None:
            for item in batch:
                assert await store.conversations.append_items("alice", cid, [item], soon(30))

        try:
            asyncio.run(one_by_one())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    page = await store.conversations.list_items("alice", cid, PageQuery(order="asc", limit=100), soon())
    assert sorted(i.id for i in page.data) == sorted(i.id for b in batches for i in b)


async def test_stored_responses_keep_input_output_and_events(backends):
    store = backends.store()
    rid = new_id("resp")
    inputs = [message("what is 2+2?"), message("be brief", "user")]
    body = {"id": rid, "object": "response", "status": "in_progress", "output": []}
    stored = await store.responses.create("alice", body, inputs, soon())
    assert stored.id == rid and (await store.responses.get("alice", rid, soon())).body == body
    events = [StoredEvent(n, {"type": "response.output_text.delta", "sequence_number": n}) for n in range(5)]
    assert await store.responses.append_events("alice", rid, events[:3], soon())
    assert await store.responses.append_events("alice", rid, events[3:], soon())
    assert await store.responses.events_after("alice", rid, 1, soon()) == events[2:]
    assert await store.responses.events_after("alice", rid, -1, soon()) == events
    answer = message("4", "assistant")
    done = {**body, "status": "completed", "output": [answer.body]}
    assert await store.responses.update("alice", rid, done, [answer], soon())
    assert (await store.responses.get("alice", rid, soon())).body == done
    page = await store.responses.list_items("alice", rid, "input", PageQuery(order="asc"), soon())
    assert [i.body for i in page.data] == [i.body for i in inputs]
    output = await store.responses.list_items("alice", rid, "output", PageQuery(), soon())
    assert [i.body for i in output.data] == [answer.body]
    # Owner-scoped like everything else, and a response is not a conversation.
    assert await store.responses.get("mallory", rid, soon()) is None
    assert await store.responses.events_after("mallory", rid, -1, soon()) is None
    assert await store.conversations.get("alice", rid, soon()) is None
    assert await store.responses.delete("alice", rid, soon())
    assert await store.responses.get("alice", rid, soon()) is None
    assert await store.responses.events_after("alice", rid, -1, soon()) is None


async def test_a_finished_response_is_stored_in_one_write_with_its_output(backends):
    store = backends.store()
    rid = new_id("resp")
    question, answer = message("what is 2+2?"), message("4", "assistant")
    body = {"id": rid, "object": "response", "status": "completed", "output": [answer.body]}
    await store.responses.create("alice", body, [question], soon(), [answer])
    inputs = await store.responses.list_items("alice", rid, "input", PageQuery(order="asc"), soon())
    outputs = await store.responses.list_items("alice", rid, "output", PageQuery(order="asc"), soon())
    assert [i.body for i in inputs.data] == [question.body] and [i.body for i in outputs.data] == [
        answer.body
    ]


async def test_a_large_response_body_is_stored_whole(backends):
    store = backends.store()
    rid = new_id("resp")
    body = {"id": rid, "object": "response", "instructions": noise(700_000), "output": []}
    await store.responses.create("alice", body, [], soon())
    assert (await store.responses.get("alice", rid, soon())).body == body
    bigger = {**body, "instructions": noise(800_000), "status": "completed"}
    assert await store.responses.update("alice", rid, bigger, [], soon())
    assert (await store.responses.get("alice", rid, soon())).body == bigger


def test_ids_are_unguessable():
    ids = {new_id("conv") for _ in range(1000)}
    assert len(ids) == 1000 and all(i.startswith("conv_") and len(i) == 53 for i in ids)
    assert len({i[5:13] for i in ids}) > 990  # no counter, no timestamp prefix


# --- the store down or hanging: StoreUnavailable within the deadline ------------------------------
async def test_an_unusable_sqlite_path_is_store_unavailable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    store = Store(SQLiteBackend(blocker / "conversations.sqlite3"), DAY)
    with pytest.raises(StoreUnavailable, match="conversation store failed"):
        await store.conversations.create("alice", {}, [], soon())


async def test_a_missing_table_is_store_unavailable(monkeypatch):
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        store = Store(DynamoDBBackend("no-such-table"), DAY)
        with pytest.raises(StoreUnavailable, match="ResourceNotFoundException"):
            await store.conversations.get("alice", "conv_" + "0" * 48, soon())


async def test_a_hanging_dynamodb_is_store_unavailable_within_the_deadline(monkeypatch):
    """An endpoint that accepts connections and never answers: the caller gets StoreUnavailable at its deadline,
    not after botocore's default 60 s read timeout and retries."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        for name, value in {
            **FAKE_CREDENTIALS,
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{listener.getsockname()[1]}",
        }.items():
            monkeypatch.setenv(name, value)
        store = Store(DynamoDBBackend(TABLE), DAY)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await store.conversations.get("alice", "conv_" + "0" * 48, Deadline.after(1.0))
        assert time.monotonic() - started < 2.0
    finally:
        listener.close()


async def test_a_hanging_backend_is_abandoned_at_the_deadline(tmp_path):
    class Stuck(SQLiteBackend):
        def read(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(3)

    store = Store(Stuck(tmp_path / "c.sqlite3"), DAY)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="did not answer within"):
        await store.conversations.get("alice", "conv_" + "0" * 48, Deadline.after(0.3))
    assert time.monotonic() - started < 1.0


# --- end to end: the backend's own boto3 client, across HTTP, against a moto server ----------------
@pytest.mark.slow
async def test_end_to_end_against_a_moto_server(monkeypatch):
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        for name, value in {**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}.items():
            monkeypatch.setenv(name, value)
        client = boto3.client("dynamodb", endpoint_url=endpoint)
        create_table(client, TABLE)
        store = Store(DynamoDBBackend(TABLE), 60)
        big, small = message(noise(560_000)), message("small")
        cid = (await store.conversations.create("alice", {"via": "http"}, [small], soon())).id
        for item in [big, *[message(str(i)) for i in range(5)]]:
            assert await store.conversations.append_items("alice", cid, [item], soon(30))
        page = await store.conversations.list_items("alice", cid, PageQuery(order="asc", limit=100), soon())
        assert len(page.data) == 7 and page.data[0] == small and big in page.data
        assert await store.conversations.get("bob", cid, soon()) is None
        items = client.scan(TableName=TABLE)["Items"]
        assert all("expires_at" in i for i in items)
        assert "alice" not in json.dumps(items, default=str)  # the owner is stored hashed
    finally:
        server.stop()
        os.environ.pop("AWS_ENDPOINT_URL", None)
