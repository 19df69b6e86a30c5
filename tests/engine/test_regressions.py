"""Issue 25's engine and provider regressions: bounded work in the demo model, client schemas checked at the edge,
the demo only where it is the configured default, the demo's OpenAI contract, the operator catalog checked at
start-up, text-call recovery held back in streams, the reminder branch, and answers that are answers."""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc

import pytest

from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.providers.base import ModelRequest, ModelResponse, TextDelta
from chatloop.providers.catalog import CatalogError
from chatloop.providers.demo import DemoModel, calculation_for
from chatloop.providers.schema_values import Hints, value_for
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.events import parse_sse
from tests.support.fake_llm import text
from tests.support.handler import post as invoke
from tests.support.models import ScriptedModel

MODEL = "llama-3.3-70b-versatile"
KEY = "gsk_test_key_0000000000"
OUTPUT_BOUND = 256 * 1024
"""Generous: no hostile schema makes the demo write more than this (its own cap is 64 KiB)."""


@pytest.fixture
def upstream(fake_llm):
    return fake_llm


@pytest.fixture
def with_keys(app_runtime):
    """``with_keys(sandbox)``: a deployment with a real (scripted) model and its key."""

    def install(sandbox) -> Runtime:
        return app_runtime(
            Settings(model_chain=f"groq:{MODEL}"),
            registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
            keys={"groq": KEY, "openai": None},
        )

    return install


@pytest.fixture
def without_keys(app_runtime):
    """``without_keys(sandbox)``: ``make run`` with no key: the demo model is the chain."""

    def install(sandbox) -> Runtime:
        return app_runtime(
            Settings(),
            registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
            keys={"groq": None, "openai": None},
        )

    return install


def schema_request(path: str, where: str, schema: dict) -> dict:
    """A request carrying ``schema`` as a function tool's parameters or as the structured-output format."""
    tool_name = "fill"
    if path == "/v1/responses":
        body: dict = {"input": "Alice is 30 years old."}
        if where == "tool":
            body |= {
                "tools": [{"type": "function", "name": tool_name, "parameters": schema}],
                "tool_choice": "required",
            }
        else:
            body["text"] = {"format": {"type": "json_schema", "name": "out", "schema": schema}}
        return body
    body = {"messages": [{"role": "user", "content": "Alice is 30 years old."}]}
    if where == "tool":
        tool = {"type": "function", "function": {"name": tool_name, "parameters": schema}}
        body |= {"tools": [tool], "tool_choice": "required"}
    else:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}
    return body


# --- 1. the demo's schema filler is bounded ---------------------------------------------------------------------
def fan_out_cycle(width: int) -> dict:
    """A recursive node with ``width`` children: legal JSON Schema, and width**depth values if filled naively."""
    node = {"type": "object", "properties": {f"child{i}": {"$ref": "#/$defs/node"} for i in range(width)}}
    return {"$defs": {"node": node}, "$ref": "#/$defs/node"}


NESTED_ARRAYS = {
    "type": "array",
    "minItems": 10_000,
    "items": {"type": "array", "minItems": 10_000, "items": {"type": "string", "minLength": 100_000}},
}
HOSTILE_SCHEMAS = {
    "ref cycle with fan-out": fan_out_cycle(10),
    "nested arrays of long strings": NESTED_ARRAYS,
    "a billion items": {"type": "array", "minItems": 10**9, "items": {"type": "string", "minLength": 10**9}},
    "string bounds": {"type": "array", "minItems": "10", "items": {"type": "string", "minLength": "5"}},
    "infinite and NaN bounds": {
        "type": "object",
        "properties": {
            "n": {"type": "number", "minimum": float("nan"), "maximum": float("inf")},
            "i": {"type": "integer", "exclusiveMinimum": float("-inf"), "maximum": 10**400},
        },
    },
    "wrong shapes": {
        "allOf": [[1], "x", {"type": "object", "properties": ["a"], "enum": {"a": 1}}],
        "type": {"not": "a type"},
    },
    "a ref that is not a string": {
        "type": "object",
        "properties": {"a": {"$ref": 5}, "b": {"$ref": "#/nowhere"}},
    },
    "a huge const, many times": {
        "type": "array",
        "minItems": 10_000,
        "items": {"const": "x" * 100_000},
    },
}


