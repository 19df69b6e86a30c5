"""Sealed state (issue 41): nothing secret at rest for a queued background request, no shared scope for callers with
no identity, approvals bound to the server they were asked for, and one spelling for every sealed item.

Real parts: the app under uvicorn with the openai SDK (``make run``: the background turn runs in-process over a
SQLite file), the Lambda handler in buffered mode with API Gateway events over a DynamoDB table (moto), and real MCP
servers (tests/support/mcp_servers.py) that record every request they receive."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from chatloop.api.turns.compaction import SUMMARY_PROMPT
from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.tools.base import ToolRegistry
from tests.support.aws import table_text
from tests.support.events import http_event, response_body, rest_event
from tests.support.handler import handle
from tests.support.mcp_servers import MCPTestServer, tools_server
from tests.support.models import ScriptedModel, call, offered
from tests.support.server import Server, app_server, client

KEYS = {"groq": "gsk_sealing_test_key_0123456789", "openai": None}
TOKEN = "mcp-bearer-TOKEN-7f3a9c"
HEADER_SECRET = "tenant-HEADER-SECRET-51e2"


def searcher(request: ModelRequest, n: int) -> ModelResponse:
    """Summarizes when asked to (the compaction prompt); else calls ``client__search`` while it is offered and has
    no result for the last question, then answers with the result."""
    messages = request.messages
    if messages[0]["content"] == SUMMARY_PROMPT:
        return ModelResponse("", "- The user asked to remember the code word PELICAN.", finish_reason="stop")
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    results = [str(m["content"]) for m in messages[last_user:] if m["role"] == "tool"]
    if "client__search" in offered(request) and not results:
        return ModelResponse(
            "", "", [call("client__search", {"query": "seals"}, id=f"call_{n}")], "tool_calls"
        )
    given = "\n".join(str(m["content"]) for m in messages if m["role"] == "system")
    return ModelResponse("", f"Answer: {results[-1] if results else given[-80:]}", finish_reason="stop")


def secret_tool(server: MCPTestServer, **extra: Any) -> dict[str, Any]:
    return {
        "type": "mcp",
        "server_label": "client",
        "server_url": server.url,
        "authorization": TOKEN,
        "headers": {"X-Tenant": HEADER_SECRET},
        "require_approval": "never",
        **extra,
    }


@pytest.fixture(scope="module")
def guarded() -> Iterator[MCPTestServer]:
    """An MCP server that answers only requests carrying ``Authorization: Bearer TOKEN``."""
    calls: list[str] = []
    with MCPTestServer(tools_server(calls=calls), token=TOKEN) as server:
        server.calls = calls  # type: ignore[attr-defined]
        yield server


def wait_for(sdk: openai.OpenAI, rid: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while (response := sdk.responses.retrieve(rid)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, response.status
        time.sleep(0.1)
    return response


# --- 1. a queued request's secrets are sealed at rest ------------------------------------------------------
def test_a_queued_requests_mcp_secrets_are_nowhere_in_the_sqlite_file_and_the_worker_still_uses_them(
    tmp_path, guarded
):
    path = tmp_path / "store.sqlite3"
    settings = Settings(conversation_store_path=str(path), mcp_allowed_urls=f"{guarded.root}/")
    model = ScriptedModel(searcher)
    with app_server(settings, model=model, registry=ToolRegistry(), keys=KEYS) as server:
        sdk = client(server)
        queued = sdk.responses.create(
            model="chatloop", input="search", background=True, tools=[secret_tool(guarded)]
        )
        done = wait_for(sdk, queued.id)
        raw = b"".join(p.read_bytes() for p in [path, Path(f"{path}-wal")] if p.exists())
    assert done.status == "completed" and "3 pages mention 'seals'" in done.output_text
    assert guarded.requests and all(authorized for _, _, authorized in guarded.requests)
    assert TOKEN.encode() not in raw and HEADER_SECRET.encode() not in raw
    assert b"X-Tenant" not in raw  # the header's name is the client's business too


def test_a_queued_requests_mcp_secrets_are_nowhere_in_the_dynamodb_table(
    tmp_path, app_runtime, monkeypatch, guarded
):
    import boto3
    from moto import mock_aws

    from chatloop.store.dynamodb_layout import create_table
    from tests.support.aws import FAKE_CREDENTIALS, invocations_kept

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        create_table(dynamodb, "conversations")
        settings = Settings(
            conversation_table_name="conversations",
            lambda_function_name="chatloop-chat",
            mcp_allowed_urls=f"{guarded.root}/",
        )
        app_runtime(settings, model=ScriptedModel(searcher), registry=ToolRegistry(), keys=KEYS)
        sent, _ = invocations_kept(monkeypatch, answers=2)

        def as_caller(method: str, path: str, body: Any = None) -> dict[str, Any]:
            event = rest_event(method, path, None if body is None else json.dumps(body))
            event["requestContext"]["identity"]["apiKeyId"] = "key-a"
            return handle(event)

        asked = {"input": "search", "background": True, "tools": [secret_tool(guarded)]}
        queued = as_caller("POST", "/v1/responses", asked)
        assert queued["statusCode"] == 200, response_body(queued)
        stored = table_text(dynamodb)
        assert TOKEN not in stored and HEADER_SECRET not in stored and "X-Tenant" not in stored
        assert TOKEN not in sent[0]["Payload"].decode()
        # Another container (its own runtime, the same deployment's keys) runs it, as Lambda delivers the event.
        app_runtime(settings, model=ScriptedModel(searcher), registry=ToolRegistry(), keys=KEYS)
        before = len(guarded.requests)
        assert handle(json.loads(sent[0]["Payload"])) == {"ran": True, "status": "completed"}
        assert len(guarded.requests) > before and all(ok for _, _, ok in guarded.requests)
        stored = table_text(dynamodb)
        assert TOKEN not in stored and HEADER_SECRET not in stored

        # Queued, then run by a container whose state key is another (STATE_KEY rotated meanwhile): the turn
        # fails, saying why; it never runs without its credentials.
        assert as_caller("POST", "/v1/responses", asked)["statusCode"] == 200
        other = {**KEYS, "groq": "gsk_another_key_0123456789"}
        app_runtime(settings, model=ScriptedModel(searcher), registry=ToolRegistry(), keys=other)
        before = len(guarded.requests)
        assert handle(json.loads(sent[1]["Payload"])) == {"ran": True, "status": "failed"}
        rid = json.loads(sent[1]["Payload"])["chatloop_background"]["response_id"]
        failed = as_caller("GET", f"/v1/responses/{rid}")
        assert "sealed secrets cannot be opened" in response_body(failed)
        assert len(guarded.requests) == before


# --- 3. an approval is bound to the server it was asked for ------------------------------------------------
@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> Iterator[tuple[Server, MCPTestServer, MCPTestServer]]:
    """The app, and two MCP servers it may reach (x and y), each recording the searches it ran."""
    with MCPTestServer(tools_server(calls=[])) as x, MCPTestServer(tools_server(calls=[])) as y:
        path = str(tmp_path_factory.mktemp("sealing") / "store.sqlite3")
        settings = Settings(conversation_store_path=path, mcp_allowed_urls=f"{x.root}/,{y.root}/")
        with app_server(settings, model=ScriptedModel(searcher), registry=ToolRegistry(), keys=KEYS) as app:
            yield app, x, y


def approval_asked(app: Server, at: MCPTestServer, **extra: Any) -> tuple[str, str]:
    """A response that waits for a person to approve a search at ``at``: its id, and the approval request's id."""
    tool: Any = {
        "type": "mcp",
        "server_label": "client",
        "server_url": at.url,
        "require_approval": "always",
        **extra,
    }
    asked = client(app).responses.create(model="chatloop", input="search", tools=[tool])
    request = next(o for o in asked.output if o.type == "mcp_approval_request")
    return asked.id, request.id


