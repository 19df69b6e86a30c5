"""WebSocket mode's memory across app copies (issue 44): two copies over one SQLite file, each answering messages of
the same connection through ``session.answer`` (the transport-neutral core both transports call: on Lambda the
next message of a connection may reach another container). A ``store: false`` response is continued on the other
copy from the connection's memory, but only by the connection's caller; a stored response is continued from a new
connection on the other copy; and the HTTP route's approvals, budgets and decision lines hold over the socket."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

from chatloop.api.websocket.session import Socket, answer
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.providers.failures import ModelError
from chatloop.tools.base import ToolRegistry
from tests.support.handler import build_runtime
from tests.support.models import ScriptedModel

HOURS_2 = 7200


def heard(request: ModelRequest, _: int) -> ModelResponse:
    """Repeats every user message it was given: what history reached the model ("fail": it fails instead)."""
    users = [str(m["content"]) for m in request.messages if m["role"] == "user"]
    if users[-1] == "fail":
        raise ModelError("the model is down", model="scripted:model", status=503)
    return ModelResponse("scripted:model", content="heard: " + " | ".join(users), finish_reason="stop")


def copies(tmp_path, n: int = 2, **settings: Any) -> list[Any]:
    config = Settings(conversation_store_path=str(tmp_path / "store.sqlite3"), **settings)
    return [build_runtime(config, model=ScriptedModel(heard), registry=ToolRegistry()) for _ in range(n)]


async def say(runtime: Any, socket: Socket, **body: Any) -> list[dict[str, Any]]:
    """The events one ``response.create`` gets on ``socket``, answered by ``runtime``'s copy."""
    sent: list[dict[str, Any]] = []

    async def send(event: dict[str, Any]) -> None:
        sent.append(event)

    message = {"type": "response.create", **body}
    await answer(
        runtime, socket, json.dumps(message), send, deadline=Deadline.after(20), request_id=str(uuid.uuid4())
    )
    return sent


async def opened(runtime: Any, socket: Socket) -> Socket:
    """The connection opened as its transport opens it (the route's handshake, API Gateway's ``$connect``)."""
    connections = runtime.stores.state().connections
    await connections.open(socket.connection_id, socket.caller, HOURS_2, Deadline.after(5))
    return socket


def text(events: list[dict[str, Any]]) -> str:
    final = events[-1]
    assert final["type"] == "response.completed", final
    return str(final["response"]["output"][-1]["content"][0]["text"])


def test_a_store_false_memory_is_found_on_another_copy_by_its_caller_only(tmp_path):
    one, other = copies(tmp_path)

    async def run() -> None:
        alice = await opened(one, Socket("conn-1", "alice"))
        first = await say(one, alice, input="my name is Ada", store=False)
        rid = first[-1]["response"]["id"]
        again = await say(other, alice, input="what is my name?", store=False, previous_response_id=rid)
        assert text(again) == "heard: my name is Ada | what is my name?"
        # the same connection id, another caller: the memory is not theirs
        mallory = await say(other, Socket("conn-1", "mallory"), input="and?", previous_response_id=rid)
        assert [e["type"] for e in mallory] == ["error"]
        assert mallory[0]["error"]["code"] == "previous_response_not_found"

    asyncio.run(run())


def test_a_stored_response_is_continued_from_a_new_connection_on_another_copy(tmp_path):
    one, other = copies(tmp_path)

    async def run() -> None:
        kept = await say(one, await opened(one, Socket("conn-1", "alice")), input="the lighthouse")
        rid = kept[-1]["response"]["id"]
        fresh = await opened(other, Socket("conn-2", "alice"))
        assert text(await say(other, fresh, input="what?", previous_response_id=rid)) == (
            "heard: the lighthouse | what?"
        )

    asyncio.run(run())


def test_the_http_routes_budget_and_decision_lines_hold_over_the_socket(tmp_path, caplog):
    [runtime] = copies(tmp_path, 1, budget_requests_per_minute=1)

    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        socket = await opened(runtime, Socket("conn-1", "alice"))
        return await say(runtime, socket, input="one", store=False), await say(
            runtime, socket, input="two", store=False
        )

    with caplog.at_level(logging.INFO):
        first, second = asyncio.run(run())
    assert first[-1]["type"] == "response.completed"
    assert [e["type"] for e in second] == ["error"]
    refused = second[0]
    assert refused["status"] == 429 and refused["error"]["type"] == "rate_limit_exceeded"
    assert "retry-after" in refused["error"]["headers"]
    assert any("Tool execution decision" in r.getMessage() for r in caplog.records)


def test_a_lane_remembers_its_last_response_and_another_lane_may_fork_it(tmp_path):
    one, other = copies(tmp_path)

    async def run() -> None:
        alice = await opened(one, Socket("conn-1", "alice"))
        r1 = (await say(one, alice, input="one", store=False))[-1]["response"]["id"]
        r2 = (await say(other, alice, input="two", store=False, previous_response_id=r1))[-1]["response"][
            "id"
        ]
        # a fork onto another lane leaves r2 to its own lane
        fork = await say(one, alice, input="fork", store=False, previous_response_id=r2, stream_id="side")
        assert text(fork) == "heard: one | two | fork" and fork[-1]["stream_id"] == "side"
        three = await say(other, alice, input="three", store=False, previous_response_id=r2)
        assert text(three) == "heard: one | two | three"
        r3 = three[-1]["response"]["id"]
        # r1 was continued on its own lane: only that lane's last response is remembered
        stale = await say(one, alice, input="again", store=False, previous_response_id=r1)
        assert stale[0]["error"]["code"] == "previous_response_not_found"
        # a response that failed is not its lane's last: the one it continued can be tried again
        failed = await say(one, alice, input="fail", store=False, previous_response_id=r3)
        assert failed[-1]["type"] == "response.failed"
        assert text(await say(other, alice, input="retry", store=False, previous_response_id=r3)) == (
            "heard: one | two | three | retry"
        )

    asyncio.run(run())


def test_an_approval_asked_on_one_copy_is_answered_over_the_socket_on_the_other(tmp_path, sandbox):
    from chatloop.tools.javascript import ExecuteJavaScriptTool
    from tests.support.approvals import KEYS, calculator

    config = Settings(
        conversation_store_path=str(tmp_path / "store.sqlite3"), approval_required_tools="execute_javascript"
    )
    registry = ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    one, other = (build_runtime(config, model=calculator(), registry=registry, keys=KEYS) for _ in range(2))

    async def run() -> None:
        alice = await opened(one, Socket("conn-1", "alice"))
        asked = (await say(one, alice, input="6*7?", store=False))[-1]["response"]
        (request,) = [o for o in asked["output"] if o["type"] == "mcp_approval_request"]
        assert request["name"] == "execute_javascript"  # nothing ran before a person said yes
        answer_item = {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}
        # answered on another lane (a fork: the asking response stays remembered), then once more
        fork = {"store": False, "previous_response_id": asked["id"], "stream_id": "answers"}
        done = await say(other, alice, input=[answer_item], **fork)
        assert text(done) == "Result: 42"
        again = await say(one, alice, input=[answer_item], store=False, previous_response_id=asked["id"])
        assert again[0]["type"] == "error" and "already answered" in again[0]["error"]["message"]  # used once

    asyncio.run(run())
