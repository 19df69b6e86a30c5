"""Tools from MCP servers in the loop: real MCP servers (the ``mcp`` SDK's MCPServer, FastMCP's successor) on
127.0.0.1 over streamable HTTP, the real handler with real-shaped events and the real groq SDK against a scripted
upstream, and the app under uvicorn with the real openai SDK."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from chatloop.api import create_app
from chatloop.api.runtime import Runtime
from chatloop.config import ConfigError, MCPServerConfig, Settings, parse_mcp_servers
from chatloop.deadline import Deadline
from chatloop.observability import logger
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from chatloop.tools.mcp import MCPServer, describe_result, offered_name
from tests.support.events import parse_sse
from tests.support.fake_llm import Reply, text, tool_calls
from tests.support.handler import build_runtime
from tests.support.handler import post as invoke
from tests.support.mcp_servers import MCPTestServer, free_port, tools_server
from tests.support.repo import ROOT
from tests.support.server import Server

MODEL = "llama-3.3-70b-versatile"
TOKEN = "mcp-token-DoNotLeak-7f3a9c"
QUESTION = "What do the docs say about limits?"


# --- a model on the wire that uses one MCP tool ---------------------------------------------------
def caller(tool: str, arguments: Callable[[int], dict[str, Any] | None]) -> Callable[[dict[str, Any]], Reply]:
    """Calls ``tool`` with ``arguments(n)`` (n: results seen so far this turn) while the tool is offered and
    ``arguments`` gives some; then answers with the last tool message it got."""

    def reply(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
        offered = [t["function"]["name"] for t in body.get("tools") or []]
        args = arguments(len(results))
        if tool in offered and args is not None:
            call = (f"call_{len(results) + 1}", tool, json.dumps(args))
            return tool_calls(body["model"], [call], groq=True)
        return text(body["model"], f"From the docs: {results[-1] if results else 'nothing'}", groq=True)

    return reply


def once(args: dict[str, Any]) -> Callable[[int], dict[str, Any] | None]:
    return lambda n: args if n == 0 else None


@pytest.fixture
def llm(fake_llm):
    return fake_llm


def make_runtime(sandbox, servers: tuple[MCPServerConfig, ...], **settings: Any) -> Runtime:
    return build_runtime(
        Settings(model_chain=f"groq:{MODEL}", mcp_servers=servers, **settings),
        registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
        keys={"groq": "gsk_test0123456789", "openai": None},
    )


@pytest.fixture
def handler_runtime(app_runtime):
    """Installs a runtime in the Lambda handler's app for one test."""
    return app_runtime.install


@contextlib.contextmanager
def captured_logs() -> Iterator[list[str]]:
    stream = io.StringIO()
    lines: list[str] = []
    handler: Any = logger.registered_handler
    old = handler.setStream(stream)
    try:
        yield lines
    finally:
        handler.setStream(old)
        lines += stream.getvalue().splitlines()


def chat(stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": QUESTION}], "stream": stream, **extra}


# --- naming and configuration ---------------------------------------------------------------------
def test_offered_names_contain_the_tool_name_are_stable_unique_and_never_shadow_the_builtin():
    assert offered_name("docs", "search") == "docs__search"
    assert offered_name("docs", "search") == offered_name("docs", "search")  # the same after a restart
    dotted, underscored = offered_name("docs", "read.file"), offered_name("docs", "read_file")
    assert dotted != underscored and dotted.startswith("docs__read_file_")
    long = offered_name("docs", "x" * 100)
    assert len(long) <= 64 and long.startswith("docs__xxx") and long != offered_name("docs", "x" * 99)
    assert offered_name("a", "b__c") != offered_name(
        "a-b", "c"
    )  # labels have no "_": the first "__" ends them
    assert "execute_javascript" not in {offered_name(label, "execute_javascript") for label in ("a", "js")}


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("{", "not valid JSON"),
        ('{"label": "docs"}', "JSON list"),
        ('[{"label": "my_docs", "url": "http://x/mcp"}]', "MCP_SERVERS[0].label"),
        ('[{"label": "docs", "url": "ftp://x"}]', "MCP_SERVERS[0].url"),
        ('[{"label": "docs", "url": "http://x/mcp", "token": "t"}]', "unknown keys ['token']"),
        ('[{"label": "docs", "url": "http://x/mcp", "headers": {"a": 1}}]', "headers"),
        ('[{"label": "docs", "url": "http://x/mcp", "timeout_seconds": 0}]', "timeout_seconds"),
        ('[{"label": "d", "url": "http://x/mcp"}, {"label": "d", "url": "http://y/mcp"}]', "used twice"),
    ],
)
def test_unusable_mcp_servers_fail_at_start_naming_the_setting(raw, words):
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({"MCP_SERVERS": raw})
    assert "MCP_SERVERS" in str(raised.value) and words in str(raised.value)


def test_mcp_servers_are_parsed_with_their_options():
    (server,) = parse_mcp_servers(
        '[{"label": "docs", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${T}"},'
        ' "allowed_tools": ["search"], "timeout_seconds": 2.5}]'
    )
    assert (server.label, server.allowed_tools, server.timeout_seconds) == ("docs", ("search",), 2.5)
    assert Settings.from_env({"MCP_TOOL_BUDGET": "5"}).mcp_tool_limit == 5


