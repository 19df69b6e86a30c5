"""Budget admission at the door and the concurrent-turn lease (issue 41).

- A caller whose budget is spent gets the plain turn's 429 when it asks for a background response, with or without
  the compaction its worker would start with: no asynchronous invocation (the Lambda client is a botocore Stubber
  that records every call), no record in the store, nothing left reserved, no model call. The Lambda path through
  the real handler with API-Gateway-shaped events.
- A background turn's lease lasts as long as the turn may (BACKGROUND_TIMEOUT_SECONDS above 900 s): with one
  concurrent turn allowed, a second turn is refused at 901 s on the ledger's clock while the first still runs, and
  admitted once it ends (the app under uvicorn, as ``make run`` serves it, the ledger's clock the test's).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse, TextDelta, Usage
from chatloop.store.budget_sqlite import SQLiteLedger
from chatloop.tools.base import ToolRegistry
from tests.support.aws import invocations_kept
from tests.support.events import response_body, rest_event
from tests.support.handler import handle
from tests.support.server import app_server


class Spender:
    """Answers every call with 2,005 tokens of reported usage (more than its estimate: one call spends a small
    day); a request that says "long" waits while ``hold`` is set. Counts its calls."""

    name = "scripted:spender"

    def __init__(self) -> None:
        self.calls = 0
        self.hold = threading.Event()

    async def stream(self, request: ModelRequest):
        self.calls += 1
        while self.hold.is_set() and "long" in str(request.messages[-1]["content"]):
            await asyncio.sleep(0.02)
        yield TextDelta("Spent. ")
        yield ModelResponse(self.name, content="Spent. ", finish_reason="stop", usage=Usage(2000, 5, 2005))


def kept_records(path: Path) -> int:
    """What the store keeps besides budgets: responses, their runs, conversations."""
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM records WHERE kind != 'budget'").fetchone()[0])


def call(method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    event = rest_event(method, path, json.dumps(body) if body is not None else None)
    event["requestContext"]["identity"]["apiKeyId"] = "key-a"
    response = handle(event)
    return response["statusCode"], json.loads(response_body(response))


@pytest.mark.parametrize("compacted", [False, True])
def test_a_spent_caller_queues_no_background_turn(tmp_path, app_runtime, monkeypatch, compacted):

    path = tmp_path / "store.sqlite3"
    settings = Settings(
        conversation_store_path=str(path),
        lambda_function_name="chatloop-chat",
        budget_tokens_per_day=1500,
        budget_concurrent_turns=5,
    )
    model = Spender()
    app_runtime(settings, model=model, registry=ToolRegistry())
    invoked, _ = invocations_kept(
        monkeypatch
    )  # no answer stubbed: any invocation would fail the request (a 503)

    status, _ = call(
        "POST", "/v1/responses", {"input": "spend the day", "store": False, "max_output_tokens": 50}
    )
    assert status == 200 and model.calls == 1  # 2,005 tokens used of 1,500: the day is spent
    plain_status, plain = call("POST", "/v1/responses", {"input": "and more", "max_output_tokens": 50})
    assert plain_status == 429 and plain["error"]["code"] == "insufficient_quota"
    records = kept_records(path)

    body: dict[str, Any] = {"input": "and more", "max_output_tokens": 50, "background": True}
    if compacted:  # the worker would compact first: its summary is a model call too
        body["input"] = "word " * 1500 + "and more"
        body["context_management"] = [{"type": "compaction", "compact_threshold": 1000}]
    status, refused = call("POST", "/v1/responses", body)
    assert status == 429, refused
    assert (
        refused["error"]["code"] == plain["error"]["code"]
        and refused["error"]["type"] == "insufficient_quota"
    )
    assert invoked == [] and model.calls == 1 and kept_records(path) == records
    status, usage = call("GET", "/v1/usage")
    assert usage["usage"]["tokens_reserved_today"] == 0 and usage["usage"]["running_turns"] == 0
    status, unstored = call(
        "POST", "/v1/responses", {**body, "store": False}
    )  # bad input: its 400 comes first
    assert status == 400 and unstored["error"]["param"] == "background"


def test_a_background_turns_lease_outlives_900_seconds_and_ends_with_the_turn(tmp_path):
    path = tmp_path / "store.sqlite3"
    settings = Settings(
        conversation_store_path=str(path), budget_concurrent_turns=1, background_timeout_seconds=3600
    )
    now = [1_800_000_000.0]
    model = Spender()
    model.hold.set()
    with app_server(settings, model=model, registry=ToolRegistry()) as server:
        server.runtime.budgets().ledger_ = SQLiteLedger(path, lambda: now[0])
        headers = {"x-api-key": "alice"}

        def post(body: dict[str, Any]) -> httpx.Response:
            return httpx.post(f"{server.base_url}/responses", json=body, headers=headers, timeout=20)

        queued = post({"input": "run long", "background": True})
        assert queued.status_code == 200, queued.text
        rid = queued.json()["id"]
        deadline = time.monotonic() + 20
        while model.calls == 0:  # the worker runs it, and waits at its model
            assert time.monotonic() < deadline
            time.sleep(0.02)
        now[0] += 901  # past the old fixed 15-minute lease, well within the turn's 3,600 s
        second = post({"input": "meanwhile", "store": False})
        assert second.status_code == 429 and "concurrent turns" in second.json()["error"]["message"]
        assert model.calls == 1
        model.hold.clear()  # the first turn ends
        while (
            httpx.get(f"{server.base_url}/responses/{rid}", headers=headers).json()["status"] != "completed"
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while (again := post({"input": "now", "store": False})).status_code == 429:
            assert time.monotonic() < deadline, (
                "the first turn's slot was not given back"
            )  # its end, just after
            time.sleep(0.05)
        assert again.status_code == 200 and again.json()["status"] == "completed" and model.calls == 2


def test_a_caller_past_its_request_rate_gets_no_summary_written_before_the_429(tmp_path, app_runtime):
    """A turn past its compaction threshold starts with the summary's call: that call is admitted as the turn is
    (its request counted, its concurrent-turn slot taken, then handed to the turn), so a caller over its request
    rate gets the 429 before any model call, not a free summary first."""
    settings = Settings(conversation_store_path=str(tmp_path / "store.sqlite3"), budget_requests_per_minute=1)
    model = Spender()
    app_runtime(settings, model=model, registry=ToolRegistry())
    status, _ = call("POST", "/v1/responses", {"input": "first", "store": False})
    assert status == 200 and model.calls == 1
    body = {
        "input": "word " * 1500 + "and now?",
        "store": False,
        "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    }
    status, refused = call("POST", "/v1/responses", body)
    assert status == 429 and refused["error"]["code"] == "rate_limit_exceeded"
    assert model.calls == 1


def test_a_queued_turn_that_never_runs_gives_its_slot_back(tmp_path, app_runtime, monkeypatch):
    """Cancelled while queued, or deleted before its worker starts: the slot its queueing took is given back then,
    not when its lease (BACKGROUND_TIMEOUT_SECONDS) expires. The Lambda path: invocations recorded, one delivered."""

    settings = Settings(
        conversation_store_path=str(tmp_path / "store.sqlite3"),
        lambda_function_name="chatloop-chat",
        budget_concurrent_turns=1,
    )
    model = Spender()
    app_runtime(settings, model=model, registry=ToolRegistry())
    invoked, _ = invocations_kept(monkeypatch, answers=2)
    plain = {"input": "a plain turn", "store": False}

    status, queued = call("POST", "/v1/responses", {"input": "later", "background": True})
    assert status == 200 and call("POST", "/v1/responses", plain)[0] == 429  # its slot is taken
    status, cancelled = call("POST", f"/v1/responses/{queued['id']}/cancel")
    assert status == 200 and cancelled["status"] == "cancelled"
    assert call("POST", "/v1/responses", plain)[0] == 200

    status, queued = call("POST", "/v1/responses", {"input": "later", "background": True})
    assert status == 200 and call("DELETE", f"/v1/responses/{queued['id']}")[0] == 200
    assert handle(json.loads(invoked[-1]["Payload"]))["ran"] is False  # its worker finds it gone
    assert call("POST", "/v1/responses", plain)[0] == 200
    assert model.calls == 2