def approve(app: Server, previous: str, request_id: str, at: MCPTestServer, **extra: Any) -> Any:
    tool: Any = {"type": "mcp", "server_label": "client", "server_url": at.url, **extra}
    return client(app).responses.create(
        model="chatloop",
        previous_response_id=previous,
        input=[{"type": "mcp_approval_response", "approval_request_id": request_id, "approve": True}],
        tools=[tool],
    )


def test_an_approval_for_one_server_never_runs_at_another_under_the_same_label(pair):
    app, x, y = pair
    previous, request_id = approval_asked(app, x)
    y_seen = len(y.requests)
    with pytest.raises(openai.BadRequestError, match="server_url") as refused:
        approve(app, previous, request_id, y)
    assert "approval_request_id" in str(refused.value.body)
    assert len(y.requests) == y_seen  # refused before anything reached it: not even a tools/list
    # At the server it was asked for, the same approval still runs (it was not used up by the refusal).
    done = approve(app, previous, request_id, x)
    assert [o.type for o in done.output if o.type == "mcp_call"] == ["mcp_call"]


def test_an_approval_is_bound_to_its_servers_headers_without_keeping_their_values(pair):
    app, x, _ = pair
    previous, request_id = approval_asked(app, x, headers={"X-Tenant": "tenant-a"}, authorization="tok-a")
    for changed in [
        {"headers": {"X-Tenant": "tenant-b"}, "authorization": "tok-a"},
        {"headers": {"X-Tenant": "tenant-a"}, "authorization": "tok-b"},
        {"headers": {"X-Other": "tenant-a"}, "authorization": "tok-a"},
        {"authorization": "tok-a"},
    ]:
        seen = len(x.requests)
        with pytest.raises(openai.BadRequestError, match="server_url"):
            approve(app, previous, request_id, x, **changed)
        assert len(x.requests) == seen
    assert "tenant-a" not in request_id and "tok-a" not in request_id
    done = approve(app, previous, request_id, x, headers={"X-Tenant": "tenant-a"}, authorization="tok-a")
    assert [o.type for o in done.output if o.type == "mcp_call"] == ["mcp_call"]


