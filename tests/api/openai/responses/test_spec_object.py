"""The ``response`` object and its stream events as the Open Responses spec requires them (issue 44), on every route
and event that carries one: a JSON answer (stored or not, with function tools and a call, cut short), every event of
a stream (stored or not, ``incomplete``, ``failed``), a retrieved one and its replayed events, a background one
(``queued``, followed, polled) and a cancelled one. Each object is checked three ways: strict JSON-schema
validation (``jsonschema``) against the schema of ``openresponses_types`` (pydantic models generated from the
published OpenAPI document, spec version 2026-04-24), that model's own ``model_validate``, and openai-python's
``Response``. Then the values: what the turn used (the sampling values given, or the providers' defaults), function
tools echoed whole, ``completed_at`` once completed.

The app runs under uvicorn in this process over a SQLite store, with a scripted model (tests/support/models.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jsonschema  # type: ignore[import-untyped]  # no stubs in the dev pins
import openai.types.responses as sdk_types
import openresponses_types as spec
import pytest
from pydantic import BaseModel, TypeAdapter

from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.providers.base import ModelRequest, ModelResponse, StreamItem
from chatloop.providers.failures import RequestTooLarge
from chatloop.tools.base import ToolRegistry
from tests.support.events import parse_sse
from tests.support.handler import build_runtime
from tests.support.models import ScriptedModel, call
from tests.support.server import Server, app_server

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a location",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
    },
}
"""The function tool of the spec's compliance suite (``tool-calling``): no ``strict``, as its clients send it."""

EVENT_MODELS: dict[str, type[BaseModel]] = {
    "response.created": spec.ResponseCreatedStreamingEvent,
    "response.queued": spec.ResponseQueuedStreamingEvent,
    "response.in_progress": spec.ResponseInProgressStreamingEvent,
    "response.completed": spec.ResponseCompletedStreamingEvent,
    "response.failed": spec.ResponseFailedStreamingEvent,
    "response.incomplete": spec.ResponseIncompleteStreamingEvent,
    "response.output_item.added": spec.ResponseOutputItemAddedStreamingEvent,
    "response.output_item.done": spec.ResponseOutputItemDoneStreamingEvent,
    "response.content_part.added": spec.ResponseContentPartAddedStreamingEvent,
    "response.content_part.done": spec.ResponseContentPartDoneStreamingEvent,
    "response.output_text.delta": spec.ResponseOutputTextDeltaStreamingEvent,
    "response.output_text.done": spec.ResponseOutputTextDoneStreamingEvent,
    "response.function_call_arguments.delta": spec.ResponseFunctionCallArgumentsDeltaStreamingEvent,
    "response.function_call_arguments.done": spec.ResponseFunctionCallArgumentsDoneStreamingEvent,
    "error": spec.ErrorStreamingEvent,
}
"""The spec's model of each event these turns send (an event with none fails the test)."""


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    # The one place the generated models differ from the published document: JsonSchemaResponseFormat.schema is
    # `anyOf: [{type: object}, {type: null}]` there (schema/components/schemas/JsonSchemaResponseFormat.json), and
    # the generator made it `type: null`. Checked against the document's own definition.
    fmt = schema.get("$defs", {}).get("JsonSchemaResponseFormat")
    if fmt is not None:
        fmt["properties"]["schema"] = {"anyOf": [{"type": "object"}, {"type": "null"}]}
    return schema


SPEC_MODELS: list[type[BaseModel]] = [spec.ResponseResource, *EVENT_MODELS.values()]
SCHEMAS = {model: _schema(model) for model in SPEC_MODELS}
SDK_EVENT: TypeAdapter[Any] = TypeAdapter(sdk_types.ResponseStreamEvent)


def schema_errors(model: type[BaseModel], data: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCHEMAS[model])
    return [f"{list(e.absolute_path)}: {e.message[:200]}" for e in validator.iter_errors(data)]


def conforms(response: dict[str, Any]) -> dict[str, Any]:
    """``response`` passes the spec's schema, its generated model and openai-python's ``Response``."""
    assert schema_errors(spec.ResponseResource, response) == [], response
    if response["text"]["format"]["type"] != "json_schema":  # the generated model's one flaw (see _schema)
        spec.ResponseResource.model_validate(response)
    sdk_types.Response.model_validate(response)
    return response


