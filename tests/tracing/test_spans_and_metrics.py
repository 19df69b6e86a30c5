"""OpenTelemetry GenAI spans and metrics (chatloop/tracing), read from the SDK's in-memory exporter and reader: turns
through the real Lambda handler, the real groq/openai SDKs against the scripted server, the real Deno sandbox and a
real MCP server; the guards through the engine with scripted models."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from chatloop.config import MCPServerConfig, Settings
from chatloop.deadline import Deadline
from chatloop.engine import TurnRequest, run_turn
from chatloop.engine.messages import normalize_conversation
from chatloop.providers.base import ModelResponse, TextDelta
from chatloop.redaction import register_secret
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from chatloop.tracing.scope import TurnScope
from chatloop.tracing.setup import SECONDS_BUCKETS, TOKEN_BUCKETS, uninstall
from chatloop.tracing.turn import trace_turn
from tests.support.events import parse_sse, rest_event
from tests.support.fake_llm import error, text, tool_calls
from tests.support.handler import build_runtime, invoke
from tests.support.mcp_servers import MCPTestServer, free_port, tools_server
from tests.support.models import ScriptedModel, call
from tests.support.telemetry import InMemoryTelemetry
from tests.support.tools import FakeSearch
from tests.support.wire_models import realistic

MODEL = "llama-3.3-70b-versatile"
QUESTION = "calculate compound interest: $10,000 at 5% annually for 15 years"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def telemetry() -> Iterator[InMemoryTelemetry]:
    yield InMemoryTelemetry()
    uninstall()


@pytest.fixture
def capturing() -> Iterator[InMemoryTelemetry]:
    yield InMemoryTelemetry(capture_content=True)
    uninstall()


@pytest.fixture
def runtime(fake_llm, sandbox, app_runtime):
    fake_llm.default = realistic
    return app_runtime(
        Settings(model_chain=f"groq:{MODEL},openai:gpt-4.1-mini"),
        registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
        keys={"groq": "gsk_test0123456789", "openai": "sk-test0123456789"},
    )


def chat_event(question: str = QUESTION, stream: bool = False, headers: dict[str, str] | None = None) -> dict:
    event = rest_event(
        "POST", "/chat", {"messages": [{"role": "user", "content": question}], "stream": stream}
    )
    for name, value in (headers or {}).items():
        event["headers"][name] = value
        event["multiValueHeaders"][name] = [value]
    return event


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent else None


# --- the span tree of a calculation turn ----------------------------------------------------------------------
def test_a_calculation_turn_is_one_agent_span_two_chat_spans_and_one_tool_span(telemetry, runtime, fake_llm):
    status, body, _ = invoke(chat_event(headers={"traceparent": TRACEPARENT}))
    assert status == 200 and "20789.28" in json.loads(body)["message"]["content"]
    agent = telemetry.agent()
    chats, tools = telemetry.named("chat "), telemetry.named("execute_tool ")
    assert [s.name for s in chats] == [f"chat {MODEL}", f"chat {MODEL}"] and len(tools) == 1
    assert len(telemetry.spans()) == 4
    # The request's trace is continued; every span is the turn's child.
    assert agent.context.trace_id == int(TRACEPARENT.split("-")[1], 16)
    assert parent_of(agent) == int(TRACEPARENT.split("-")[2], 16)
    assert {parent_of(s) for s in chats + tools} == {agent.context.span_id}
    assert chats[0].start_time < tools[0].start_time < chats[1].start_time  # ask, act, ask again

    assert agent.kind is SpanKind.INTERNAL and agent.name == "invoke_agent chatloop"
    a = agent.attributes or {}
    assert a["gen_ai.operation.name"] == "invoke_agent" and a["gen_ai.provider.name"] == "groq"
    assert a["chatloop.stop_reason"] == "stop" and a["chatloop.iterations"] == 2
    assert a["chatloop.request_id"] == json.loads(body)["request_id"]
    assert "gen_ai.conversation.id" not in a  # not in a conversation

    first = chats[0].attributes or {}
    assert chats[0].kind is SpanKind.CLIENT
    assert first["gen_ai.operation.name"] == "chat" and first["gen_ai.provider.name"] == "groq"
    assert first["gen_ai.request.model"] == MODEL and first["gen_ai.request.stream"] is True
    assert first["gen_ai.response.model"] == MODEL and first["gen_ai.response.id"] == "chatcmpl-test"
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (30, 10)
    assert "gen_ai.response.time_to_first_chunk" not in first  # a tool call only: no text chunk came
    second = chats[1].attributes or {}
    assert second["gen_ai.response.finish_reasons"] == ("stop",)
    assert 0 < second["gen_ai.response.time_to_first_chunk"] < chats[1].end_time - chats[1].start_time

    tool = tools[0].attributes or {}
    assert tools[0].name == "execute_tool execute_javascript" and tools[0].kind is SpanKind.INTERNAL
    assert tool["gen_ai.tool.name"] == "execute_javascript" and tool["gen_ai.tool.call.id"] == "call_1"
    assert tool["gen_ai.tool.type"] == "extension" and tool["chatloop.tool.status"] == "ok"
    assert tool["chatloop.sandbox.exit"] == "result" and tool["chatloop.sandbox.cpu_ms"] >= 0
    assert tools[0].status.status_code is StatusCode.UNSET

    # The decision (its log line's fields) and nothing tripped.
    decisions = [e for e in agent.events if e.name == "chatloop.decision"]
    assert [d.attributes["reason"] for d in decisions] == ["execute", "no_tool_calls"]
    assert decisions[0].attributes["shouldExecuteTools"] is True and decisions[0].attributes["iteration"] == 1
    assert not [e for e in agent.events if e.name == "chatloop.guard"]

    # Each model call carried its own span's trace context.
    sent = [r["headers"].get("traceparent") for r in fake_llm.requests]
    assert sent == [f"00-{c.context.trace_id:032x}-{c.context.span_id:016x}-01" for c in chats]


def test_a_call_that_waits_for_approval_is_an_event_of_the_turns_span_without_its_arguments(
    telemetry, runtime, fake_llm
):
    runtime.settings = replace(runtime.settings, approval_required_tools="execute_javascript")
    event = (
        chat_event()
    )  # a caller with an identity: one with none is never offered a tool that waits (issue 41)
    event["requestContext"]["identity"]["apiKeyId"] = "k1x2"
    status, body, _ = invoke(event)
    assert status == 200 and json.loads(body)["stop_reason"] == "approval_required"
    agent = telemetry.agent()
    (asked,) = [e for e in agent.events if e.name == "chatloop.approval_request"]
    attributes = dict(asked.attributes or {})
    assert attributes["name"] == "execute_javascript" and str(attributes["id"]).startswith("mcpr_")
    assert "arguments" not in attributes and not telemetry.named("execute_tool ")  # nothing ran
    decisions = [e.attributes["reason"] for e in agent.events if e.name == "chatloop.decision"]
    assert decisions == ["approval_required"]


def test_the_xray_header_is_continued_when_there_is_no_traceparent(telemetry, runtime):
    xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    status, _, _ = invoke(chat_event("hello", headers={"X-Amzn-Trace-Id": xray}))
    agent = telemetry.agent()
    assert status == 200 and f"{agent.context.trace_id:032x}" == "5759e988bd862e3fe1be46a994272793"
    assert parent_of(agent) == 0x53995C3F42CD8AD8


def test_lambdas_own_unsampled_xray_header_is_continued_and_still_recorded(telemetry, runtime):
    """Lambda writes Sampled=0 whenever its active tracing is off: honoured, nothing would ever be exported."""
    xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0"
    invoke(chat_event("hello", headers={"X-Amzn-Trace-Id": xray}))
    agent = telemetry.agent()
    assert (
        f"{agent.context.trace_id:032x}" == "5759e988bd862e3fe1be46a994272793"
        and agent.context.trace_flags.sampled
    )
    assert len(telemetry.named("chat ")) == 1


def test_a_turn_in_a_stored_conversation_names_it(telemetry, runtime, tmp_path):
    runtime.settings = replace(runtime.settings, conversation_store_path=str(tmp_path / "c.sqlite3"))

    def keyed(path: str, body: dict) -> dict:
        event = rest_event("POST", path, body)
        event["requestContext"]["identity"]["apiKeyId"] = "key-a"  # a stored conversation has an owner
        return event

    status, body, _ = invoke(keyed("/v1/conversations", {}))
    assert status == 200, body
    conversation = json.loads(body)["id"]
    status, body, _ = invoke(keyed("/v1/responses", {"conversation": conversation, "input": "hello"}))
    assert status == 200, body
    assert telemetry.agent().attributes["gen_ai.conversation.id"] == conversation
    assert telemetry.named("chat ")[0].attributes["gen_ai.conversation.id"] == conversation


def test_a_fault_in_tracing_never_fails_the_turn(telemetry, runtime, monkeypatch):
    from chatloop.tracing.turn import TurnTrace

    def broken(self, event):
        raise RuntimeError("a bug in tracing")

    monkeypatch.setattr(TurnTrace, "_tool_started", broken)
    status, body, _ = invoke(chat_event())
    assert status == 200 and "20789.28" in json.loads(body)["message"]["content"]
    assert telemetry.agent().attributes["chatloop.stop_reason"] == "stop"


def test_the_metrics_have_the_conventions_names_units_attributes_and_buckets(telemetry, runtime):
    invoke(chat_event(stream=True))
    metrics = telemetry.metrics()
    assert set(metrics) == {
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "gen_ai.client.operation.time_to_first_chunk",
    }
    usage = metrics["gen_ai.client.token.usage"]
    assert usage.unit == "{token}"
    points = {p.attributes["gen_ai.token.type"]: p for p in usage.data.data_points}
    assert set(points) == {"input", "output"}
    assert points["input"].sum == 30 + 20 and points["output"].sum == 10 + 5  # the two calls' usage
    assert points["input"].count == 2 and list(points["input"].explicit_bounds) == TOKEN_BUCKETS
    assert dict(points["input"].attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "groq",
        "gen_ai.request.model": MODEL,
        "gen_ai.response.model": MODEL,
        "gen_ai.token.type": "input",
    }
    duration = metrics["gen_ai.client.operation.duration"]
    (point,) = duration.data.data_points
    assert duration.unit == "s" and point.count == 2 and list(point.explicit_bounds) == SECONDS_BUCKETS
    first_chunk = metrics["gen_ai.client.operation.time_to_first_chunk"]
    (point,) = first_chunk.data.data_points
    assert first_chunk.unit == "s" and point.count == 1  # only the answer streamed text


# --- a fallback: a failed call, then the next model's -----------------------------------------------------------
def test_a_fallback_is_a_failed_chat_span_followed_by_the_next_models(telemetry, runtime, fake_llm):
    fake_llm.script(MODEL, error(429, "rate_limit_exceeded", "Rate limit reached", {"retry-after": "7"}))
    status, body, _ = invoke(chat_event("hello"))
    assert status == 200 and json.loads(body)["model"] == "openai:gpt-4.1-mini"
    failed, answered = telemetry.named("chat ")
    assert failed.name == f"chat {MODEL}" and answered.name == "chat gpt-4.1-mini"
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes["error.type"] == "rate_limited"
    assert answered.attributes["gen_ai.provider.name"] == "openai" and "error.type" not in answered.attributes
    assert failed.end_time <= answered.start_time
    (fallback,) = [e for e in telemetry.agent().events if e.name == "chatloop.fallback"]
    assert fallback.attributes["from"] == f"groq:{MODEL}" and fallback.attributes["reason"] == "rate_limited"
    durations = telemetry.metrics()["gen_ai.client.operation.duration"].data.data_points
    assert {p.attributes.get("error.type") for p in durations} == {"rate_limited", None}


def test_a_turn_every_model_failed_is_an_error_span(telemetry, runtime, fake_llm):
    fake_llm.script(MODEL, error(503, None, "overloaded"))
    fake_llm.script("gpt-4.1-mini", error(503, None, "overloaded"))
    status, _, _ = invoke(chat_event("hello"))
    agent = telemetry.agent()
    assert status == 503 and agent.status.status_code is StatusCode.ERROR
    assert agent.attributes["error.type"] == "all_models_failed"
    assert [s.attributes["error.type"] for s in telemetry.named("chat ")] == ["transient", "transient"]


# --- guards -------------------------------------------------------------------------------------------------
async def traced(model: ScriptedModel, registry: ToolRegistry, **request: Any) -> list[Any]:
    settings = Settings()
    turn = TurnRequest(
        messages=normalize_conversation([{"role": "user", "content": "look it up"}]), **request
    )
    runtime = build_runtime(settings, model=model, registry=registry)
    scope = TurnScope("rid-guard", conversation_id="conv_123")
    run = lambda chain: run_turn(turn, chain, registry, Deadline.after(30), runtime.limits)  # noqa: E731
    return [e async for e in trace_turn(settings, scope, runtime.models.for_turn(None, strict=False), run)]


async def test_a_guard_ended_turn_has_its_guard_event(telemetry):
    def stubborn(request, n):
        if request.tools:
            return ModelResponse("", tool_calls=[call("search_web", {"query": f"q{n}"})])
        return ModelResponse("", content="")

    events = await traced(ScriptedModel(stubborn), ToolRegistry([FakeSearch()]), max_iterations=3)
    assert events[-1].summary.stop_reason.value == "iteration_cap"
    agent = telemetry.agent()
    guards = [e for e in agent.events if e.name == "chatloop.guard"]
    assert [(g.attributes["guard"], g.attributes["reason"]) for g in guards] == [
        ("iteration_cap", "iteration_cap")
    ]
    assert guards[0].attributes["iteration"] == 3
    assert agent.attributes["chatloop.stop_reason"] == "iteration_cap"
    assert agent.attributes["gen_ai.conversation.id"] == "conv_123"
    assert len(telemetry.named("chat ")) == 3 and len(telemetry.named("execute_tool search_web")) == 2
    assert all(s.attributes["gen_ai.conversation.id"] == "conv_123" for s in telemetry.named("chat "))


async def test_a_turn_the_client_leaves_mid_call_ends_its_spans(telemetry):
    import asyncio

    class Slow:
        name = "groq:slow-model"

        async def stream(self, request):
            yield TextDelta("Let me think")
            await asyncio.sleep(30)
            yield ModelResponse("groq:slow-model", content="never")

    settings = Settings()
    turn = TurnRequest(messages=normalize_conversation([{"role": "user", "content": "hi"}]))
    runtime = build_runtime(settings, model=Slow(), registry=ToolRegistry())
    run = lambda chain: run_turn(turn, chain, ToolRegistry(), Deadline.after(60), runtime.limits)  # noqa: E731
    events = trace_turn(
        settings, TurnScope("rid-gone", flush=True), runtime.models.for_turn(None, strict=False), run
    )
    async for event in events:
        if getattr(event, "content", None) == "Let me think":
            break  # the client goes away while the model is still answering
    await events.aclose()
    agent = telemetry.agent()
    assert agent.end_time is not None and agent.attributes["chatloop.stop_reason"] == "client_disconnected"
    (chat,) = telemetry.named("chat ")
    assert chat.attributes["error.type"] == "cancelled" and chat.status.status_code is StatusCode.ERROR


async def test_a_budget_guard_and_calls_not_run_are_events(telemetry):
    def greedy(request, n):
        if request.tools:
            return ModelResponse(
                "", tool_calls=[call("search_web", {"query": f"q{n}-{i}"}) for i in range(3)]
            )
        return ModelResponse("", content="done")

    registry = ToolRegistry([FakeSearch()])
    await traced(ScriptedModel(greedy), registry, max_tool_calls=2)
    agent = telemetry.agent()
    assert len(telemetry.named("execute_tool")) == 2  # only the runs are spans
    not_run = [e for e in agent.events if e.name == "chatloop.tool_call_not_run"]
    assert not_run and all("content" not in e.attributes for e in not_run)
    assert "tool_budget" in {e.attributes["guard"] for e in agent.events if e.name == "chatloop.guard"}


async def test_a_model_written_tool_name_is_capped_and_redacted_in_events(telemetry):
    register_secret(SECRET)
    hostile = f"{SECRET}_" + "x" * 5000

    def made_up(request, n):
        if request.tools and n == 1:
            return ModelResponse("", tool_calls=[call(hostile, {"q": 1})])
        return ModelResponse("", content="done")

    await traced(ScriptedModel(made_up), ToolRegistry([FakeSearch()]))
    (not_run,) = [e for e in telemetry.agent().events if e.name == "chatloop.tool_call_not_run"]
    name = not_run.attributes["name"]
    assert SECRET not in name and name.startswith("[REDACTED]") and len(name) <= 512


# --- MCP ------------------------------------------------------------------------------------------------------
def serve_mcp(app_runtime: Any, sandbox: Any, *servers: MCPServerConfig) -> None:
    """The handler's app with the sandbox and ``servers``' tools, a groq model on the scripted server."""
    app_runtime(
        Settings(model_chain=f"groq:{MODEL}", mcp_servers=servers),
        registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
        keys={"groq": "gsk_test0123456789", "openai": None},
    )


def test_an_mcp_call_is_a_tool_span_with_its_server(telemetry, fake_llm, sandbox, app_runtime):
    with MCPTestServer(tools_server()) as docs:
        serve_mcp(app_runtime, sandbox, MCPServerConfig("docs", docs.url))

        def reply(body):
            if any(m["role"] == "tool" for m in body["messages"]):
                return text(body["model"], "From the docs: 3 pages.", groq=True)
            failing = "fail" in body["messages"][-1]["content"]
            args = json.dumps({"reason": "database offline"}) if failing else '{"query": "limits"}'
            name = "docs__explode" if failing else "docs__search"
            return tool_calls(body["model"], [("call_m", name, args)], groq=True)

        fake_llm.default = reply
        status, _, _ = invoke(chat_event("what do the docs say?"))
        assert status == 200
        (span,) = telemetry.named("execute_tool")
        a = span.attributes or {}
        assert (
            span.name == "execute_tool docs__search" and parent_of(span) == telemetry.agent().context.span_id
        )
        assert a["mcp.method.name"] == "tools/call" and a["chatloop.mcp.server"] == "docs"
        assert a["chatloop.mcp.server_tool"] == "search" and a["chatloop.tool.status"] == "ok"

        telemetry.exporter.clear()
        down = MCPServerConfig("down", f"http://127.0.0.1:{free_port()}/mcp")
        serve_mcp(app_runtime, sandbox, down, MCPServerConfig("docs", docs.url))
        invoke(chat_event("make it fail"))
        (span,) = telemetry.named("execute_tool")
        assert span.status.status_code is StatusCode.ERROR and span.attributes["error.type"] == "tool_error"
        (unavailable,) = [e for e in telemetry.agent().events if e.name == "chatloop.tools_unavailable"]
        assert "down" in unavailable.attributes  # the server left out of the turn, and why


def recording(app: Any, bodies: list[dict]) -> Any:
    """``app`` (ASGI), each JSON-RPC request it is sent kept in ``bodies``."""

    async def wrapper(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        with contextlib.suppress(ValueError):
            bodies.append(json.loads(body))
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await app(scope, replay, send)

    return wrapper


def test_an_mcp_call_carries_its_spans_trace_context_in_params_meta(
    telemetry, fake_llm, sandbox, app_runtime
):
    bodies: list[dict] = []
    inner = tools_server().streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True
    )
    with MCPTestServer(recording(inner, bodies)) as docs:
        serve_mcp(app_runtime, sandbox, MCPServerConfig("docs", docs.url))

        def reply(body):
            if any(m["role"] == "tool" for m in body["messages"]):
                return text(body["model"], "Both found.", groq=True)
            calls = [
                ("c1", "docs__search", '{"query": "limits"}'),
                ("c2", "docs__search", '{"query": "quotas"}'),
            ]
            return tool_calls(body["model"], calls, groq=True)

        fake_llm.default = reply
        status, _, _ = invoke(chat_event("search twice"))
        assert status == 200
    runs = {s.attributes["gen_ai.tool.call.id"]: s for s in telemetry.named("execute_tool")}
    sent = {
        b["params"]["arguments"]["query"]: b["params"].get("_meta", {}).get("traceparent")
        for b in bodies
        if b.get("method") == "tools/call"
    }
    context = {q: runs[c].context for c, q in (("c1", "limits"), ("c2", "quotas"))}
    assert sent == {
        q: f"00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}" for q, c in context.items()
    }  # each run its own


# --- content: off by default, redacted when on --------------------------------------------------------------
SECRET = "gsk_PLANTEDsecret0123456789abcdefXYZ"
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


def everything(spans: list[ReadableSpan]) -> str:
    """Every name, attribute and event of ``spans`` as one text."""
    parts: list[str] = []
    for span in spans:
        parts.append(span.name)
        parts += [f"{k}={v!s}" for k, v in (span.attributes or {}).items()]
        for event in span.events:
            parts.append(event.name)
            parts += [f"{k}={v!s}" for k, v in (event.attributes or {}).items()]
    return "\n".join(parts)


def leaky(body: dict) -> Any:
    """A model that repeats the secret it was given, in its tool call's code and in its answer."""
    messages = body["messages"]
    if any(m["role"] == "tool" for m in messages):
        return text(body["model"], f"Done. The key was {SECRET}, the result 3.", groq=True)
    code = json.dumps({"code": f"'{SECRET}'.length + 3; '{SECRET}'"})
    return tool_calls(body["model"], [("call_s", "execute_javascript", code)], groq=True)


