"""Whole turns with upstream models that write their tool calls as text, through the real ``groq`` and ``openai``
SDKs and the real Lambda handler: /chat as JSON and as SSE, /v1/chat/completions streamed.

The scripted models misbehave the way the ones in issue 17 did (Qwen2.5-Coder behind llama-server, Hermes
fine-tunes, Llama 3.1): while tools are offered they write the call into ``content``, streamed in small pieces;
after a tool result they answer from it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from chatloop.config import Settings
from chatloop.engine.messages import normalize_conversation
from chatloop.observability import logger
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.events import parse_sse
from tests.support.fake_llm import FakeLLM, Reply, text, tool_calls
from tests.support.handler import post

JS = "execute_javascript"
QUESTION = "calculate compound interest: $10,000 at 5% annually for 15 years"
CODE = "Math.round(10000 * Math.pow(1.05, 15) * 100) / 100"
ARGS = {"code": CODE}

WRITTEN_AS_TEXT = {
    "hermes": f"Let me calculate that.\n<tool_call>\n{json.dumps({'name': JS, 'arguments': ARGS})}\n</tool_call>",
    "python_tag": f"<|python_tag|>{json.dumps({'name': JS, 'parameters': ARGS})}<|eom_id|>",
    "function_tag": f"<function={JS}>{json.dumps(ARGS)}</function>",
    "fenced_json": f"```json\n{json.dumps({'name': JS, 'arguments': ARGS}, indent=2)}\n```",
    "json": json.dumps({"name": JS, "arguments": ARGS}),
    "flat_json": json.dumps({"name": JS, "code": CODE, "timeout_seconds": 10}),
}
PSEUDO_MARKS = ("<tool_call>", "python_tag", "<function", "```", '"name"', '"arguments"', "eom_id")
PROVIDERS = {
    "groq": ("groq:llama-3.3-70b-versatile", "llama-3.3-70b-versatile", True),
    "openai": ("openai:gpt-4.1-mini", "gpt-4.1-mini", False),
    # A self-hosted OpenAI-compatible server (llama-server, Ollama, vLLM) with no key: the local provider.
    "local": ("local:qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct", False),
}


def model_that_writes(pseudo_call: str, groq: bool, answer: Callable[[str], str] | None = None):
    """Writes ``pseudo_call`` as content while tools are offered and no result is back; then answers."""

    def reply(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
        if results:
            found = json.loads(results[-1])
            return text(body["model"], (answer or _default_answer)(json.dumps(found)), groq=groq)
        if body.get("tools"):
            return text(body["model"], pseudo_call, pieces=max(2, len(pseudo_call) // 7), groq=groq)
        return text(body["model"], "I can answer without tools: roughly $20,789.", groq=groq)

    return reply


def _default_answer(result: str) -> str:
    return f"The balance after 15 years is ${json.loads(result)['result']:,}."


@pytest.fixture
def upstream(fake_llm):
    return fake_llm


@pytest.fixture
def use(app_runtime):
    """``use(entry, sandbox)``: the handler's runtime with the chain ``entry``, keys for groq and openai."""

    def install(entry: str, sandbox) -> None:
        app_runtime(
            Settings(model_chain=entry),
            registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
            keys={"groq": "gsk_test_key_0000000000", "openai": "sk-test-key-000000000000", "local": None},
        )

    return install


def every_upstream_conversation_is_valid(upstream: FakeLLM) -> None:
    for request in upstream.requests:
        normalize_conversation(
            request["body"]["messages"]
        )  # raises on an orphan, a half-exchange, a bad call
        for message in request["body"]["messages"]:
            if (
                message["role"] == "assistant"
            ):  # a pseudo call goes back upstream as a real call, never as text
                assert not any(
                    mark in (message.get("content") or "") for mark in ("<tool_call>", "python_tag")
                )


def assert_clean(text_shown: str) -> None:
    assert not any(mark in text_shown for mark in PSEUDO_MARKS), text_shown


