"""Sealed state (issue 41): nothing secret at rest for a queued background request, no shared scope for callers with
no identity, approvals bound to the server they were asked for, and one spelling for every sealed item.

Real parts: the app under uvicorn with the openai SDK (``make run``: the background turn runs in-process over a
SQLite file), the Lambda handler in buffered mode with API Gateway events over a DynamoDB table (moto), and real MCP
servers (tests/support/mcp_servers.py) that record every request they receive."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from chatloop.api.turns.compaction import SUMMARY_PROMPT
from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.tools.base import ToolRegistry
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
    from botocore.stub import ANY, Stubber
    from moto import mock_aws

    from chatloop.api.openai.responses import worker
    from chatloop.store.dynamodb_layout import create_table
    from tests.support.aws import FAKE_CREDENTIALS

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        create_table(dynamodb, "conversations")  # type: ignore[arg-type]
        settings = Settings(
            conversation_table_name="conversations",
            lambda_function_name="chatloop-chat",
            mcp_allowed_urls=f"{guarded.root}/",
        )
        app_runtime(settings, model=ScriptedModel(searcher), registry=ToolRegistry(), keys=KEYS)
        lambda_client = boto3.client("lambda", region_name="us-east-1")
        sent: list[dict[str, Any]] = []
        lambda_client.meta.events.register(
            "provide-client-params.lambda.Invoke", lambda params, **_: sent.append(dict(params))
        )
        stubber = Stubber(lambda_client)
        stubber.add_response(
            "invoke", {"StatusCode": 202}, {"FunctionName": ANY, "InvocationType": ANY, "Payload": ANY}
        )
        stubber.activate()
        monkeypatch.setitem(worker._CLIENTS, 5.0, lambda_client)

        event = rest_event(
            "POST",
            "/v1/responses",
            json.dumps({"input": "search", "background": True, "tools": [secret_tool(guarded)]}),
        )
        event["requestContext"]["identity"]["apiKeyId"] = "key-a"
        queued = handle(event)
        assert queued["statusCode"] == 200, response_body(queued)
        stored = table_text(dynamodb)
        assert TOKEN not in stored and HEADER_SECRET not in stored and "X-Tenant" not in stored
        assert TOKEN not in sent[0]["Payload"].decode()
        before = len(guarded.requests)
        assert handle(json.loads(sent[0]["Payload"])) == {"ran": True, "status": "completed"}
        assert len(guarded.requests) > before and all(ok for _, _, ok in guarded.requests)
        stored = table_text(dynamodb)
        assert TOKEN not in stored and HEADER_SECRET not in stored


def table_text(dynamodb: Any) -> str:
    """Every attribute of every item, binary ones decompressed as the store writes them (zlib)."""
    texts: list[str] = []
    for item in dynamodb.scan(TableName="conversations")["Items"]:
        for value in item.values():
            if "B" in value:
                data = value["B"]
                try:
                    data = zlib.decompress(data)
                except zlib.error:
                    pass
                texts.append(data.decode("utf-8", "replace"))
            else:
                texts.append(json.dumps(value))
    return "\n".join(texts)
