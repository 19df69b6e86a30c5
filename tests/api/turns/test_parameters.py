"""Nothing silently ignored (issue 23): request parameters reach models whose catalog entry takes them, models that
refuse one are passed over, and one that no model can take is a 400 naming it, with no model call. A model the
catalog says nothing about is tried: its provider's refusal passes the turn to the next model.

Through the real handler with REST API events, and the real openai SDK against a scripted upstream."""

from __future__ import annotations

import json

import pytest

from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry
from tests.support.events import response_body, rest_event
from tests.support.fake_llm import error, text
from tests.support.handler import handle

KNOWN = "gpt-4.1-mini"  # the catalog lists json_schema and seed/stop/penalties for it
NEW = "gpt-brand-new"  # not in the catalog: tried with whatever the request asks
REASONING = "gpt-5-mini"  # the catalog lists reasoning_effort but not stop


@pytest.fixture
def upstream(fake_llm):
    fake_llm.default = lambda body: text(body["model"], "ok")
    return fake_llm


@pytest.fixture
def chain_of(app_runtime):
    def use(*models: str) -> None:
        app_runtime(
            Settings(model_chain=",".join(f"openai:{m}" for m in models)),
            registry=ToolRegistry(),
            keys={"groq": None, "openai": "sk-test-0000000000000000"},
        )

    return use


def post(path: str, body: dict) -> tuple[int, dict]:
    response = handle(rest_event("POST", path, json.dumps(body)))
    return response["statusCode"], json.loads(response_body(response))


def chat(**extra) -> dict:
    return {"messages": [{"role": "user", "content": "hi"}], **extra}


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("seed", 7),
        ("stop", ["\n\n"]),
        ("presence_penalty", 0.5),
        ("frequency_penalty", -0.5),
        ("logit_bias", {"50256": -100}),
        ("prompt_cache_key", "user-42"),
    ],
)
def test_a_sampling_parameter_reaches_a_model_that_takes_it(upstream, chain_of, param, value):
    chain_of(KNOWN)
    code, body = post("/v1/chat/completions", chat(**{param: value}))
    assert code == 200, body
    assert upstream.requests[-1]["body"][param] == value


def test_a_model_that_refuses_a_parameter_is_passed_over_for_one_that_takes_it(upstream, chain_of):
    chain_of(REASONING, KNOWN)
    code, body = post("/v1/chat/completions", chat(stop=["END"]))
    assert code == 200 and body["model"] == f"openai:{KNOWN}", body
    assert [r["body"]["model"] for r in upstream.requests] == [KNOWN]


def test_a_parameter_no_model_takes_is_a_400_naming_it_with_no_model_call(upstream, chain_of):
    chain_of(KNOWN)
    code, body = post("/v1/chat/completions", chat(reasoning_effort="low"))
    assert code == 400 and body["error"]["code"] == "unsupported_parameter", body
    assert body["error"]["param"] == "reasoning_effort" and upstream.requests == []


def test_responses_reasoning_and_verbosity_map_to_the_models_parameters(upstream, chain_of):
    chain_of(REASONING)
    code, body = post(
        "/v1/responses", {"input": "hi", "reasoning": {"effort": "low"}, "text": {"verbosity": "low"}}
    )
    assert code == 200, body
    sent = upstream.requests[-1]["body"]
    assert sent["reasoning_effort"] == "low" and sent["verbosity"] == "low"
    assert body["reasoning"]["effort"] == "low" and body["text"]["verbosity"] == "low"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", chat(logprobs=True), "logprobs"),
        ("/v1/chat/completions", chat(top_logprobs=3), "top_logprobs"),
        ("/v1/chat/completions", chat(store=True), "store"),
        ("/v1/chat/completions", chat(service_tier="flex"), "service_tier"),
        ("/v1/chat/completions", chat(functions=[{"name": "f"}]), "functions"),
        ("/v1/chat/completions", chat(modalities=["text", "audio"]), "modalities"),
        ("/v1/chat/completions", chat(temperatur=0.1), "temperatur"),
        ("/v1/responses", {"input": "hi", "background": True, "store": False}, "background"),
        ("/v1/responses", {"input": "hi", "prompt": {"id": "pmpt_1"}}, "prompt"),
        ("/v1/responses", {"input": "hi", "include": ["message.output_text.logprobs"]}, "include"),
        ("/v1/responses", {"input": "hi", "reasoning": {"summary": "auto"}}, "reasoning.summary"),
        ("/v1/responses", {"input": "hi", "top_logprobs": 2}, "top_logprobs"),
        ("/v1/responses", {"input": "hi", "max_output_token": 5}, "max_output_token"),
    ],
)
def test_what_cannot_be_honoured_is_a_400_naming_it(upstream, chain_of, path, body, param):
    chain_of(KNOWN)
    code, answer = post(path, body)
    assert code == 400 and answer["error"]["code"] == "unsupported_parameter", answer
    assert answer["error"]["param"] == param and upstream.requests == []


