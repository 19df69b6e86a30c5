"""The official openai Python client, unchanged, against the app served by uvicorn on a free loopback port:
non-streaming, streaming, and a client-defined tool that comes back as standard tool_calls."""

from __future__ import annotations

import json

import openai
import pytest

from chatloop.api import create_app
from chatloop.config import Settings
from chatloop.providers.base import ModelResponse
from chatloop.providers.chain import FallbackChain
from chatloop.providers.demo import DemoModel
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.models import ScriptedModel, call, tool_results
from tests.support.server import Server

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def weather_model(request, n):
    """Calls the client's get_weather tool, then answers from what the client sent back."""
    results = tool_results(request)
    if "get_weather" in request.tool_names() and not results:
        return ModelResponse(
            "", tool_calls=[call("get_weather", {"city": "Oslo"}, "call_w")], finish_reason="tool_calls"
        )
    return ModelResponse("", content=f"It is {results[-1]['temp']} degrees in Oslo.")


@pytest.fixture(scope="module")
def server(sandbox):
    chain = FallbackChain([DemoModel(), ScriptedModel(weather_model, name="scripted:weather")])
    app = create_app(Settings(), chain=chain, registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]))
    with Server(app) as running:
        yield running


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=20)


def test_non_streaming_completion(client):
    completion = client.chat.completions.create(
        model="demo:offline",
        messages=[
            {"role": "user", "content": "calculate compound interest: $10,000 at 5% annually for 15 years"}
        ],
    )
    assert completion.object == "chat.completion" and completion.model == "demo:offline"
    assert (
        "$20,789.28" in completion.choices[0].message.content
        and completion.choices[0].finish_reason == "stop"
    )
    assert completion.usage.total_tokens > 0


def test_streaming_completion(client):
    stream = client.chat.completions.create(
        model="demo:offline",
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "calculate 5! and 10!"}],
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "5! = 120" in text and "10! = 3628800" in text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"] and chunks[-1].usage is not None


def test_a_client_tool_call_round_trip(client):
    messages = [{"role": "user", "content": "weather in Oslo?"}]
    first = client.chat.completions.create(model="scripted:weather", messages=messages, tools=[WEATHER_TOOL])
    choice = first.choices[0]
    assert (
        choice.finish_reason == "tool_calls" and choice.message.tool_calls[0].function.name == "get_weather"
    )
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": choice.message.tool_calls[0].id, "content": json.dumps({"temp": 7})},
    ]
    second = client.chat.completions.create(model="scripted:weather", messages=messages, tools=[WEATHER_TOOL])
    assert (
        second.choices[0].message.content == "It is 7 degrees in Oslo."
        and second.choices[0].finish_reason == "stop"
    )


def test_a_client_tool_call_streams_as_tool_call_chunks(client):
    stream = client.chat.completions.create(
        model="scripted:weather",
        stream=True,
        tools=[WEATHER_TOOL],
        messages=[{"role": "user", "content": "weather?"}],
    )
    chunks = list(stream)
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].function.name == "get_weather" and chunks[-1].choices[0].finish_reason == "tool_calls"


def test_errors_reach_the_client_as_openai_errors(client):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="demo:offline", messages=[{"role": "wizard", "content": "x"}])
    assert "unknown role" in raised.value.message
