"""Issue 11's regression corpus: each attack that once crashed, leaked, overran or overflowed the handler, as a
named test through the real handler with real-shaped events (the sandbox's own attacks are in tests/tools/test_sandbox.py)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest
import uvicorn

from chatloop.api import create_app
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.engine import TurnRequest, run_turn
from chatloop.engine.events import Delta, Started
from chatloop.providers.base import ModelRequest, ModelResponse, ToolCall
from chatloop.providers.catalog import Catalog
from chatloop.providers.chain import FallbackChain
from chatloop.providers.factory import build_model
from chatloop.redaction import register_secret
from chatloop.tools.base import ToolRegistry, ToolResult
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.events import parse_sse, response_body, rest_event
from tests.support.fake_llm import Reply, error, text, tool_calls
from tests.support.handler import handle

MODEL = "llama-3.3-70b-versatile"
KEY = "gsk_test_key_0000000000"


@pytest.fixture
def upstream(fake_llm):
    return fake_llm


@pytest.fixture
def use(app_runtime):
    """``use(sandbox, **settings)``: the handler's runtime, a groq model with its key and the real sandbox."""

    def install(sandbox, **settings) -> Runtime:
        return app_runtime(
            Settings(model_chain=f"groq:{MODEL}", **settings),
            registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
            keys={"groq": KEY, "openai": None},
        )

    return install


def invoke(path: str, body, remaining_ms: int = 28_000) -> tuple[int, str, dict]:
    response = handle(rest_event("POST", path, body), remaining_ms)
    return response["statusCode"], response_body(response), response


def ask(content: str, **extra):
    return {"messages": [{"role": "user", "content": content}], **extra}


# --- bodies that once answered 500 ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "status", "words"),
    [
        ('{"messages": ' + "[" * 10_000 + "]" * 10_000 + "}", 400, "nested more than 64 levels"),
        (
            '{"messages": [{"role": "user", "content": "x"}], "max_tokens": ' + "9" * 5000 + "}",
            400,
            "too large",
        ),
        (json.dumps(ask("x", temperature=[[[[1]]]])), 400, "temperature"),
        (json.dumps({"messages": [{"role": "user", "content": "hi"}] * 2001}), 413, "MAX_MESSAGES"),
        (json.dumps({"messages": [{"role": "user", "content": {"nested": "object"}}]}), 400, "content"),
        (json.dumps({"messages": [{"role": "assistant", "tool_calls": [{"id": 1}]}]}), 400, "messages[0]"),
        (json.dumps({"messages": [{"role": None}]}), 400, "unknown role"),
    ],
    ids=[
        "10,000-deep nesting",
        "5,000-digit integer",
        "number as nested lists",
        "2,001 messages",
        "content as an object",
        "tool call id as a number",
        "role null",
    ],
)
@pytest.mark.parametrize("path", ["/chat", "/v1/chat/completions"])
def test_malformed_bodies_are_clear_4xx_without_a_model_call(
    upstream, sandbox, raw, status, words, path, use
):
    use(sandbox)
    code, body, _ = invoke(path, raw)
    assert code == status and words in json.loads(body)["error"]["message"], body
    assert upstream.requests == []


@pytest.mark.parametrize("name", ["", "../../etc/passwd", "<img src=x>", "a" * 65, "has space"])
@pytest.mark.parametrize(
    ("path", "tools"),
    [
        ("/v1/responses", lambda name: [{"type": "function", "name": name}]),
        ("/v1/chat/completions", lambda name: [{"type": "function", "function": {"name": name}}]),
    ],
    ids=["responses", "chat-completions"],
)
def test_a_hostile_function_tool_name_is_a_400_on_both_openai_routes(
    upstream, sandbox, name, path, tools, use
):
    """Once a 500 on /v1/responses (its tool name went unchecked into the chat tool's validator)."""
    use(sandbox)
    key = "input" if path == "/v1/responses" else "messages"
    value = "hi" if key == "input" else [{"role": "user", "content": "hi"}]
    code, body, _ = invoke(path, json.dumps({key: value, "tools": tools(name)}))
    error = json.loads(body)["error"]
    assert code == 400 and error["param"].startswith("tools") and "1-64 letters" in error["message"], body
    assert upstream.requests == []


