"""A turn with no HTTP request (issue 42's jobs): the pipeline runs on a ``RequestContext`` built from explicit inputs
(a background job's, a WebSocket message's), and the Responses door's stream can be had as the event dicts its SSE
frames carry (``ResponsesDoor.serve_events``), kept and journaled as a streamed request's are, for a door that sends
each event elsewhere."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.responses import Response

from chatloop.api.http.context import QUEUED, RequestContext, TurnJob
from chatloop.api.http.errors import RequestError
from chatloop.api.openai.responses.run import ResponsesDoor
from chatloop.api.openai.responses.turn import ResponsesPlan
from chatloop.api.turns.pipeline import Admitted, run_door
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.engine import Event
from chatloop.providers.base import ModelResponse
from chatloop.tools.base import ToolRegistry
from tests.support.events import parse_sse, response_body, rest_event
from tests.support.handler import handle
from tests.support.models import ScriptedModel

CALLER = "apikey:key-a"
"""The caller an API Gateway request with API key id ``key-a`` is (``caller_of``)."""


class SendingDoor(ResponsesDoor):
    """A door of another transport, as a WebSocket door would be: each event sent as a dict, no SSE."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict[str, object]] = []

    async def serve(
        self, ctx: RequestContext, plan: ResponsesPlan, admitted: Admitted, events: AsyncIterator[Event]
    ) -> Response:
        async for event in self.serve_events(ctx, plan, admitted, events):
            self.sent.append(event)
        return Response(status_code=204)


def answering(text: str) -> ScriptedModel:
    return ScriptedModel(lambda request, n: ModelResponse("", text, finish_reason="stop"))


def get(path: str, **query: str) -> tuple[int, str]:
    event = rest_event("GET", path)
    event["requestContext"]["identity"]["apiKeyId"] = "key-a"
    event["queryStringParameters"] = query or None
    response = handle(event)
    return response["statusCode"], response_body(response)


def without_request(runtime: Any, body: bytes, request_id: str) -> RequestContext:
    return RequestContext(
        runtime, caller=CALLER, request_id=request_id, deadline=Deadline.after(30), body=body
    )


def test_a_turn_with_no_request_sends_the_events_a_stream_would_and_keeps_them(tmp_path, app_runtime):
    runtime = app_runtime(
        Settings(conversation_store_path=str(tmp_path / "s.sqlite3")),
        model=answering("Hello from no request."),
        registry=ToolRegistry(),
    )
    door = SendingDoor()
    body = json.dumps({"input": "hi", "stream": False}).encode()  # another transport streams whatever it says
    asyncio.run(run_door(without_request(runtime, body, "ws1"), door))

    kinds = [e["type"] for e in door.sent]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in door.sent] == list(range(len(door.sent)))
    final: Any = door.sent[-1]["response"]
    assert final["id"] == "resp_ws1" and final["output"][0]["content"][0]["text"] == "Hello from no request."
    # Kept as a streamed request's are: the response for its caller, and its events, the very dicts sent.
    status, stored = get("/v1/responses/resp_ws1")
    assert status == 200 and json.loads(stored)["status"] == "completed"
    status, replayed = get("/v1/responses/resp_ws1", stream="true")
    assert status == 200 and [data for _, data in parse_sse(replayed)] == door.sent


def test_a_given_body_is_checked_as_a_requests_is_before_any_model_call(tmp_path, app_runtime):
    model = answering("never")
    runtime = app_runtime(Settings(max_body_bytes=64), model=model, registry=ToolRegistry())
    with pytest.raises(RequestError) as large:
        asyncio.run(
            run_door(without_request(runtime, b'{"input": "' + b"x" * 64 + b'"}', "big"), SendingDoor())
        )
    with pytest.raises(RequestError) as broken:
        asyncio.run(run_door(without_request(runtime, b'{"input": ', "bad"), SendingDoor()))
    assert (large.value.status, broken.value.status) == (413, 400) and model.calls == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_given_body_is_a_4xx_or_a_turn_never_a_crash(raw, tmp_path, app_runtime):
    """A WebSocket message's body is the client's, as hostile as a request's: bad bytes are a 4xx naming no secret,
    before any model call."""
    model = answering("fine")
    runtime = app_runtime(Settings(max_body_bytes=100), model=model, registry=ToolRegistry())
    try:
        asyncio.run(run_door(without_request(runtime, raw, "fuzz"), SendingDoor()))
    except RequestError as error:
        assert 400 <= error.status < 500 and model.calls == 0


def test_a_jobs_context_is_its_owner_its_responses_id_and_its_deadline_with_no_connection(app_runtime):
    runtime = app_runtime(Settings(), model=answering("unused"), registry=ToolRegistry())
    deadline = Deadline.after(600)
    ctx = RequestContext.for_job(runtime, TurnJob("apikey:k", "resp_abc", deadline, {"input": "hi"}))
    assert (ctx.caller, ctx.request_id, ctx.deadline, ctx.prior) == ("apikey:k", "abc", deadline, QUEUED)
    assert ctx.connection is None and ctx.gateway == {} and not ctx.in_lambda and ctx.invocation is None
    with pytest.raises(TypeError):  # its body is the job's, handed to run_door: there is no request to read
        asyncio.run(ctx.raw_body(1000))


def test_a_turn_with_no_connection_that_was_not_queued_is_counted_by_the_budget(tmp_path, app_runtime):
    """Only what ``prior`` says was done is skipped: having no connection is not being a queued job."""
    model = answering("counted")
    settings = Settings(conversation_store_path=str(tmp_path / "s.sqlite3"), budget_requests_per_minute=1)
    runtime = app_runtime(settings, model=model, registry=ToolRegistry())
    body = json.dumps({"input": "hi", "store": False}).encode()
    asyncio.run(run_door(without_request(runtime, body, "first"), SendingDoor()))
    with pytest.raises(RequestError) as refused:
        asyncio.run(run_door(without_request(runtime, body, "second"), SendingDoor()))
    assert refused.value.status == 429 and model.calls == 1
