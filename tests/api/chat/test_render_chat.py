"""/chat's renderer on its own: typed events in, SSE bytes or the JSON body out (no model, no server)."""

import asyncio
import json

import pytest

from chatloop.api.chat.endpoint import ChatRenderer, chat_body
from chatloop.engine import StopReason, TurnSummary
from chatloop.engine.events import Delta, Done, Started, ToolCallResult, ToolCallStart
from chatloop.engine.summary import AssistantMessage
from tests.support.render import rendered, stream

pytestmark = pytest.mark.usefixtures("no_registered_secrets")


def summary(text: str = "Hello", stop: StopReason = StopReason.STOP, **fields) -> TurnSummary:
    return TurnSummary(AssistantMessage(text), stop, iterations=1, model="groq:m", **fields)


def frames(body: str) -> list[tuple[str, dict]]:
    out = []
    for block in body.split("\n\n")[:-1]:
        head, data = block.split("\n")
        out.append((head.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def test_every_event_is_one_frame_named_by_its_type_with_its_wire_data():
    done = summary(request_id="req-1")
    body = rendered(ChatRenderer(), [Started("groq:m"), Delta("Hel", 1), Delta("lo", 1), Done(done)])
    assert body == (
        'event: status\ndata: {"status":"started","model":"groq:m","tools":[]}\n\n'
        'event: delta\ndata: {"content":"Hel","iteration":1}\n\n'
        'event: delta\ndata: {"content":"lo","iteration":1}\n\n'
        "event: done\ndata: "
        '{"message":{"role":"assistant","content":"Hello"},"stop_reason":"stop","iterations":1,"tool_calls":[],'
        '"tool_counts":{},"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0},"model":"groq:m",'
        '"context":null,"request_id":"req-1"}\n\n'
    )


def test_a_stream_that_breaks_ends_with_an_error_and_a_done():
    events = frames(stream(ChatRenderer(), [Started("groq:m"), Delta("partial", 1)], fail=True))
    assert [name for name, _ in events] == ["status", "delta", "error", "done"]
    assert events[2][1] == {"code": "internal_error", "message": "internal error while sending the response"}
    assert events[3][1]["stop_reason"] == "error" and "context" not in events[3][1]


def test_a_stream_that_breaks_after_its_done_sends_no_second_done():
    events = frames(stream(ChatRenderer(), [Delta("Hi", 1), Done(summary("Hi"))], fail=True))
    assert [name for name, _ in events] == ["delta", "done"]


def test_a_key_split_across_deltas_is_redacted_whole():
    key = "gsk_" + "a1b2c3d4e5f6g7h8"
    pieces = [Delta("the key is " + key[:7], 1), Delta(key[7:] + " ok", 1), Done(summary())]
    body = stream(ChatRenderer(), pieces)
    deltas = [data["content"] for name, data in frames(body) if name == "delta"]
    assert key not in body and key[:7] not in body
    assert "".join(deltas) == "the key is [REDACTED] ok"


def test_the_json_body_has_every_summary_field_context_and_request_id_last():
    status, body = asyncio.run(ChatRenderer().answer(summary(), []))
    assert status == 200
    assert list(body) == [
        "message",
        "stop_reason",
        "iterations",
        "tool_calls",
        "tool_counts",
        "usage",
        "model",
        "context",
        "request_id",
    ]
    assert body["context"] is None and body["request_id"] is None


def test_a_turn_every_model_failed_is_a_503_with_its_summary():
    failed = TurnSummary.failed("No model could answer.", StopReason.ALL_MODELS_FAILED).with_request_id("r")
    status, body = asyncio.run(ChatRenderer().answer(failed, []))
    assert status == 503 and body["stop_reason"] == "all_models_failed" and body["request_id"] == "r"
    assert list(body)[-2:] == ["context", "request_id"] and chat_body(failed) == body


def test_a_seam_sends_no_empty_delta():
    """Once: the redaction hold was flushed at every seam whether or not it held anything, so each model call after
    the first sent an empty ``delta`` (an empty chunk on the OpenAI routes) before its seam."""
    events = [
        Started("groq:m"),
        Delta("Let me compute that.", 1),
        ToolCallStart("c1", "execute_javascript", "{}"),
        ToolCallResult("c1", "execute_javascript", "ok", '{"result": 42}'),
        Delta("\n\n", 2, seam=True),
        Delta("It is 42.", 2),
        Done(summary("Let me compute that.\n\nIt is 42.")),
    ]
    deltas = [data["content"] for name, data in frames(stream(ChatRenderer(), events)) if name == "delta"]
    assert deltas == ["Let me compute that.", "\n\n", "It is 42."]