def test_import_app_leaves_the_mcp_sdk_unimported():
    code = "import sys, app; assert 'mcp' not in sys.modules and 'httpx2' not in sys.modules, 'imported'"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT / 'src'}", "MCP_SERVERS": "[]"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


# --- results --------------------------------------------------------------------------------------
def test_results_are_described_redacted_and_capped():
    from mcp_types import CallToolResult, EmbeddedResource, ImageContent, TextContent, TextResourceContents

    server = MCPServer(
        MCPServerConfig("docs", "http://127.0.0.1:9/mcp"), {"Authorization": f"Bearer {TOKEN}"}
    )
    result = CallToolResult(
        content=[
            TextContent(text=f"the server echoed Bearer {TOKEN}"),
            ImageContent(data="aGVsbG8=", mime_type="image/png"),
            EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="resource text")),
        ]
    )
    content, ok, _ = describe_result(result, server.redact)
    body = json.loads(content)["result"]
    assert ok and TOKEN not in content and "[REDACTED]" in body
    assert "[image returned by the tool: image/png" in body and "resource text" in body
    big = CallToolResult(content=[TextContent(text="y" * 1_000_000)])
    assert len(describe_result(big, server.redact)[0].encode()) <= 16 * 1024
    failed = CallToolResult(content=[TextContent(text="no such page")], is_error=True)
    content, ok, error = describe_result(failed, server.redact)
    assert not ok and "the tool reported an error: no such page" in json.loads(content)["error"] == error


# --- end to end through the Lambda handler ---------------------------------------------------------
def test_an_mcp_tool_answers_on_chat_through_the_handler(docs, llm, sandbox, handler_runtime):
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),)))
    llm.default = caller("docs__search", once({"query": "limits"}))
    with captured_logs() as logs:
        code, body = invoke("/chat", chat())
    data = json.loads(body)
    assert code == 200 and data["stop_reason"] == "stop"
    assert "3 pages mention 'limits'" in data["message"]["content"]
    (entry,) = data["tool_calls"]
    assert (entry["name"], entry["server"], entry["server_tool"], entry["status"]) == (
        "docs__search",
        "docs",
        "search",
        "ok",
    )
    offered = {t["function"]["name"]: t["function"] for t in llm.requests[0]["body"]["tools"]}
    assert {"execute_javascript", "docs__search", "docs__add"} <= set(offered)
    assert offered["docs__search"]["description"] == "Search the documentation for a phrase."
    decision = next(line for line in logs if "Tool execution decision" in line and "tools=" in line)
    assert "tools=docs__search@docs" in decision and '"server": "docs"' in decision.replace('":"', '": "')

    code, body = invoke("/chat", chat(stream=True))
    events = parse_sse(body)
    start = next(d for n, d in events if n == "tool_call_start")
    result = next(d for n, d in events if n == "tool_call_result")
    assert code == 200 and start["server"] == result["server"] == "docs" and result["status"] == "ok"
    assert events[-1][0] == "done"


def test_an_mcp_tool_answers_on_chat_completions_and_responses(docs, llm, sandbox, handler_runtime):
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),)))
    llm.default = caller("docs__add", once({"a": 20, "b": 22}))
    messages = [{"role": "user", "content": "add 20 and 22 with the docs tool"}]
    code, body = invoke("/v1/chat/completions", {"messages": messages})
    data = json.loads(body)
    assert code == 200 and "42" in data["choices"][0]["message"]["content"]
    assert data["x_chatloop"]["tool_calls"][0]["server"] == "docs"
    code, body = invoke("/v1/chat/completions", {"messages": messages, "stream": True})
    assert code == 200 and "42" in body and body.rstrip().endswith("data: [DONE]")
    code, body = invoke("/v1/responses", {"input": "add 20 and 22 with the docs tool"})
    assert code == 200 and "42" in json.loads(body)["output"][-1]["content"][0]["text"]
    code, body = invoke("/v1/responses", {"input": "add 20 and 22 with the docs tool", "stream": True})
    assert code == 200 and "response.completed" in body and "42" in body


def test_allowed_tools_limit_what_is_offered(docs, llm, sandbox, handler_runtime):
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url, allowed_tools=("search",)),)))
    llm.default = caller("docs__add", once({"a": 1, "b": 2}))  # a tool not allowed: never offered
    code, body = invoke("/chat", chat())
    offered = [t["function"]["name"] for t in llm.requests[0]["body"]["tools"]]
    assert code == 200 and sorted(offered) == ["docs__search", "execute_javascript"]
    assert json.loads(body)["tool_calls"] == []


