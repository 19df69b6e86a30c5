"""``session.answer`` when the store fails (issue 44): the HTTP route's 503 ``store_unavailable`` as an ``error``
event, with no model call, and nothing raised (the connection goes on)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from chatloop.api.websocket.session import Socket, answer
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.tools.base import ToolRegistry
from tests.support.handler import build_runtime
from tests.support.models import ScriptedModel


def hello(request: ModelRequest, _: int) -> ModelResponse:
    return ModelResponse("scripted:model", content="hello", finish_reason="stop")


def test_a_store_that_fails_is_the_http_routes_503_as_an_error_event(tmp_path):
    model = ScriptedModel(hello)
    unusable = Settings(conversation_store_path=str(tmp_path))  # a directory: SQLite cannot open it
    runtime = build_runtime(unusable, model=model, registry=ToolRegistry())
    sent: list[dict[str, Any]] = []

    async def send(event: dict[str, Any]) -> None:
        sent.append(event)

    message = json.dumps({"type": "response.create", "input": "hi", "store": False, "stream_id": "a"})
    asyncio.run(
        answer(runtime, Socket("c1", "alice"), message, send, deadline=Deadline.after(10), request_id="r1")
    )
    assert sent == [
        {
            "type": "error",
            "status": 503,
            "error": {
                "type": "service_unavailable",
                "code": "store_unavailable",
                "message": "the conversation store is unavailable; try again shortly",
                "param": None,
            },
            "stream_id": "a",
        }
    ]
    assert model.calls == 0


def test_a_turn_cancelled_before_its_events_ran_gives_its_concurrent_turn_slot_back(tmp_path):
    """The socket went away while the first event was being sent (the turn admitted, its events not yet started):
    the HTTP route's middleware gives such a turn's slot back, and a socket has no middleware, so the session
    does. Otherwise the caller is refused (429) until the slot's lease runs out."""
    model = ScriptedModel(hello)
    settings = Settings(conversation_store_path=str(tmp_path / "s.sqlite3"), budget_concurrent_turns=1)
    runtime = build_runtime(settings, model=model, registry=ToolRegistry())
    message = json.dumps({"type": "response.create", "input": "hi", "store": False})
    socket = Socket("c1", "alice")

    async def scenario() -> list[dict[str, Any]]:
        stuck = asyncio.Event()

        async def never_sent(event: dict[str, Any]) -> None:
            stuck.set()
            await asyncio.Event().wait()  # the socket's send never completes

        first = asyncio.create_task(
            answer(runtime, socket, message, never_sent, deadline=Deadline.after(20), request_id="r1")
        )
        await stuck.wait()
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        sent: list[dict[str, Any]] = []

        async def send(event: dict[str, Any]) -> None:
            sent.append(event)

        await answer(runtime, socket, message, send, deadline=Deadline.after(20), request_id="r2")
        return sent

    sent = asyncio.run(scenario())
    assert sent[-1]["type"] == "response.completed", sent[-1]
