"""``POST /v1/responses/compact`` as the Open Responses spec defines its body (``CompactResponseMethodPublicBody``:
``model`` required; ``input``, ``previous_response_id``, ``instructions``, ``prompt_cache_key``), issue 44: each field
honoured, anything else refused by name (a 400 naming it, no model call), the answer a spec ``CompactResource``;
and ``context_management[].compact_threshold``'s minimum of 1000 on ``/v1/responses``. The real handler with
API-Gateway-shaped events of an identified caller, a counting scripted model, a SQLite store."""

from __future__ import annotations

import json
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the dev pins
import openresponses_types as spec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.tools.base import ToolRegistry
from tests.support.events import response_body, rest_event
from tests.support.handler import handle
from tests.support.models import ScriptedModel

SPEC_FIELDS = set(spec.CompactResponseMethodPublicBody.model_fields)
COMPACT = spec.CompactResource.model_json_schema()


def call(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    event = rest_event("POST", path, json.dumps(body))
    event["requestContext"]["identity"]["apiKeyId"] = "key-a"
    response = handle(event)
    return response["statusCode"], json.loads(response_body(response))


def summary(request: ModelRequest, n: int) -> ModelResponse:
    return ModelResponse("", "- The user greeted; nothing else happened.", finish_reason="stop")


@pytest.fixture
def model(tmp_path, app_runtime) -> ScriptedModel:
    counting = ScriptedModel(summary)
    settings = Settings(conversation_store_path=str(tmp_path / "store.sqlite3"))
    app_runtime(settings, model=counting, registry=ToolRegistry())
    return counting


def test_the_spec_names_these_fields_and_only_model_is_required():
    """What the tests below hold the route to: the spec's body as the generated model has it."""
    assert {"model", "input", "previous_response_id", "instructions", "prompt_cache_key"} == SPEC_FIELDS
    assert spec.CompactResponseMethodPublicBody.model_json_schema()["required"] == ["model"]


def test_model_is_required_a_400_naming_it_and_no_model_call(model):
    status, refused = call("/v1/responses/compact", {"input": "hello"})
    assert status == 400 and refused["error"]["param"] == "model", refused
    assert model.calls == 0


REFUSED = {
    "stream": True,
    "tools": [{"type": "function", "name": "f"}],
    "temperature": 0.5,
    "store": True,
    "background": True,
    "max_output_tokens": 100,
    "text": {"format": {"type": "text"}},
    "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    "metadata": {"k": "v"},
    "service_tier": "flex",
}
"""``/v1/responses`` fields the compact body does not take (OpenAI's own compact takes none of them either)."""


@pytest.mark.parametrize("field", REFUSED)
def test_a_field_the_compact_body_does_not_take_is_refused_by_name(model, field):
    status, refused = call(
        "/v1/responses/compact", {"model": "chatloop", "input": "hi", field: REFUSED[field]}
    )
    assert status == 400 and refused["error"]["param"] == field, refused
    assert model.calls == 0


ACCEPTED = SPEC_FIELDS | {"prompt_cache_retention"}
FIELD = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FFF), min_size=1, max_size=24)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=FIELD.filter(lambda n: n not in ACCEPTED), value=st.none() | st.booleans() | st.integers() | FIELD
)
def test_any_other_field_is_refused_by_its_name(model, name, value):
    status, refused = call("/v1/responses/compact", {"model": "chatloop", "input": "hi", name: value})
    assert status == 400 and refused["error"]["param"] == name, refused
    assert model.calls == 0


def test_each_spec_field_is_honoured_and_the_answer_is_a_compact_resource(model):
    status, first = call("/v1/responses", {"model": "chatloop", "input": "hello there"})
    assert status == 200, first
    body = {
        "model": "chatloop",
        "previous_response_id": first["id"],
        "instructions": "Keep names.",
        "prompt_cache_key": "k-1",  # a caching hint: accepted, changes no answer
    }
    status, compacted = call("/v1/responses/compact", body)  # no input: the chain alone is compacted
    assert status == 200, compacted
    assert list(jsonschema.Draft202012Validator(COMPACT).iter_errors(compacted)) == []
    spec.CompactResource.model_validate(compacted)
    asked = model.requests[-1].messages[-1]["content"]
    assert "hello there" in asked and "Keep names." in asked  # the chain and the instructions were summarized
    assert compacted["output"][-1]["type"] == "compaction"


def test_nothing_to_compact_is_a_400_naming_input(model):
    status, refused = call("/v1/responses/compact", {"model": "chatloop"})
    assert status == 400 and refused["error"]["param"] == "input", refused
    assert model.calls == 0


def test_compact_threshold_below_the_spec_s_minimum_is_a_400_naming_it(model):
    body = {"input": "hi", "context_management": [{"type": "compaction", "compact_threshold": 999}]}
    status, refused = call("/v1/responses", body)
    assert status == 400 and refused["error"]["param"] == "context_management.0.compact_threshold", refused
    assert model.calls == 0