def test_a_server_behind_a_token_works_and_the_token_appears_nowhere(
    llm, sandbox, handler_runtime, monkeypatch
):
    monkeypatch.setenv("DOCS_TOKEN", TOKEN)
    with MCPTestServer(tools_server(), token=TOKEN) as private:
        config = MCPServerConfig("private", private.url, headers={"Authorization": "Bearer ${DOCS_TOKEN}"})
        locked = MCPServerConfig("locked", private.url)  # no header: the server refuses it
        handler_runtime(make_runtime(sandbox, (config, locked)))
        llm.default = caller("private__search", once({"query": "tokens"}))
        with captured_logs() as logs:
            code, body = invoke("/chat", chat())
            code2, body2 = invoke("/chat", chat(stream=True))
    data = json.loads(body)
    assert code == code2 == 200 and data["tool_calls"][0]["status"] == "ok"
    assert any(ok for _, _, ok in private.requests) and any(not ok for _, _, ok in private.requests)
    skipped = [line for line in logs if "MCP server skipped for this turn: server=locked" in line]
    assert skipped and "HTTP 401" in skipped[0]
    everything = body + body2 + "\n".join(logs) + json.dumps([r["body"] for r in llm.requests])
    assert TOKEN not in everything


def test_a_down_server_is_skipped_with_its_reason_and_the_turn_answers(docs, llm, sandbox, handler_runtime):
    down = MCPServerConfig("down", f"http://127.0.0.1:{free_port()}/mcp")
    handler_runtime(make_runtime(sandbox, (down, MCPServerConfig("docs", docs.url))))
    llm.default = caller("docs__search", once({"query": "x"}))
    with captured_logs() as logs:
        code, body = invoke("/chat", chat())
    assert code == 200 and json.loads(body)["stop_reason"] == "stop"
    line = next(line for line in logs if "server=down" in line)
    assert "could not connect" in line
    code, body = invoke("/chat", chat(stream=True))
    status = next(d for n, d in parse_sse(body) if n == "status" and d["status"] == "tools_unavailable")
    assert code == 200 and "not retried" in status["sources"]["down"]
    assert not any(t["function"]["name"].startswith("down__") for t in llm.requests[0]["body"]["tools"])


def test_a_tool_that_raises_is_an_error_message_in_words(docs, llm, sandbox, handler_runtime):
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),)))
    llm.default = caller("docs__explode", once({"reason": "index offline"}))
    code, body = invoke("/chat", chat())
    data = json.loads(body)
    (entry,) = data["tool_calls"]
    assert code == 200 and entry["status"] == "error" and entry["server"] == "docs"
    assert "the tool reported an error" in json.loads(entry["result"])["error"]
    # The model pasted the error JSON it was told as its answer: that is no answer (issue #36), never shown.
    assert (
        '{"error"' not in data["message"]["content"]
        and data["message"]["content"].strip() == "From the docs:"
    )


def test_a_huge_result_and_an_image_reach_the_model_capped_and_described(docs, llm, sandbox, handler_runtime):
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),)))
    llm.default = caller("docs__huge", once({}))
    code, body = invoke("/chat", chat())
    tool_message = next(m for m in llm.requests[-1]["body"]["messages"] if m["role"] == "tool")
    assert code == 200 and len(tool_message["content"].encode()) <= 16 * 1024
    assert json.loads(tool_message["content"])["result"].startswith("xxxx")
    llm.default = caller("docs__picture", once({}))
    code, body = invoke("/chat", chat())
    assert code == 200 and "[image returned by the tool: image/png" in json.loads(body)["message"]["content"]


@pytest.mark.slow
def test_a_server_that_sleeps_past_the_deadline_is_cut_and_the_turn_still_answers(
    docs, llm, sandbox, handler_runtime
):
    slow = MCPServerConfig("docs", docs.url, timeout_seconds=60)  # the request's deadline comes first
    handler_runtime(make_runtime(sandbox, (slow,), request_timeout_seconds=5, deadline_reserve_seconds=1.5))
    llm.default = caller("docs__nap", once({"seconds": 30}))
    started = time.monotonic()
    code, body = invoke("/chat", chat())
    elapsed = time.monotonic() - started
    data = json.loads(body)
    assert code == 200 and elapsed < 5.5 and data["message"]["content"]
    assert "timed out" in json.loads(data["tool_calls"][0]["result"])["error"]
    # The server's own timeout, shorter than the request's time, cuts a call too.
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url, timeout_seconds=1),)))
    started = time.monotonic()
    code, body = invoke("/chat", chat())
    assert code == 200 and time.monotonic() - started < 4
    assert "timed out after 1.0 s" in json.loads(body)["tool_calls"][0]["result"]


def test_the_budget_cuts_a_model_that_keeps_calling_with_new_arguments(docs, llm, sandbox, handler_runtime):
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),), mcp_tool_limit=2))
    llm.default = caller("docs__search", lambda n: {"query": f"page {n}"})  # new arguments every time
    before = len(docs.calls)
    code, body = invoke("/chat", chat())
    data = json.loads(body)
    assert code == 200 and data["tool_counts"] == {"docs__search": 2} and len(docs.calls) - before == 2
    offered_last = [t["function"]["name"] for t in llm.requests[-1]["body"].get("tools") or []]
    assert "docs__search" not in offered_last and "From the docs" in data["message"]["content"]
    # TOOL_BUDGETS by the offered name wins over MCP_TOOL_BUDGET.
    budgets = {"execute_javascript": 3, "docs__search": 1}
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),), tool_caps=budgets))
    code, body = invoke("/chat", chat())
    assert json.loads(body)["tool_counts"] == {"docs__search": 1}


