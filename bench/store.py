"""The conversation store: writing a turn's items (the user's message and the answer) and reading the conversation
back, on SQLite (a temp file) and on DynamoDB (moto in-process: the store's own cost, not DynamoDB's network
latency, which adds single-digit milliseconds per call in a region); and the request bytes a client saves by
sending a conversation id instead of the whole history.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from bench.common import median

USER_TEXT = "How much is 10,000 at 5 % a year, compounded monthly, after 30 years? Show the formula. " * 2
ANSWER_TEXT = (
    "With monthly compounding the balance is P(1 + r/12)^(12t): 10,000 x (1 + 0.05/12)^360 = 44,677.44. "
) * 6
"""A typical turn: a ~180-character question and a ~600-character answer."""


def turn_items(n: int) -> list:
    from chatloop.api.conversation_items import stored_items
    from chatloop.api.schemas import InputMessage

    return stored_items(
        [
            InputMessage(role="user", content=f"{n}: {USER_TEXT}"),
            InputMessage(role="assistant", content=ANSWER_TEXT),
        ]
    )


async def _timings(store, reps: int, history_turns: int) -> dict:
    from chatloop.deadline import Deadline
    from chatloop.store import PageQuery

    owner = "bench-caller"
    conversation = await store.create_conversation(owner, {}, [], Deadline.after(30))
    for n in range(history_turns):
        await store.append_items(owner, conversation.id, turn_items(n), Deadline.after(30))
    writes, reads = [], []
    for n in range(reps):
        items = turn_items(history_turns + n)
        start = time.perf_counter()
        assert await store.append_items(owner, conversation.id, items, Deadline.after(30))
        writes.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        page = await store.list_items(
            owner, conversation.id, PageQuery(order="asc", limit=100), Deadline.after(30)
        )
        reads.append((time.perf_counter() - start) * 1000)
        assert page is not None and len(page.data) == min(100, 2 * (history_turns + n + 1))
    return {"write_ms": median(writes), "read_ms": median(reads)}


def _sqlite(reps: int, history_turns: int) -> dict:
    from chatloop.store import Store
    from chatloop.store.sqlite import SQLiteBackend

    with tempfile.TemporaryDirectory() as folder:
        store = Store(SQLiteBackend(Path(folder) / "bench.sqlite3"), 3600)
        return asyncio.run(_timings(store, reps, history_turns))


def _dynamodb(reps: int, history_turns: int) -> dict:
    import boto3
    from moto import mock_aws

    from chatloop.store import Store
    from chatloop.store.dynamodb import DynamoDBBackend, create_table

    names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")
    saved = {k: os.environ.get(k) for k in names}
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    try:
        with mock_aws():
            create_table(boto3.client("dynamodb", region_name="us-east-1"), "bench-conversations")
            store = Store(DynamoDBBackend("bench-conversations"), 3600)
            return asyncio.run(_timings(store, reps, history_turns))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def bytes_saved(messages: int) -> dict:
    """A ``/v1/responses`` body carrying the whole history as input items, against the same turn naming its
    conversation and sending only the new message."""
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": USER_TEXT if i % 2 == 0 else ANSWER_TEXT}
        for i in range(messages - 1)
    ]
    new = {"role": "user", "content": USER_TEXT}
    full = json.dumps({"model": "chatloop", "input": [*history, new]}).encode()
    by_id = json.dumps({"model": "chatloop", "conversation": "conv_" + "0" * 48, "input": [new]}).encode()
    return {
        "messages": messages,
        "full_bytes": len(full),
        "by_id_bytes": len(by_id),
        "saved_bytes": len(full) - len(by_id),
    }


def measure(reps: int) -> dict:
    history_turns = 10  # a conversation of 20 messages before each measured turn
    return {
        "history_messages": 2 * history_turns,
        "sqlite": _sqlite(reps, history_turns),
        "dynamodb": _dynamodb(reps, history_turns),
        "bytes": [bytes_saved(n) for n in (10, 100, 1000)],
        "reps": reps,
    }