# --- 2. a caller with no identity gets no shared scope -------------------------------------------------------
def chatter(turns: int) -> list[dict[str, Any]]:
    said = ["Please remember that the code word is PELICAN.", *(f"Turn {i}: fine." for i in range(1, turns))]
    return [
        m for s in said for m in ({"role": "user", "content": s}, {"role": "assistant", "content": "Noted."})
    ]


def unidentified(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``body`` POSTed through an HTTP API with no authorizer (no identity at all) to the Lambda handler."""
    response = handle(http_event("POST", path, json.dumps(body)))
    return response["statusCode"], json.loads(response_body(response))


def test_callers_with_no_identity_get_no_compaction_item_nor_open_one_sealed_to_no_one(app_runtime, pair):
    from chatloop.api.turns.compaction import PURPOSE, seal
    from chatloop.api.turns.statekey import state_key

    _, x, _ = pair
    model = ScriptedModel(searcher)
    runtime = app_runtime(
        Settings(mcp_allowed_urls=f"{x.root}/"), model=model, registry=ToolRegistry(), keys=KEYS
    )
    status, body = unidentified("/v1/responses/compact", {"model": "chatloop", "input": chatter(3)})
    assert status == 400 and "identity" in body["error"]["message"] and model.calls == 0
    automatic = [{"type": "compaction", "compact_threshold": 1000}]
    status, body = unidentified("/v1/responses", {"input": "hi", "context_management": automatic})
    assert (status, body["error"]["param"]) == (400, "context_management") and model.calls == 0
    # An item sealed to no one (as every unidentified caller's item was before): no unidentified caller opens it.
    key = asyncio.run(state_key(runtime, PURPOSE))
    item = {"type": "compaction", "encrypted_content": seal(key, "", {"summary": "the code word is PELICAN"})}
    status, body = unidentified(
        "/v1/responses", {"input": [item, {"role": "user", "content": "The code word?"}]}
    )
    assert (status, body["error"]["param"]) == (400, "input") and model.calls == 0
    # Approvals: a server that asks is refused up front; with none asked for, the turn runs as before.
    tool = {"type": "mcp", "server_label": "client", "server_url": x.url}
    seen = len(x.requests)
    status, body = unidentified("/v1/responses", {"input": "search", "tools": [tool]})
    assert (status, body["error"]["param"]) == (400, "tools[0].require_approval") and len(x.requests) == seen
    status, body = unidentified(
        "/v1/responses", {"input": "search", "tools": [{**tool, "require_approval": "never"}]}
    )
    assert status == 200 and "3 pages mention 'seals'" in json.dumps(body)
    # The operator's approval-required tools are not offered to such a caller: nothing to ask, nothing sealed.
    settings = Settings(mcp_allowed_urls=f"{x.root}/", approval_required_tools="client__search")
    app_runtime(settings, model=model, registry=ToolRegistry(), keys=KEYS)
    status, body = unidentified(
        "/v1/responses", {"input": "search", "tools": [{**tool, "require_approval": "never"}]}
    )
    assert status == 200 and "client__search" not in offered(model.requests[-1])
    assert not [o for o in body["output"] if o["type"] in ("mcp_approval_request", "mcp_call")]


# --- 4. one spelling for every sealed item ----------------------------------------------------------------
def respellings(sealed: str) -> dict[str, str]:
    """Other spellings of the same bytes (or of bytes with data after them) that a lenient decoder accepts."""
    standard = sealed.replace("-", "+").replace("_", "/")
    padded = sealed if sealed.endswith("=") else sealed + "="
    return {
        "a newline inside": sealed[:16] + "\n" + sealed[16:],
        "a trailing newline": sealed + "\n",
        "a stray character": sealed[:10] + "!" + sealed[10:],
        "spaces": " ".join([sealed[:8], sealed[8:]]),
        "the standard alphabet": standard,
        "data after the padding": padded + "AAAA",
        "a second padding": sealed + "==" if sealed.endswith("=") else sealed + "====",
    }


def test_a_compaction_item_has_one_spelling_and_every_other_is_a_400(pair):
    app, _, _ = pair
    sdk = client(app)
    item = None
    for _ in range(8):  # an item whose text has both URL-safe characters, so the other alphabet differs
        item = (
            sdk.responses.compact(model="chatloop", input=chatter(2)).output[-1].model_dump(exclude_none=True)
        )
        if "-" in item["encrypted_content"] and "_" in item["encrypted_content"]:
            break
    assert item is not None
    question = {"role": "user", "content": "The code word?"}
    for name, spelled in respellings(item["encrypted_content"]).items():
        assert spelled != item["encrypted_content"]
        with pytest.raises(openai.BadRequestError, match="compaction item") as refused:
            sdk.responses.create(model="chatloop", input=[{**item, "encrypted_content": spelled}, question])
        assert refused.value.status_code == 400, name
    assert sdk.responses.create(model="chatloop", input=[item, question]).status == "completed"


def test_an_approval_request_item_has_one_spelling_and_every_other_is_a_400(pair):
    app, x, _ = pair
    previous, request_id = approval_asked(app, x)
    for spelled in [
        request_id.upper(),
        request_id + "\n",
        " " + request_id,
        request_id[:-1] + "=",
        request_id + "0",
    ]:
        seen = len(x.requests)
        with pytest.raises(openai.BadRequestError):
            approve(app, previous, spelled, x)
        assert len(x.requests) == seen
    assert [o.type for o in approve(app, previous, request_id, x).output if o.type == "mcp_call"] == [
        "mcp_call"
    ]


def test_any_change_to_a_sealed_text_is_refused():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from chatloop.api.turns.compaction import seal, unseal

    key, owner = b"k" * 32, "apikey:k1"
    genuine = seal(key, owner, {"summary": "the code word is PELICAN"})
    assert unseal(key, owner, genuine) == {"summary": "the code word is PELICAN"}

    @settings(max_examples=50, deadline=None)
    @given(
        at=st.integers(0, len(genuine)),
        cut=st.integers(0, 3),
        insert=st.text(alphabet="\n\r\t =+/-_!.AQgw\x00é", max_size=4),
    )
    def check(at: int, cut: int, insert: str) -> None:
        mutated = genuine[:at] + insert + genuine[at + cut :]
        if mutated == genuine:
            return
        with pytest.raises(ValueError):
            unseal(key, owner, mutated)

    check()