def test_responses_echo_what_they_honoured(upstream, chain_of):
    chain_of(KNOWN)
    request = {
        "input": "hi",
        "metadata": {"ticket": "T-1"},
        "user": "u-1",
        "safety_identifier": "s-1",
        "max_tool_calls": 3,
        "truncation": "auto",
        "include": ["code_interpreter_call.outputs"],
        "store": False,
    }
    code, body = post("/v1/responses", request)
    assert code == 200, body
    assert (
        body["metadata"] == {"ticket": "T-1"} and body["user"] == "u-1" and body["safety_identifier"] == "s-1"
    )
    assert body["max_tool_calls"] == 3 and body["truncation"] == "auto" and body["store"] is False


def test_truncation_disabled_refuses_what_does_not_fit_and_auto_trims(
    upstream, chain_of, tmp_path, monkeypatch, app_runtime
):
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"models": {f"openai:{KNOWN}": {"context_window": 2000}}}))
    monkeypatch.setenv("MODEL_CATALOG_FILE", str(catalog))
    app_runtime(
        Settings(model_chain=f"openai:{KNOWN}", model_catalog_file=str(catalog)),
        registry=ToolRegistry(),
        keys={"groq": None, "openai": "sk-test-0000000000000000"},
    )
    history = []
    for i in range(40):
        history += [
            {"role": "user", "content": f"question {i} " + "words " * 60},
            {"role": "assistant", "content": "answer " * 60},
        ]
    items = [*history, {"role": "user", "content": "and now?"}]
    code, body = post("/v1/responses", {"input": items})
    assert code == 413 and body["error"]["code"] == "context_length_exceeded", body
    assert "truncation" in body["error"]["message"] and upstream.requests == []
    code, body = post("/v1/responses", {"input": items, "truncation": "auto"})
    assert code == 200 and body["x_chatloop"]["context"]["action"] == "trim", body


def test_structured_output_is_tried_on_a_model_the_catalog_does_not_list(upstream, chain_of):
    chain_of(NEW, KNOWN)
    upstream.script(NEW, error(400, "invalid_request_error", "response_format json_schema is not supported"))
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "A", "schema": schema}}
    upstream.default = lambda body: text(body["model"], '{"a": "x"}')
    code, body = post("/v1/chat/completions", chat(response_format=fmt))
    assert code == 200 and body["model"] == f"openai:{KNOWN}", body
    tried = [r["body"] for r in upstream.requests]
    assert [b["model"] for b in tried] == [NEW, KNOWN]
    assert all(b["response_format"]["type"] == "json_schema" for b in tried)


def test_a_model_the_catalog_does_not_list_is_sent_the_format_and_answers(upstream, chain_of):
    chain_of(NEW)
    upstream.default = lambda body: text(body["model"], '{"a": "x"}')
    fmt = {"type": "json_schema", "json_schema": {"name": "A", "schema": {"type": "object"}}}
    code, body = post("/v1/chat/completions", chat(response_format=fmt))
    assert code == 200 and json.loads(body["choices"][0]["message"]["content"]) == {"a": "x"}
