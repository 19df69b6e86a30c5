"""The conversation store: writing a turn's items (the user's message and the answer) and reading the conversation
back, on SQLite (a temp file) and on DynamoDB (moto in-process: the store's own cost, not DynamoDB's network
latency, which adds single-digit milliseconds per call in a region); and the request bytes a client saves by
sending a conversation id instead of the whole history.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

from bench.common import median, mocked_dynamodb

USER_TEXT = "How much is 10,000 at 5 % a year, compounded monthly, after 30 years? Show the formula. " * 2
ANSWER_TEXT = (
    "With monthly compounding the balance is P(1 + r/12)^(12t): 10,000 x (1 + 0.05/12)^360 = 44,677.44. "
) * 6
"""A typical turn: a ~180-character question and a ~600-character answer."""


def turn_items(n: int) -> list:
    from chatloop.api.items.inputs import InputMessage
    from chatloop.api.items.stored import stored_items

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
    conversation = await store.conversations.create(owner, {}, [], Deadline.after(30))
    for n in range(history_turns):
        await store.conversations.append_items(owner, conversation.id, turn_items(n), Deadline.after(30))
    writes, reads = [], []
    for n in range(reps):
        items = turn_items(history_turns + n)
        start = time.perf_counter()
        assert await store.conversations.append_items(owner, conversation.id, items, Deadline.after(30))
        writes.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        page = await store.conversations.list_items(
            owner, conversation.id, PageQuery(order="asc", limit=100), Deadline.after(30)
        )
        reads.append((time.perf_counter() - start) * 1000)
        assert page is not None and len(page.data) == min(100, 2 * (history_turns + n + 1))
    return {"write_ms": median(writes), "read_ms": median(reads)}


def _sqlite(reps: int, history_turns: int) -> dict:
    return _with_backend("sqlite", lambda store: asyncio.run(_timings(store, reps, history_turns)))


def _dynamodb(reps: int, history_turns: int) -> dict:
    return _with_backend("dynamodb", lambda store: asyncio.run(_timings(store, reps, history_turns)))


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


class _Echo:
    """An instant model: the handler's own cost is what is measured."""

    name = "bench:echo"

    async def stream(self, request):
        from chatloop.providers.base import ModelResponse, TextDelta

        yield TextDelta(ANSWER_TEXT)
        yield ModelResponse(self.name, content=ANSWER_TEXT, finish_reason="stop")


def _continued(store, reps: int, messages: int) -> dict:
    """One ``/v1/responses`` turn through the real handler after ``messages`` earlier messages: the history resent
    as input items (``store: false``), against continuing with ``previous_response_id`` (the chain of stored
    responses followed back) and with ``conversation`` (its items read); medians of the handler's time."""
    from tests.support.events import FakeContext, response_body, rest_event

    import app as lambda_app
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings
    from chatloop.providers.chain import FallbackChain
    from chatloop.tools.base import ToolRegistry

    saved = lambda_app.app.state.runtime
    lambda_app.app.state.runtime = Runtime(
        Settings(), chain=FallbackChain([_Echo()]), registry=ToolRegistry(), state=store
    )

    def post(body: dict) -> tuple[float, dict]:
        event = rest_event("POST", "/v1/responses", json.dumps(body))
        event["requestContext"]["identity"]["apiKeyId"] = "bench-key"
        start = time.perf_counter()
        response = lambda_app.handler(event, FakeContext())
        took = (time.perf_counter() - start) * 1000
        assert response["statusCode"] == 200, response_body(response)
        return took, json.loads(response_body(response))

    try:
        history = [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": USER_TEXT if i % 2 == 0 else ANSWER_TEXT,
            }
            for i in range(messages)
        ]
        last = None
        for _ in range(messages // 2):  # the same history as a chain of stored responses
            _, answered = post({"input": USER_TEXT, **({"previous_response_id": last} if last else {})})
            last = answered["id"]
        from chatloop.api.items.inputs import InputMessage
        from chatloop.api.items.stored import stored_items
        from chatloop.deadline import Deadline

        items = stored_items([InputMessage.model_validate(m) for m in history])
        conversation = asyncio.run(
            store.conversations.create("apikey:bench-key", {}, items[:20], Deadline.after(30))
        )
        for start in range(20, len(items), 20):
            asyncio.run(
                store.conversations.append_items(
                    "apikey:bench-key", conversation.id, items[start : start + 20], Deadline.after(30)
                )
            )
        new = {"role": "user", "content": USER_TEXT}
        resent = [post({"input": [*history, new], "store": False})[0] for _ in range(reps)]
        chained = [
            post({"input": USER_TEXT, "previous_response_id": last, "store": False})[0] for _ in range(reps)
        ]
        joined = [post({"input": USER_TEXT, "conversation": conversation.id})[0] for _ in range(reps)]
        return {
            "messages": messages,
            "resent_ms": median(resent),
            "previous_response_id_ms": median(chained),
            "conversation_ms": median(joined),
        }
    finally:
        lambda_app.app.state.runtime = saved


def _with_backend(kind: str, run):
    """``run(store)`` on a fresh SQLite file or a moto DynamoDB table."""
    from chatloop.store import Store

    if kind == "sqlite":
        from chatloop.store.sqlite import SQLiteBackend

        with tempfile.TemporaryDirectory() as folder:
            return run(Store(SQLiteBackend(Path(folder) / "bench.sqlite3"), 3600))
    from chatloop.store.dynamodb import DynamoDBBackend

    with mocked_dynamodb("bench-continued") as table:
        return run(Store(DynamoDBBackend(table), 3600))


def measure(reps: int) -> dict:
    history_turns = 10  # a conversation of 20 messages before each measured turn
    sizes = (10,) if reps < 10 else (10, 100)
    continued_reps = max(2, reps // 5)
    return {
        "history_messages": 2 * history_turns,
        "sqlite": _sqlite(reps, history_turns),
        "dynamodb": _dynamodb(reps, history_turns),
        "bytes": [bytes_saved(n) for n in (10, 100, 1000)],
        "continued": {
            kind: [_with_backend(kind, lambda s, n=n: _continued(s, continued_reps, n)) for n in sizes]
            for kind in ("sqlite", "dynamodb")
        },
        "reps": reps,
    }
