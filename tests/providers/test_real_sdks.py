"""Providers through the real groq and openai SDKs against a scripted OpenAI-compatible server on 127.0.0.1:
error classes with real-shaped bodies, fallback order, cooldown and stickiness, no hidden retries,
decommissioned models, tool_use_failed recovery, a stream cut mid-reply, usage, and tool-call streaming."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.engine import EventType, TurnRequest, run_turn
from chatloop.engine.messages import normalize_conversation
from chatloop.providers.base import ModelFallback, ModelRequest, ModelResponse
from chatloop.providers.catalog import Catalog, split_entry
from chatloop.providers.chain import ChainHealth, FallbackChain
from chatloop.providers.demo import DemoModel
from chatloop.providers.errors import (
    AllModelsFailed,
    AuthFailed,
    BadRequest,
    ContextTooLong,
    ModelGone,
    RateLimited,
    RequestTooLarge,
    ToolUseFailed,
    Transient,
    classify,
    parse_duration,
)
from chatloop.providers.factory import build_chain, build_model
from chatloop.providers.stream import ToolCallAccumulator
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.fake_llm import error, text, tool_calls

G70, G8, OSS = "llama-3.3-70b-versatile", "llama-3.1-8b-instant", "openai/gpt-oss-120b"
MINI = "gpt-4.1-mini"
JS_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "execute_javascript",
            "description": "run js",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def llm(fake_llm):
    return fake_llm


KEYS = {"groq": "gsk_test_key_0000000000", "openai": "sk-test-key-000000000000"}


def chain(*entries: str, **kw) -> FallbackChain:
    catalog = Catalog.load()
    models = [build_model(e, KEYS, catalog) for e in entries]
    assert all(models), entries  # every test entry has a key
    return FallbackChain([m for m in models if m], catalog=catalog, **kw)


def request(tools=None, deadline=10.0, **kw) -> ModelRequest:
    return ModelRequest(
        messages=[{"role": "user", "content": "hi"}], deadline=Deadline.after(deadline), tools=tools, **kw
    )


async def collect(model, req):
    items = [item async for item in model.stream(req)]
    assert isinstance(items[-1], ModelResponse)
    return items, items[-1]


# --- streaming -------------------------------------------------------------------------------------
async def test_openai_incremental_tool_call_deltas_accumulate_index_zero_included(llm):
    args = json.dumps({"code": "10000 * Math.pow(1.05, 15)"})
    llm.script(
        MINI,
        tool_calls(
            MINI, [("call_a", "execute_javascript", args), ("call_b", "execute_javascript", '{"code": "1"}')]
        ),
    )
    _, response = await collect(chain(f"openai:{MINI}"), request(JS_TOOL))
    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("call_a", args),
        ("call_b", '{"code": "1"}'),
    ]
    assert (
        response.finish_reason == "tool_calls" and response.usage.total_tokens == 40
    )  # stream_options usage
    sent = llm.requests_for(MINI)[0]
    assert (
        sent["body"]["stream_options"] == {"include_usage": True} and sent["path"] == "/v1/chat/completions"
    )


async def test_groq_whole_call_chunks_and_x_groq_usage(llm):
    llm.script(
        G70,
        tool_calls(G70, [("call_g", "execute_javascript", '{"code": "5*4*3*2"}')], groq=True, usage=(11, 7)),
    )
    _, response = await collect(chain(f"groq:{G70}"), request(JS_TOOL))
    assert response.tool_calls[0].arguments == '{"code": "5*4*3*2"}' and response.usage.as_dict() == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "total_tokens": 18,
    }
    assert llm.requests_for(G70)[0]["path"] == "/openai/v1/chat/completions"


def test_accumulator_handles_missing_index_and_id():
    acc = ToolCallAccumulator()
    acc.add([{"id": "x", "function": {"name": "f", "arguments": '{"a":'}}])
    acc.add([{"id": "x", "function": {"arguments": "1}"}}])  # matched by id
    acc.add([{"function": {"name": "g", "arguments": "{}"}}])  # no id: a new call with a generated id
    acc.add([{"function": {"arguments": ""}}])  # continuation of the last call
    calls = acc.calls()
    assert [(c.name, c.arguments) for c in calls] == [("f", '{"a":1}'), ("g", "{}")]
    assert calls[1].id.startswith("call_")
    repeat = ToolCallAccumulator()
    repeat.add([{"index": 0, "id": "y", "function": {"name": "f", "arguments": '{"b": 2}'}}])
    repeat.add(
        [{"index": 0, "id": "y", "function": {"name": "f", "arguments": '{"b": 2}'}}]
    )  # sent twice whole
    assert repeat.calls()[0].arguments == '{"b": 2}'


def test_params_send_only_what_was_asked_and_what_the_model_takes():
    catalog = Catalog.load()
    model = build_model(f"openai:{MINI}", KEYS, catalog)
    plain = model.params(request(JS_TOOL))
    assert "tool_choice" not in plain and "parallel_tool_calls" not in plain and "temperature" not in plain
    asked = model.params(request(JS_TOOL, tool_choice="required", parallel_tool_calls=False, temperature=0.2))
    assert (
        asked["tool_choice"] == "required"
        and asked["parallel_tool_calls"] is False
        and asked["temperature"] == 0.2
    )
    reasoning = build_model("openai:gpt-5-mini", KEYS, catalog).params(
        request(temperature=0.2, max_tokens=50)
    )
    assert (
        "temperature" not in reasoning
        and reasoning["max_completion_tokens"] == 50
        and "max_tokens" not in reasoning
    )
    tool_message = {"role": "tool", "tool_call_id": "c", "name": "execute_javascript", "content": "{}"}
    req = request()
    req.messages = [*req.messages, {"role": "assistant", "content": "", "tool_calls": []}, tool_message]
    assert "name" not in model.params(req)["messages"][-1]
    assert (
        build_model(f"groq:{G70}", KEYS, catalog).params(req)["messages"][-1]["name"] == "execute_javascript"
    )


# --- the error taxonomy ----------------------------------------------------------------------------
GROQ_429 = (
    "Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_01` service tier `on_demand` "
    "on tokens per minute (TPM): Limit 12000, Used 11972, Requested 4351. Please try again in 2m59.56s. "
    "Need more tokens? Upgrade to Dev Tier today."
)


@pytest.mark.parametrize(
    ("reply", "cls", "retry_after"),
    [
        (error(429, "rate_limit_exceeded", GROQ_429, {"retry-after": "7"}, kind="tokens"), RateLimited, 7.0),
        (error(429, "rate_limit_exceeded", GROQ_429, kind="tokens"), RateLimited, 179.56),
        (
            error(
                429,
                "rate_limit_exceeded",
                "Rate limit",
                {"x-ratelimit-reset-tokens": "1.57s", "x-ratelimit-reset-requests": "6s"},
            ),
            RateLimited,
            6.0,
        ),
        (
            error(
                413,
                "rate_limit_exceeded",
                "Request too large for model `x` in organization `o` on tokens per minute "
                "(TPM): Limit 8000, Requested 11881, please reduce your message size and try again.",
                kind="tokens",
            ),
            RequestTooLarge,
            None,
        ),
        (
            error(
                400,
                "context_length_exceeded",
                "Please reduce the length of the messages or completion.",
                param="messages",
            ),
            ContextTooLong,
            None,
        ),
        (
            error(
                400,
                "model_decommissioned",
                "The model `llama-3.1-70b-versatile` has been decommissioned and is no longer supported.",
            ),
            ModelGone,
            None,
        ),
        (
            error(404, "model_not_found", "The model `nope` does not exist or you do not have access to it."),
            ModelGone,
            None,
        ),
        (
            error(
                400,
                "tool_use_failed",
                "Failed to call a function. Please adjust your prompt. See 'failed_generation' "
                "for more details.",
                failed_generation="<function=x>",
            ),
            ToolUseFailed,
            None,
        ),
        (error(401, "invalid_api_key", "Invalid API Key", kind="invalid_request_error"), AuthFailed, None),
        (error(403, None, "Forbidden"), AuthFailed, None),
        (error(500, None, "Internal Server Error", kind="internal_server_error"), Transient, None),
        (error(503, None, "Service Unavailable"), Transient, None),
        (error(498, "capacity_exceeded", "Flex tier capacity exceeded."), Transient, None),
        (error(422, None, "messages.0: unknown field"), BadRequest, None),
    ],
)
async def test_error_classes_from_real_bodies(llm, reply, cls, retry_after):
    llm.script(G70, reply)
    with pytest.raises(cls) as raised:
        await collect(build_model(f"groq:{G70}", KEYS, Catalog.load()), request())
    assert (
        raised.value.retry_after == pytest.approx(retry_after)
        if retry_after
        else raised.value.retry_after is None
    )
    assert len(llm.requests_for(G70)) == 1  # no hidden SDK retries, whatever the error


def test_durations_and_classification_without_http():
    assert parse_duration("2m59.56s") == pytest.approx(179.56) and parse_duration("120ms") == 0.12
    assert parse_duration("6s") == 6 and parse_duration("1h") == 3600 and parse_duration("soon") is None
    assert isinstance(classify(400, {"error": {"message": "bad", "code": "invalid_value"}}), BadRequest)


def test_error_messages_never_carry_keys():
    err = classify(401, {"error": {"message": "Incorrect API key provided: sk-proj-abcdefghijklmnop1234."}})
    assert "sk-proj" not in err.message and "[REDACTED]" in err.message


# --- the chain -------------------------------------------------------------------------------------
async def test_rate_limited_model_falls_back_at_once_and_cools_down(llm):
    llm.script(G70, error(429, "rate_limit_exceeded", GROQ_429, {"retry-after": "30"}, kind="tokens"))
    llm.script(
        G8, text(G8, "hello from 8b", groq=True), text(G8, "again", groq=True), text(G8, "third", groq=True)
    )
    c = chain(f"groq:{G70}", f"groq:{G8}")
    items, response = await collect(c.for_turn(), request())
    fallback = next(i for i in items if isinstance(i, ModelFallback))
    assert (fallback.from_model, fallback.to_model, fallback.reason, fallback.retry_after) == (
        f"groq:{G70}",
        f"groq:{G8}",
        "rate_limited",
        30.0,
    )
    assert response.content == "hello from 8b" and response.model == f"groq:{G8}"
    turn = c.for_turn()
    await collect(turn, request())  # a new turn: the primary is still cooling down
    await collect(turn, request())  # and the same turn sticks to the model that worked
    assert len(llm.requests_for(G70)) == 1


async def test_a_short_wait_is_slept_out_when_no_other_model_is_left(llm):
    llm.script(
        G70, error(429, "rate_limit_exceeded", "Please try again in 0.2s.", kind="requests"), text(G70, "ok")
    )
    _, response = await collect(chain(f"groq:{G70}").for_turn(), request())
    assert response.content == "ok" and len(llm.requests_for(G70)) == 2
    llm.script(G8, error(429, "rate_limit_exceeded", GROQ_429, kind="tokens"))
    with pytest.raises(AllModelsFailed):
        await collect(chain(f"groq:{G8}").for_turn(), request())  # 3 minutes: no sleeping, fail now
    assert len(llm.requests_for(G8)) == 1


async def test_decommissioned_model_is_disabled_for_the_container(llm):
    llm.script(G70, error(400, "model_decommissioned", "The model has been decommissioned."))
    llm.script(G8, text(G8, "a"), text(G8, "b"))
    c = chain(f"groq:{G70}", f"groq:{G8}")
    await collect(c.for_turn(), request())
    await collect(c.for_turn(), request())
    assert len(llm.requests_for(G70)) == 1 and f"groq:{G70}" in c.health.disabled


async def test_tool_use_failed_is_recovered_from_failed_generation_without_another_call(llm):
    llm.script(
        G70,
        error(
            400,
            "tool_use_failed",
            "Failed to call a function.",
            failed_generation='<function=execute_javascript>{"code": "6 * 7"}</function>',
        ),
    )
    _, response = await collect(chain(f"groq:{G70}").for_turn(), request(JS_TOOL))
    assert response.tool_calls[0].name == "execute_javascript" and response.tool_calls[
        0
    ].parsed_arguments() == {"code": "6 * 7"}
    assert len(llm.requests_for(G70)) == 1


async def test_tool_use_failed_is_retried_once_with_a_note_then_falls_back(llm):
    bad = error(
        400,
        "tool_use_failed",
        "attempted to call tool 'terminal<|channel|>commentary' which was not in request.tools",
        failed_generation="terminal<|channel|>commentary",
    )
    llm.script(G70, bad, text(G70, "fixed"))
    _, response = await collect(chain(f"groq:{G70}").for_turn(), request(JS_TOOL))
    assert response.content == "fixed"
    retry = llm.requests_for(G70)[1]["body"]["messages"][-1]
    assert retry["role"] == "system" and "could not be parsed" in retry["content"]
    llm.script(G8, bad, bad)
    llm.script(OSS, text(OSS, "from oss"))
    _, response = await collect(chain(f"groq:{G8}", f"groq:{OSS}").for_turn(), request(JS_TOOL))
    assert response.model == f"groq:{OSS}" and len(llm.requests_for(G8)) == 2


async def test_auth_failure_skips_every_model_of_the_provider(llm):
    llm.script(G70, error(401, "invalid_api_key", "Invalid API Key"))
    llm.script(MINI, text(MINI, "from openai"))
    _, response = await collect(chain(f"groq:{G70}", f"groq:{G8}", f"openai:{MINI}").for_turn(), request())
    assert response.model == f"openai:{MINI}" and llm.requests_for(G8) == []


async def test_context_too_long_prefers_a_larger_context(llm):
    llm.script(
        G70, error(400, "context_length_exceeded", "Please reduce the length of the messages or completion.")
    )
    llm.script(MINI, text(MINI, "big context"))
    c = chain(f"groq:{G70}", "groq:tiny-unknown-model", f"openai:{MINI}")
    _, response = await collect(c.for_turn(), request())
    assert response.model == f"openai:{MINI}" and llm.requests_for("tiny-unknown-model") == []


async def test_a_bad_request_is_not_retried_on_other_models(llm):
    llm.script(G70, error(400, "invalid_value", "temperature must be <= 2"))
    with pytest.raises(BadRequest):
        await collect(chain(f"groq:{G70}", f"groq:{G8}").for_turn(), request())
    assert llm.requests_for(G8) == []


async def test_all_models_failing_is_one_typed_error(llm):
    llm.script(G70, error(503, None, "down"))
    llm.script(MINI, error(500, None, "down too"))
    with pytest.raises(AllModelsFailed) as raised:
        await collect(chain(f"groq:{G70}", f"openai:{MINI}").for_turn(), request())
    assert [a.kind for a in raised.value.attempts] == ["transient", "transient"]


async def test_a_stream_cut_mid_reply_keeps_what_was_shown_and_the_next_model_continues(llm, sandbox):
    llm.script(G70, text(G70, "The answer is forty-", pieces=4, cut_after=3))
    llm.script(MINI, text(MINI, "The answer is 42."))
    c = chain(f"groq:{G70}", f"openai:{MINI}")
    events = [
        e
        async for e in run_turn(
            TurnRequest(messages=normalize_conversation([{"role": "user", "content": "?"}])),
            c.for_turn(),
            ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
            Deadline.after(10),
        )
    ]
    fallback = next(e.data for e in events if e.type is EventType.MODEL_FALLBACK)
    assert fallback["partial_kept"] is True and fallback["reason"] == "transient"
    assert fallback["discard_partial"] is True  # its deprecated name, sent for one release
    done = events[-1].data
    deltas = [e.data["content"] for e in events if e.type is EventType.DELTA]
    # The client already has the cut text: it stays, and the next model's answer continues it (issue #36: once it
    # was the cut text, a seam, then the whole answer again from its start).
    assert deltas[:2] == ["The a", "nswer"]
    assert "".join(deltas) == "The answer is 42." == done["message"]["content"]
    assert done["model"] == f"openai:{MINI}"


async def test_usage_is_summed_over_a_turn(llm, sandbox):
    llm.script(
        G70,
        tool_calls(G70, [("c1", "execute_javascript", '{"code": "6*7"}')], groq=True, usage=(100, 20)),
        text(G70, "42", groq=True, usage=(150, 5)),
    )
    events = [
        e
        async for e in run_turn(
            TurnRequest(messages=[{"role": "user", "content": "6*7"}]),
            chain(f"groq:{G70}").for_turn(),
            ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
            Deadline.after(10),
        )
    ]
    assert events[-1].data["usage"] == {"prompt_tokens": 250, "completion_tokens": 25, "total_tokens": 275}


async def test_cooldown_uses_the_clock(llm):
    now = [100.0]
    health = ChainHealth(clock=lambda: now[0])
    llm.script(G70, error(429, "rate_limit_exceeded", "slow down", {"retry-after": "5"}), text(G70, "back"))
    llm.script(G8, text(G8, "meanwhile"))
    c = chain(f"groq:{G70}", f"groq:{G8}", health=health)
    await collect(c.for_turn(), request())
    now[0] += 6
    _, response = await collect(c.for_turn(), request())
    assert response.content == "back"


# --- catalog, factory, demo, lazy imports ----------------------------------------------------------
def test_entries_split_at_the_first_colon():
    assert split_entry("groq:openai/gpt-oss-120b") == ("groq", "openai/gpt-oss-120b")
    assert split_entry("openai:ft:gpt-4o:org:x") == ("openai", "ft:gpt-4o:org:x")


def test_factory_skips_decommissioned_and_keyless_entries():
    c = build_chain(
        Settings(model_chain=f"groq:llama-3.1-70b-versatile,groq:{G70},openai:{MINI}"), {"groq": "gsk_x"}
    )
    assert c.entries() == [f"groq:{G70}"]
    assert build_chain(Settings(), {}).entries() == ["demo:offline"]
    assert build_chain(Settings(), {"groq": "gsk_x"}).entries()[0].startswith("groq:")


def test_default_chain_has_no_decommissioned_model():
    from chatloop.config import DEFAULT_MODEL_CHAIN

    catalog = Catalog.load()
    assert all(
        not catalog.get(e).decommissioned and catalog.get(e).known for e in DEFAULT_MODEL_CHAIN.split(",")
    )


async def test_demo_model_runs_the_whole_loop(sandbox):
    events = [
        e
        async for e in run_turn(
            TurnRequest(
                messages=[
                    {
                        "role": "user",
                        "content": "calculate compound interest: $10,000 at 5% annually for 15 years",
                    }
                ]
            ),
            DemoModel(),
            ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
            Deadline.after(10),
        )
    ]
    done = events[-1].data
    assert "20,789.28" in done["message"]["content"] and "offline demo model" in done["message"]["content"]
    assert (
        done["tool_counts"] == {"execute_javascript": 1}
        and done["iterations"] == 2
        and done["model"] == "demo:offline"
    )


def test_provider_sdks_are_imported_lazily():
    code = (
        "import sys; from chatloop.providers.factory import build_chain; from chatloop.config import Settings; "
        "build_chain(Settings(), {'groq': 'gsk_x', 'openai': 'sk-x'}); "
        "print(sorted(m for m in ('groq', 'openai') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="src", check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


async def test_a_model_that_fails_again_after_the_wait_is_all_models_failed(llm):
    again = error(429, "rate_limit_exceeded", "Please try again in 0.1s.", kind="requests")
    llm.script(G70, again, again)
    with pytest.raises(AllModelsFailed) as raised:
        await collect(chain(f"groq:{G70}").for_turn(), request())
    assert [a.kind for a in raised.value.attempts] == ["rate_limited", "rate_limited"]
    assert len(llm.requests_for(G70)) == 2  # the first call and one retry after the short wait, no more


def short_wait():
    """A rate limit short enough to be slept out when no other model is left: the model is called once more after it."""
    return error(429, "rate_limit_exceeded", "Please try again in 0.1s.", kind="requests")


async def test_the_call_after_the_wait_recovers_a_tool_call_from_failed_generation(llm):
    failed = error(
        400,
        "tool_use_failed",
        "Failed to call a function.",
        failed_generation='<function=execute_javascript>{"code": "6 * 7"}</function>',
    )
    llm.script(G70, short_wait(), failed)
    _, response = await collect(chain(f"groq:{G70}").for_turn(), request(JS_TOOL))
    assert [(c.name, c.parsed_arguments()) for c in response.tool_calls] == [
        ("execute_javascript", {"code": "6 * 7"})
    ]
    assert len(llm.requests_for(G70)) == 2  # the first call and the one after the wait: nothing asked again


async def test_the_call_after_the_wait_takes_a_refused_unvouched_format_as_the_models_failure(llm):
    unlisted = "unlisted-model"  # the catalog says nothing of its formats
    llm.script(
        unlisted,
        short_wait(),
        error(400, "invalid_request_error", "response_format json_schema is not supported"),
    )
    fmt = {"type": "json_schema", "json_schema": {"name": "A", "schema": {"type": "object"}}}
    with pytest.raises(
        AllModelsFailed
    ) as raised:  # the model could not take it: not the client's bad request
        await collect(chain(f"groq:{unlisted}").for_turn(), request(response_format=fmt))
    assert [a.kind for a in raised.value.attempts] == ["rate_limited", "bad_request"]


async def test_the_call_after_the_wait_calibrates_the_token_estimate(llm):
    llm.script(G70, short_wait(), text(G70, "ok", groq=True, usage=(40, 1)))
    c = chain(f"groq:{G70}")
    _, response = await collect(c.for_turn(), request())
    assert response.content == "ok" and f"groq:{G70}" in c.health.estimator.scale


async def test_an_auth_failure_is_remembered_across_turns(llm):
    llm.script(G70, error(401, "invalid_api_key", "Invalid API Key"))
    llm.script(MINI, text(MINI, "one"), text(MINI, "two"))
    c = chain(f"groq:{G70}", f"openai:{MINI}")
    await collect(c.for_turn(), request())
    _, response = await collect(c.for_turn(), request())
    assert response.content == "two" and len(llm.requests_for(G70)) == 1


async def test_a_model_that_sends_nothing_is_skipped_for_the_next(llm):
    silent = text(G70, "too late")
    silent.delay = 3.0
    llm.script(G70, silent)
    llm.script(G8, text(G8, "from the next model"))
    catalog = Catalog.load()
    settings = Settings(model_first_chunk_timeout_seconds=0.5)
    c = FallbackChain([build_model(f"groq:{m}", KEYS, catalog, settings) for m in (G70, G8)], catalog=catalog)
    items, response = await collect(c.for_turn(), request(deadline=10))
    fallback = next(i for i in items if isinstance(i, ModelFallback))
    assert fallback.reason == "transient" and "sent nothing within 0.5 s" in fallback.message
    assert response.content == "from the next model"
