"""/v1/responses' renderer on its own: typed events in, the Responses event stream or a ``response`` out (no
model, no server, no store)."""

import asyncio
import json

import pytest

from chatloop.api.openai.responses.render import ResponsesRenderer
from chatloop.engine import StopReason, TurnSummary
from chatloop.engine.events import Delta, Done, Started, ToolCallResult, ToolCallStart, TurnError
from chatloop.engine.summary import AssistantMessage
from chatloop.providers.base import ToolCall, Usage
from tests.support.render import stream

pytestmark = pytest.mark.usefixtures("no_registered_secrets")

ECHO = {"model": "chatloop", "store": False}


def summary(text="Hello", stop=StopReason.STOP, calls=None) -> TurnSummary:
    message = AssistantMessage(text, calls)
    return TurnSummary(message, stop, iterations=1, model="groq:m", usage=Usage(10, 2, 12), request_id="r")


def events_of(body: str) -> list[dict]:
    out = []
    for block in body.split("\n\n")[:-1]:
        head, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert head == f"event: {event['type']}"
        out.append(event)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


def test_a_text_answer_streams_as_one_message_item_and_completes():
    got = events_of(
        stream(
            ResponsesRenderer("r", ECHO),
            [Started("groq:m"), Delta("Hel", 1), Delta("lo", 1), Done(summary())],
        )
    )
    assert [e["type"] for e in got] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = got[-1]["response"]
    assert final["id"] == "resp_r" and final["status"] == "completed" and final["model"] == "groq:m"
    assert final["output"][0]["id"] == "msg_r" and final["output"][0]["content"][0]["text"] == "Hello"
    assert final["usage"]["input_tokens"] == 10 and final["usage"]["output_tokens"] == 2


def test_a_sandbox_run_is_a_code_interpreter_item_between_two_messages():
    run = [
        Delta("Let me compute.", 1),
        ToolCallStart("call_1", "execute_javascript", '{"code": "6*7"}'),
        ToolCallResult("call_1", "execute_javascript", "ok", '{"result": 42}', duration_ms=3.0),
        Delta("42", 2),
        Done(summary("Let me compute.42")),
    ]
    output = events_of(stream(ResponsesRenderer("r", ECHO), run))[-1]["response"]["output"]
    assert [(i["type"], i["id"]) for i in output] == [
        ("message", "msg_r"),
        ("code_interpreter_call", "ci_call_1"),
        ("message", "msg_r_1"),
    ]
    assert output[1]["code"] == "6*7" and output[1]["status"] == "completed"
    assert output[1]["outputs"] == [{"type": "logs", "logs": '{"result": 42}'}]


def test_the_client_tool_calls_come_last_as_function_call_items():
    call = ToolCall("call_9", "lookup", '{"q": "x"}')
    got = events_of(stream(ResponsesRenderer("r", ECHO), [Done(summary("", StopReason.TOOL_CALLS, (call,)))]))
    item = got[-1]["response"]["output"][-1]
    assert item == {
        "type": "function_call",
        "id": "fc_call_9",
        "call_id": "call_9",
        "name": "lookup",
        "arguments": '{"q": "x"}',
        "status": "completed",
    }
    assert "response.function_call_arguments.done" in [e["type"] for e in got]


def test_every_model_failing_ends_the_stream_with_response_failed():
    failure = TurnError("all_models_failed", "every model failed")
    got = events_of(stream(ResponsesRenderer("r", ECHO), [Started("groq:m"), failure, Done(summary())]))
    assert got[-1]["type"] == "response.failed"
    assert got[-1]["response"]["error"] == {"code": "server_error", "message": "every model failed"}


def test_a_stream_that_breaks_ends_with_an_error_event_and_response_failed():
    got = events_of(stream(ResponsesRenderer("r", ECHO), [Delta("par", 1)], fail=True))
    assert [e["type"] for e in got[-2:]] == ["error", "response.failed"]
    assert got[-2]["code"] == "internal_error"


def test_a_stream_that_breaks_after_its_terminal_event_adds_nothing():
    got = events_of(stream(ResponsesRenderer("r", ECHO), [Done(summary())], fail=True))
    assert got[-1]["type"] == "response.completed" and "error" not in [e["type"] for e in got]


def test_kept_responses_are_stored_with_their_events_before_the_terminal_one_goes_out():
    kept = []

    async def keep(response, events):
        kept.append((response, events))
        return {**response, "store": True}

    got = events_of(stream(ResponsesRenderer("r", ECHO, keep), [Delta("Hi", 1), Done(summary("Hi"))]))
    response, stored_events = kept[0]
    assert stored_events == [*got[:-1], {**got[-1], "response": response}]
    assert got[-1]["response"]["store"] is True


def test_not_streamed_a_response_cut_by_the_token_cap_is_incomplete():
    renderer = ResponsesRenderer("r", ECHO, stream=False)
    renderer.output.feed(Delta("Hel", 1))  # as observed_by(renderer.output.feed, events) gives it the events
    status, body = asyncio.run(renderer.answer(summary("Hel", StopReason.LENGTH), []))
    assert status == 200 and body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["content"][0]["text"] == "Hel" and body["x_chatloop"]["stop_reason"] == "length"


def test_the_text_after_a_sandbox_run_starts_with_its_seam_and_no_delta_is_empty():
    run = [
        Delta("Let me compute.", 1),
        ToolCallStart("call_1", "execute_javascript", '{"code": "6*7"}'),
        ToolCallResult("call_1", "execute_javascript", "ok", '{"result": 42}', duration_ms=3.0),
        Delta("\n\n", 2, seam=True),
        Delta("42", 2),
        Done(summary("Let me compute.\n\n42")),
    ]
    got = events_of(stream(ResponsesRenderer("r", ECHO), run))
    deltas = [e["delta"] for e in got if e["type"] == "response.output_text.delta"]
    assert deltas == ["Let me compute.", "\n\n", "42"]  # they add up to the answer, and none is empty
    texts = [i["content"][0]["text"] for i in got[-1]["response"]["output"] if i["type"] == "message"]
    assert texts == ["Let me compute.", "\n\n42"]