@pytest.mark.parametrize("schema", HOSTILE_SCHEMAS.values(), ids=HOSTILE_SCHEMAS.keys())
async def test_the_demo_fills_any_schema_in_bounded_time_and_memory(schema):
    """Once: minutes at 100 % CPU and up to ~2 GB for a cycle with fan-out or nested minItems, and a traceback
    for a string or infinite bound. Bounded now: output, memory and time (generous bounds; numbers in make bench)."""
    tracemalloc.start()
    try:
        value = await asyncio.wait_for(
            asyncio.to_thread(value_for, schema, Hints.from_text("Alice is 30")), 20
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    size = len(json.dumps(value, allow_nan=False))  # valid JSON, whatever the bounds
    assert size <= OUTPUT_BOUND and peak < 16 * 2**20


def test_the_filler_still_fills_what_clients_send():
    person = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2, "maxLength": 10},
            "age": {"type": "integer", "minimum": 0, "exclusiveMaximum": 150},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3},
            "score": {"type": "number", "exclusiveMinimum": 40.5},
            "kind": {"enum": ["a", "b"]},
        },
    }
    value = value_for(person, Hints.from_text("Alice is 30 years old"))
    assert value == {"name": "Alice", "age": 30, "tags": ["Alice", "Alice"], "score": 41.5, "kind": "a"}
    assert value_for({"type": "integer", "minimum": 7.5}, Hints()) == 8
    assert value_for({"type": "integer", "maximum": 2.5}, Hints(numbers=[9.0])) == 2


@pytest.mark.parametrize(
    "question",
    ["1 " * 100_000, "1" * 300_000 + "% a year for 3 years", "fibonacci " * 50_000, "9" * 5000 + "!"],
    ids=[
        "digits and spaces",
        "a long number before a percent",
        "fibonacci repeated",
        "a 5,000-digit factorial",
    ],
)
async def test_the_demo_reads_any_question_in_bounded_time(question):
    """Once cubic: 2,000 "1 " took 7 s on the event loop, a longer question minutes; a 5,000-digit number raised."""
    plan = await asyncio.wait_for(asyncio.to_thread(calculation_for, question), 10)
    assert plan is None or len(plan[0]) < 5_000


async def test_a_hostile_schema_through_the_demo_model_keeps_the_event_loop_free():
    """The demo answers a cycle with fan-out while other work on the loop keeps its pace (heartbeats, /health)."""
    tool = {"type": "function", "function": {"name": "fill", "parameters": fan_out_cycle(12)}}
    request = ModelRequest(
        messages=[{"role": "user", "content": "Alice is 30"}],
        tools=[tool],
        tool_choice="required",
        deadline=Deadline.after(20),
    )
    gaps: list[float] = []

    async def heartbeat() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    beating = asyncio.create_task(heartbeat())
    await asyncio.sleep(0.05)
    items = [item async for item in DemoModel().stream(request)]
    await asyncio.sleep(0.05)
    beating.cancel()
    response = items[-1]
    assert isinstance(response, ModelResponse) and response.tool_calls[0].name == "fill"
    assert len(response.tool_calls[0].arguments) <= OUTPUT_BOUND
    assert max(gaps) < 1.0  # generous: the loop was never blocked for long


# --- 2. client schemas are checked at the edge --------------------------------------------------------------------
BAD_SCHEMAS = [
    ({"type": "array", "minItems": "10"}, "minItems"),
    ({"type": "array", "minItems": 10**9}, "minItems"),
    (
        {"type": "object", "properties": {"tags": {"type": "array", "maxItems": -1}}},
        "properties.tags.maxItems",
    ),
    ({"type": "string", "minLength": 1.5}, "minLength"),
    ({"type": "string", "minLength": 10, "maxLength": 2}, "minLength"),
    ({"type": "number", "minimum": "0"}, "minimum"),
    ({"type": "number", "maximum": float("inf")}, "maximum"),
    ({"type": "number", "minimum": float("nan")}, "minimum"),
    ({"type": "integer", "exclusiveMaximum": 10**400}, "exclusiveMaximum"),
    ({"type": "number", "multipleOf": 0}, "multipleOf"),
    ({"$defs": {"n": {"type": "string", "maxLength": True}}, "$ref": "#/$defs/n"}, "$defs.n.maxLength"),
    ({"anyOf": [{"type": "string"}, {"type": "array", "minItems": None}]}, "anyOf[1].minItems"),
    ({"type": "object", "properties": {"a": {"$ref": 5}}}, "properties.a.$ref"),
    ({"type": "wizard"}, "type"),
    ({"type": "object", "properties": ["a"]}, "properties"),
]