# --- lone surrogates: in the request, the model's output, a tool's result ----------------------------------
def test_a_lone_surrogate_in_the_question_becomes_a_replacement_character(upstream, sandbox, use):
    use(sandbox)
    upstream.default = lambda body: text(MODEL, "Noted.", groq=True)
    raw = '{"messages": [{"role": "user", "content": "bad \\ud800 text"}], "stream": true}'
    code, body, _ = invoke("/chat", raw)
    events = parse_sse(body)
    assert code == 200 and events[-1][0] == "done" and events[-1][1]["message"]["content"] == "Noted."
    assert upstream.requests[0]["body"]["messages"][-1]["content"] == "bad \ufffd text"


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("path", ["/chat", "/v1/chat/completions"])
def test_a_lone_surrogate_from_the_model_never_breaks_a_response(upstream, sandbox, path, stream, use):
    use(sandbox)
    upstream.default = lambda body: text(MODEL, "half a pair: \ud83d and more", groq=True)
    code, body, _ = invoke(path, json.dumps(ask("hi", stream=stream)))
    body.encode("utf-8")  # the response is valid UTF-8
    assert code == 200 and answer_of(path, stream, body) == "half a pair: \ufffd and more"


def answer_of(path: str, stream: bool, body: str) -> str:
    if path == "/chat":
        return (parse_sse(body)[-1][1] if stream else json.loads(body))["message"]["content"]
    if not stream:
        return json.loads(body)["choices"][0]["message"]["content"]
    lines = [line[6:] for line in body.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


# --- streams always end with their terminal event ----------------------------------------------------------
def failing_turn(*args, **kwargs):
    async def events():
        yield Started("fake")
        yield Delta("partial ", 1)
        raise RuntimeError("something broke after the stream began")

    return events()


@pytest.mark.parametrize("path", ["/chat", "/v1/chat/completions"])
def test_every_stream_ends_with_its_terminal_event_after_an_internal_error(
    upstream, sandbox, monkeypatch, path, use
):
    use(sandbox)
    monkeypatch.setattr("chatloop.api.turns.serve.run_turn", failing_turn)
    code, body, _ = invoke(path, json.dumps(ask("hi", stream=True)))
    assert code == 200 and "Traceback" not in body and "something broke" not in body
    if path == "/chat":
        events = parse_sse(body)
        assert [name for name, _ in events[-2:]] == ["error", "done"]
        assert events[-2][1]["code"] == "internal_error" and events[-1][1]["stop_reason"] == "error"
    else:
        lines = [line for line in body.splitlines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]" and json.loads(lines[-2][6:])["error"]["code"] == "internal_error"


# --- Lambda's 6 MB payload limit ----------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_a_buffered_response_never_exceeds_lambdas_payload_limit(upstream, sandbox, stream, use):
    """A model that writes 40 calls of 200 KB of code each: the summary (and the buffered SSE) would carry 8 MB."""
    use(sandbox)
    huge = json.dumps({"code": "1 // " + "x" * 200_000})
    upstream.script(
        MODEL,
        tool_calls(MODEL, [(f"call_{i}", "execute_javascript", huge) for i in range(40)], groq=True),
        text(MODEL, "Done.", groq=True),
    )
    code, body, response = invoke("/chat", json.dumps(ask("go", stream=stream)))
    assert len(json.dumps(response)) <= 6_000_000
    assert code == 200
    final = parse_sse(body)[-1][1] if stream else json.loads(body)
    assert final["message"]["content"] == "Done." and len(final["tool_calls"]) == 40


# --- secrets of any length ----------------------------------------------------------------------------------
def test_a_short_key_echoed_by_a_provider_is_redacted(upstream, sandbox, use):
    short = "k3Y9"
    register_secret(short)
    runtime = use(sandbox)
    runtime.models._keys_loader = lambda s: {"groq": short, "openai": None}
    upstream.script(
        MODEL, error(401, "invalid_api_key", f"Invalid API Key: {short}", kind="invalid_request_error")
    )
    code, body, _ = invoke("/chat", json.dumps(ask("hi", stream=True)))  # the error event carries the message
    assert code == 200 and "Invalid API Key: [REDACTED]" in body and short not in body


# --- the chain: an unknown model's window is unknown -----------------------------------------------------
async def test_after_a_context_error_an_unknown_model_is_still_tried(upstream):
    catalog = Catalog.load()
    first, second = (
        build_model(f"groq:{m}", {"groq": KEY}, catalog) for m in ("unknown-small", "unknown-other")
    )
    assert first and second and catalog.get("groq:unknown-other").context_window is None
    upstream.script(
        "unknown-small", error(400, "context_length_exceeded", "This model's maximum context length is 8192")
    )
    upstream.script("unknown-other", text("unknown-other", "answered", groq=True))
    chain = FallbackChain([first, second], catalog=catalog).for_turn()
    items = [
        i async for i in chain.stream(ModelRequest([{"role": "user", "content": "long"}], Deadline.after(10)))
    ]
    assert items[-1].content == "answered" and items[-1].model == "groq:unknown-other"


def test_the_fallback_text_is_a_clean_sentence(upstream, sandbox, use):
    use(sandbox)
    upstream.default = lambda body: error(503, None, "overloaded", kind="server_error")
    _, body, _ = invoke("/chat", json.dumps(ask("hi", stream=False)))
    answer = json.loads(body)["message"]["content"]
    assert answer.startswith("No model was available to answer right now. Here's what I tried: ")
    assert "without a final answer" not in answer and ".." not in answer


# --- deadlines that hold under load ----------------------------------------------------------------------
async def test_a_huge_history_does_not_block_the_event_loop(upstream):
    """The SDK's request transform walked every message on the loop: 11.3 s for 29,000 messages. The loop now
    stays responsive: the longest gap a 5 ms ticker sees while the request is built and sent stays small."""
    upstream.default = lambda body: text(MODEL, "ok", groq=True)
    model = build_model(f"groq:{MODEL}", {"groq": KEY}, Catalog.load())
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(1999)]
    gaps: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async for _ in model.stream(ModelRequest(history[:1], Deadline.after(20))):
        pass  # the SDK's import and client are paid once, at the first call: not what is measured here
    stop = asyncio.Event()
    tick = asyncio.create_task(ticker(stop))
    await asyncio.sleep(0.02)  # the ticker is running
    async for _ in model.stream(ModelRequest(history, Deadline.after(20))):
        pass
    stop.set()
    await tick
    assert max(gaps) < 0.2, (
        f"the event loop was blocked for {max(gaps):.2f} s"
    )  # the old path: ~0.4-0.8 s here