def test_a_duplicate_call_is_not_run_again(docs, llm, sandbox, handler_runtime):
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),)))
    llm.default = caller("docs__search", lambda n: {"query": "same"} if n < 2 else None)
    before = len(docs.calls)
    code, body = invoke("/chat", chat())
    data = json.loads(body)
    assert code == 200 and len(docs.calls) - before == 1
    assert [c["status"] for c in data["tool_calls"]] == ["ok", "skipped"]
    assert data["tool_calls"][1]["reason"] == "duplicate"


def test_tool_lists_are_cached_per_container(docs, llm, sandbox, handler_runtime):
    runtime = handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),)))
    llm.default = caller("docs__search", once({"query": "x"}))
    invoke("/chat", chat())
    seen = len(docs.requests)
    invoke("/chat", chat(tools=[]))  # no tools: nothing listed, nothing called
    assert len(docs.requests) == seen
    llm.default = lambda body: text(body["model"], "no tool needed", groq=True)
    invoke("/chat", chat())
    assert len(docs.requests) == seen  # listed once, then reused
    assert runtime.tools.mcp_servers()._listings["docs"].tools


# --- under uvicorn, with the real openai SDK -------------------------------------------------------
@pytest.mark.slow
def test_the_openai_sdk_gets_mcp_answers_from_the_app_under_uvicorn(docs, llm, sandbox):
    runtime = make_runtime(sandbox, (MCPServerConfig("docs", docs.url),))
    llm.default = caller("docs__add", once({"a": 40, "b": 2}))
    with Server(create_app(runtime.settings, runtime=runtime)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        completion = client.chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": "add 40 and 2"}]
        )
        assert "42" in (completion.choices[0].message.content or "")
        with client.responses.stream(model="chatloop", input="add 40 and 2") as stream:
            final = stream.get_final_response()
        assert "42" in final.output_text
        chunks = client.chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": "add 40 and 2"}], stream=True
        )
        assert "42" in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        response = client.responses.create(model="chatloop", input="add 40 and 2")
        assert "42" in response.output_text
        body = {"messages": [{"role": "user", "content": "add 40 and 2"}]}
        with httpx.stream("POST", f"{server.root}/chat", json=body, timeout=30) as streamed:
            events = parse_sse(streamed.read().decode())
        result = next(d for n, d in events if n == "tool_call_result")
        assert result["server"] == "docs" and events[-1][0] == "done"


def test_calls_and_errors_are_counted_per_server_for_the_dashboard(
    docs, llm, sandbox, handler_runtime, capsys
):
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),)))
    llm.default = caller("docs__explode", once({}))
    invoke("/chat", chat())
    records = [
        json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')
    ]
    by_name = {
        m["Name"]: (record, directive)
        for record in records
        for directive in record["_aws"]["CloudWatchMetrics"]
        for m in directive["Metrics"]
    }
    for name in ("MCPToolCalls", "MCPToolErrors"):
        record, directive = by_name[name]
        assert record["server"] == "docs" and record[name] in (1.0, [1.0])
        assert sorted(directive["Dimensions"][0]) == ["server", "service"]
    template = (ROOT / "template.yaml").read_text()
    assert 'MetricName=\\"MCPToolCalls\\"' in template and 'MetricName=\\"MCPToolErrors\\"' in template


