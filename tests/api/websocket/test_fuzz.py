"""Hostile WebSocket messages (issue 44), fuzzed: whatever a client sends to ``session.answer`` (any text or bytes, any
JSON, a ``response.create`` with any body the POST fuzz sends, any ``stream_id``), the answer is one ``error`` event
naming the problem and no model call, or a whole response; nothing raises, and the lane is given back either way
(the next message on the same connection is answered)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatloop.api.websocket.session import Socket, answer
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.tools.base import ToolRegistry
from tests.support.handler import build_runtime
from tests.support.models import ScriptedModel

TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Any code point, lone surrogates included: valid in JSON escapes.
TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=30)
LEAF = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT
JSON = st.recursive(
    LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12
)
BODY = st.fixed_dictionaries(
    {"input": TEXT | JSON},
    optional={
        "model": st.just("chatloop") | JSON,
        "store": st.booleans() | JSON,
        "temperature": st.floats(allow_nan=False) | JSON,
        "tools": JSON,
        "previous_response_id": TEXT | JSON,
        "unknown_field": JSON,
    },
)


def hello(request: ModelRequest, _: int) -> ModelResponse:
    return ModelResponse("scripted:model", content="hello", finish_reason="stop")


MESSAGE = (
    TEXT
    | st.binary(max_size=40)
    | JSON.map(json.dumps)
    | st.fixed_dictionaries(
        {"type": st.just("response.create")},
        optional={"stream_id": TEXT | JSON, "background": JSON, "stream": JSON},
    ).flatmap(lambda head: BODY.map(lambda body: json.dumps({**body, **head})))
)


def test_any_message_is_one_error_or_one_response_and_the_lane_is_given_back(tmp_path):
    model = ScriptedModel(hello)
    settings = Settings(conversation_store_path=str(tmp_path / "store.sqlite3"))
    runtime = build_runtime(settings, model=model, registry=ToolRegistry())
    socket = Socket("conn-fuzz", "alice")

    async def say(message: str | bytes) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def send(event: dict[str, Any]) -> None:
            sent.append(event)

        rid = str(uuid.uuid4())
        await answer(runtime, socket, message, send, deadline=Deadline.after(20), request_id=rid)
        return sent

    @FAST
    @given(message=MESSAGE)
    def check(message: str | bytes) -> None:
        calls = model.calls
        sent = asyncio.run(say(message))
        assert sent, "every message is answered"
        if sent[-1]["type"] == "error":
            assert len(sent) == 1 and model.calls == calls  # refused before any model call
            assert sent[0]["error"]["message"] and isinstance(sent[0]["status"], int)
        else:
            assert sent[0]["type"] == "response.created" and sent[-1]["type"] in TERMINAL
        again = asyncio.run(say(json.dumps({"type": "response.create", "input": "hi", "store": False})))
        assert again[-1]["type"] == "response.completed"  # the lane was given back

    check()
