"""The store by aggregate (issue 42): conversations, responses, runs and claims each in a module of their own, all in
one table or file, and every store has all four (no code asks whether one exists). What they write is pinned, key by
key and attribute by attribute, on both backends: deployed tables and local files written before the split must
keep working, so a change here is a migration, not a refactor."""

from __future__ import annotations

import re
import sqlite3
from typing import Any

import boto3

from chatloop.jsontypes import JSONObject
from chatloop.store import Store
from chatloop.store.model import Item, PageQuery, StoredEvent
from tests.support.store import TABLE, soon

WRITTEN_DYNAMODB = [
    ("OWNER#apr_1", "#meta", "body:B created_at:N expires_at:N kind:S next:N pk:S sk:S"),
    ("OWNER#conv_ID", "#meta", "body:B created_at:N expires_at:N kind:S next:N pk:S sk:S"),
    ("OWNER#conv_ID", "items#000000000000#000", "d:B expires_at:N id:S parts:N pk:S sk:S"),
    ("OWNER#conv_ID", "items@msg_1", "expires_at:N parts:N pk:S pos:N sk:S"),
    ("OWNER#idx_OWNER", "#meta", "body:B created_at:N expires_at:N kind:S next:N pk:S sk:S"),
    ("OWNER#idx_OWNER", "conversations#000000000000#000", "d:B expires_at:N id:S parts:N pk:S sk:S"),
    ("OWNER#idx_OWNER", "conversations@conv_ID", "expires_at:N parts:N pk:S pos:N sk:S"),
    ("OWNER#resp_1", "#meta", "body:B created_at:N expires_at:N kind:S next:N pk:S sk:S"),
    ("OWNER#resp_1", "events#000000000000#000", "d:B expires_at:N id:S parts:N pk:S sk:S"),
    ("OWNER#resp_1", "input#000000000000#000", "d:B expires_at:N id:S parts:N pk:S sk:S"),
    ("OWNER#resp_1", "input@msg_2", "expires_at:N parts:N pk:S pos:N sk:S"),
    ("OWNER#resp_1", "output#000000000000#000", "d:B expires_at:N id:S parts:N pk:S sk:S"),
    ("OWNER#resp_1", "output@out_1", "expires_at:N parts:N pk:S pos:N sk:S"),
    ("OWNER#run_resp_1", "#meta", "body:B created_at:N expires_at:N kind:S next:N pk:S sk:S"),
    ("OWNER#run_resp_1", "input#000000000000#000", "d:B expires_at:N id:S parts:N pk:S sk:S"),
    ("OWNER#run_resp_1", "input@request", "expires_at:N parts:N pk:S pos:N sk:S"),
    ("OWNER#run_turn_1", "#meta", "body:B created_at:N expires_at:N kind:S next:N pk:S sk:S"),
]
WRITTEN_SQLITE_RECORDS = [
    ("apr_1", "claim"),
    ("conv_ID", "conversation"),
    ("idx_OWNER", "index"),
    ("resp_1", "response"),
    ("run_resp_1", "run"),
    ("run_turn_1", "run"),
]
WRITTEN_SQLITE_CHILDREN = [
    ("conv_ID", "items", 0, "msg_1"),
    ("idx_OWNER", "conversations", 0, "conv_ID"),
    ("resp_1", "events", 0, "0"),
    ("resp_1", "input", 0, "msg_2"),
    ("resp_1", "output", 0, "out_1"),
    ("run_resp_1", "input", 0, "request"),
]


async def write_one_of_each(store: Store) -> None:
    d = soon()
    await store.conversations.create("alice", {"a": "b"}, [Item("msg_1", {"id": "msg_1"})], d)
    body: JSONObject = {"id": "resp_1", "status": "completed"}
    await store.responses.create(
        "alice", body, [Item("msg_2", {"id": "msg_2"})], d, [Item("out_1", {"id": "out_1"})]
    )
    await store.responses.append_events("alice", "resp_1", [StoredEvent(0, {"sequence_number": 0})], d)
    await store.runs.begin("alice", "resp_1", "resp_1", "queued", d, {"model": "m"}, background=True)
    await store.runs.open_journal("alice", "turn_1", d)
    assert await store.claims.claim("alice", "apr_1", d)


def normalised(text: str) -> str:
    """Ids made stable: the owner's hash and a new conversation's random id."""
    return re.sub(r"[0-9a-f]{40}", "OWNER", re.sub(r"conv_[0-9a-f]{48}", "conv_ID", text))


async def test_every_aggregate_writes_what_deployed_tables_and_files_already_hold(backends):
    store = backends.store()
    await write_one_of_each(store)
    if backends.kind == "dynamodb":
        items: list[dict[str, Any]] = boto3.client("dynamodb", region_name="us-east-1").scan(TableName=TABLE)[
            "Items"
        ]
        written = sorted(
            (
                normalised(i["pk"]["S"]),
                normalised(i["sk"]["S"]),
                " ".join(sorted(f"{name}:{next(iter(value))}" for name, value in i.items())),
            )
            for i in items
        )
        assert written == WRITTEN_DYNAMODB
        return
    db = sqlite3.connect(backends.path)
    try:
        records = sorted((normalised(i), k) for i, k in db.execute("SELECT id, kind FROM records"))
        children = sorted(
            (normalised(r), name, p, normalised(i))
            for r, name, p, i in db.execute("SELECT record_id, list, position, item_id FROM children")
        )
    finally:
        db.close()
    assert records == WRITTEN_SQLITE_RECORDS
    assert children == WRITTEN_SQLITE_CHILDREN


async def test_two_stores_over_one_table_share_every_aggregate(backends):
    """Two copies of the app hold two ``Store`` objects over one table or file: what one writes, the other reads."""
    one, other = backends.store(), backends.store()
    await write_one_of_each(one)
    d = soon()
    assert (await other.conversations.list("alice", PageQuery(), d)).data[0].body["metadata"] == {"a": "b"}
    assert (await other.responses.get("alice", "resp_1", d)) is not None
    assert [
        e.sequence_number for e in await other.responses.events_after("alice", "resp_1", -1, d) or []
    ] == [0]
    assert await other.runs.request_of("alice", "resp_1", d) == {"model": "m"}
    assert await other.claims.claim("alice", "apr_1", d) is False
    claimed = await other.runs.move("alice", "resp_1", "resp_1", {"queued"}, "in_progress", d)
    assert claimed is not None and claimed.background
    assert await one.runs.move("alice", "resp_1", "resp_1", {"queued"}, "in_progress", d) is None