# --- client-supplied servers on /v1/responses --------------------------------------------------------
def mcp_tool(url: str, label: str = "client", **extra: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never", **extra}


def test_a_client_supplied_server_under_an_allowed_prefix_is_used(docs, llm, sandbox, handler_runtime):
    handler_runtime(make_runtime(sandbox, (), mcp_allowed_urls=f"{docs.root}/"))
    llm.default = caller("client__search", once({"query": "client"}))
    tool = mcp_tool(docs.url, headers={"X-Api-Key": "client-secret-123"}, allowed_tools=["search"])
    code, body = invoke("/v1/responses", {"input": QUESTION, "tools": [tool]})
    data = json.loads(body)
    assert code == 200, body
    assert "3 pages mention 'client'" in json.dumps(data["output"])
    offered = sorted(t["function"]["name"] for t in llm.requests[0]["body"]["tools"])
    assert offered == ["client__search", "execute_javascript"]
    echoed = next(t for t in data["tools"] if t["type"] == "mcp")
    assert echoed["server_url"] == docs.url and "headers" not in echoed and "client-secret-123" not in body


@pytest.mark.parametrize(
    ("allowed", "url", "words"),
    [
        ("{root}/", "http://127.0.0.1:{other}/mcp", "is not allowed on this server"),
        ("{root}/", "{root}.evil.test/mcp", "is not allowed on this server"),
        ("", "{url}", "is not allowed on this server"),
        ("http://169.254.169.254/", "http://169.254.169.254/mcp", "link-local or metadata"),
        ("http://[::ffff:169.254.169.254]/", "http://[::ffff:169.254.169.254]/mcp", "link-local or metadata"),
    ],
)
def test_a_client_supplied_url_outside_the_list_is_a_400_and_no_request_is_made(
    docs, llm, sandbox, handler_runtime, allowed, url, words
):
    with MCPTestServer(tools_server()) as other:
        fill = {"root": docs.root, "other": other.root.rsplit(":", 1)[1], "url": docs.url}
        handler_runtime(make_runtime(sandbox, (), mcp_allowed_urls=allowed.format(**fill)))
        before = len(docs.requests)
        target = url.format(**fill)
        code, body = invoke("/v1/responses", {"input": QUESTION, "tools": [mcp_tool(target)]})
        assert code == 400 and words in body and target in json.loads(body)["error"]["message"]
        assert json.loads(body)["error"]["param"] == "tools[0].server_url"
        assert other.requests == [] and len(docs.requests) == before and llm.requests == []


def test_a_400_names_the_mcp_tools_index_in_the_requests_tools_not_among_mcp_tools(
    docs, llm, sandbox, handler_runtime
):
    handler_runtime(make_runtime(sandbox, (), mcp_allowed_urls=f"{docs.root}/"))
    function = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    refused = "http://127.0.0.1:1/mcp"  # outside MCP_ALLOWED_URLS
    tools = [function, {**function, "name": "other"}, mcp_tool(docs.url), mcp_tool(refused, label="second")]
    code, body = invoke("/v1/responses", {"input": QUESTION, "tools": tools})
    error = json.loads(body)["error"]
    assert code == 400 and error["param"] == "tools[3].server_url", body
    assert error["message"].startswith(f"tools[3].server_url {refused!r} is not allowed")
    assert llm.requests == []


@pytest.mark.parametrize(
    "approval", ["sometimes", {"always": {"read_only": True}}, {"never": ["search"]}, {"maybe": {}}]
)
def test_require_approval_in_a_shape_openai_does_not_use_is_a_400(
    docs, llm, sandbox, handler_runtime, approval
):
    handler_runtime(make_runtime(sandbox, (), mcp_allowed_urls=f"{docs.root}/"))
    before = len(docs.requests)
    tool = {**mcp_tool(docs.url), "require_approval": approval}
    code, body = invoke("/v1/responses", {"input": QUESTION, "tools": [tool]})
    assert code == 400 and "require_approval" in body and len(docs.requests) == before and llm.requests == []


def test_a_client_label_may_not_take_an_operator_label(docs, llm, sandbox, handler_runtime):
    handler_runtime(
        make_runtime(sandbox, (MCPServerConfig("docs", docs.url),), mcp_allowed_urls=f"{docs.root}/")
    )
    code, body = invoke("/v1/responses", {"input": QUESTION, "tools": [mcp_tool(docs.url, label="docs")]})
    assert code == 400 and "already in use" in body and llm.requests == []


def test_prefixes_match_at_a_boundary_only():
    from chatloop.api.openai.responses.mcp_servers import allowed_prefix
    from chatloop.netpolicy import never_allowed as internal_address

    assert (
        allowed_prefix("https://mcp.example.com/v1/mcp", ["https://mcp.example.com"])
        == "https://mcp.example.com"
    )
    assert allowed_prefix("https://mcp.example.com.evil.test/mcp", ["https://mcp.example.com"]) is None
    assert allowed_prefix("https://mcp.example.com@evil.test/mcp", ["https://mcp.example.com"]) is None
    assert allowed_prefix("https://mcp.example.com:444/mcp", ["https://mcp.example.com"]) is None
    assert allowed_prefix("https://mcp.example.com/other", ["https://mcp.example.com/v1/"]) is None
    assert (
        internal_address("fe80::1") and internal_address("fd00:ec2::254") and not internal_address("10.0.0.1")
    )


def test_output_items_are_what_the_openai_sdk_parses():
    from openai.types.responses.response_output_item import McpCall, McpListTools

    from chatloop.api.items.mcp import call_item, list_tools_item
    from chatloop.tools.mcp import ListedTool, MCPTool

    server = MCPServer(MCPServerConfig("docs", "http://127.0.0.1:9/mcp"), {})
    tool = MCPTool(server, ListedTool("search", "Search.", {"type": "object"}), 3)
    listed = McpListTools.model_validate(list_tools_item("docs", [tool]))
    assert listed.tools[0].name == "search" and listed.server_label == "docs"
    failed = McpListTools.model_validate(list_tools_item("docs", [], error="could not connect"))
    assert failed.error == "could not connect"
    done = McpCall.model_validate(call_item("call_1", "search", "{}", "docs", '{"result": "hits"}', ok=True))
    assert (done.output, done.status, done.error) == ("hits", "completed", None)
    tool_error = call_item(
        "call_2", "search", "{}", "docs", '{"error": "the tool reported an error: x"}', ok=False
    )
    parsed = McpCall.model_validate(tool_error)
    assert (
        parsed.status == "failed"
        and parsed.error is not None
        and parsed.error.type == "mcp_tool_execution_error"
    )
    timeout = call_item("call_3", "nap", "{}", "docs", '{"error": "MCP server \'docs\' timed out"}', ok=False)
    assert McpCall.model_validate(timeout).error.type == "mcp_protocol_error"


def test_mcp_items_sent_back_as_input_are_read_as_the_call_they_were():
    from chatloop.api.openai.responses.schemas import ResponsesBody

    body = ResponsesBody.model_validate(
        {
            "input": [
                {"role": "user", "content": "search the docs"},
                {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "docs", "tools": []},
                {
                    "type": "mcp_call",
                    "id": "mcp_1",
                    "server_label": "docs",
                    "name": "search",
                    "arguments": '{"query": "x"}',
                    "output": "hits",
                    "status": "completed",
                },
            ]
        }
    )
    call = body.input[2]
    assistant, tool = call.messages()
    assert assistant["tool_calls"][0]["function"]["name"] == "docs__search"
    assert tool["tool_call_id"] == "mcp_1" and json.loads(tool["content"]) == {"result": "hits"}


def test_a_redirect_off_the_allowed_prefix_is_not_followed(llm, sandbox, handler_runtime):
    with MCPTestServer(tools_server(), redirect_from="/allowed/mcp") as redirecting:
        handler_runtime(make_runtime(sandbox, (), mcp_allowed_urls=f"{redirecting.root}/allowed/"))
        llm.default = caller("client__search", once({"query": "x"}))
        tool = mcp_tool(f"{redirecting.root}/allowed/mcp")
        with captured_logs() as logs:
            code, _ = invoke("/v1/responses", {"input": QUESTION, "tools": [tool]})
    assert code == 200 and {path for _, path, _ in redirecting.requests} == {"/allowed/mcp"}
    assert any("server=client" in line and "outside the allowed URL prefix" in line for line in logs)
    assert [t["function"]["name"] for t in llm.requests[0]["body"]["tools"]] == ["execute_javascript"]


def test_a_redirect_past_the_prefix_boundary_is_not_followed(llm, sandbox, handler_runtime):
    """MCP_ALLOWED_URLS ``…/allowed`` admits ``…/allowed/mcp`` but never ``…/allowedx/mcp`` (a prefix matches at
    a boundary): not when the request names it, and not when the server redirects there."""
    with MCPTestServer(tools_server(), path="/allowedx/mcp", redirect_from="/allowed/mcp") as redirecting:
        handler_runtime(make_runtime(sandbox, (), mcp_allowed_urls=f"{redirecting.root}/allowed"))
        llm.default = caller("client__search", once({"query": "x"}))
        tool = mcp_tool(f"{redirecting.root}/allowed/mcp")
        code, _ = invoke("/v1/responses", {"input": QUESTION, "tools": [tool]})
    assert code == 200 and {path for _, path, _ in redirecting.requests} == {"/allowed/mcp"}


def test_chat_may_name_mcp_tools_and_force_one(docs, llm, sandbox, handler_runtime):
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),)))
    llm.default = caller("docs__search", once({"query": "x"}))
    choice = {"type": "function", "function": {"name": "docs__search"}}
    code, body = invoke("/chat", chat(tools=["docs__search"], tool_choice=choice))
    first = llm.requests[0]["body"]
    assert code == 200 and [t["function"]["name"] for t in first["tools"]] == ["docs__search"]
    assert first["tool_choice"] == choice and json.loads(body)["tool_calls"][0]["status"] == "ok"
    code, body = invoke("/chat", chat(tools=["other__search"]))  # no server labelled "other"
    assert code == 400 and "unknown tool" in body