def test_with_content_on_a_planted_secret_appears_in_no_span(capturing, runtime, fake_llm):
    register_secret(SECRET)
    fake_llm.default = leaky
    status, body, _ = invoke(chat_event(f"my key is {SECRET}, use it", stream=True))
    assert status == 200 and parse_sse(body)[-1][0] == "done"
    spans = capturing.spans()
    text_of_spans = everything(spans)
    assert SECRET not in text_of_spans and "PLANTEDsecret" not in text_of_spans
    keys = {k for s in spans for k in (s.attributes or {})}
    assert CONTENT_KEYS - {"gen_ai.system_instructions"} <= keys  # the content is there, redacted
    assert "[REDACTED]" in text_of_spans and "my key is" in text_of_spans


def test_with_content_off_no_content_attribute_exists(telemetry, runtime, fake_llm):
    fake_llm.default = leaky
    invoke(chat_event(f"my key is {SECRET}"))
    spans = telemetry.spans()
    assert len(spans) == 4
    assert not CONTENT_KEYS & {k for s in spans for k in (s.attributes or {})}
    assert "my key is" not in everything(spans)


async def test_the_runtimes_chain_is_untouched_and_a_reused_chain_is_traced_once_per_call(telemetry):
    """Tracing wraps the members of the turn's chain (``Runtime.model_for`` makes one per turn), never the chain the
    runtime keeps; a chain traced twice has its members wrapped once, for the turn at hand."""
    model = ScriptedModel(lambda r, n: ModelResponse("", content="hi"))
    runtime = build_runtime(Settings(), model=model, registry=ToolRegistry())
    turn_chain = runtime.models.for_turn(None, strict=False)
    registry = ToolRegistry()
    turn = TurnRequest(messages=normalize_conversation([{"role": "user", "content": "hi"}]))
    run = lambda chain: run_turn(turn, chain, registry, Deadline.after(10), runtime.limits)  # noqa: E731
    for rid in ("r1", "r2"):
        async for _ in trace_turn(Settings(), TurnScope(rid), turn_chain, run):
            pass
    assert runtime.models.chain().models == [model] and model.calls == 2
    agents = telemetry.named("invoke_agent")
    chats = telemetry.named("chat ")
    assert len(agents) == 2 and [parent_of(c) for c in chats] == [a.context.span_id for a in agents]


