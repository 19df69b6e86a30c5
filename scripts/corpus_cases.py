"""The corpus ``scripts/corpus.py`` records: ~30 cases on ``/chat``, ``/v1/chat/completions`` and ``/v1/responses``
(plain, streamed, tool turns, client tools, tool_choice, structured output, approvals, compaction, budgets refused,
bad input, background), each against a fresh runtime over its own SQLite store and one scripted model.

Usage::

    from scripts.corpus_cases import CASES      # {name: case(recorder)}
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from tests.support.models import ScriptedModel
from tests.support.tools import FakeSearch

from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse, ToolCall, Usage
from chatloop.tools.base import ToolRegistry

KEYS = {"groq": "gsk_corpus_test_key_0123456789abcdef", "openai": None}


def script(request: ModelRequest, n: int) -> ModelResponse:
    """Calls the tool a user message names ("use <tool>") while it is offered and unanswered since that message;
    answers JSON under a response format; otherwise answers from the last tool result, or echoes the question."""
    messages = request.messages
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    last_user = users[-1] if users else 0
    question = str(messages[last_user].get("content") or "")
    results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
    offered = request.tool_names()
    for name in offered:
        if f"use {name}" in question and not results:
            arguments = json.dumps({"query": "corpus"} if name != "get_weather" else {"city": "Oslo"})
            return ModelResponse("", "", [ToolCall(f"call_{n}", name, arguments)], "tool_calls")
    if request.response_format is not None:
        return ModelResponse("", json.dumps({"answer": "forty-two"}), finish_reason="stop")
    if "summar" in str(messages[0].get("content", "")).lower() and "summar" in question.lower():
        return ModelResponse("", "Summary: the user talked at length.", finish_reason="stop")
    said = f" from {results[-1][:60]}" if results else ""
    return ModelResponse(
        "", f"Answer {n}{said} to: {question[:40]}", finish_reason="stop", usage=Usage(20, 8, 28)
    )


def install(
    r: Any, model: ScriptedModel | None = None, tools: bool = False, **settings: Any
) -> ScriptedModel:
    model = model or ScriptedModel(script)
    registry = ToolRegistry([FakeSearch()]) if tools else ToolRegistry()
    store = f"{r.tmp}/store.sqlite3"
    r.swap(Settings(conversation_store_path=store, **settings), model=model, registry=registry, keys=KEYS)
    return model


def ask(content: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}]}


# --- /chat ---------------------------------------------------------------------------------------------------------
def chat_plain(r: Any) -> None:
    install(r)
    r.send("POST", "/chat", {**ask("hello"), "stream": False})


def chat_streamed(r: Any) -> None:
    install(r)
    r.send("POST", "/chat", ask("hello there"))


def chat_tool_turn(r: Any) -> None:
    install(r, tools=True)
    r.send("POST", "/chat", {**ask("please use search_web"), "stream": False})
    r.send("POST", "/chat", ask("please use search_web, streamed"))


def chat_tool_choice(r: Any) -> None:
    install(r, tools=True)
    r.send("POST", "/chat", {**ask("please use search_web"), "tool_choice": "none", "stream": False})
    named = {"type": "function", "function": {"name": "search_web"}}
    r.send("POST", "/chat", {**ask("please use search_web"), "tool_choice": named, "stream": False})
    r.send("POST", "/chat", {**ask("hi"), "tools": ["nope"], "stream": False})


def chat_bad_input(r: Any) -> None:
    install(r)
    r.send("POST", "/chat", {"messages": "hi"})
    r.send("POST", "/chat", {**ask("hi"), "max_iterations": 0})
    r.send("POST", "/chat", "{not json")
    r.send("POST", "/chat", {**ask("hi"), "approvals": [{"approval_request_id": "x", "approve": True}]})


def chat_conversation(r: Any) -> None:
    install(r)
    _, conv = r.send("POST", "/v1/conversations", {})
    cid = conv.get("id") if isinstance(conv, dict) else None
    r.send("POST", "/chat", {**ask("first"), "conversation": cid, "stream": False})
    r.send("POST", "/chat", {**ask("second"), "conversation": cid})
    r.send("GET", f"/v1/conversations/{cid}/items")


def chat_approval(r: Any) -> None:
    install(r, tools=True, approval_required_tools="search_web")
    _, conv = r.send("POST", "/v1/conversations", {})
    cid = conv.get("id") if isinstance(conv, dict) else None
    _, asked = r.send("POST", "/chat", {**ask("please use search_web"), "conversation": cid, "stream": False})
    request_id = _approval_id(asked)
    answer = {"approval_request_id": request_id or "none", "approve": True}
    r.send("POST", "/chat", {"messages": [], "conversation": cid, "approvals": [answer], "stream": False})
    r.send("POST", "/chat", {"messages": [], "conversation": cid, "approvals": [answer], "stream": False})


def chat_budget_refused(r: Any) -> None:
    install(r, budget_tokens_per_day=30)
    r.send("POST", "/chat", {**ask("spend"), "stream": False, "max_tokens": 20})
    r.send("POST", "/chat", {**ask("more"), "stream": False, "max_tokens": 20})
    r.send("GET", "/v1/usage")


def chat_compaction(r: Any) -> None:
    install(r, compaction_threshold_tokens=300)
    _, conv = r.send("POST", "/v1/conversations", {})
    cid = conv.get("id") if isinstance(conv, dict) else None
    r.send("POST", "/chat", {**ask("word " * 400), "conversation": cid, "stream": False})
    r.send("POST", "/chat", {**ask("and then?"), "conversation": cid, "stream": False})


def chat_all_models_failed(r: Any) -> None:
    def failing(request: ModelRequest, n: int) -> ModelResponse:
        raise RuntimeError("model down")

    install(r, ScriptedModel(failing))
    r.send("POST", "/chat", {**ask("hello"), "stream": False})
    r.send("POST", "/v1/chat/completions", {**ask("hello"), "model": "chatloop"})


# --- /v1/chat/completions ------------------------------------------------------------------------------------------
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def completions_plain(r: Any) -> None:
    install(r)
    r.send("POST", "/v1/chat/completions", {**ask("hello"), "model": "chatloop"})


def completions_streamed(r: Any) -> None:
    install(r)
    body = {**ask("hello"), "stream": True, "stream_options": {"include_usage": True}}
    r.send("POST", "/v1/chat/completions", body)
    r.send("POST", "/v1/chat/completions", {**ask("hello"), "stream": True})


def completions_tool_turn(r: Any) -> None:
    install(r, tools=True)
    r.send("POST", "/v1/chat/completions", ask("please use search_web"))


def completions_client_tools(r: Any) -> None:
    install(r)
    r.send("POST", "/v1/chat/completions", {**ask("please use get_weather"), "tools": [WEATHER]})
    named = {"type": "function", "function": {"name": "get_weather"}}
    body = {**ask("please use get_weather"), "tools": [WEATHER], "tool_choice": named, "stream": True}
    r.send("POST", "/v1/chat/completions", body)
    r.send("POST", "/v1/chat/completions", {**ask("hi"), "tool_choice": named})


def completions_structured(r: Any) -> None:
    install(r)
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": True}}
    r.send("POST", "/v1/chat/completions", {**ask("answer"), "response_format": fmt})
    r.send("POST", "/v1/chat/completions", {**ask("answer"), "response_format": {"type": "json_object"}})


def completions_bad_input(r: Any) -> None:
    install(r)
    r.send("POST", "/v1/chat/completions", {**ask("hi"), "temperature": "hot"})
    r.send("POST", "/v1/chat/completions", {**ask("hi"), "n": 3})
    r.send("POST", "/v1/chat/completions", {"messages": []})
    r.send("POST", "/v1/chat/completions", {**ask("hi"), "model": "no-such-model"})


def completions_budget_refused(r: Any) -> None:
    install(r, budget_tokens_per_day=30)
    r.send("POST", "/v1/chat/completions", {**ask("spend"), "max_tokens": 20})
    r.send("POST", "/v1/chat/completions", {**ask("more"), "max_tokens": 20})
    r.send("POST", "/v1/chat/completions", {**ask("more"), "max_tokens": 20}, caller=None)


def completions_approval_tools_hidden(r: Any) -> None:
    install(r, tools=True, approval_required_tools="search_web")
    r.send("POST", "/v1/chat/completions", ask("please use search_web"))


# --- /v1/responses -------------------------------------------------------------------------------------------------
def responses_plain(r: Any) -> None:
    install(r)
    r.send("POST", "/v1/responses", {"input": "hello", "store": False})
    r.send("POST", "/v1/responses", {"input": "hello", "instructions": "Be brief."})


def responses_streamed_stored(r: Any) -> None:
    install(r)
    _, first = r.send("POST", "/v1/responses", {"input": "hello", "stream": True})
    rid = _response_id(first)
    r.send("GET", f"/v1/responses/{rid}")
    r.send("POST", "/v1/responses", {"input": "again", "previous_response_id": rid})
    r.send("POST", "/v1/responses", {"input": "unstored", "stream": True, "store": False})


def responses_tool_turn(r: Any) -> None:
    install(r, tools=True)
    r.send("POST", "/v1/responses", {"input": "please use search_web"})
    r.send("POST", "/v1/responses", {"input": "please use search_web", "stream": True, "store": False})


def responses_client_tools(r: Any) -> None:
    install(r)
    tool = {"type": "function", **WEATHER["function"]}
    _, first = r.send("POST", "/v1/responses", {"input": "please use get_weather", "tools": [tool]})
    named = {"type": "function", "name": "get_weather"}
    r.send("POST", "/v1/responses", {"input": "use get_weather", "tools": [tool], "tool_choice": named})
    r.send("POST", "/v1/responses", {"input": "hi", "tool_choice": named})
    call = next((i for i in _output(first) if i.get("type") == "function_call"), None)
    if call is not None:
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": '{"temp": 3}'}
        body = {"input": [output], "previous_response_id": _response_id(first), "tools": [tool]}
        r.send("POST", "/v1/responses", body)


def responses_structured(r: Any) -> None:
    install(r)
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    fmt = {"type": "json_schema", "name": "a", "schema": schema, "strict": True}
    r.send("POST", "/v1/responses", {"input": "answer", "text": {"format": fmt}})
    r.send("POST", "/v1/responses", {"input": "answer", "text": {"format": {"type": "json_schema"}}})


def responses_approval(r: Any) -> None:
    install(r, tools=True, approval_required_tools="search_web")
    _, asked = r.send("POST", "/v1/responses", {"input": "please use search_web"})
    item = next((i for i in _output(asked) if i.get("type") == "mcp_approval_request"), {})
    answer = {"type": "mcp_approval_response", "approval_request_id": item.get("id", "x"), "approve": True}
    body = {"input": [answer], "previous_response_id": _response_id(asked)}
    r.send("POST", "/v1/responses", body)
    r.send("POST", "/v1/responses", body)  # replayed: refused
    _, again = r.send("POST", "/v1/responses", {"input": "please use search_web"})
    item = next((i for i in _output(again) if i.get("type") == "mcp_approval_request"), {})
    deny = {**answer, "approval_request_id": item.get("id", "x"), "approve": False, "reason": "no"}
    r.send(
        "POST",
        "/v1/responses",
        {"input": [deny], "previous_response_id": _response_id(again), "stream": True},
    )


def responses_compaction(r: Any) -> None:
    install(r)
    body = {
        "input": "word " * 1500,
        "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    }
    r.send("POST", "/v1/responses", body)
    r.send("POST", "/v1/responses", {**body, "stream": True, "store": False})
    r.send("POST", "/v1/responses", {**body}, caller=None)


def responses_budget_refused(r: Any) -> None:
    install(r, budget_tokens_per_day=30)
    r.send("POST", "/v1/responses", {"input": "spend", "max_output_tokens": 20})
    r.send("POST", "/v1/responses", {"input": "more", "max_output_tokens": 20})
    r.send("POST", "/v1/responses", {"input": "more", "max_output_tokens": 20, "stream": True})


def responses_bad_input(r: Any) -> None:
    install(r)
    r.send("POST", "/v1/responses", {"input": 3})
    r.send("POST", "/v1/responses", {"input": "hi", "previous_response_id": "resp_nope"})
    r.send("POST", "/v1/responses", {"input": "hi", "background": True, "store": False})
    r.send("POST", "/v1/responses", {"input": "hi", "truncation": "sideways"})
    r.send("POST", "/v1/responses", {"input": "hi", "tools": [{"type": "web_search"}]})


def responses_conversation(r: Any) -> None:
    install(r)
    _, conv = r.send("POST", "/v1/conversations", {})
    cid = conv.get("id") if isinstance(conv, dict) else None
    r.send("POST", "/v1/responses", {"input": "first", "conversation": cid})
    r.send("POST", "/v1/responses", {"input": "second", "conversation": cid, "stream": True})
    r.send("GET", f"/v1/conversations/{cid}/items")


def responses_background(r: Any) -> None:
    install(r, lambda_function_name="chatloop-chat")
    with lambda_invocations(2) as payloads:
        _, queued = r.send("POST", "/v1/responses", {"input": "please run later", "background": True})
        rid = _response_id(queued)
        for payload in list(payloads):
            r.worker(json.loads(payload))
        if payloads:
            r.worker(json.loads(payloads[0]))  # delivered twice: runs nothing
        r.send("GET", f"/v1/responses/{rid}")
        r.send("GET", f"/v1/responses/{rid}", query={"stream": "true"})
        r.send("POST", "/v1/responses", {"input": "again", "background": True, "stream": True})
        r.send("POST", "/v1/responses", {"input": "x", "background": True}, caller=None)


def responses_background_compacted(r: Any) -> None:
    """Queued past its compaction threshold: the worker compacts, once, when it runs the turn."""
    install(r, lambda_function_name="chatloop-chat")
    management = [{"type": "compaction", "compact_threshold": 1000}]
    with lambda_invocations(1) as payloads:
        body = {"input": "word " * 1500, "context_management": management, "background": True}
        _, queued = r.send("POST", "/v1/responses", body)
        for payload in list(payloads):
            r.worker(json.loads(payload))
        r.send("GET", f"/v1/responses/{_response_id(queued)}")


def responses_background_refused(r: Any) -> None:
    """A spent caller's background request: the plain turn's 429, nothing invoked, nothing held."""
    install(r, lambda_function_name="chatloop-chat", budget_tokens_per_day=30, budget_concurrent_turns=5)
    with lambda_invocations(0):
        r.send("POST", "/v1/responses", {"input": "spend", "max_output_tokens": 20, "store": False})
        r.send("POST", "/v1/responses", {"input": "more", "max_output_tokens": 20, "background": True})
        r.send("GET", "/v1/usage")


@contextlib.contextmanager
def lambda_invocations(answered: int) -> Iterator[list[bytes]]:
    """The worker's ``lambda.invoke`` through botocore's Stubber: ``answered`` invocations answered 202 (a further
    one fails its request); the payloads sent, in order."""
    import boto3
    from botocore.stub import ANY, Stubber

    from chatloop.api.openai.responses import worker

    client = boto3.client(
        "lambda",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # noqa: S106
    )
    payloads: list[bytes] = []
    client.meta.events.register(
        "provide-client-params.lambda.Invoke", lambda params, **_: payloads.append(params["Payload"])
    )
    stubber = Stubber(client)
    for _ in range(answered):
        expected = {"FunctionName": ANY, "InvocationType": ANY, "Payload": ANY}
        stubber.add_response("invoke", {"StatusCode": 202}, expected)
    stubber.activate()
    saved = worker._CLIENTS.get(5.0)
    worker._CLIENTS[5.0] = client
    try:
        yield payloads
    finally:
        if saved is None:
            worker._CLIENTS.pop(5.0, None)
        else:
            worker._CLIENTS[5.0] = saved


# --- helpers -------------------------------------------------------------------------------------------------------
def _output(body: Any) -> list[dict[str, Any]]:
    if isinstance(body, dict) and "sse" in body:
        done = [e["data"] for e in body["sse"] if isinstance(e.get("data"), dict) and "response" in e["data"]]
        body = done[-1]["response"] if done else {}
    return list(body.get("output", [])) if isinstance(body, dict) else []


def _response_id(body: Any) -> str:
    if isinstance(body, dict) and "sse" in body:
        for event in body["sse"]:
            data = event.get("data")
            if isinstance(data, dict) and isinstance(data.get("response"), dict):
                return str(data["response"].get("id"))
    return str(body.get("id")) if isinstance(body, dict) else "resp_none"


def _approval_id(body: Any) -> str | None:
    """The id of the approval request a /chat answer asked with (``mcpr_…``), wherever the body carries it."""
    found = re.search(r'"(mcpr_[A-Za-z0-9_-]+)"', json.dumps(body))
    return found.group(1) if found else None


CASES: dict[str, Callable[[Any], None]] = {
    name: case
    for name, case in sorted(globals().items())
    if callable(case) and name.startswith(("chat_", "completions_", "responses_")) and name != "chat_body"
}