def test_a_server_cannot_grow_the_request_without_bound(sandbox):
    from mcp.server.mcpserver import MCPServer as SDKServer

    from chatloop.tools.mcp import MAX_DESCRIPTION_CHARS, MAX_TOOLS_PER_SERVER, MCPServers

    greedy = SDKServer("greedy")
    for i in range(MAX_TOOLS_PER_SERVER + 10):
        greedy.add_tool(lambda: "ok", name=f"tool.{i}", description="d" * 10_000)
    with MCPTestServer(greedy) as server:
        settings = Settings(mcp_servers=(MCPServerConfig("greedy", server.url),))
        turn = asyncio.run(MCPServers(settings).tools_for_turn(Deadline.after(20)))
    assert len(turn.tools) == MAX_TOOLS_PER_SERVER and not turn.skipped
    assert all(len(t.description) == MAX_DESCRIPTION_CHARS for t in turn.tools)
    assert (
        len({t.name for t in turn.tools}) == MAX_TOOLS_PER_SERVER
    )  # "tool.1" and friends: unique, safe names
    assert all(re.fullmatch(r"greedy__tool_\d+_[0-9a-f]{6}", t.name) for t in turn.tools)


@pytest.mark.parametrize(
    "headers", [{"X-Key": "secret-value\r\nInjected: yes"}, {"Host": "evil.test"}, {"bad name": "v"}]
)
def test_client_headers_that_are_not_headers_are_a_400_without_their_value(
    docs, llm, sandbox, handler_runtime, headers
):
    handler_runtime(make_runtime(sandbox, (), mcp_allowed_urls=f"{docs.root}/"))
    before = len(docs.requests)
    code, body = invoke("/v1/responses", {"input": QUESTION, "tools": [mcp_tool(docs.url, headers=headers)]})
    assert code == 400 and "tools[0].headers" in body and "secret-value" not in body
    assert len(docs.requests) == before and llm.requests == []


