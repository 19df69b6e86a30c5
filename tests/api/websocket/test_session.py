"""``session.answer`` when the store fails (issue 44): the HTTP route's 503 ``store_unavailable`` as an ``error``
event, with no model call, and nothing raised (the connection goes on)."""

from __future__ import annotations

import asyncio
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
