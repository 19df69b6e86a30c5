"""/v1/chat/completions' renderer on its own: typed events in, ``chat.completion.chunk`` bytes or a
``chat.completion`` out (no model, no server)."""

import asyncio
import json

import pytest

from chatloop.api.openai.chat_completions import CompletionRenderer
from chatloop.engine import StopReason, TurnSummary
from chatloop.engine.events import Delta, Done, FallbackMade, Started, TurnError
from chatloop.engine.summary import AssistantMessage
from chatloop.providers.base import ToolCall, Usage
from tests.support.render import rendered, stream

pytestmark = pytest.mark.usefixtures("no_registered_secrets")

USAGE = Usage(10, 2, 12)


def summary(text="Hello", stop=StopReason.STOP, calls=None, model="groq:m") -> TurnSummary:
    message = AssistantMessage(text, calls)
    return TurnSummary(message, stop, iterations=1, model=model, usage=USAGE, request_id="req-1")


def chunks(body: str) -> list:
    blocks = body.split("\n\n")
    assert blocks[-2:] == ["data: [DONE]", ""], "the stream ends with [DONE]"
    return [json.loads(b.removeprefix("data: ")) for b in blocks[:-2]]


def test_the_role_chunk_then_each_delta_then_the_finish_then_done():
    events = [Started("groq:m"), Delta("Hel", 1), Delta("lo", 1), Done(summary())]
    got = chunks(rendered(CompletionRenderer("req-1"), events))
    assert [c["choices"][0]["delta"] for c in got] == [
        {"role": "assistant", "content": ""},
        {"content": "Hel"},
        {"content": "lo"},
        {},
    ]
    assert {c["id"] for c in got} == {"chatcmpl-req-1"} and {c["model"] for c in got} == {"groq:m"}
    assert [c["choices"][0]["finish_reason"] for c in got] == [None, None, None, "stop"]
    assert "usage" not in got[0] and got[-1]["x_chatloop"]["stop_reason"] == "stop"


def test_with_include_usage_every_chunk_carries_usage_null_until_a_last_usage_only_chunk():
    events = [Started("groq:m"), Delta("Hi", 1), Done(summary("Hi"))]
    got = chunks(stream(CompletionRenderer("req-1", include_usage=True), events))
    assert [c["usage"] for c in got[:-1]] == [None, None, None]
    assert got[-1]["choices"] == [] and got[-1]["usage"] == USAGE.as_dict()


def test_a_fallback_names_the_model_that_took_over():
    events = [Started("groq:a"), FallbackMade("groq:a", "openai:b", "rate_limit"), Delta("Hi", 1)]
    got = chunks(stream(CompletionRenderer("r"), [*events, Done(summary("Hi", model="openai:b"))]))
    assert [c["model"] for c in got] == ["groq:a", "openai:b", "openai:b"]


def test_client_tool_calls_come_as_one_chunk_before_the_finish():
    call = ToolCall("call_1", "lookup", '{"q": "x"}')
    events = [Started("groq:m"), Done(summary("", StopReason.TOOL_CALLS, (call,)))]
    got = chunks(stream(CompletionRenderer("r"), events))
    assert got[1]["choices"][0]["delta"] == {"tool_calls": [{"index": 0, **call.to_message()}]}
    assert got[2]["choices"][0]["finish_reason"] == "tool_calls"


def test_every_model_failing_is_an_error_chunk_then_nothing_but_done():
    failure = TurnError("all_models_failed", "every model failed")
    events = [Started("groq:m"), failure, Delta("fallback text", 1), Done(summary())]
    got = chunks(stream(CompletionRenderer("r"), events))
    assert got[-1] == {
        "error": {
            "message": "every model failed",
            "type": "service_unavailable",
            "param": None,
            "code": "all_models_failed",
        }
    }
    assert len(got) == 2


def test_a_stream_that_breaks_ends_with_an_internal_error_chunk_and_done():
    got = chunks(stream(CompletionRenderer("r"), [Started("groq:m"), Delta("par", 1)], fail=True))
    assert got[-1]["error"]["code"] == "internal_error" and got[-1]["error"]["type"] == "server_error"


def test_a_stream_that_breaks_after_its_finish_chunk_only_ends_with_done_never_an_error_after_it(caplog):
    body = stream(CompletionRenderer("r"), [Started("groq:m"), Done(summary())], fail=True)
    assert "chat.completion.chunk stream failed" in caplog.text and "the turn broke" in caplog.text
    got = chunks(body)  # which also checks it ends with [DONE]
    assert [c["choices"][0]["finish_reason"] for c in got] == [None, "stop"] and body.count("[DONE]") == 1
    with_usage = chunks(
        stream(CompletionRenderer("r", True), [Started("groq:m"), Done(summary())], fail=True)
    )
    assert with_usage[-1]["choices"] == [] and with_usage[-1]["usage"] == USAGE.as_dict()


def test_a_stream_that_breaks_after_its_error_chunk_sends_no_second_error():
    failure = TurnError("all_models_failed", "every model failed")
    body = stream(CompletionRenderer("r"), [Started("groq:m"), failure], fail=True)
    got = chunks(body)
    assert [c.get("error", {}).get("code") for c in got] == [None, "all_models_failed"]
    assert body.count("[DONE]") == 1


def test_not_streamed_a_chat_completion():
    call = ToolCall("call_1", "lookup", "{}")
    status, body = asyncio.run(
        CompletionRenderer("req-1").answer(summary("", StopReason.TOOL_CALLS, (call,)), [])
    )
    assert status == 200 and body["object"] == "chat.completion" and body["id"] == "chatcmpl-req-1"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": None, "tool_calls": [call.to_message()]}
    assert choice["finish_reason"] == "tool_calls" and body["usage"] == USAGE.as_dict()
    assert list(body["x_chatloop"]) == [
        "stop_reason",
        "iterations",
        "tool_calls",
        "tool_counts",
        "context",
        "request_id",
    ]


def test_a_guard_that_ended_the_turn_finishes_as_stop_with_empty_content_never_null():
    _, body = asyncio.run(CompletionRenderer("r").answer(summary("", StopReason.LOOP_DETECTED), []))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"] == {"role": "assistant", "content": ""}
    assert body["x_chatloop"]["stop_reason"] == "loop_detected"


def test_not_streamed_a_turn_every_model_failed_is_an_error_response_not_a_completion():
    """OpenAI answers no completion when no model could: a 429 with ``retry-after`` while the chain cools down after
    rate limits, else a 503; the renderer answers so itself (no flag steers serve_turn)."""
    import pytest

    from chatloop.api.http.errors import RequestError

    failed = TurnSummary.failed("No model could answer.", StopReason.ALL_MODELS_FAILED)
    limited = TurnError("all_models_failed", "every model is rate limited", retry_after=2.4)
    with pytest.raises(RequestError) as raised:
        asyncio.run(CompletionRenderer("r").answer(failed, [limited]))
    assert (raised.value.status, raised.value.code) == (429, "rate_limit_exceeded")
    assert raised.value.headers == {"retry-after": "3"}
    with pytest.raises(RequestError) as raised:
        asyncio.run(CompletionRenderer("r").answer(failed, []))
    assert (raised.value.status, raised.value.code, raised.value.message) == (
        503,
        "all_models_failed",
        "no model could answer",
    )