# --- the page -----------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="Chromium is not installed (apt-get install chromium)"
)
def test_the_page_shows_an_mcp_call_as_it_shows_a_sandbox_run(docs, llm, sandbox):
    from playwright.sync_api import sync_playwright

    runtime = make_runtime(sandbox, (MCPServerConfig("docs", docs.url),))
    llm.default = caller("docs__search", once({"query": "limits"}))
    with Server(create_app(runtime.settings, runtime=runtime)) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(server.root + "/")
            page.fill("#question", QUESTION)
            page.press("#question", "Enter")
            page.wait_for_selector(".turn.assistant .stop-reason")
            tool = page.locator("details.tool").first
            tool.locator("summary").click()
            assert tool.locator("strong").inner_text() == "docs__search"
            assert tool.locator(".server").inner_text() == "on docs"
            assert json.loads(tool.locator("pre.code").inner_text()) == {"query": "limits"}
            assert "3 pages mention 'limits'" in tool.locator("pre.result").inner_text()
            assert "ok in" in tool.locator(".status").inner_text() and errors == []
        finally:
            browser.close()


def test_mcp_stream_events_are_what_the_openai_sdk_parses():
    import itertools

    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    from chatloop.api.items.mcp import (
        call_finished_frames,
        call_started_frames,
        finish_call_item,
        list_tools_frames,
        list_tools_item,
        started_call_item,
    )
    from chatloop.engine.events import ToolCallResult, ToolCallStart

    numbers = itertools.count()

    def emit(kind: str, **fields: Any) -> str:
        return json.dumps({"type": kind, "sequence_number": next(numbers), **fields})

    start = ToolCallStart("call_1", "docs__search", '{"query": "x"}', server="docs", server_tool="search")
    item = started_call_item(start)
    frames = list_tools_frames(emit, list_tools_item("docs", [], error="could not connect"), 0)
    frames += call_started_frames(emit, item, 1)
    result = ToolCallResult("call_1", "docs__search", "ok", '{"result": "3 pages"}', "docs", "search")
    finish_call_item(item, result)
    frames += call_finished_frames(emit, item, 1)
    events = [TypeAdapter(ResponseStreamEvent).validate_python(json.loads(f)) for f in frames]
    assert [e.type for e in events] == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.failed",
        "response.output_item.done",
        "response.output_item.added",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.output_item.done",
    ]
    done = events[-1].item
    assert (done.type, done.name, done.server_label, done.output, done.status) == (
        "mcp_call",
        "search",
        "docs",
        "3 pages",
        "completed",
    )


@pytest.mark.slow
def test_a_server_slow_to_list_is_skipped_within_the_listing_timeout(llm, sandbox, handler_runtime):
    with MCPTestServer(tools_server(), stall=3) as hanging:
        runtime = make_runtime(sandbox, (MCPServerConfig("slow", hanging.url),), mcp_list_timeout_seconds=0.5)
        handler_runtime(runtime)
        llm.default = lambda body: text(body["model"], "answered without it", groq=True)
        started = time.monotonic()
        with captured_logs() as logs:
            code, body = invoke("/chat", chat())
        elapsed = time.monotonic() - started
        assert code == 200 and json.loads(body)["message"]["content"] == "answered without it"
        assert elapsed < 2.5 and any(
            "server=slow" in line and "timed out after 0.5 s" in line for line in logs
        )
        started = time.monotonic()
        invoke("/chat", chat())  # within FAILURE_RETRY_SECONDS: not tried again, no time lost
        assert time.monotonic() - started < 1.0 and len(hanging.requests) == 1


def test_header_placeholders_come_from_the_provider_keys_secret(monkeypatch):
    import boto3
    from moto import mock_aws

    from chatloop.secrets import load_named_secrets

    monkeypatch.delenv("DOCS_TOKEN", raising=False)
    stored_token = "token-from-secrets-manager-5e1b"
    with mock_aws():
        arn = boto3.client("secretsmanager").create_secret(
            Name="chatloop/keys",
            SecretString=json.dumps({"GROQ_API_KEY": "gsk_x", "DOCS_TOKEN": stored_token}),
        )["ARN"]
        settings = Settings(provider_keys_secret_arn=arn)
        assert load_named_secrets(settings, ["DOCS_TOKEN", "MISSING"], environ={}) == {
            "DOCS_TOKEN": stored_token
        }
    from chatloop.redaction import redact

    assert (
        redact(f"Bearer {stored_token}") == "Bearer [REDACTED]"
    )  # registered: never in a log line or response


def test_a_placeholder_with_no_value_skips_the_server_naming_it(docs):
    from chatloop.tools.mcp import MCPServers

    config = MCPServerConfig("docs", docs.url, headers={"Authorization": "Bearer ${NOT_SET_ANYWHERE}"})
    servers = MCPServers(Settings(mcp_servers=(config,)), secrets_loader=lambda settings, names: {})
    turn = asyncio.run(servers.tools_for_turn(Deadline.after(10)))
    assert turn.tools == [] and "NOT_SET_ANYWHERE" in turn.skipped["docs"]


