"""Tool approvals on /v1/responses (issue 37): a call that needs a person's approval ends the turn with an
``mcp_approval_request`` item; the answer, sent with ``previous_response_id``, a conversation or the whole history,
runs it (approved) or tells the model (denied). Forged, foreign and replayed answers are a 400 and run nothing.

Two copies of the app (each its own runtime: a container) serve over one SQLite store; the answer goes to the copy
that did not ask. Real clients: the openai SDK and the Agents SDK against the app under uvicorn; real MCP servers
(tests/support/mcp_servers.py); a scripted model that keeps calling its tool while it has no result, as models do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse, ToolCall
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.approvals import KEYS, calculator, said
from tests.support.events import parse_sse
from tests.support.mcp_servers import MCPTestServer
from tests.support.models import ScriptedModel, call, offered
from tests.support.server import Server, app_server, client


def searcher(tool: str) -> ScriptedModel:
    """Calls ``tool`` while it is offered and no tool message answers the last user message; then answers with
    what the tool message said (a result, or the denial)."""

    def script(request: ModelRequest, n: int) -> ModelResponse:
        messages = request.messages
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
        if tool in offered(request) and not results:
            return ModelResponse("", "", [call(tool, {"query": "approvals"}, id=f"call_{n}")], "tool_calls")
        return ModelResponse(
            "", f"Answer from: {said(results[-1]) if results else 'nothing'}", finish_reason="stop"
        )

    return ScriptedModel(script)


@pytest.fixture(scope="module")
def copies(tmp_path_factory, docs, sandbox) -> Iterator[tuple[Server, Server, ScriptedModel]]:
    """Two copies of the app over one store, one model script between them (it sees every turn)."""
    path = str(tmp_path_factory.mktemp("approvals") / "store.sqlite3")
    settings = Settings(conversation_store_path=path, mcp_allowed_urls=f"{docs.root}/")
    model = searcher("client__search")
    registry = ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    with (
        app_server(settings, model=model, registry=registry, keys=KEYS) as first,
        app_server(settings, model=model, registry=registry, keys=KEYS) as second,
    ):
        yield first, second, model


def mcp_tool(docs: MCPTestServer, **extra: Any) -> Any:
    return {"type": "mcp", "server_label": "client", "server_url": docs.url, **extra}


def answer(request_id: str, approve: bool, reason: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "mcp_approval_response",
        "approval_request_id": request_id,
        "approve": approve,
    }
    if reason is not None:
        item["reason"] = reason
    return item


def ask(server: Server, docs: MCPTestServer, key: str = "alice-key", **extra: Any) -> Any:
    return client(server, key).responses.create(
        model="chatloop", input="search for approvals", tools=[mcp_tool(docs, **extra)]
    )


# --- the openai SDK round trip ---------------------------------------------------------------------------
def test_an_approved_call_runs_at_another_copy_and_the_loop_goes_on(copies, docs):
    first, second, model = copies
    before = list(docs.calls)
    asked = ask(first, docs)  # require_approval left out: OpenAI's default, "always"
    request = next(o for o in asked.output if o.type == "mcp_approval_request")
    assert (request.server_label, request.name) == ("client", "search")
    assert json.loads(request.arguments) == {"query": "approvals"}
    assert docs.calls == before  # nothing ran before a person said yes
    assert (
        asked.output[-1].type == "mcp_approval_request"
        and asked.x_chatloop["stop_reason"] == "approval_required"
    )

    done = client(second).responses.create(
        model="chatloop",
        previous_response_id=asked.id,
        input=[answer(request.id, True)],
        tools=[mcp_tool(docs)],
    )
    ran = next(o for o in done.output if o.type == "mcp_call")
    assert ran.approval_request_id == request.id and ran.status == "completed"
    assert "3 pages mention 'approvals'" in (ran.output or "")
    assert docs.calls == [*before, "approvals"]
    assert "3 pages mention" in done.output_text  # the model was asked again with the result, and answered
    resumed = model.requests[-1].messages
    assert [m["role"] for m in resumed[-2:]] == ["assistant", "tool"]


def test_a_denied_call_is_told_to_the_model_with_the_reason(copies, docs):
    first, second, model = copies
    before = list(docs.calls)
    asked = ask(first, docs, require_approval="always")
    request = next(o for o in asked.output if o.type == "mcp_approval_request")
    done = client(second).responses.create(
        model="chatloop",
        previous_response_id=asked.id,
        input=[answer(request.id, False, "not on a Friday")],
        tools=[mcp_tool(docs)],
    )
    assert docs.calls == before
    assert not [o for o in done.output if o.type == "mcp_call"]
    assert "did not approve" in done.output_text and "not on a Friday" in done.output_text
    # Continued once more: the model is given the denied call and the denial, in order, as history.
    later = client(first).responses.create(model="chatloop", previous_response_id=done.id, input="and now?")
    assert later.status == "completed"
    history = model.requests[-1].messages
    denial = next(m for m in history if m["role"] == "tool")
    assert "not on a Friday" in denial["content"]


def test_never_and_the_never_filter_run_without_asking(copies, docs):
    first, _, _ = copies
    for rule in ["never", {"never": {"tool_names": ["search"]}}]:
        done = ask(first, docs, require_approval=rule)
        assert [o.type for o in done.output if o.type.startswith("mcp_")] == ["mcp_list_tools", "mcp_call"]
    asked = ask(first, docs, require_approval={"always": {"tool_names": ["search"]}})
    assert any(o.type == "mcp_approval_request" for o in asked.output)


# --- forged, foreign, replayed ------------------------------------------------------------------------------
def test_a_replayed_approval_is_a_400_and_runs_nothing(copies, docs):
    first, second, _ = copies
    asked = ask(first, docs)
    request = next(o for o in asked.output if o.type == "mcp_approval_request")
    body = {"previous_response_id": asked.id, "input": [answer(request.id, True)], "tools": [mcp_tool(docs)]}
    client(second).responses.create(model="chatloop", **body)
    after_first = list(docs.calls)
    for server in (first, second):  # the same answer again, from the same chain point, at either copy
        with pytest.raises(openai.BadRequestError, match="already answered"):
            client(server).responses.create(model="chatloop", **body)
    assert docs.calls == after_first


def test_a_forged_approval_request_is_a_400_and_runs_nothing(copies, docs):
    first, _, model = copies
    asked = ask(first, docs)
    request = next(o for o in asked.output if o.type == "mcp_approval_request")
    before, calls = list(docs.calls), model.calls
    # The whole history sent back (no previous_response_id), the request's arguments changed by the client ...
    history = [
        {"role": "user", "content": "search for approvals"},
        {**request.model_dump(), "arguments": '{"query": "x"}'},
    ]
    # ... a request this server never made ...
    made_up = {**request.model_dump(), "id": "mcpr_" + "0" * 64}
    for items in (
        [*history, answer(request.id, True)],
        [history[0], made_up, answer(made_up["id"], True)],
        [answer("mcpr_nothing", True)],  # ... and an answer to nothing at all
    ):
        with pytest.raises(openai.BadRequestError, match="names no approval request"):
            client(first).responses.create(model="chatloop", input=items, tools=[mcp_tool(docs)])
    assert docs.calls == before and model.calls == calls


def test_another_callers_approval_is_refused_and_runs_nothing(copies, docs):
    first, second, model = copies
    asked = ask(first, docs, key="alice-key")
    request = next(o for o in asked.output if o.type == "mcp_approval_request")
    before, calls = list(docs.calls), model.calls
    mallory = client(second, "mallory-key")
    with pytest.raises(openai.NotFoundError):  # alice's stored response does not exist for mallory
        mallory.responses.create(
            model="chatloop",
            previous_response_id=asked.id,
            input=[answer(request.id, True)],
            tools=[mcp_tool(docs)],
        )
    # Alice's request item, sent back as mallory's own history: sealed to alice, so not an approval for mallory.
    items = [{"role": "user", "content": "search"}, request.model_dump(), answer(request.id, True)]
    with pytest.raises(openai.BadRequestError, match="names no approval request"):
        mallory.responses.create(model="chatloop", input=items, tools=[mcp_tool(docs)])
    assert docs.calls == before and model.calls == calls


def test_the_whole_history_sent_back_works_as_the_agents_sdk_sends_it(copies, docs):
    first, second, _ = copies
    asked = ask(first, docs)
    history = [{"role": "user", "content": "search for approvals"}, *[o.model_dump() for o in asked.output]]
    request = next(o for o in asked.output if o.type == "mcp_approval_request")
    done = client(second).responses.create(
        model="chatloop", input=[*history, answer(request.id, True)], tools=[mcp_tool(docs)]
    )
    ran = next(o for o in done.output if o.type == "mcp_call")
    assert ran.approval_request_id == request.id
    # Sent back again with what followed: the answer is history now (acted upon), nothing runs twice.
    before = list(docs.calls)
    again = [
        *history,
        answer(request.id, True),
        *[o.model_dump() for o in done.output],
        {"role": "user", "content": "thanks"},
    ]
    client(first).responses.create(
        model="chatloop", input=again, tools=[mcp_tool(docs, require_approval="never")]
    )
    assert docs.calls[: len(before)] == before


# --- the Agents SDK ------------------------------------------------------------------------------------------
def agent_with(
    server: Server, docs: MCPTestServer, on_approval: Any = None, sent: list[dict[str, Any]] | None = None
) -> Any:
    """An agent with the app's hosted MCP tool (approval always); ``sent``: every request body it sends."""
    import httpx2
    from agents import Agent, HostedMCPTool, OpenAIResponsesModel, set_tracing_disabled

    set_tracing_disabled(True)

    async def record(request: httpx2.Request) -> None:
        if sent is not None:
            sent.append(json.loads(request.content or b"{}"))

    sdk = openai.AsyncOpenAI(
        base_url=server.base_url,
        api_key="unused",
        max_retries=0,
        default_headers={"x-api-key": "alice-key"},
        http_client=httpx2.AsyncClient(event_hooks={"request": [record]}),
    )
    config: Any = {
        "type": "mcp",
        "server_label": "client",
        "server_url": docs.url,
        "require_approval": "always",
    }
    return Agent(
        name="searcher",
        instructions="Search, then answer.",
        model=OpenAIResponsesModel(model="chatloop", openai_client=sdk),
        tools=[HostedMCPTool(tool_config=config, on_approval_request=on_approval)],
    )