def events_conform(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every event passes its spec model (schema and ``model_validate``) and openai-python's event union; each
    ``response`` it carries conforms."""
    for event in events:
        model = EVENT_MODELS.get(event["type"])
        assert model is not None, f"no spec model for {event['type']}"
        assert schema_errors(model, event) == [], event
        model.model_validate(event)
        SDK_EVENT.validate_python(event)
        if "response" in event:
            conforms(event["response"])
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


# --- the app ------------------------------------------------------------------------------------------
def script(request: ModelRequest, n: int) -> ModelResponse:
    """Calls get_weather when asked about the weather, cuts an answer short on "cut", fails on "fail", and otherwise
    answers."""
    last = str([m for m in request.messages if m["role"] == "user"][-1]["content"])
    if "fail" in last:
        raise RequestTooLarge("the prompt is past the tier's limit", model="scripted:model")  # no cooldown
    if "weather" in last and request.tools:
        return ModelResponse(
            "", tool_calls=[call("get_weather", {"location": "SF"})], finish_reason="tool_calls"
        )
    if "cut" in last:
        return ModelResponse("", content="Once upon a", finish_reason="length")
    return ModelResponse("", content="Hello there, friend.", finish_reason="stop")


class Model(ScriptedModel):
    """``script``'s model, which first waits a few seconds on "slowly" (long enough to be cancelled)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        if "slowly" in str(request.messages[-1]["content"]):
            await asyncio.sleep(3)
        async for item in super().stream(request):
            yield item


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    settings = Settings(conversation_store_path=str(tmp_path_factory.mktemp("spec") / "spec.sqlite3"))
    with app_server(settings, model=Model(script), registry=ToolRegistry()) as running:
        yield running


@pytest.fixture(scope="module")
def http(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, headers={"x-api-key": "alice"}, timeout=30) as c:
        yield c


def create(http: httpx.Client, **body: Any) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The JSON answer, or the stream's events (with ``stream``)."""
    answer = http.post("/responses", json={"model": "chatloop", **body})
    assert answer.status_code == 200, answer.text
    if body.get("stream"):
        return None, [data for _, data in parse_sse(answer.text)]
    return answer.json(), []


# --- every route and event -----------------------------------------------------------------------------
CASES = {
    "json, stored": ({"input": "hi"}, "completed"),
    "json, unstored": ({"input": "hi", "store": False}, "completed"),
    "json, a function call": ({"input": "weather in SF?", "tools": [WEATHER]}, "completed"),
    "json, cut short": ({"input": "cut", "max_output_tokens": 16}, "incomplete"),
    "json, sampling and text given": (
        {
            "input": "hi",
            "temperature": 0.2,
            "top_p": 0.9,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "text": {"format": {"type": "json_object"}},
            "tools": [{**WEATHER, "strict": True}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "instructions": "Be brief.",
            "metadata": {"k": "v"},
        },
        "completed",
    ),
    "stream, stored": ({"input": "hi", "stream": True}, "completed"),
    "stream, unstored, a function call": (
        {"input": "weather in SF?", "tools": [WEATHER], "stream": True, "store": False},
        "completed",
    ),
    "stream, cut short": ({"input": "cut", "stream": True}, "incomplete"),
    "stream, failed": ({"input": "fail", "stream": True}, "failed"),
}


@pytest.mark.parametrize("case", CASES)
def test_every_object_and_event_conforms_to_the_spec(http, case):
    body, status = CASES[case]
    answer, events = create(http, **body)
    if answer is not None:
        conforms(answer)
        final = answer
    else:
        events_conform(events)
        final = events[-1]["response"]
        assert [e["response"]["status"] for e in events[:2]] == ["in_progress", "in_progress"]
        assert events[0]["response"]["completed_at"] is None
    assert final["status"] == status
    if status == "completed":
        assert final["created_at"] <= final["completed_at"] <= time.time()
    else:
        assert final["completed_at"] is None
    if status == "failed":  # why, in the spec's Error; nothing was answered
        assert final["error"]["code"] and final["error"]["message"] and final["usage"] is None
    if final["store"]:  # read back as it was answered, and its stream replayed
        again = http.get(f"/responses/{final['id']}")
        assert again.status_code == 200 and conforms(again.json()) == final
        if events:
            replayed = http.get(f"/responses/{final['id']}", params={"stream": "true"})
            assert events_conform([d for _, d in parse_sse(replayed.text)]) == events


def test_the_turn_s_values_are_echoed_the_providers_defaults_when_none_was_given(http):
    plain, _ = create(http, input="hi", tools=[WEATHER])
    assert plain is not None
    assert (plain["temperature"], plain["top_p"]) == (1.0, 1.0)
    assert (plain["presence_penalty"], plain["frequency_penalty"]) == (0.0, 0.0)
    assert plain["tools"] == [{**WEATHER, "strict": None}]  # whole: what was not given is null, not dropped
    assert "verbosity" not in plain["text"] and plain["text"]["format"] == {"type": "text"}
    given, _ = create(http, **CASES["json, sampling and text given"][0])
    assert given is not None
    assert (given["temperature"], given["top_p"]) == (0.2, 0.9)
    assert (given["presence_penalty"], given["frequency_penalty"]) == (0.5, -0.5)
    assert given["tools"] == [{**WEATHER, "strict": True}]
    assert given["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert given["instructions"] == "Be brief." and given["metadata"] == {"k": "v"}


def test_a_response_stored_before_these_fields_is_read_back_as_the_spec_requires(server, http):
    """A record the previous version wrote (kept CONVERSATION_TTL_SECONDS) is answered with the fields it lacks."""
    answer, _ = create(http, input="hi", tools=[WEATHER])
    assert answer is not None
    gone = ("completed_at", "presence_penalty", "frequency_penalty")
    usage = {**answer["usage"], "input_tokens_details": {"cached_tokens": 0}}
    old = {k: v for k, v in answer.items() if k not in gone}
    old |= {"temperature": None, "top_p": None, "tools": [WEATHER], "usage": usage}
    old["text"] = {"format": {"type": "text"}, "verbosity": None}
    # Written as that version wrote it, through another copy's store over the same file.
    store = build_runtime(server.runtime.settings).stores.state()
    owner = "local-key:" + hashlib.sha256(b"alice").hexdigest()[:32]
    assert asyncio.run(store.responses.update(owner, answer["id"], old, [], Deadline.after(10)))
    again = conforms(http.get(f"/responses/{answer['id']}").json())
    assert again["completed_at"] is None and (again["temperature"], again["presence_penalty"]) == (1.0, 0.0)
    assert again["tools"] == [{**WEATHER, "strict": None}] and again["output"] == answer["output"]


def test_a_json_schema_format_is_echoed_whole(http):
    fmt = {"type": "json_schema", "name": "greeting", "schema": {"type": "object"}}
    answer = http.post("/responses", json={"model": "chatloop", "input": "hi", "text": {"format": fmt}})
    echoed = answer.json()["text"]["format"]
    assert echoed == {**fmt, "description": None, "strict": False}
    conforms(answer.json())


def test_a_background_response_conforms_queued_followed_polled_and_cancelled(http):
    queued = http.post("/responses", json={"model": "chatloop", "input": "hi", "background": True}).json()
    conforms(queued)
    assert queued["status"] == "queued" and queued["completed_at"] is None and queued["background"] is True
    deadline = time.monotonic() + 20
    while (done := http.get(f"/responses/{queued['id']}").json())["status"] in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert conforms(done)["status"] == "completed" and done["completed_at"] >= done["created_at"]
    replayed = http.get(f"/responses/{queued['id']}", params={"stream": "true"})
    events = events_conform([d for _, d in parse_sse(replayed.text)])
    assert events[0]["type"] == "response.queued" and events[-1]["type"] == "response.completed"

    slow = http.post("/responses", json={"model": "chatloop", "input": "slowly", "background": True}).json()
    cancelled = http.post(f"/responses/{slow['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert conforms(cancelled.json())["status"] == "cancelled" and cancelled.json()["completed_at"] is None
    replayed = http.get(f"/responses/{slow['id']}", params={"stream": "true"})
    ended = events_conform([d for _, d in parse_sse(replayed.text)])[-1]
    assert ended["type"] == "response.failed" and ended["response"]["status"] == "cancelled"


def test_the_spec_s_error_event_shape_is_sent_with_openai_s_flat_fields():
    """A stream that breaks ends with ``error`` (then ``response.failed``): the spec nests the error (``error``:
    type, code, message, param), openai-python reads it flat; both are there."""
    from chatloop.api.openai.responses.render import ResponsesRenderer, echo_of
    from chatloop.api.openai.responses.schemas import ResponsesBody
    from chatloop.engine.events import Delta
    from tests.support.render import stream

    renderer = ResponsesRenderer("r", echo_of(ResponsesBody.model_validate({"input": "hi"}), "chatloop"))
    events = [data for _, data in parse_sse(stream(renderer, [Delta("par", 1)], fail=True))]
    events_conform(events)
    error = events[-2]
    assert error["type"] == "error" and error["error"]["code"] == error["code"] == "internal_error"
    assert json.dumps(error).count("message") == 2
