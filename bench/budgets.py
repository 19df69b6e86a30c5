"""Budgets (#35): what metering a turn costs. One ``/v1/chat/completions`` turn through the real handler (a REST API
event, an instant model that reports its usage), with no budget, then with a daily token budget kept in a SQLite
file and in a DynamoDB table (moto in-process: the ledger's own cost, not DynamoDB's network latency, which adds a
few milliseconds per call in a region); medians of the handler's time, and the budget store calls each turn made.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import median, mocked_dynamodb

ANSWER = "Within budget."


class _Echo:
    """An instant model that reports its usage, as a provider does."""

    name = "bench:echo"

    async def stream(self, request: Any) -> Any:
        from chatloop.providers.base import ModelResponse, TextDelta, Usage

        yield TextDelta(ANSWER)
        yield ModelResponse(self.name, content=ANSWER, finish_reason="stop", usage=Usage(30, 5, 35))


class _Counted:
    """A ledger that counts the calls made on it (each is one store round trip)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, 0
        self.clock = inner.clock

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.inner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return await method(*args, **kwargs)

        return counted


def _turns(reps: int, **settings: Any) -> dict[str, float]:
    """``reps`` turns through the handler with ``settings``: median ms and budget store calls per turn."""
    from tests.support.events import FakeContext, response_body, rest_event

    import app as lambda_app
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings
    from chatloop.providers.chain import FallbackChain
    from chatloop.tools.base import ToolRegistry

    runtime = Runtime(Settings(**settings), chain=FallbackChain([_Echo()]), registry=ToolRegistry())
    counted: _Counted | None = None
    book = runtime.budgets()
    if book is not None:
        counted = _Counted(book.ledger)
        book.ledger_ = counted  # type: ignore[assignment]  # the same ledger, its calls counted
    saved = lambda_app.app.state.runtime
    lambda_app.app.state.runtime = runtime
    body = json.dumps(
        {"model": "chatloop", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 50}
    )
    times: list[float] = []
    try:
        for n in range(reps + 2):
            event = rest_event("POST", "/v1/chat/completions", body)
            event["requestContext"]["identity"]["apiKeyId"] = "bench-key"
            start = time.perf_counter()
            response = lambda_app.handler(event, FakeContext())
            took = (time.perf_counter() - start) * 1000
            assert response["statusCode"] == 200, response_body(response)
            if n >= 2:  # the first turns open the store and import the budget modules
                times.append(took)
    finally:
        lambda_app.app.state.runtime = saved
    calls = (counted.calls / (reps + 2)) if counted is not None else 0.0
    return {"turn_ms": median(times), "store_calls_per_turn": calls}


def measure(reps: int) -> dict[str, Any]:
    import chatloop.store as budget

    opened: list[object] = []
    real_open = budget.open_ledger

    def counting_open(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return real_open(*args, **kwargs)

    budget.open_ledger = counting_open
    try:
        off = _turns(reps)
        off["ledgers_opened"] = float(len(opened))
        with tempfile.TemporaryDirectory() as folder:
            sqlite = _turns(
                reps, budget_tokens_per_day=10**12, conversation_store_path=str(Path(folder) / "b.sqlite3")
            )
        with mocked_dynamodb("bench-budgets") as table:
            dynamodb = _turns(reps, budget_tokens_per_day=10**12, conversation_table_name=table)
            concurrent = _turns(
                reps, budget_tokens_per_day=10**12, budget_concurrent_turns=5, conversation_table_name=table
            )
    finally:
        budget.open_ledger = real_open
    return {
        "reps": reps,
        "off": off,
        "sqlite": sqlite,
        "dynamodb": dynamodb,
        "dynamodb_concurrent": concurrent,
    }


def section(b: dict[str, Any]) -> list[str]:
    off = b["off"]["turn_ms"]
    rows = [
        ("no budget configured", b["off"]),
        ("BUDGET_TOKENS_PER_DAY, SQLite file", b["sqlite"]),
        ("BUDGET_TOKENS_PER_DAY, DynamoDB (moto)", b["dynamodb"]),
        ("… and BUDGET_CONCURRENT_TURNS, DynamoDB (moto)", b["dynamodb_concurrent"]),
    ]
    lines = [
        "## Budgets: the cost of metering a turn",
        "",
        f"One `/v1/chat/completions` turn through the handler (an instant model reporting its usage), medians over "
        f"{b['reps']}; store calls per turn (read the caller's overrides, reserve, settle; with a concurrency limit, "
        "free the slot). DynamoDB is moto in-process: add DynamoDB's own latency per call in a region.",
        "",
        "| configuration | turn (ms) | added (ms) | budget store calls per turn |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {row['turn_ms']:.2f} | {row['turn_ms'] - off:+.2f} | {row['store_calls_per_turn']:.0f} |"
        for name, row in rows
    ]
    lines += ["", f"With no budget configured no ledger was opened ({b['off']['ledgers_opened']:.0f}).", ""]
    return lines