async def test_a_sandbox_run_reports_its_cpu_time_and_how_it_exited(sandbox):
    tool = ExecuteJavaScriptTool(sandbox)
    code = "let x = 0; for (let i = 0; i < 5e7; i++) x = (x + i) % 1000003; x"
    busy = await tool.run({"code": code, "timeout_seconds": 10}, Deadline.after(20))
    assert busy.ok and busy.details["chatloop.sandbox.exit"] == "result"
    # Hundreds of milliseconds of arithmetic, counted at the clock tick's resolution (10 ms).
    assert busy.details["chatloop.sandbox.cpu_ms"] >= 50
    stuck = await tool.run({"code": "while (true) {}", "timeout_seconds": 1}, Deadline.after(20))
    assert not stuck.ok and stuck.details["chatloop.sandbox.exit"] in {"TimeoutError", "CPULimitError"}


@settings(max_examples=200, deadline=None)
@given(traceparent=st.text(max_size=80), xray=st.text(max_size=120))
def test_any_trace_header_a_client_sends_is_continued_or_ignored_never_a_failure(traceparent, xray):
    from chatloop.tracing.turn import incoming_context

    for headers in (
        {"traceparent": traceparent},
        {"x-amzn-trace-id": xray},
        {"x-amzn-trace-id": f"Parent={xray}"},
    ):
        context = incoming_context(TurnScope("r", headers=headers))
        assert context is None or isinstance(context, dict)