@pytest.mark.parametrize("approve", [True, False])
def test_the_agents_sdk_hosted_mcp_tool_asks_its_callback(copies, docs, approve):
    import asyncio

    from agents import Runner

    first, _, _ = copies
    asked: list[Any] = []

    def decide(request: Any) -> Any:
        asked.append(request.data)
        return {"approve": approve} if approve else {"approve": False, "reason": "the user said no"}

    before = list(docs.calls)
    result = asyncio.run(Runner.run(agent_with(first, docs, decide), "search for approvals"))
    assert [(r.server_label, r.name) for r in asked] == [("client", "search")]
    if approve:
        assert docs.calls == [*before, "approvals"]
        assert "3 pages mention 'approvals'" in result.final_output
    else:
        assert docs.calls == before
        assert "did not approve" in result.final_output and "the user said no" in result.final_output


def test_the_agents_sdk_interruption_is_resumed_through_previous_response_id(copies, docs):
    import asyncio

    from agents import Runner

    first, _, _ = copies
    sent: list[dict[str, Any]] = []
    agent = agent_with(first, docs, sent=sent)
    before = list(docs.calls)

    async def interrupted_then_resumed() -> tuple[Any, Any]:
        paused = await Runner.run(agent, "search for approvals", auto_previous_response_id=True)
        state = paused.to_state()
        for item in paused.interruptions:
            state.approve(item)
        resumed = await Runner.run(agent, state, auto_previous_response_id=True)
        return paused, resumed

    paused, resumed = asyncio.run(interrupted_then_resumed())
    assert len(paused.interruptions) == 1 and docs.calls[: len(before)] == before
    assert docs.calls == [*before, "approvals"]
    assert "3 pages mention 'approvals'" in resumed.final_output
    # The resumed run continued the stored response: its request named it and sent only the answer.
    assert [body.get("previous_response_id") is not None for body in sent] == [False, True]
    assert [item["type"] for item in sent[1]["input"]] == ["mcp_approval_response"]