@pytest.mark.parametrize("provider", list(PROVIDERS))
@pytest.mark.parametrize("fmt", list(WRITTEN_AS_TEXT))
def test_a_call_written_as_text_runs_once_and_never_reaches_the_user(upstream, sandbox, fmt, provider, use):
    entry, _, groq = PROVIDERS[provider]
    upstream.default = model_that_writes(WRITTEN_AS_TEXT[fmt], groq)
    use(entry, sandbox)

    code, body = post("/chat", {"messages": [{"role": "user", "content": QUESTION}], "stream": False})
    data = json.loads(body)
    assert code == 200 and data["stop_reason"] == "stop", data
    assert data["tool_counts"] == {JS: 1} and "20,789.28" in data["message"]["content"]
    assert_clean(data["message"]["content"])
    assert [c["status"] for c in data["tool_calls"]] == ["ok"]
    every_upstream_conversation_is_valid(upstream)
    second = upstream.requests[1]["body"]["messages"]
    calling = next(m for m in second if m.get("tool_calls"))
    assert calling["tool_calls"][0]["function"]["name"] == JS  # sent back upstream as a real call
    assert json.loads(calling["tool_calls"][0]["function"]["arguments"])["code"] == CODE


@pytest.mark.parametrize("fmt", list(WRITTEN_AS_TEXT))
def test_sse_deltas_never_show_the_pseudo_call(upstream, sandbox, fmt, use):
    upstream.default = model_that_writes(WRITTEN_AS_TEXT[fmt], groq=True)
    use(PROVIDERS["groq"][0], sandbox)

    code, body = post("/chat", {"messages": [{"role": "user", "content": QUESTION}], "stream": True})
    events = parse_sse(body)
    shown = "".join(data["content"] for name, data in events if name == "delta")
    assert code == 200 and events[-1][0] == "done" and events[-1][1]["tool_counts"] == {JS: 1}
    assert_clean(shown)
    assert "20,789.28" in shown
    if fmt == "hermes":
        assert shown.startswith("Let me calculate that.")  # the words before the call are kept
    recovered = [d for n, d in events if n == "status" and d.get("status") == "text_tool_calls_recovered"]
    assert recovered == [{"status": "text_tool_calls_recovered", "format": fmt, "count": 1, "iteration": 1}]
    for name, data in events:
        if name in ("llm_response", "message_complete", "done"):
            content = data.get("content", data.get("message", {}).get("content")) or ""
            assert_clean(content)


@pytest.mark.parametrize("fmt", ["hermes", "json", "fenced_json"])
def test_v1_stream_sends_only_the_answer(upstream, sandbox, fmt, use):
    upstream.default = model_that_writes(WRITTEN_AS_TEXT[fmt], groq=False)
    use(PROVIDERS["openai"][0], sandbox)

    body = {
        "model": "openai:gpt-4.1-mini",
        "messages": [{"role": "user", "content": QUESTION}],
        "stream": True,
    }
    code, text_body = post("/v1/chat/completions", body)
    chunks = [json.loads(line[6:]) for line in text_body.splitlines() if line.startswith("data: {")]
    shown = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert code == 200 and text_body.rstrip().endswith("data: [DONE]")
    # Text the model wrote before its call (hermes: "Let me calculate that.") is part of the answer, set off by a
    # seam; the call itself never shows.
    narration = WRITTEN_AS_TEXT[fmt].partition("<")[0].strip() if fmt == "hermes" else ""
    expected = f"{narration}\n\n" if narration else ""
    assert shown == expected + "The balance after 15 years is $20,789.28."
    assert all("tool_calls" not in c["choices"][0]["delta"] for c in chunks if c["choices"])


def test_a_text_call_to_an_unknown_tool_then_a_native_call_to_the_real_one(upstream, sandbox, use):
    model = "llama-3.3-70b-versatile"
    unknown = '```json\n{"name": "calculator", "arguments": {"expression": "10000 * 1.05 ** 15"}}\n```'
    upstream.script(
        model,
        text(model, unknown, groq=True),
        tool_calls(model, [("call_js", JS, json.dumps(ARGS))], groq=True),
        text(model, "It grows to $20,789.28.", groq=True),
    )
    use(PROVIDERS["groq"][0], sandbox)

    code, body = post("/chat", {"messages": [{"role": "user", "content": QUESTION}], "stream": False})
    data = json.loads(body)
    assert code == 200 and data["message"]["content"] == "It grows to $20,789.28."
    assert [(c["name"], c["status"]) for c in data["tool_calls"]] == [("calculator", "error"), (JS, "ok")]
    told = json.loads(upstream.requests[1]["body"]["messages"][-1]["content"])["error"]
    assert "'calculator' is not available" in told and JS in told  # the model is told which tools exist
    every_upstream_conversation_is_valid(upstream)


