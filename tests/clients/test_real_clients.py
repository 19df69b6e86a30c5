"""Real clients, unchanged, against the app under uvicorn on a loopback port: the openai SDK (models, the Responses
API plain / with instructions / with items / with client tools and their outputs / streamed, structured output
with ``parse``, client tools with ``tool_choice``) and LangChain's ChatOpenAI, each with a scripted upstream model
(the real groq SDK against a local server that answers as Groq does) and with the offline demo model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from chatloop.api import create_app
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from tests.support.events import CODE_INTERPRETER_EVENTS
from tests.support.fake_llm import FakeLLM, Reply, error, text, tool_calls
from tests.support.repo import ROOT
from tests.support.server import Server, app_server

GPT_OSS = "groq:openai/gpt-oss-120b"  # honours json_schema
LLAMA = "groq:llama-3.3-70b-versatile"  # json_object only
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
CHAT_WEATHER = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}


class Interest(BaseModel):
    principal: float
    rate_percent: float
    years: int
    total: float


class Person(BaseModel):
    name: str
    age: int


# --- the servers ----------------------------------------------------------------------------------
def wire_model(body: dict[str, Any]) -> Reply:
    """A model on the wire: calls the client's get_weather when offered and not yet answered, then answers from its
    result; otherwise answers in plain text, or in JSON when a response_format asks for it."""
    model = body["model"]
    messages = body["messages"]
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    results = [m for m in messages if m["role"] == "tool"]
    if "get_weather" in offered and not results:
        arguments = json.dumps({"city": "Oslo", "unit": "celsius"})
        return tool_calls(model, [("call_weather_1", "get_weather", arguments)], groq=True)
    if results:
        return text(model, f"It is {json.loads(results[-1]['content'])['temp']} degrees in Oslo.", groq=True)
    response_format = body.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        answer = {"principal": 10000, "rate_percent": 5, "years": 15, "total": 20789.28}
        return text(model, json.dumps(answer), groq=True)
    system = [m["content"] for m in messages if m["role"] == "system" and "pirate" in m["content"]]
    return text(model, "Arr, hello." if system else "Hello from the wire.", groq=True)


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeLLM]:
    with FakeLLM() as llm:
        llm.default = wire_model
        yield llm


@pytest.fixture(scope="module")
def scripted(upstream, sandbox) -> Iterator[Server]:
    from chatloop.tools.base import ToolRegistry
    from chatloop.tools.javascript import ExecuteJavaScriptTool

    settings = Settings(model_chain=f"{GPT_OSS},{LLAMA}", rate_limit_max_wait_seconds=0.0)
    with app_server(
        settings,
        env={"GROQ_BASE_URL": upstream.groq_base_url},
        registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
        keys={"groq": "gsk_clients_test_0000000000", "openai": None},
    ) as server:
        yield server


@pytest.fixture(autouse=True)
def healthy_chain(request):
    """Each test starts with no model cooling down: the scripted server lives for the module."""
    yield
    if "scripted" in request.fixturenames:
        from chatloop.providers.chain import ChainHealth

        request.getfixturevalue("scripted").runtime.models.chain().health = ChainHealth()


@pytest.fixture(scope="module")
def demo(sandbox) -> Iterator[Server]:
    from chatloop.tools.base import ToolRegistry
    from chatloop.tools.javascript import ExecuteJavaScriptTool

    with app_server(Settings(), registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]), keys={}) as server:
        yield server


def client_of(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=30)


# --- models ---------------------------------------------------------------------------------------
def test_models_list_and_retrieve(demo, scripted):
    assert [m.id for m in client_of(demo).models.list()] == ["chatloop", "demo:offline"]
    ids = [m.id for m in client_of(scripted).models.list()]
    assert ids[:3] == ["chatloop", GPT_OSS, LLAMA] and all(i.startswith("groq:") for i in ids[1:])
    assert "groq:mixtral-8x7b-32768" not in ids  # decommissioned models are never offered
    assert client_of(scripted).models.retrieve(LLAMA).owned_by == "groq"
    with pytest.raises(openai.NotFoundError) as raised:
        client_of(demo).models.retrieve("gpt-4o")
    assert "demo:offline" in raised.value.message


def test_health_names_the_resolved_chain_before_any_request(sandbox):
    runtime = Runtime(Settings(), keys_loader=lambda s: {})
    with Server(create_app(Settings(), runtime=runtime)) as server:
        assert httpx.get(f"{server.root}/health").json()["model_chain"] == ["demo:offline"]


def test_every_answer_names_the_model_that_answered(scripted, upstream):
    upstream.script(GPT_OSS.partition(":")[2], error(503, None, "over capacity", kind="server_error"))
    response = client_of(scripted).responses.create(model="chatloop", input="hi")
    assert response.model == LLAMA and response.output_text == "Hello from the wire."


# --- the Responses API ----------------------------------------------------------------------------
def test_responses_plain_with_the_demo_model(demo):
    response = client_of(demo).responses.create(model="demo:offline", input="What is 2**64?")
    assert response.status == "completed" and response.object == "response"
    assert "2^64 = 18446744073709551616" in response.output_text  # exact: BigInt, not a float
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0  # estimated, not 0
    assert response.model == "demo:offline"


def test_responses_instructions_and_item_input_reach_the_model(scripted, upstream):
    before = len(upstream.requests)
    response = client_of(scripted).responses.create(
        model=LLAMA,
        instructions="You are a pirate.",
        input=[
            {"role": "user", "content": [{"type": "input_text", "text": "Hello"}]},
            {"role": "assistant", "content": "Ahoy."},
            {"type": "message", "role": "developer", "content": "Keep it short."},
            {"role": "user", "content": "Greet me again"},
        ],
    )
    assert response.output_text == "Arr, hello."
    sent = upstream.requests[before]["body"]["messages"]
    roles = [(m["role"], m["content"]) for m in sent if m["role"] != "system" or "pirate" in m["content"]]
    assert roles[0] == ("system", roles[0][1]) and "You are a pirate." in roles[0][1]
    assert [r for r, _ in roles[1:]] == ["user", "assistant", "user"]
    assert any(m["role"] == "system" and m["content"] == "Keep it short." for m in sent)


def test_responses_client_tool_round_trip(scripted):
    client = client_of(scripted)
    first = client.responses.create(model=LLAMA, input="weather in Oslo?", tools=[WEATHER])
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments)["city"] == "Oslo"
    assert first.x_chatloop["stop_reason"] == "tool_calls"
    follow_up = [
        {"role": "user", "content": "weather in Oslo?"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": json.dumps({"temp": 7})},
    ]
    second = client.responses.create(model=LLAMA, input=follow_up, tools=[WEATHER])
    assert second.output_text == "It is 7 degrees in Oslo." and second.status == "completed"


def test_responses_stream_sends_openais_event_sequence(demo):
    with client_of(demo).responses.stream(model="demo:offline", input="calculate 5! and 10!") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    text_events = [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    message_events = [
        e.type
        for e in events
        if e.type in text_events
        and e.type != "response.output_text.delta"
        and _item_type(e) in (None, "message")
    ]
    assert message_events[-3:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text and "10! = 3628800" in final.output_text
    # The sandbox run is OpenAI's hosted-code item, before the message that answers from it, announced as it ran.
    run = next(item for item in final.output if item.type == "code_interpreter_call")
    assert run.status == "completed" and run.code and "3628800" in run.outputs[0].logs
    assert final.output.index(run) < max(i for i, item in enumerate(final.output) if item.type == "message")
    run_events = [e.type for e in events if getattr(e, "item_id", None) == run.id or _item_id(e) == run.id]
    assert run_events == CODE_INTERPRETER_EVENTS


def _item_type(event) -> str | None:
    item = getattr(event, "item", None)
    return None if item is None else item.type


def _item_id(event) -> str | None:
    item = getattr(event, "item", None)
    return None if item is None else item.id


def test_a_streamed_client_tool_call_is_a_function_call_item(scripted):
    stream = client_of(scripted).responses.create(model=LLAMA, input="weather?", tools=[WEATHER], stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert (
        "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    )
    done = next(e for e in events if e.type == "response.output_item.done")
    assert done.item.type == "function_call" and done.item.name == "get_weather"
    assert kinds[-1] == "response.completed"


def test_responses_parse_with_text_format(demo, scripted, upstream):
    parsed = (
        client_of(demo)
        .responses.parse(model="demo:offline", input="Alice is 30 years old.", text_format=Person)
        .output_parsed
    )
    assert parsed == Person(name="Alice", age=30)
    before = len(upstream.requests)
    result = client_of(scripted).responses.parse(model=GPT_OSS, input="interest?", text_format=Interest)
    assert result.output_parsed.total == 20789.28
    sent = upstream.requests[before]["body"]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"]["properties"].keys() >= {"total"}


def test_continuing_from_a_response_that_was_never_stored_is_a_404(demo):
    with pytest.raises(openai.NotFoundError) as raised:
        client_of(demo).responses.create(model="demo:offline", input="hi", previous_response_id="resp_1")
    assert "resp_1" in raised.value.message


# --- structured output on chat completions --------------------------------------------------------
def test_chat_completions_parse_with_a_pydantic_model(demo, scripted, upstream):
    question = "calculate compound interest: $10,000 at 5% annually for 15 years"
    completion = client_of(demo).chat.completions.parse(
        model="demo:offline", messages=[{"role": "user", "content": question}], response_format=Interest
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Interest) and parsed.total == 20789.28  # the sandbox's result, in the schema
    before = len(upstream.requests)
    completion = client_of(scripted).chat.completions.parse(
        model="chatloop", messages=[{"role": "user", "content": "interest?"}], response_format=Interest
    )
    assert completion.choices[0].message.parsed.total == 20789.28
    models = [r["body"]["model"] for r in upstream.requests[before:]]
    assert models == ["openai/gpt-oss-120b"]  # llama-3.3 (json_object only) is skipped, never called


def test_a_format_no_model_can_honour_is_a_400_with_no_model_call(upstream, monkeypatch):
    monkeypatch.setenv("GROQ_BASE_URL", upstream.groq_base_url)
    settings = Settings(model_chain=LLAMA)
    runtime = Runtime(settings, keys_loader=lambda s: {"groq": "gsk_clients_test_0000000000"})
    before = len(upstream.requests)
    with Server(create_app(settings, runtime=runtime)) as server:
        with pytest.raises(openai.BadRequestError) as raised:
            client_of(server).chat.completions.parse(
                model=LLAMA, messages=[{"role": "user", "content": "x"}], response_format=Interest
            )
        assert raised.value.code == "unsupported_parameter" and LLAMA in raised.value.message
        with pytest.raises(openai.BadRequestError):
            client_of(server).responses.parse(model=LLAMA, input="x", text_format=Interest)
        plain = client_of(server).chat.completions.create(
            model=LLAMA, messages=[{"role": "user", "content": "x"}], response_format={"type": "json_object"}
        )
        assert plain.choices[0].message.content  # json_object is within llama-3.3's reach
    assert upstream.requests[before:][0]["body"]["response_format"] == {"type": "json_object"}
    assert len(upstream.requests) == before + 1


# --- client tools and tool_choice on the demo model -----------------------------------------------
@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_the_demo_model_honours_tool_choice(demo, choice):
    completion = client_of(demo).chat.completions.create(
        model="demo:offline",
        messages=[{"role": "user", "content": "What is the weather in Oslo?"}],
        tools=[CHAT_WEATHER],
        tool_choice=choice,
    )
    (call,) = completion.choices[0].message.tool_calls
    assert completion.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Oslo", "unit": "celsius"}  # valid for the schema


# --- errors ---------------------------------------------------------------------------------------
def test_errors_map_to_the_sdks_exceptions(scripted, upstream, demo):
    client = client_of(scripted)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="gpt-4o", input="hi")
    with pytest.raises(openai.APIStatusError) as too_large:
        client.responses.create(model=LLAMA, input="x" * 1_100_000)
    assert too_large.value.status_code == 413
    limited = error(429, "rate_limit_exceeded", "Rate limit reached", {"retry-after": "7"}, kind="rate_limit")
    upstream.script("openai/gpt-oss-120b", limited)
    upstream.script("llama-3.3-70b-versatile", limited)
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="chatloop", messages=[{"role": "user", "content": "hi"}])
    assert 1 <= int(raised.value.response.headers["retry-after"]) <= 7
    with pytest.raises(openai.RateLimitError):  # still cooling down: no model is called at all
        client.responses.create(model="chatloop", input="hi")


def test_every_model_failing_is_a_503(sandbox):
    from chatloop.providers.chain import FallbackChain
    from chatloop.providers.failures import Transient
    from tests.support.models import ScriptedModel

    def down(request, n):
        raise Transient("upstream down", model="scripted:down")

    chain = FallbackChain([ScriptedModel(down, name="scripted:down")])
    with Server(create_app(Settings(), chain=chain)) as server:
        with pytest.raises(openai.InternalServerError) as raised:
            client_of(server).responses.create(model="chatloop", input="hi")
        assert raised.value.status_code == 503
        events = list(client_of(server).responses.create(model="chatloop", input="hi", stream=True))
        assert events[-1].type == "response.failed" and events[-1].response.status == "failed"


# --- LangChain ------------------------------------------------------------------------------------
def test_langchain_bind_tools_and_structured_output(demo, scripted):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return "7 degrees"

    model = ChatOpenAI(base_url=demo.base_url, api_key="unused", model="demo:offline", max_retries=0)
    message = model.bind_tools([get_weather], tool_choice="get_weather").invoke(
        "What is the weather in Oslo?"
    )
    assert message.tool_calls[0]["name"] == "get_weather" and message.tool_calls[0]["args"] == {
        "city": "Oslo"
    }
    person = model.with_structured_output(Person).invoke("Alice is 30 years old.")
    assert person == Person(name="Alice", age=30)
    wired = ChatOpenAI(base_url=scripted.base_url, api_key="unused", model=GPT_OSS, max_retries=0)
    assert wired.with_structured_output(Interest).invoke("interest?").total == 20789.28


# --- the Vercel AI SDK under node -----------------------------------------------------------------
CLIENTS = ROOT / "tests" / "clients"


def ai_sdk(server: Server, scenario: str, model: str) -> dict[str, Any]:
    """Run one scenario of tests/clients/ai_sdk.mjs (the real `ai` and `@ai-sdk/openai` packages) against ``server``."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the Vercel AI SDK tests need it (apt-get install nodejs)")
    if not (CLIENTS.parent.parent / "node_modules" / "ai").is_dir():
        pytest.fail("node_modules is missing: `make install` runs npm ci at the repository root")
    env = {"PATH": os.environ["PATH"], "CHATLOOP_BASE_URL": server.base_url, "CHATLOOP_MODEL": model}
    done = subprocess.run(
        [node, "ai_sdk.mjs", scenario], cwd=CLIENTS, env=env, capture_output=True, text=True, timeout=60
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(lines[-1])
    assert result["ok"], (result, done.stderr[-2000:])
    return result


@pytest.mark.parametrize("scenario", ["generateResponses", "streamResponses", "generateChat", "streamChat"])
def test_the_ai_sdk_generates_and_streams_text(demo, scenario):
    result = ai_sdk(demo, scenario, "demo:offline")
    assert "5! = 120, 10! = 3628800" in result["text"] and result["finishReason"] == "stop"
    assert result["usage"]["inputTokens"] > 0 and result["usage"]["outputTokens"] > 0


@pytest.mark.parametrize("scenario", ["toolsResponses", "toolsChat"])
def test_the_ai_sdk_runs_its_own_tools_through_the_loop(scripted, scenario):
    result = ai_sdk(scripted, scenario, LLAMA)
    assert result["calls"] == ["get_weather"] and result["steps"] == 2
    assert result["text"] == "It is 7 degrees in Oslo."


def test_the_ai_sdk_generates_an_object(demo):
    assert ai_sdk(demo, "objectResponses", "demo:offline")["object"] == {"name": "Alice", "age": 30}