def test_a_malformed_result_is_an_error_message_in_words(llm, sandbox, handler_runtime):
    from tests.support.mcp_servers import malformed_server

    with MCPTestServer(malformed_server()) as broken:
        handler_runtime(make_runtime(sandbox, (MCPServerConfig("broken", broken.url),)))
        llm.default = caller("broken__broken", once({}))
        code, body = invoke("/chat", chat())
    (entry,) = json.loads(body)["tool_calls"]
    assert code == 200 and entry["status"] == "error"
    assert "malformed" in json.loads(entry["result"])["error"]


def test_the_same_result_from_new_arguments_ends_tool_use_as_a_loop(docs, llm, sandbox, handler_runtime):
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),), mcp_tool_limit=10))
    llm.default = caller("docs__add", lambda n: {"a": n, "b": 10 - n})  # always 10: a result loop
    code, body = invoke("/chat", chat())
    data = json.loads(body)
    assert code == 200 and data["tool_counts"] == {"docs__add": 2} and data["stop_reason"] == "loop_detected"


def test_a_server_with_no_tools_or_missing_allowed_tools_is_a_warning(docs):
    from mcp.server.mcpserver import MCPServer as SDKServer

    from chatloop.tools.mcp import MCPServers

    with MCPTestServer(SDKServer("empty")) as empty:
        configs = (
            MCPServerConfig("empty", empty.url),
            MCPServerConfig("docs", docs.url, allowed_tools=("search", "serach")),
        )
        with captured_logs() as logs:
            turn = asyncio.run(MCPServers(Settings(mcp_servers=configs)).tools_for_turn(Deadline.after(10)))
    assert [t.name for t in turn.tools] == ["docs__search"] and not turn.skipped
    warnings = [line for line in logs if "offers fewer tools than configured" in line]
    assert any("server=empty listed=0" in w for w in warnings)
    assert any("server=docs" in w and "allowed_but_absent=serach" in w for w in warnings)


def test_a_token_written_into_mcp_servers_is_redacted_everywhere(docs):
    from chatloop.redaction import redact
    from chatloop.tools.mcp import MCPServers

    literal = "literal-token-9d1f00aa"
    config = MCPServerConfig("docs", docs.url, headers={"X-Api-Key": literal, "Accept-Language": "en"})
    turn = asyncio.run(MCPServers(Settings(mcp_servers=(config,))).tools_for_turn(Deadline.after(10)))
    assert turn.tools and redact(f"key {literal}") == "key [REDACTED]" and redact("en") == "en"


@pytest.mark.slow
def test_client_supplied_servers_yield_items_the_openai_sdk_parses_and_takes_back(docs, llm, sandbox):
    runtime = make_runtime(sandbox, (), mcp_allowed_urls=f"{docs.root}/")
    llm.default = caller("client__search", once({"query": "items"}))
    down = f"{docs.root}/nowhere"  # under the prefix, but no MCP server there
    tools: Any = [mcp_tool(docs.url, allowed_tools=["search"]), mcp_tool(down, label="gone")]
    with Server(create_app(runtime.settings, runtime=runtime)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        response = client.responses.create(model="chatloop", input=QUESTION, tools=tools)
        kinds = [item.type for item in response.output]
        assert kinds == ["mcp_list_tools", "mcp_list_tools", "mcp_call", "message"], kinds
        listed, gone, call = response.output[0], response.output[1], response.output[2]
        assert listed.type == "mcp_list_tools" and [t.name for t in listed.tools] == ["search"]
        assert gone.type == "mcp_list_tools" and gone.error and "gone" in gone.error
        assert call.type == "mcp_call" and (call.name, call.server_label, call.status) == (
            "search",
            "client",
            "completed",
        )
        assert "3 pages mention 'items'" in (call.output or "") and "3 pages" in response.output_text

        with client.responses.stream(model="chatloop", input=QUESTION, tools=tools[:1]) as stream:
            types = [event.type for event in stream]
            final = stream.get_final_response()
        assert "response.mcp_list_tools.completed" in types and "response.mcp_call.completed" in types
        assert types.index("response.mcp_call.in_progress") < types.index("response.mcp_call.completed")
        assert [item.type for item in final.output] == ["mcp_list_tools", "mcp_call", "message"]

        # The items sent back as input: the model sees the earlier call and its answer.
        llm.requests.clear()
        history: Any = [
            {"role": "user", "content": QUESTION},
            *[item.model_dump(exclude_none=True) for item in final.output],
            {"role": "user", "content": "thanks"},
        ]
        again = client.responses.create(model="chatloop", input=history, tools=tools[:1])
        sent = llm.requests[0]["body"]["messages"]
        replayed = next(m for m in sent if m["role"] == "tool")
        assert "3 pages mention 'items'" in replayed["content"] and again.output_text


def test_an_operator_servers_call_is_an_mcp_call_item(docs, llm, sandbox, handler_runtime):
    handler_runtime(make_runtime(sandbox, (MCPServerConfig("docs", docs.url),)))
    llm.default = caller("docs__search", once({"query": "operator"}))
    code, body = invoke("/v1/responses", {"input": QUESTION})
    output = json.loads(body)["output"]
    assert code == 200 and [i["type"] for i in output] == ["mcp_call", "message"]
    assert (output[0]["server_label"], output[0]["name"], output[0]["status"]) == (
        "docs",
        "search",
        "completed",
    )