def test_a_json_answer_with_a_name_key_passes_untouched(upstream, sandbox, use):
    model = "llama-3.3-70b-versatile"
    person = json.dumps({"name": "Alice", "age": 30, "email": "alice@example.com"}, indent=2)
    upstream.script(model, text(model, person, pieces=6, groq=True))
    use(PROVIDERS["groq"][0], sandbox)

    ask = {"messages": [{"role": "user", "content": "Give me a JSON example of a person"}], "stream": True}
    code, body = post("/chat", ask)
    events = parse_sse(body)
    done = events[-1][1]
    assert code == 200 and done["message"]["content"] == person and done["tool_counts"] == {}
    assert "".join(d["content"] for n, d in events if n == "delta") == person
    assert len(upstream.requests) == 1


@pytest.mark.parametrize(
    "broken",
    [
        f'<tool_call>{{"name": "{JS}", "arguments": {{"code": "Math.pow(1.05',
        f"<function={JS}{{code: Math.pow(1.05, 15)}}>",
        '<|python_tag|>brave_search.call(query="compound interest")',
    ],
    ids=["truncated hermes", "function tag, not JSON", "python_tag builtin"],
)
def test_malformed_text_calls_end_in_a_clean_answer(upstream, sandbox, broken, use):
    upstream.default = model_that_writes(broken, groq=True)
    use(PROVIDERS["groq"][0], sandbox)

    code, body = post("/chat", {"messages": [{"role": "user", "content": QUESTION}], "stream": True})
    events = parse_sse(body)
    done = events[-1][1]
    assert code == 200 and events[-1][0] == "done"
    assert done["message"]["content"] == "I can answer without tools: roughly $20,789."
    assert_clean(
        json.dumps([d for n, d in events if n in ("delta", "llm_response", "message_complete", "done")])
    )
    assert done["tool_counts"] == {}
    reminders = [d for n, d in events if n == "status" and d.get("reason") == "legacy_syntax_reminder"]
    assert len(reminders) == 2  # then tools are withdrawn and the model answers
    every_upstream_conversation_is_valid(upstream)


def test_a_model_that_only_ever_writes_broken_calls_gets_the_fallback_text(upstream, sandbox, use):
    model = "llama-3.3-70b-versatile"
    upstream.default = lambda body: text(model, '<tool_call>{"name": "execute_javascript", "argu', groq=True)
    use(PROVIDERS["groq"][0], sandbox)

    code, body = post("/chat", {"messages": [{"role": "user", "content": QUESTION}], "stream": False})
    data = json.loads(body)
    assert code == 200 and data["message"]["content"] and "<tool_call>" not in data["message"]["content"]
    assert data["stop_reason"] in ("error", "iteration_cap")


def test_each_recovery_is_a_decision_line_and_a_metric(upstream, sandbox, capsys, use):
    upstream.default = model_that_writes(WRITTEN_AS_TEXT["hermes"], groq=True)
    use(PROVIDERS["groq"][0], sandbox)
    stream = io.StringIO()
    old = logger.registered_handler.setStream(stream)
    try:
        post("/chat", {"messages": [{"role": "user", "content": QUESTION}], "stream": False})
    finally:
        logger.registered_handler.setStream(old)
    lines = [json.loads(line)["message"] for line in stream.getvalue().splitlines()]
    decisions = [line for line in lines if line.startswith("Tool execution decision:")]
    assert decisions[0].endswith("reason=execute textToolCalls=1 format=hermes")
    assert "textToolCalls" not in decisions[1]  # a line without recovery keeps the seeds' exact shape
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    metrics = {m["Name"] for b in blobs for d in b["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]}
    assert "TextToolCalls_hermes" in metrics


def test_the_local_provider_needs_a_base_url_not_a_key(upstream, sandbox, monkeypatch, use):
    upstream.default = model_that_writes(WRITTEN_AS_TEXT["flat_json"], groq=False)
    use(PROVIDERS["local"][0], sandbox)
    code, body = post("/chat", {"messages": [{"role": "user", "content": QUESTION}], "stream": False})
    assert code == 200 and json.loads(body)["model"] == "local:qwen2.5-coder-0.5b-instruct"
    assert upstream.requests[0]["path"] == "/v1/chat/completions"

    monkeypatch.delenv("LOCAL_BASE_URL")
    use(PROVIDERS["local"][0], sandbox)
    code, body = post("/chat", {"messages": [{"role": "user", "content": "5!"}], "stream": False})
    # nothing left to call: refused naming the setting, never the offline demo in its place (#41)
    assert code == 503 and "no LOCAL_BASE_URL configured" in json.loads(body)["error"]["message"]
