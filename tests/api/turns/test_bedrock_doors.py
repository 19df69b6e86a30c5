"""A Bedrock-only chain behind every door: ``/chat`` through the real Lambda handler (a calculation turn in the real
Deno sandbox, traced as ``aws.bedrock``), a client tool round trip with a named ``tool_choice`` through
``/v1/chat/completions``, ``/v1/responses``, and the real openai SDK streaming from the app under uvicorn. Bedrock is
the fake Bedrock Runtime (tests/support/fake_bedrock.py) reached by boto3 with SigV4; no secret shows anywhere."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest

from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from chatloop.tracing.setup import uninstall
from tests.support.events import rest_event
from tests.support.fake_bedrock import SECRET_KEY, text, tool_use
from tests.support.handler import invoke, post
from tests.support.server import app_server, client
from tests.support.telemetry import InMemoryTelemetry

NOVA = "amazon.nova-pro-v1:0"
SETTINGS = Settings(model_chain=f"bedrock:{NOVA}")
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture
def telemetry() -> Iterator[InMemoryTelemetry]:
    yield InMemoryTelemetry()
    uninstall()


def test_a_calculation_turn_on_chat_is_traced_as_aws_bedrock(
    fake_bedrock, sandbox, app_runtime, telemetry, capsys
):
    fake_bedrock.script(
        NOVA,
        tool_use(
            [("tu_calc", "execute_javascript", json.dumps({"code": "(10000 * 1.05 ** 15).toFixed(2)"}))]
        ),
        text("It grows to $20,789.28."),
    )
    app_runtime(SETTINGS, registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]), keys={})
    status, body = post(
        "/chat", {"messages": [{"role": "user", "content": "$10,000 at 5% for 15 years?"}], "stream": False}
    )
    assert status == 200, body
    answer = json.loads(body)
    assert answer["message"]["content"] == "It grows to $20,789.28." and answer["model"] == f"bedrock:{NOVA}"
    second = fake_bedrock.requests_for(NOVA)[1]["body"]
    assert "20789.28" in json.dumps(second["messages"])  # the sandbox's result went back to the model
    assert all(r["signed"] for r in fake_bedrock.requests)
    agent = telemetry.agent().attributes or {}
    chats = [s.attributes or {} for s in telemetry.named("chat ")]
    assert agent["gen_ai.provider.name"] == "aws.bedrock" and agent["gen_ai.request.model"] == NOVA
    assert [c["gen_ai.provider.name"] for c in chats] == ["aws.bedrock", "aws.bedrock"]
    assert SECRET_KEY not in body + json.dumps(capsys.readouterr())


def test_a_client_tool_round_trip_with_a_named_tool_choice_on_chat_completions(fake_bedrock, app_runtime):
    fake_bedrock.script(
        NOVA, tool_use([("tu_w", "get_weather", '{"city": "Paris"}')]), text("Sunny in Paris, 21 °C.")
    )
    app_runtime(SETTINGS, registry=ToolRegistry([]), keys={})
    question = [{"role": "user", "content": "Weather in Paris?"}]
    named = {"type": "function", "function": {"name": "get_weather"}}
    status, body = post(
        "/v1/chat/completions",
        {"model": "chatloop", "messages": question, "tools": [WEATHER], "tool_choice": named},
    )
    assert status == 200, body
    message = json.loads(body)["choices"][0]["message"]
    (call,) = message["tool_calls"]
    assert (call["id"], call["function"]["name"], json.loads(call["function"]["arguments"])) == (
        "tu_w",
        "get_weather",
        {"city": "Paris"},
    )
    assert json.loads(body)["choices"][0]["finish_reason"] == "tool_calls"
    answered = [
        *question,
        message,
        {"role": "tool", "tool_call_id": "tu_w", "content": '{"sky": "sunny", "celsius": 21}'},
    ]
    status, body = post(
        "/v1/chat/completions", {"model": "chatloop", "messages": answered, "tools": [WEATHER]}
    )
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "Sunny in Paris, 21 °C."
    first, second = (r["body"] for r in fake_bedrock.requests_for(NOVA))
    assert first["toolConfig"]["toolChoice"] == {"tool": {"name": "get_weather"}}
    assert second["messages"][1]["content"] == [
        {"toolUse": {"toolUseId": "tu_w", "name": "get_weather", "input": {"city": "Paris"}}}
    ]
    assert second["messages"][2]["content"] == [
        {"toolResult": {"toolUseId": "tu_w", "content": [{"json": {"sky": "sunny", "celsius": 21}}]}}
    ]


def test_responses_answers_from_bedrock(fake_bedrock, app_runtime):
    fake_bedrock.script(NOVA, text("Bonjour !", usage=(9, 3)))
    app_runtime(SETTINGS, registry=ToolRegistry([]), keys={})
    status, body, _ = invoke(
        rest_event(
            "POST", "/v1/responses", {"model": "chatloop", "input": "Say hello in French", "store": False}
        )
    )
    assert status == 200, body
    response = json.loads(body)
    said = [c["text"] for o in response["output"] if o["type"] == "message" for c in o["content"]]
    assert said == ["Bonjour !"] and response["usage"]["input_tokens"] == 9
    assert fake_bedrock.requests_for(NOVA)[0]["body"]["messages"][-1] == {
        "role": "user",
        "content": [{"text": "Say hello in French"}],
    }


def test_the_openai_sdk_streams_a_bedrock_answer_from_the_app_under_uvicorn(fake_bedrock):
    fake_bedrock.script(NOVA, text("one two three four five", pieces=5))
    with app_server(SETTINGS, registry=ToolRegistry([]), keys={}) as server:
        stream = client(server).chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": "count"}], stream=True
        )
        pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 5 and "".join(pieces) == "one two three four five"


def test_bedrock_models_are_offered_only_where_the_chain_names_bedrock(fake_bedrock, app_runtime):
    haiku = "bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0"
    app_runtime(
        Settings(model_chain="groq:llama-3.3-70b-versatile"),
        registry=ToolRegistry([]),
        keys={"groq": "gsk_x"},
    )
    status, body, _ = invoke(rest_event("GET", "/v1/models"))
    assert status == 200 and not [m["id"] for m in json.loads(body)["data"] if m["id"].startswith("bedrock:")]
    status, body = post(
        "/v1/chat/completions", {"model": haiku, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert status in (400, 404) and haiku in body and not fake_bedrock.requests

    fake_bedrock.script(haiku.removeprefix("bedrock:"), text("from Haiku"))
    app_runtime(SETTINGS, registry=ToolRegistry([]), keys={})
    status, body, _ = invoke(rest_event("GET", "/v1/models"))
    assert haiku in [m["id"] for m in json.loads(body)["data"]]
    status, body = post(
        "/v1/chat/completions", {"model": haiku, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "from Haiku"


def test_a_bedrock_turn_is_charged_at_its_catalog_price(fake_bedrock, tmp_path):
    haiku = (
        "us.anthropic.claude-haiku-4-5-20251001-v1:0"  # $1.10 / $5.50 per million tokens (the us. profile)
    )
    fake_bedrock.script(haiku, text("Hi there!", usage=(2000, 1000)))
    settings = Settings(
        model_chain=f"bedrock:{haiku}",
        budget_cost_per_day_usd=1.0,
        conversation_store_path=str(tmp_path / "store.sqlite3"),
    )
    with app_server(settings, registry=ToolRegistry([]), keys={}) as server:
        answer = client(server).chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": "hello"}], max_tokens=50
        )
        assert answer.choices[0].message.content == "Hi there!"
        usage = httpx.get(f"{server.base_url}/usage", headers={"x-api-key": "alice-key"}, timeout=10).json()
    assert usage["usage"]["cost_today_usd"] == pytest.approx(2000 * 1.1e-6 + 1000 * 5.5e-6)


def test_bedrock_tokens_reach_the_client_as_they_come(fake_bedrock):
    # Proved by order, not by time: the model writes its third piece only once the client has read the first.
    seen_first, in_time = threading.Event(), []
    answer = text("one two three four five", pieces=5)
    answer.before = lambda n: in_time.append(seen_first.wait(10)) if n == 3 else None
    fake_bedrock.script(NOVA, answer)
    with app_server(SETTINGS, registry=ToolRegistry([]), keys={}) as server:
        stream = client(server).chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": "count"}], stream=True
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                seen_first.set()
    assert in_time == [True]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_lone_bedrock_model_slow_to_start_is_waited_for_not_a_503(fake_bedrock, app_runtime, stream):
    """Issue #41's rule for the last model of a chain (it has no next model to skip to: its first chunk is waited
    for until the deadline) holds for ``bedrock:`` as for the SDK providers: a cold model slow to its first token
    answers, where it was a 503 after MODEL_FIRST_CHUNK_TIMEOUT_SECONDS."""
    slow = text("It is 76127.")
    slow.delay = 1.5
    fake_bedrock.script(NOVA, slow)
    settings = Settings(model_chain=f"bedrock:{NOVA}", model_first_chunk_timeout_seconds=0.5)
    app_runtime(settings, registry=ToolRegistry(), keys={})
    question = [{"role": "user", "content": "What is the sum of all prime numbers below 1000?"}]
    status, body = post("/chat", {"messages": question, "stream": stream})
    assert status == 200, body
    assert "It is 76127." in body and "sent nothing" not in body
    assert len(fake_bedrock.requests_for(NOVA)) == 1
