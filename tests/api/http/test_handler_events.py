"""The Lambda handler with real-shaped events (REST v1, HTTP v2, Function URL, base64 bodies) and the real groq
SDK talking to a scripted model on 127.0.0.1; bad input; the deadline; logs and metrics; secrets."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

import app as lambda_app
from chatloop.config import Settings
from chatloop.observability import logger
from chatloop.secrets import KeysUnavailable, load_provider_keys
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.events import (
    FakeContext,
    function_url_event,
    http_event,
    parse_sse,
    rest_event,
)
from tests.support.fake_llm import Reply, error, text, tool_calls
from tests.support.handler import invoke
from tests.support.wire_models import realistic

MODEL = "llama-3.3-70b-versatile"
SECRET_KEY = "gsk_SECRETdoNotLeak0123456789abcdef"
QUESTION = "calculate compound interest: $10,000 at 5% annually for 15 years"


@pytest.fixture
def llm(fake_llm):
    fake_llm.default = realistic
    return fake_llm


@pytest.fixture
def runtime(llm, sandbox, app_runtime):
    settings = Settings(model_chain=f"groq:{MODEL}", version="9.9.9")
    return app_runtime(
        settings,
        registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
        keys={"groq": SECRET_KEY, "openai": None},
    )


def chat_body(question=QUESTION, **extra):
    return {"messages": [{"role": "user", "content": question}], **extra}


# --- the handler with each kind of event ------------------------------------------------------------
@pytest.mark.parametrize(
    "make", [rest_event, http_event, function_url_event], ids=["rest-v1", "http-v2", "function-url"]
)
@pytest.mark.parametrize("base64", [False, True], ids=["plain", "base64"])
def test_chat_json_through_each_event_kind(runtime, llm, make, base64):
    status, body, headers = invoke(
        make("POST", "/chat", chat_body(stream=False), base64=base64, request_id="rid-1")
    )
    assert status == 200, body
    data = json.loads(body)
    fields = "message stop_reason iterations tool_calls tool_counts usage model context request_id"
    assert set(data) == set(fields.split())
    assert data["context"]["action"] == "fits" and data["context"]["window"] == 131072
    assert "20789.28" in data["message"]["content"] and data["stop_reason"] == "stop"
    assert data["iterations"] == 2 and data["tool_counts"] == {"execute_javascript": 1}
    assert (
        data["model"] == f"groq:{MODEL}"
        and data["request_id"] == "rid-1"
        and headers["x-request-id"] == "rid-1"
    )
    assert data["usage"]["total_tokens"] > 0


def test_chat_sse_ends_with_done(runtime):
    status, body, headers = invoke(http_event("POST", "/chat", chat_body()))
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    events = parse_sse(body)
    names = [name for name, _ in events]
    assert names[0] == "status" and names[-1] == "done" and names.count("done") == 1
    assert {
        "delta",
        "llm_response",
        "decision",
        "tool_call_start",
        "tool_call_result",
        "message_complete",
    } <= set(names)
    assert "20789.28" in events[-1][1]["message"]["content"]


def test_openai_endpoint_through_the_handler(runtime):
    status, body, _ = invoke(
        http_event("POST", "/v1/chat/completions", {"model": "chatloop", "messages": chat_body()["messages"]})
    )
    data = json.loads(body)
    assert status == 200 and data["object"] == "chat.completion" and data["model"] == f"groq:{MODEL}"
    assert (
        data["choices"][0]["finish_reason"] == "stop"
        and "20789.28" in data["choices"][0]["message"]["content"]
    )


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
def test_a_model_the_server_cannot_serve_is_a_404_naming_what_it_can(runtime, llm, path):
    body = {"model": "gpt-4o-mini", "messages": chat_body()["messages"], "input": QUESTION}
    if path == "/v1/responses":
        body.pop("messages")
    else:
        body.pop("input")
    status, raw, _ = invoke(http_event("POST", path, body))
    error = json.loads(raw)["error"]
    assert status == 404 and error["code"] == "model_not_found" and error["param"] == "model"
    assert (
        "'gpt-4o-mini'" in error["message"]
        and f"groq:{MODEL}" in error["message"]
        and "chatloop" in error["message"]
    )
    assert llm.requests == []  # no model call
    runtime.settings = Settings(
        model_chain=f"groq:{MODEL}", unknown_model_fallback=True
    )  # the operator's opt-in
    status, raw, _ = invoke(http_event("POST", path, body))
    assert status == 200 and json.loads(raw)["model"] == f"groq:{MODEL}"  # names the model that answered


def test_tool_choice_none_on_v1_offers_no_tool_at_all(runtime, llm):
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    status, body, _ = invoke(
        http_event(
            "POST",
            "/v1/chat/completions",
            {"messages": chat_body()["messages"], "tools": [weather], "tool_choice": "none"},
        )
    )
    assert status == 200 and json.loads(body)["choices"][0]["finish_reason"] == "stop"
    assert all("tools" not in r["body"] for r in llm.requests)


def test_health_shows_version_and_chain_and_no_secret(runtime):
    status, body, _ = invoke(rest_event("GET", "/health"))
    data = json.loads(body)
    assert status == 200 and data["version"] == "9.9.9" and data["model_chain"] == [f"groq:{MODEL}"]
    assert SECRET_KEY not in body


def test_a_named_stage_base_path_is_stripped(runtime, monkeypatch):
    from mangum import Mangum

    handler = Mangum(lambda_app.app, lifespan="off", api_gateway_base_path="/dev")
    event = http_event("GET", "/dev/health")
    assert handler(event, FakeContext())["statusCode"] == 200


def test_committed_event_files_work(runtime):
    expected = {"rest-bad-request.json": 400}
    for path in sorted(Path("events").glob("*.json")):
        status, body, _ = invoke(json.loads(path.read_text()))
        assert status == expected.get(path.name, 200), (path.name, body)


# --- bad input: a clear 4xx, and no model call ------------------------------------------------------
BAD = [
    ("not json", "{messages: [", 400, "not valid JSON"),
    ("not an object", "[1, 2]", 400, "must be a JSON object"),
    ("missing messages", {"stream": False}, 400, "messages: Field required"),
    ("empty messages", {"messages": []}, 400, "non-empty list"),
    ("wrong type", {"messages": "hi"}, 400, "messages"),
    ("unknown role", {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0]: unknown role"),
    ("role as a list", {"messages": [{"role": ["user"], "content": "x"}]}, 400, "messages[0]: unknown role"),
    (
        "role as an object",
        {"messages": [{"role": {"a": 1}, "content": "x"}]},
        400,
        "messages[0]: unknown role",
    ),
    (
        "tool_calls not a list",
        {"messages": [{"role": "assistant", "tool_calls": 5}]},
        400,
        "tool_calls must be a list",
    ),
    ("invalid UTF-8", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "not valid UTF-8"),
    (
        "orphan tool message",
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "nope", "content": "1"},
            ]
        },
        400,
        "messages[1]: orphan",
    ),
    ("unknown tool", chat_body(tools=["rm_rf"]), 400, "unknown tool"),
    ("iterations too low", chat_body(max_iterations=0), 400, "max_iterations"),
    ("iterations too high", chat_body(max_iterations=101), 400, "max_iterations"),
    ("iterations as a string", chat_body(max_iterations="5"), 400, "max_iterations"),
    ("temperature out of range", chat_body(temperature=3), 400, "temperature"),
    ("stream as a string", chat_body(stream="yes"), 400, "stream"),
    ("unknown field", chat_body(max_iteration=3), 400, "max_iteration: unknown field"),
    ("unknown model", chat_body(model="groq:not-a-model"), 400, "unknown model"),
    (
        "tool_choice for a disabled tool",
        chat_body(tools=[], tool_choice={"type": "function", "function": {"name": "execute_javascript"}}),
        400,
        "tool_choice",
    ),
]


@pytest.mark.parametrize(("name", "body", "status", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_clear_4xx_without_a_model_call(runtime, llm, name, body, status, words):
    code, text_body, _ = invoke(rest_event("POST", "/chat", body))
    data = json.loads(text_body)
    assert code == status and words in data["error"]["message"], data
    assert llm.requests == []
    assert "Traceback" not in text_body and "/work/" not in text_body and "site-packages" not in text_body


def test_body_over_the_limit_is_413(runtime, llm):
    runtime.settings = Settings(model_chain=f"groq:{MODEL}", max_body_bytes=1000)
    code, body, _ = invoke(rest_event("POST", "/chat", chat_body("x" * 2000)))
    assert code == 413 and json.loads(body)["error"]["code"] == "body_too_large" and llm.requests == []


def test_unknown_paths_and_methods(runtime):
    assert invoke(rest_event("GET", "/nope"))[0] == 404
    code, body, _ = invoke(rest_event("GET", "/chat"))
    assert code == 405 and json.loads(body)["error"]["code"] == "method_not_allowed"


def test_openai_endpoint_errors_use_openai_shape(runtime, llm):
    code, body, _ = invoke(
        http_event("POST", "/v1/chat/completions", {"messages": [{"role": "x", "content": "y"}]})
    )
    error_body = json.loads(body)["error"]
    assert (
        code == 400
        and error_body["type"] == "invalid_request_error"
        and "unknown role" in error_body["message"]
    )
    clash = {
        "messages": chat_body()["messages"],
        "tools": [{"type": "function", "function": {"name": "execute_javascript", "parameters": {}}}],
    }
    assert invoke(http_event("POST", "/v1/chat/completions", clash))[0] == 400
    assert llm.requests == []


# --- upstream failure, deadline -----------------------------------------------------------------------
def test_all_models_failing_is_a_503_with_the_summary_and_no_secret(runtime, llm):
    leak = error(401, "invalid_api_key", f"Invalid API Key: {SECRET_KEY}")
    llm.script(MODEL, leak, leak, leak, leak)
    stream = io.StringIO()
    old = logger.registered_handler.setStream(stream)
    try:
        code, body, _ = invoke(rest_event("POST", "/chat", chat_body(stream=False)))
        sse_code, sse_body, _ = invoke(rest_event("POST", "/chat", chat_body()))
        v1_code, v1_body, _ = invoke(
            http_event("POST", "/v1/chat/completions", {"messages": chat_body()["messages"]})
        )
        _, v1_stream, _ = invoke(
            http_event("POST", "/v1/chat/completions", {"messages": chat_body()["messages"], "stream": True})
        )
    finally:
        logger.registered_handler.setStream(old)
    data = json.loads(body)
    assert code == 503 and data["stop_reason"] == "all_models_failed" and data["message"]["content"]
    names = [n for n, _ in parse_sse(sse_body)]
    assert sse_code == 200 and names[-2:] == ["message_complete", "done"] and "error" in names
    v1_error = json.loads(v1_body)["error"]
    assert (
        v1_code == 503 and v1_error["code"] == "all_models_failed" and f"groq:{MODEL}" in v1_error["message"]
    )
    chunks = [line[6:] for line in v1_stream.splitlines() if line.startswith("data: ")]
    # The role chunk goes out as the turn starts; then the error chunk (OpenAI clients raise on it), then [DONE].
    assert json.loads(chunks[0])["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert json.loads(chunks[1])["error"]["code"] == "all_models_failed" and chunks[2:] == ["[DONE]"]
    for text_out in (body, sse_body, v1_body, v1_stream, stream.getvalue()):
        assert SECRET_KEY not in text_out


def test_a_slow_model_and_little_remaining_time_stop_at_the_deadline(runtime, llm):
    slow = Reply(
        **{**vars(tool_calls(MODEL, [("c", "execute_javascript", '{"code": "1"}')], groq=True)), "delay": 1.5}
    )
    llm.script(MODEL, slow, Reply(**{**vars(text(MODEL, "late", groq=True)), "delay": 1.5}))
    runtime.settings = Settings(
        model_chain=f"groq:{MODEL}", deadline_reserve_seconds=0.8, lambda_safety_margin_seconds=0.5
    )
    start = time.monotonic()
    code, body, _ = invoke(rest_event("POST", "/chat", chat_body(stream=False)), remaining_ms=2500)
    elapsed = time.monotonic() - start
    data = json.loads(body)
    assert code == 200 and data["stop_reason"] == "deadline" and data["message"]["content"]
    assert elapsed < 2.5  # the response is complete before the Lambda's time runs out


# --- logs, metrics, secrets -----------------------------------------------------------------------
def test_decision_records_carry_the_correlation_id(runtime):
    stream = io.StringIO()
    old = logger.registered_handler.setStream(stream)
    try:
        invoke(rest_event("POST", "/chat", chat_body(stream=False), request_id="corr-42"))
    finally:
        logger.registered_handler.setStream(old)
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    decisions = [r for r in records if r["message"].startswith("Tool execution decision:")]
    assert len(decisions) == 2 and all(r["correlation_id"] == "corr-42" for r in decisions)
    assert all(r["function_name"] == "chatloop-chat" for r in decisions)


def test_metrics_are_emitted_as_emf(runtime, capsys):
    invoke(rest_event("POST", "/chat", chat_body(stream=False)))
    blobs = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    names = {m["Name"] for b in blobs for d in b["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]}
    assert {
        "Requests",
        "Iterations",
        "ToolExecutions",
        "ToolCallsSkipped",
        "ModelFallbacks",
        "Stop_stop",
        "SandboxMilliseconds",
    } <= names
    assert blobs[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "ChatLoopTest"


@mock_aws
def test_keys_come_from_secrets_manager_when_not_in_the_environment():
    from aws_lambda_powertools.utilities import parameters

    parameters.clear_caches()
    arn = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
        Name="chatloop/provider-keys",
        SecretString=json.dumps({"GROQ_API_KEY": "gsk_from_secrets_manager_123"}),
    )["ARN"]
    keys = load_provider_keys(Settings(provider_keys_secret_arn=arn), environ={})
    assert keys == {"groq": "gsk_from_secrets_manager_123", "openai": None, "local": None}
    env_wins = load_provider_keys(
        Settings(provider_keys_secret_arn=arn), environ={"GROQ_API_KEY": "gsk_env_key_456"}
    )
    assert env_wins["groq"] == "gsk_env_key_456"
    parameters.clear_caches()
    with pytest.raises(KeysUnavailable):
        load_provider_keys(Settings(provider_keys_secret_arn=arn + "-missing"), environ={})


@mock_aws
def test_an_unreadable_secret_is_a_503_not_a_silent_demo(llm, sandbox, app_runtime):
    from aws_lambda_powertools.utilities import parameters

    parameters.clear_caches()
    settings = Settings(
        provider_keys_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:missing"
    )
    app_runtime(
        settings,
        registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
        keys_loader=lambda s: load_provider_keys(s, environ={}),
    )
    code, body, _ = invoke(rest_event("POST", "/chat", chat_body(stream=False)))
    assert code == 503 and json.loads(body)["error"]["code"] == "keys_unavailable"


def test_the_page_is_served_under_the_stage_behind_api_gateway(runtime):
    """API Gateway serves the page at /prod/: its <base href> must make chat, static/app.js, ... resolve there."""
    event = rest_event("GET", "/", None)
    status, body, headers = invoke(event)
    assert status == 200 and '<base href="/prod/">' in body
    assert "script-src 'self'" in {k.lower(): v for k, v in headers.items()}["content-security-policy"]
    status, body, _ = invoke(rest_event("GET", "/static/app.js", None))
    assert status == 200 and "DOMPurify.sanitize" in body
    assert invoke(rest_event("GET", "/static/../app.py", None))[0] == 404
    assert invoke(rest_event("GET", "/static/page.py", None))[0] == 404  # only the page's own files
