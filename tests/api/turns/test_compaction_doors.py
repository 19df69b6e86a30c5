"""Where a summary is written (``/v1/responses/compact``, a turn past its ``compact_threshold``), issue #41's review.

COMPACTION_MODEL naming a model this server cannot serve (a typo, a provider this version does not know) is the
operator's mistake (issue #41's review, beside MODEL_CHAIN's loud failure): a 503 naming the setting and no model
call, on every door a summary is written at (``/v1/responses/compact``, a turn past its ``compact_threshold``), never
a 4xx that blames the client's ``model`` and never a silent switch to the turn's own chain. The real handler with
API-Gateway-shaped events of an identified caller."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.tools.base import ToolRegistry
from tests.support.events import response_body, rest_event
from tests.support.handler import handle
from tests.support.models import ScriptedModel


def call(path: str, body: dict[str, Any], caller: str | None = "key-a") -> tuple[int, dict[str, Any]]:
    event = rest_event("POST", path, json.dumps(body))
    if caller is not None:
        event["requestContext"]["identity"]["apiKeyId"] = caller
    response = handle(event)
    return response["statusCode"], json.loads(response_body(response))


def answer(request: ModelRequest, n: int) -> ModelResponse:
    return ModelResponse("", "- Small talk only.", finish_reason="stop")


LONG = "word " * 1500 + "and now?"
DOORS = {
    "compact": ("/v1/responses/compact", {"model": "chatloop", "input": "hello"}),
    "threshold": (
        "/v1/responses",
        {
            "input": LONG,
            "store": False,
            "context_management": [{"type": "compaction", "compact_threshold": 1000}],
        },
    ),
}


@pytest.mark.parametrize("fallback", [False, True], ids=["strict", "unknown_model_fallback"])
@pytest.mark.parametrize("door", list(DOORS))
@pytest.mark.parametrize("named", ["grok:llama-3.3-70b-versatile", "not-an-entry"])
def test_a_compaction_model_that_cannot_be_served_is_a_503_naming_the_setting(
    tmp_path, app_runtime, door, named, fallback
):
    settings = Settings(
        conversation_store_path=str(tmp_path / "store.sqlite3"),
        compaction_model=named,
        unknown_model_fallback=fallback,
    )
    model = ScriptedModel(answer)
    app_runtime(settings, model=model, registry=ToolRegistry())
    path, body = DOORS[door]
    status, refused = call(path, body)
    assert status == 503, refused
    assert refused["error"]["code"] == "compaction_model_misconfigured"
    assert "COMPACTION_MODEL" in refused["error"]["message"] and refused["error"].get("param") != "model"
    assert model.calls == 0


def test_a_caller_with_no_identity_is_refused_compaction_before_its_budget_counts_it(tmp_path, app_runtime):
    """A caller with no identity gets no compaction item (issue #41): ``/v1/responses/compact`` refuses it before the
    shared anonymous budget counts the request (bad input is not counted), so the next plain turn is served."""
    settings = Settings(
        conversation_store_path=str(tmp_path / "store.sqlite3"),
        budget_anonymous_caller="shared",
        budget_requests_per_minute=1,
    )
    model = ScriptedModel(answer)
    app_runtime(settings, model=model, registry=ToolRegistry())
    status, refused = call("/v1/responses/compact", {"model": "chatloop", "input": "hello"}, caller=None)
    assert status == 400 and "caller identity" in refused["error"]["message"]
    assert model.calls == 0
    status, served = call("/v1/responses", {"input": "hi", "store": False}, caller=None)
    assert status == 200, served
    assert model.calls == 1