def test_health_answers_while_a_heavy_request_runs(upstream, sandbox, use):
    upstream.default = lambda body: Reply(chunks=text(MODEL, "ok", groq=True).chunks, delay=2.0)
    app = create_app(
        Settings(), runtime=use(sandbox, max_messages=20_000)
    )  # an operator who allows long ones
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="off"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(10_001)]
        heavy = threading.Thread(
            target=httpx.post,
            args=(f"http://127.0.0.1:{port}/chat",),
            kwargs={"json": {"messages": history, "stream": False, "tools": []}, "timeout": 30},
        )
        heavy.start()
        time.sleep(0.3)  # the heavy request is being built and sent upstream
        start = time.monotonic()
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        assert health.status_code == 200 and time.monotonic() - start < 1.0
        heavy.join()
    finally:
        server.should_exit = True
        thread.join(timeout=5)


# --- every tool's message is capped, not only execute_javascript's -------------------------------------------
class FloodingTool:
    name = "flood"
    description = "Returns far too much."
    parameters = {"type": "object", "properties": {}}

    async def run(self, arguments, deadline):
        return ToolResult(content=json.dumps({"result": "é" * 100_000}), ok=True)


async def test_any_tools_message_to_the_model_is_at_most_16_kib():
    from tests.support.models import ScriptedModel

    def script(request, n):
        if n == 1:
            return ModelResponse(
                "", tool_calls=[ToolCall("call_flood", "flood", "{}")], finish_reason="tool_calls"
            )
        return ModelResponse("", content="done", finish_reason="stop")

    model = ScriptedModel(script)
    turn = TurnRequest(messages=[{"role": "user", "content": "flood me"}])
    events = [e async for e in run_turn(turn, model, ToolRegistry([FloodingTool()]), Deadline.after(10))]
    tool_message = next(m for m in model.requests[1].messages if m["role"] == "tool")
    assert len(tool_message["content"].encode()) <= 16 * 1024
    assert events[-1].data["message"]["content"] == "done"