def raw_json(body: dict) -> str:
    """The body as a client may send it: Python's reader takes NaN and Infinity, so the server sees them."""
    return json.dumps(body, allow_nan=True)


@pytest.mark.parametrize(("schema", "field"), BAD_SCHEMAS, ids=[f for _, f in BAD_SCHEMAS])
@pytest.mark.parametrize("where", ["tool", "format"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_a_schema_with_unusable_bounds_is_a_400_naming_the_field(
    upstream, sandbox, schema, field, where, path, with_keys
):
    with_keys(sandbox)
    upstream.script(MODEL, text(MODEL, "should not be asked", groq=True))
    code, body = invoke(path, raw_json(schema_request(path, where, schema)))
    assert code == 400, body
    message = json.loads(body)["error"]["message"]
    assert field in message and ("parameters" in message or "schema" in message), message
    assert upstream.requests == []


@pytest.mark.parametrize(
    "schema",
    [
        fan_out_cycle(3),
        {"type": "object", "properties": {"minimum": {"type": "string"}, "maxItems": {"type": "integer"}}},
        {"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": True, "minimum": 0}}},
        {"type": "array", "items": {"type": "string", "enum": ["a"], "default": "a", "maxLength": 3.0}},
    ],
    ids=["legal recursion", "properties named like bounds", "draft-4 exclusive bounds", "integral floats"],
)
def test_legal_schemas_pass_the_edge(sandbox, schema, without_keys):
    without_keys(sandbox)
    code, body = invoke("/v1/chat/completions", schema_request("/v1/chat/completions", "tool", schema))
    assert code == 200, body
    call = json.loads(body)["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "fill"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
@pytest.mark.parametrize("where", ["tool", "format"])
def test_the_demo_answers_an_expensive_legal_schema_within_bounds(sandbox, path, where, without_keys):
    """Bounds the edge allows (10,000 items of 100,000 characters, nested) still cost the demo bounded work."""
    without_keys(sandbox)
    started = time.perf_counter()
    code, body = invoke(path, schema_request(path, where, NESTED_ARRAYS))
    assert code == 200, body
    assert len(body) <= OUTPUT_BOUND and time.perf_counter() - started < 10


# --- 3. the demo is the default with no key, never a model by name beside real keys -------------------------------
@pytest.mark.parametrize("name", ["demo:offline", "DEMO:offline", "demo:anything"])
@pytest.mark.parametrize(
    ("path", "status"), [("/chat", 400), ("/v1/chat/completions", 404), ("/v1/responses", 404)]
)
def test_the_demo_is_not_selectable_by_name_beside_real_keys(
    upstream, sandbox, name, path, status, with_keys
):
    with_keys(sandbox)
    body = (
        {"input": "What is 2+2?"}
        if path == "/v1/responses"
        else {"messages": [{"role": "user", "content": "What is 2+2?"}]}
    )
    if path == "/chat":
        body["stream"] = False
    code, text_body = invoke(path, json.dumps({**body, "model": name}))
    assert code == status, text_body
    assert "demo" not in json.dumps(json.loads(text_body)["error"]).split("available")[-1]
    assert upstream.requests == []


def test_the_demo_answers_where_it_is_the_default(sandbox, without_keys):
    without_keys(sandbox)
    code, body = invoke(
        "/v1/chat/completions",
        json.dumps({"model": "demo:offline", "messages": [{"role": "user", "content": "What is 2+2?"}]}),
    )
    assert code == 200 and json.loads(body)["model"] == "demo:offline"


# --- 4. the demo keeps OpenAI's contract ------------------------------------------------------------------------
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
JS = {"type": "function", "function": {"name": "execute_javascript", "parameters": {"type": "object"}}}


def demo_reply(messages, **fields) -> ModelResponse:
    async def run() -> ModelResponse:
        request = ModelRequest(messages=messages, deadline=Deadline.after(10), **fields)
        items = [item async for item in DemoModel().stream(request)]
        *deltas, response = items
        assert all(isinstance(i, TextDelta) for i in deltas) and isinstance(response, ModelResponse)
        return response

    return asyncio.run(run())


ASKED_AND_ANSWERED = [
    {"role": "user", "content": "What is the weather in Oslo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": '{"temp": 12, "sky": "clear"}'},
]


@pytest.mark.parametrize(
    "choice",
    ["required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["required", "named"],
)
def test_the_demo_honours_tool_choice_once_tool_results_follow(choice):
    """Once: a forced choice was ignored as soon as a tool result followed the question."""
    response = demo_reply(ASKED_AND_ANSWERED, tools=[WEATHER], tool_choice=choice)
    assert [c.name for c in response.tool_calls] == ["get_weather"] and response.finish_reason == "tool_calls"


def test_the_demo_honours_required_with_only_its_own_tool():
    response = demo_reply([{"role": "user", "content": "Hello there"}], tools=[JS], tool_choice="required")
    assert [c.name for c in response.tool_calls] == ["execute_javascript"]


def test_the_demo_honours_tool_choice_none():
    response = demo_reply([{"role": "user", "content": "What is 6 * 7?"}], tools=[JS], tool_choice="none")
    assert response.tool_calls == [] and response.content


@pytest.mark.parametrize(
    ("content", "quoted"),
    [
        ('{"temp": 12, "sky": "clear"}', '{"temp": 12, "sky": "clear"}'),
        ("sunny, 12 degrees", "sunny, 12 degrees"),
        ("[1, 2, 3]", "1, 2, 3"),
        ('{"error": "no such city"}', "no such city"),
    ],
    ids=["object without result", "plain text", "a list", "an error"],
)
def test_the_demo_quotes_a_client_tool_result_whatever_its_shape(content, quoted):
    """Once: "The result is None." for any result without a ``result`` key."""
    messages = [*ASKED_AND_ANSWERED[:2], {**ASKED_AND_ANSWERED[2], "content": content}]
    response = demo_reply(messages, tools=[WEATHER])
    assert quoted in response.content and "None" not in response.content


def test_the_demo_honours_max_tokens():
    response = demo_reply([{"role": "user", "content": "Hello there"}], max_tokens=5)
    assert len(response.content) <= 20 and response.finish_reason == "length"
    assert response.usage.completion_tokens <= 5


# --- 5. the operator catalog is checked at start-up ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("overlay", "named"),
    [
        ('{"models": {"groq:x": {"context_window": NaN}}}', "models['groq:x'].context_window"),
        ('{"models": {"groq:x": {"context_window": Infinity}}}', "models['groq:x'].context_window"),
        ('{"models": {"groq:x": {"context_window": 1e999}}}', "models['groq:x'].context_window"),
        ('{"models": {"groq:x": {"context_window": "131072"}}}', "models['groq:x'].context_window"),
        ('{"models": {"groq:x": {"context_window": -5}}}', "models['groq:x'].context_window"),
        ('{"models": {"groq:x": ["not", "an", "object"]}}', "models['groq:x']"),
        ('{"models": {"groq:llama-3.3-70b-versatile": 42}}', "models['groq:llama-3.3-70b-versatile']"),
        ('{"models": {"groq:x": {"tools": "yes"}}}', "models['groq:x'].tools"),
        ('{"models": {"groq:x": {"drop_params": "temperature"}}}', "models['groq:x'].drop_params"),
        ('{"providers": {"groq": "gsk"}}', "providers['groq']"),
        ('{"defaults": {"context_window": NaN}}', "defaults.context_window"),
        ("[1, 2]", "the file"),
    ],
    ids=[
        "NaN window",
        "infinite window",
        "overflowing window",
        "string window",
        "negative window",
        "entry a list",
        "packaged entry replaced by a number",
        "flag a string",
        "dropped parameters a string",
        "provider a string",
        "NaN default",
        "not an object",
    ],
)
def test_a_hostile_catalog_file_fails_at_start_naming_file_entry_and_field(tmp_path, overlay, named):
    """Once: a NaN, infinite or string window made every request a 500; an entry that was not an object failed at
    import without naming the file."""
    path = tmp_path / "models.json"
    path.write_text(overlay)
    with pytest.raises(CatalogError) as raised:
        Runtime(Settings(model_catalog_file=str(path)), keys_loader=lambda s: {"groq": KEY, "openai": None})
    message = str(raised.value)
    assert "MODEL_CATALOG_FILE" in message and str(path) in message and named in message, message


def test_a_good_catalog_file_with_fields_the_checker_does_not_know_still_loads(
    tmp_path, upstream, sandbox, with_keys
):
    path = tmp_path / "models.json"
    path.write_text(
        json.dumps({"models": {f"groq:{MODEL}": {"context_window": 8192.0, "some_future_field": {}}}})
    )
    runtime = with_keys(sandbox)
    runtime.models.catalog = Runtime(Settings(model_catalog_file=str(path))).models.catalog
    assert runtime.models.catalog.get(f"groq:{MODEL}").context_window == 8192


# --- 8. the reminder branch ends after the final call ---------------------------------------------------------------
async def drive(model, registry, question: str, **settings):
    from chatloop.api.runtime import engine_limits
    from chatloop.engine import EventType, TurnRequest, run_turn
    from chatloop.engine.events import Delta

    request = TurnRequest(messages=[{"role": "user", "content": question}])
    events = [
        e
        async for e in run_turn(
            request, model, registry, Deadline.after(30), engine_limits(Settings(**settings))
        )
    ]
    assert [e.type for e in events].count(EventType.DONE) == 1 and events[-1].type is EventType.DONE
    deltas = "".join(e.content for e in events if isinstance(e, Delta))
    return events[-1].data, deltas


async def test_a_model_that_quotes_a_tool_call_tag_in_prose_does_not_run_to_the_iteration_cap(sandbox):
    """Once: every reply held a tag, so every reply was "legacy syntax" and the turn ran all 10 model calls; then
    four (two reminders and a tool-less call), each shown again. A tag that no call follows is prose (issue #36):
    the first reply is the answer, said once."""
    prose = "To call a tool, models like me write <tool_call> followed by JSON. Anything else?"
    model = ScriptedModel(lambda request, n: ModelResponse("", content=prose), chunk=5)
    done, deltas = await drive(
        model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "How do tool calls look?"
    )
    assert model.calls == 1 and done["stop_reason"] == "stop"
    assert done["message"]["content"] == prose == deltas


# --- 7. every form the parser recovers is held back by the stream filter -------------------------------------------
JS_KEYS = {"execute_javascript": {"code", "timeout_seconds"}}
CALL = {"name": "execute_javascript", "arguments": {"code": "6 * 7"}}
RECOVERABLE = {
    "hermes": f"<tool_call>{json.dumps(CALL)}</tool_call>",
    "python_tag": '<|python_tag|>{"name": "execute_javascript", "parameters": {"code": "6 * 7"}}',
    "function_tag": '<function=execute_javascript>{"code": "6 * 7"}</function>',
    "function_tag, spaced": "<" + " " * 300 + 'function = execute_javascript>{"code": "6 * 7"}</function>',
    "fenced_json, padded": "```" + " " * 300 + f"\n{json.dumps(CALL)}\n```",
    "fenced_json, longer run": f"``````json\n{json.dumps(CALL)}\n```",
    "fenced_json": f"```json\n{json.dumps(CALL)}\n```",
    "json": json.dumps(CALL),
    "flat_json": '{"name": "execute_javascript", "code": "6 * 7"}',
    "flat_json, code first": '{"code": "6 * 7", "name": "execute_javascript"}',
    "json, arguments before name": '{"arguments": {"code": "6 * 7"}, "name": "execute_javascript"}',
    "name_json": 'execute_javascript{"code": "6 * 7"}',
    "a list of calls": json.dumps([CALL, {**CALL, "arguments": {"code": "1 + 1"}}]),
}


def shown_before_judging(text: str, chunk: int, tools=JS_KEYS) -> str:
    from chatloop.engine.textfilter import TextCallFilter

    box = TextCallFilter(hold_json=True, tools=tools)
    return "".join(box.feed(text[i : i + chunk]) for i in range(0, len(text), chunk))


PROSE = {
    "alone": "",
    "after words": "Let me compute that. ",
    "after braces": "Here is {a} brace and [1] list; then: ",
}
WRITTEN = [
    pytest.param(prose, form, id=f"{kind}, {where}")
    for kind, form in RECOVERABLE.items()
    for where, prose in PROSE.items()
    if not (prose and kind == "name_json")  # name{...} is a call only as the whole text (the parser's rule)
]


@pytest.mark.parametrize(("prose", "form"), WRITTEN)
@pytest.mark.parametrize("chunk", [1, 3, 1000])
def test_each_recoverable_form_is_held_back_by_the_stream_filter(prose, form, chunk):
    """Once leaked in /chat deltas: ``name{...}``, flat JSON with ``code`` first, ``arguments`` before ``name``."""
    from chatloop.providers.textcall_formats import find_text_calls

    text = prose + form
    found = find_text_calls(text, JS_KEYS)
    assert found is not None and found.calls[0].name == "execute_javascript"
    shown = shown_before_judging(text, chunk)
    assert len(shown.strip()) <= len(found.prefix), shown  # nothing of the call reached the client


def test_the_filter_knows_every_opener_in_the_parsers_table():
    from chatloop.engine import textfilter
    from chatloop.providers.textcall_formats import FORMATS

    kinds = {f.opener.kind for f in FORMATS}
    assert kinds <= textfilter._KNOWN_KINDS and {f.name for f in FORMATS} <= set(RECOVERABLE)


@pytest.mark.parametrize(
    "text",
    [
        "Use a set like {1, 2} in Python, or a dict {'a': 1} — both work fine.",
        'A JSON example: {"name": "Alice", "age": 30} and that is all.',
        "get_weather is not a tool here, but executing JavaScript is.",
        "Arrays [1, 2, 3] and objects {} are both JSON values, as you know.",
    ],
)
def test_braces_in_prose_are_released_once_text_follows_them(text):
    shown = shown_before_judging(
        text + " The end.", 4, tools={"execute_javascript": {"code"}, "get_weather": {"city"}}
    )
    assert shown.startswith(text)


def test_the_filter_is_linear_in_the_text():
    """200,000 characters of braces in 100-character pieces: bounded work (generous; numbers in the report)."""
    text = ("{" * 100 + "x" + "}" * 50 + " and [" * 10) * 400
    started = time.perf_counter()
    shown = shown_before_judging(text, 100)
    assert time.perf_counter() - started < 10 and text.startswith(shown)


# --- 9. what a user is shown is an answer ---------------------------------------------------------------------------
JS_TOOL = {
    "type": "function",
    "function": {
        "name": "execute_javascript",
        "description": "Run JavaScript",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
    },
}
JUDGED = [
    ("an answer", "The result is 42.", "The result is 42.", None),
    ("a JSON answer", '{"result": 42, "unit": "m"}', '{"result": 42, "unit": "m"}', None),
    ("a pseudo call", '{"name": "execute_javascript", "arguments": {"code": "6*7"}}', "", "call_shaped"),
    (
        "words then a pseudo call",
        'Let me compute. {"name": "execute_javascript", "code": "6*7"}',
        "Let me compute.",
        "call_shaped",
    ),
    ("name form", 'execute_javascript{"code": "6*7"}', "", "call_shaped"),
    ("a tool error", '{"error": "ReferenceError: x is not defined", "output": ""}', "", "tool_error_json"),
    ("a fenced tool error", '```json\n{"error": "TimeoutError"}\n```', "", "tool_error_json"),
    ("the tools echoed", json.dumps([JS_TOOL]), "", "tool_definitions"),
    ("the function echoed", "My tools: " + json.dumps(JS_TOOL["function"]), "My tools:", "tool_definitions"),
    (
        "another tool's definition",
        json.dumps({"name": "other", "description": "x", "parameters": {}}),
        None,
        None,
    ),
]


@pytest.mark.parametrize(("text", "content", "reason"), [j[1:] for j in JUDGED], ids=[j[0] for j in JUDGED])
def test_the_final_answer_check(text, content, reason):
    from chatloop.engine.answers import judge_final

    judged = judge_final(text, [JS_TOOL])
    assert (judged.content, judged.reason) == (text if content is None else content, reason)


def test_a_structured_answer_with_an_error_field_is_an_answer():
    from chatloop.engine.answers import judge_final

    assert judge_final('{"error": "none found"}', [JS_TOOL], structured=True).reason is None


def stubborn_after_withdrawal(final_text: str):
    """Calls execute_javascript while offered, then writes ``final_text`` once tools are withdrawn."""

    def script(request, n):
        from tests.support.models import js

        if request.tools:
            return ModelResponse("", tool_calls=[js("6 * 7")], finish_reason="tool_calls")
        return ModelResponse("", content=final_text)

    return script


@pytest.mark.parametrize(
    "final_text",
    [
        '{"name": "execute_javascript", "arguments": {"code": "6 * 7"}}',
        '{"error": "ReferenceError: result is not defined", "output": ""}',
        json.dumps([JS_TOOL]),
        'execute_javascript{"code": "6 * 7"}',
    ],
    ids=["pseudo call", "tool error JSON", "tool definitions", "name form"],
)
async def test_a_final_answer_that_is_no_answer_gets_the_fallback_text(sandbox, final_text, caplog):
    """Seen with a 0.5B model: once tools were withdrawn it answered with a pseudo call, a tool error, or the tool
    definitions, and the user was shown exactly that."""
    model = ScriptedModel(stubborn_after_withdrawal(final_text), chunk=4)
    done, deltas = await drive(
        model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "6*7?", max_iterations=2
    )
    answer = done["message"]["content"]
    assert final_text not in answer and "execute_javascript{" not in answer and '"error"' not in answer
    assert "Here's what I tried" in answer  # the fallback text: what happened, and what to do
    # The pseudo call never reaches the deltas; the fallback text streams like any answer, so they add up to it.
    assert final_text not in deltas and "execute_javascript{" not in deltas and deltas == answer
    assert "Answer check: reason=" in caplog.text


async def test_a_good_final_answer_is_released_whole(sandbox):
    model = ScriptedModel(stubborn_after_withdrawal('{"answer": 42}'), chunk=3)
    done, deltas = await drive(
        model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "6*7?", max_iterations=2
    )
    assert done["message"]["content"] == '{"answer": 42}' and deltas == '{"answer": 42}'


LEAKED_ON_CHAT = {
    "name_json": 'execute_javascript{"code": "6 * 7"}',
    "flat_json, code first": 'Let me compute. {"code": "6 * 7", "name": "execute_javascript"}',
    "json, arguments before name": 'Let me compute. {"arguments": {"code": "6 * 7"}, "name": "execute_javascript"}',
}


@pytest.mark.parametrize("written", LEAKED_ON_CHAT.values(), ids=LEAKED_ON_CHAT.keys())
@pytest.mark.parametrize("path", ["/chat", "/v1/chat/completions"])
def test_a_call_written_as_text_never_reaches_the_streamed_deltas(
    upstream, sandbox, written, path, with_keys
):
    """Through the real handler and the groq SDK: the call is recovered and run, and no delta shows any of it."""
    with_keys(sandbox)

    def model(body: dict) -> object:
        answered = any(m["role"] == "tool" for m in body["messages"])
        return text(MODEL, "The answer is 42." if answered else written, pieces=9, groq=True)

    upstream.default = model
    request = {"messages": [{"role": "user", "content": "What is 6 * 7?"}], "stream": True}
    code, body = invoke(path, json.dumps(request))
    assert code == 200, body
    if path == "/chat":
        events = parse_sse(body)
        deltas = "".join(d["content"] for name, d in events if name == "delta")
        assert events[-1][1]["tool_counts"] == {"execute_javascript": 1}
    else:
        chunks = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
        deltas = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert "execute_javascript" not in deltas and "6 * 7" not in deltas and "{" not in deltas, deltas
    assert deltas.endswith("The answer is 42.")


async def test_words_before_a_pseudo_call_on_the_final_call_are_the_answer_as_streamed(sandbox, caplog):
    written = 'The answer is 42. {"name": "execute_javascript", "arguments": {"code": "6 * 7"}}'
    model = ScriptedModel(stubborn_after_withdrawal(written), chunk=4)
    done, deltas = await drive(
        model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "6*7?", max_iterations=2
    )
    assert done["message"]["content"].strip() == "The answer is 42." and done["message"]["content"] == deltas
    assert "reason=call_shaped" in caplog.text


@pytest.mark.parametrize(
    "content",
    ['{"result": 1' + "0" * 400 + "}", '{"result": "1e999"}', '{"result": "nan"}', '{"result": "-inf"}'],
    ids=["an integer past any float", "a string past any float", "nan", "-inf"],
)
def test_the_demo_fills_a_forced_call_after_a_result_no_float_holds(content):
    """Once: a result past a float's range (Python reads any JSON integer) raised OverflowError out of the demo."""
    days = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "number"}}}
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": days}}
    messages = [*ASKED_AND_ANSWERED[:2], {**ASKED_AND_ANSWERED[2], "content": content}]
    response = demo_reply(messages, tools=[tool], tool_choice="required")
    assert [c.name for c in response.tool_calls] == ["get_weather"]
    json.loads(
        response.tool_calls[0].arguments, parse_constant=pytest.fail
    )  # strict JSON: no NaN, no Infinity