# --- the stream and the decision lines ---------------------------------------------------------------------
def test_an_approval_request_streams_as_openai_streams_it_and_each_step_is_a_decision_line(
    copies, docs, caplog
):
    first, second, _ = copies
    caplog.set_level("INFO")
    sdk = client(first)
    with sdk.responses.stream(
        model="chatloop", input="search for approvals", tools=[mcp_tool(docs)]
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [(e.type, getattr(getattr(e, "item", None), "type", None)) for e in events]
    added = kinds.index(("response.output_item.added", "mcp_approval_request"))
    assert kinds[added + 1] == ("response.output_item.done", "mcp_approval_request")
    assert kinds[-1] == ("response.completed", None)
    (request,) = [o for o in final.output if o.type == "mcp_approval_request"]
    assert events[added].item.id == request.id
    for approve in (True, False):  # approved once, then the same question denied
        if not approve:
            final = ask(first, docs)
            request = next(o for o in final.output if o.type == "mcp_approval_request")
        client(second).responses.create(
            model="chatloop",
            previous_response_id=final.id,
            input=[answer(request.id, approve)],
            tools=[mcp_tool(docs)],
        )
    reasons = [
        r.getMessage().rsplit("reason=", 1)[1].split()[0]
        for r in caplog.records
        if "Tool execution decision:" in r.getMessage()
    ]
    assert {"approval_required", "approved", "denied"} <= set(reasons)


# --- the operator's policy on /chat and chat completions --------------------------------------------------------
@pytest.fixture(scope="module")
def guarded(tmp_path_factory, sandbox) -> Iterator[tuple[Server, Server, ScriptedModel]]:
    """Two copies whose operator requires approval for the sandbox."""
    path = str(tmp_path_factory.mktemp("guarded") / "store.sqlite3")
    settings = Settings(conversation_store_path=path, approval_required_tools="execute_javascript")
    model = calculator()
    registry = ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    with (
        app_server(settings, model=model, registry=registry, keys=KEYS) as first,
        app_server(settings, model=model, registry=registry, keys=KEYS) as second,
    ):
        yield first, second, model


def chat(server: Server, body: dict[str, Any]) -> Any:
    import httpx

    response = httpx.post(f"{server.root}/chat", json=body, headers={"x-api-key": "alice-key"}, timeout=30)
    return response.status_code, response


def test_chat_asks_before_the_sandbox_runs_and_an_answer_in_the_conversation_resumes(guarded):
    first, second, _ = guarded
    conversation = client(first).conversations.create().id
    code, response = chat(
        first,
        {"conversation": conversation, "messages": [{"role": "user", "content": "6*7?"}], "stream": False},
    )
    body = response.json()
    assert code == 200 and body["stop_reason"] == "approval_required", body
    (asked,) = [c for c in body["tool_calls"] if c["reason"] == "approval_required"]
    assert asked["name"] == "execute_javascript" and asked["id"].startswith("mcpr_")
    assert not [c for c in body["tool_calls"] if c["status"] == "ok"]  # nothing ran

    approval = {"approval_request_id": asked["id"], "approve": True}
    code, response = chat(
        second, {"conversation": conversation, "messages": [], "approvals": [approval], "stream": False}
    )
    body = response.json()
    assert code == 200 and body["stop_reason"] == "stop", body
    assert [c["status"] for c in body["tool_calls"]] == ["ok"] and "42" in body["message"]["content"]
    code, response = chat(
        first, {"conversation": conversation, "messages": [], "approvals": [approval], "stream": False}
    )
    assert code == 400 and "already answered" in response.text  # used once


def test_chat_streams_an_approval_request_event_and_a_denial_reaches_the_model(guarded):
    first, second, _ = guarded
    conversation = client(first).conversations.create().id
    code, response = chat(
        first, {"conversation": conversation, "messages": [{"role": "user", "content": "6*7?"}]}
    )
    events = parse_sse(response.text)
    (request,) = [data for name, data in events if name == "approval_request"]
    assert request["name"] == "execute_javascript" and "6 * 7" in request["arguments"]
    assert events[-1][0] == "done" and events[-1][1]["stop_reason"] == "approval_required"
    denial = {"approval_request_id": request["id"], "approve": False, "reason": "no code today"}
    code, response = chat(
        second, {"conversation": conversation, "messages": [], "approvals": [denial], "stream": False}
    )
    assert code == 200 and "no code today" in response.json()["message"]["content"]


def test_chat_completions_does_not_offer_a_tool_that_needs_approval(guarded):
    first, _, model = guarded
    completion = client(first).chat.completions.create(
        model="chatloop", messages=[{"role": "user", "content": "6*7?"}]
    )
    assert completion.choices[0].message.content == "Result: none"
    assert "execute_javascript" not in offered(model.requests[-1])


def test_the_operators_policy_on_responses_asks_for_the_sandbox_under_the_builtin_label(guarded):
    first, second, _ = guarded
    asked = client(first).responses.create(model="chatloop", input="6*7?")
    (request,) = [o for o in asked.output if o.type == "mcp_approval_request"]
    assert (request.server_label, request.name) == ("chatloop_builtin", "execute_javascript")
    done = client(second).responses.create(
        model="chatloop", previous_response_id=asked.id, input=[answer(request.id, True)]
    )
    (run,) = [o for o in done.output if o.type == "code_interpreter_call"]
    assert run.code == "return 6 * 7" and "42" in done.output_text


# --- the seals, fuzzed -------------------------------------------------------------------------------------------
def test_a_sealed_id_verifies_only_for_its_caller_tool_and_exact_arguments():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from chatloop.api.items.approvals import McpApprovalRequestInput
    from chatloop.api.turns.approvals import Sealer

    text = st.text(max_size=40)

    @settings(max_examples=200, deadline=None)
    @given(
        owner=text,
        other=text,
        name=st.from_regex(r"[a-z]{1,10}", fullmatch=True),
        arguments=text,
        changed=text,
    )
    def check(owner: str, other: str, name: str, arguments: str, changed: str) -> None:
        sealer = Sealer(b"k" * 32, owner)
        sealed = sealer.approval_id(ToolCall("call_1", f"docs__{name}", arguments))
        request = McpApprovalRequestInput(
            type="mcp_approval_request", id=sealed, server_label="docs", name=name, arguments=arguments
        )
        assert sealer.verifies(request)
        assert Sealer(b"k" * 32, other).verifies(request) == (other == owner)
        assert Sealer(b"x" * 32, owner).verifies(request) is False
        altered = request.model_copy(update={"arguments": changed})
        assert sealer.verifies(altered) == (changed == arguments)

    check()


def test_an_answer_in_a_responses_conversation_runs_once_and_stays_its_history(copies, docs):
    first, second, _ = copies
    alice = client(first)
    conversation = alice.conversations.create().id
    asked = alice.responses.create(
        model="chatloop", conversation=conversation, input="search for approvals", tools=[mcp_tool(docs)]
    )
    request = next(o for o in asked.output if o.type == "mcp_approval_request")
    before = list(docs.calls)
    body = {"conversation": conversation, "input": [answer(request.id, True)], "tools": [mcp_tool(docs)]}
    done = client(second).responses.create(model="chatloop", **body)
    assert next(o for o in done.output if o.type == "mcp_call").approval_request_id == request.id
    assert docs.calls == [*before, "approvals"]
    with pytest.raises(openai.BadRequestError, match="already answered"):
        client(first).responses.create(model="chatloop", **body)
    later = client(first).responses.create(model="chatloop", conversation=conversation, input="thanks")
    assert later.status == "completed" and docs.calls == [*before, "approvals"]
    kinds = [i.type for i in alice.conversations.items.list(conversation, order="asc").data]
    assert kinds.count("mcp_approval_request") == 1 and kinds.count("mcp_approval_response") == 1


def test_an_approval_answered_in_a_background_response_runs_once_in_its_worker(copies, docs):
    import time

    first, second, _ = copies
    asked = ask(first, docs)
    request = next(o for o in asked.output if o.type == "mcp_approval_request")
    before = list(docs.calls)
    sdk = client(second)
    queued = sdk.responses.create(
        model="chatloop",
        background=True,
        previous_response_id=asked.id,
        input=[answer(request.id, True)],
        tools=[mcp_tool(docs)],
    )
    done = queued
    for _ in range(200):  # the worker (a task of this copy here; a Lambda invocation deployed) runs it
        done = sdk.responses.retrieve(queued.id)
        if done.status in ("completed", "failed", "incomplete", "cancelled"):
            break
        time.sleep(0.05)
    assert done.status == "completed", done
    assert next(o for o in done.output if o.type == "mcp_call").approval_request_id == request.id
    assert docs.calls == [*before, "approvals"]  # claimed when queued, run once by the worker


@pytest.mark.parametrize(("compacted", "background"), [(False, False), (True, False), (False, True)])
def test_an_approval_refused_by_the_budget_is_not_used_up_and_runs_once_the_budget_renews(
    tmp_path, docs, compacted, background
):
    """The answer's turn refused (429, nothing run) leaves the approval unused: sent again once the budget allows,
    it runs, once. ``compacted``: the answer's turn is past its compact_threshold, so the refusal comes at the
    summary's call, and the summary and the turn together are one request. ``background``: the answer's turn is
    queued, so the refusal comes at the door (issue 41): no record is kept, no worker started."""
    import sqlite3
    import time

    from chatloop.store.budget_sqlite import SQLiteLedger

    def kept() -> int:
        with sqlite3.connect(path) as db:
            return int(db.execute("SELECT count(*) FROM records WHERE kind = 'response'").fetchone()[0])

    path = tmp_path / "store.sqlite3"
    settings = Settings(
        conversation_store_path=str(path), mcp_allowed_urls=f"{docs.root}/", budget_requests_per_minute=1
    )
    now = [1_800_000_000.0]
    with app_server(settings, model=searcher("client__search"), registry=ToolRegistry(), keys=KEYS) as server:
        server.runtime.budgets().ledger_ = SQLiteLedger(path, lambda: now[0])
        sdk = client(server).with_options(max_retries=0)
        asked = sdk.responses.create(
            model="chatloop", input="word " * 1500 + "search for approvals", tools=[mcp_tool(docs)]
        )
        request = next(o for o in asked.output if o.type == "mcp_approval_request")
        body: dict[str, Any] = {
            "previous_response_id": asked.id,
            "input": [answer(request.id, True)],
            "tools": [mcp_tool(docs)],
        }
        if compacted:
            body["context_management"] = [{"type": "compaction", "compact_threshold": 1000}]
        before, responses = list(docs.calls), kept()
        with pytest.raises(openai.RateLimitError):
            sdk.responses.create(model="chatloop", background=background, **body)
        assert docs.calls == before and kept() == responses
        now[0] += 61
        done = sdk.responses.create(model="chatloop", background=background, **body)
        for _ in range(200):  # a background one: its worker (a task of this process) runs it
            if done.status not in ("queued", "in_progress"):
                break
            time.sleep(0.05)
            done = sdk.responses.retrieve(done.id)
        assert next(o for o in done.output if o.type == "mcp_call").approval_request_id == request.id
        assert docs.calls == [*before, "approvals"]
        now[0] += 61
        with pytest.raises(openai.BadRequestError, match="already answered"):
            sdk.responses.create(model="chatloop", **body)


def test_an_approval_whose_background_turn_could_not_be_started_is_not_used_up(tmp_path, docs, monkeypatch):
    """A background answer whose worker could not be started (on Lambda: ``lambda.invoke`` failed, a 503 from
    ``background._start_worker``) runs nothing: the approval can be sent again, and runs once."""
    from chatloop.api.http.errors import RequestError
    from chatloop.api.openai.responses import background

    async def not_started(*args: Any) -> None:
        raise RequestError(
            503, "background_unavailable", "the background turn could not be started; try again"
        )

    settings = Settings(
        conversation_store_path=str(tmp_path / "store.sqlite3"), mcp_allowed_urls=f"{docs.root}/"
    )
    with app_server(settings, model=searcher("client__search"), registry=ToolRegistry(), keys=KEYS) as server:
        asked = ask(server, docs)
        request = next(o for o in asked.output if o.type == "mcp_approval_request")
        body = {
            "previous_response_id": asked.id,
            "input": [answer(request.id, True)],
            "tools": [mcp_tool(docs)],
        }
        before = list(docs.calls)
        with monkeypatch.context() as patch:
            patch.setattr(background, "_start_worker", not_started)
            with pytest.raises(openai.InternalServerError):
                client(server).with_options(max_retries=0).responses.create(
                    model="chatloop", background=True, **body
                )
        assert docs.calls == before
        done = client(server).responses.create(model="chatloop", **body)
        assert next(o for o in done.output if o.type == "mcp_call").approval_request_id == request.id
        assert docs.calls == [*before, "approvals"]
