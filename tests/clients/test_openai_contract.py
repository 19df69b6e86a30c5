"""OpenAI's contract, kept for the clients that rely on it (issue #23), through real clients against the app under
uvicorn and a scripted upstream behind the real groq / openai SDKs:

- ``tool_choice`` holds: with ``required`` or a named client tool the server may run execute_javascript first, but
  the turn ends with a call to a client tool (pydantic-ai's ``ToolOutput``, the Vercel AI SDK v6 and v7, the openai
  SDK); ``none`` sends no tools.
- the server's own runs are ``code_interpreter_call`` items the openai SDK parses, streamed with their events, and
  accepted back as input (the Agents SDK replays a result's items).
- structured output is tried on a model the catalog does not list; a provider's rejection moves the chain on.
- every request parameter is honoured (forwarded to the model, echoed, logged) or a 400 ``unsupported_parameter``
  naming it, with no model call.

The scripted model (tests/support/contract.py) behaves as real ones do when the API enforces ``tool_choice``: it
computes with execute_javascript when offered it, then answers in text unless the request forces a call to a client
tool. The ``server``, ``upstream`` and ``store_path`` fixtures are in tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from chatloop.api import create_app
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from tests.support.contract import (
    ANSWER,
    CODE,
    EXPECTED,
    GPT_OSS,
    KEYS,
    LLAMA,
    QUESTION,
    TOTAL,
    UNLISTED,
    Interest,
    client_of,
)
from tests.support.events import CODE_INTERPRETER_EVENTS
from tests.support.fake_llm import FakeLLM, error, tool_calls
from tests.support.node import run_node
from tests.support.server import Server, app_server

RECORD_FUNCTION: dict[str, Any] = {
    "name": "record_interest",
    "description": "Record the result of a compound interest calculation",
    "parameters": Interest.model_json_schema(),
}
RECORD = {"type": "function", "function": RECORD_FUNCTION}
RESPONSES_RECORD = {"type": "function", **RECORD_FUNCTION}


@pytest.fixture(autouse=True)
def healthy_chain(request):
    """Each test starts with no model cooling down and no script left over: the server lives for the module."""
    yield
    if "server" in request.fixturenames:
        from chatloop.providers.chain import ChainHealth

        request.getfixturevalue("server").runtime.models.chain().health = ChainHealth()
        request.getfixturevalue("upstream").queues.clear()


def sent_since(upstream: FakeLLM, before: int) -> list[dict[str, Any]]:
    """The bodies of the upstream requests made since ``before``."""
    return [r["body"] for r in upstream.requests[before:]]


def ran_javascript(bodies: list[dict[str, Any]]) -> bool:
    """Whether a later model call carried execute_javascript's result: the server ran it during the turn."""
    return any(m["role"] == "tool" and str(TOTAL) in str(m["content"]) for b in bodies for m in b["messages"])


# --- tool_choice holds ----------------------------------------------------------------------------
CHOICES = {"required": "required", "named": {"type": "function", "function": {"name": "record_interest"}}}


@pytest.mark.parametrize("choice", CHOICES)
def test_chat_completions_tool_choice_ends_with_a_client_tool_call(server, upstream, choice):
    before = len(upstream.requests)
    completion = client_of(server).chat.completions.create(
        model="chatloop",
        messages=[{"role": "user", "content": QUESTION}],
        tools=[RECORD],
        tool_choice=CHOICES[choice],
    )
    assert completion.choices[0].finish_reason == "tool_calls", completion.choices[0].message
    (call,) = completion.choices[0].message.tool_calls
    assert call.function.name == "record_interest"
    assert Interest.model_validate_json(call.function.arguments) == EXPECTED
    assert ran_javascript(sent_since(upstream, before))  # the server computed first, then the client's call


@pytest.mark.parametrize("choice", CHOICES)
def test_responses_tool_choice_ends_with_a_function_call_item(server, upstream, choice):
    named = {"type": "function", "name": "record_interest"}
    before = len(upstream.requests)
    response = client_of(server).responses.create(
        model="chatloop",
        input=QUESTION,
        tools=[RESPONSES_RECORD],
        tool_choice="required" if choice == "required" else named,
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["record_interest"], response.output
    assert Interest.model_validate_json(calls[0].arguments) == EXPECTED
    assert ran_javascript(sent_since(upstream, before))


def test_a_streamed_required_turn_ends_with_the_client_call_after_the_servers_run(server, upstream):
    with client_of(server).responses.stream(
        model="chatloop", input=QUESTION, tools=[RESPONSES_RECORD], tool_choice="required"
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["code_interpreter_call", "function_call"], final.output
    assert Interest.model_validate_json(final.output[1].arguments) == EXPECTED
    assert events[-1].type == "response.completed"
    chunks = list(
        client_of(server).chat.completions.create(
            model="chatloop",
            messages=[{"role": "user", "content": QUESTION}],
            tools=[RECORD],
            tool_choice="required",
            stream=True,
        )
    )
    names = [
        c.function.name for k in chunks for c in (k.choices[0].delta.tool_calls if k.choices else None) or []
    ]
    finishes = [k.choices[0].finish_reason for k in chunks if k.choices and k.choices[0].finish_reason]
    assert "record_interest" in names and finishes == ["tool_calls"], chunks


@pytest.mark.parametrize("api", ["chat_completions", "responses"])
def test_tool_choice_none_sends_no_tools(server, upstream, api):
    before = len(upstream.requests)
    client = client_of(server)
    if api == "chat_completions":
        client.chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": "hi"}], tools=[RECORD], tool_choice="none"
        )
    else:
        client.responses.create(model="chatloop", input="hi", tools=[RESPONSES_RECORD], tool_choice="none")
    bodies = sent_since(upstream, before)
    assert bodies and all(not b.get("tools") for b in bodies), [b.get("tools") for b in bodies]


@pytest.mark.parametrize("model_class", ["OpenAIChatModel", "OpenAIResponsesModel"])
def test_pydantic_ai_tool_output_on_the_compound_interest_question(server, upstream, model_class):
    """pydantic-ai's ToolOutput sends tool_choice "required" with its final_result tool; it raised
    UnexpectedModelBehavior when the turn ended in text after the server's calculation."""
    import pydantic_ai.models.openai as models
    from pydantic_ai import Agent, ToolOutput
    from pydantic_ai.providers.openai import OpenAIProvider

    model = getattr(models, model_class)(
        "chatloop", provider=OpenAIProvider(base_url=server.base_url, api_key="x")
    )
    before = len(upstream.requests)
    result = Agent(model, output_type=ToolOutput(Interest)).run_sync(QUESTION)
    assert result.output == EXPECTED
    assert ran_javascript(sent_since(upstream, before))


# --- the Vercel AI SDK, v6 and its newest major v7 --------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["generate", "stream"])
@pytest.mark.parametrize("api", ["responses", "chat"])
@pytest.mark.parametrize("major", ["6", "7"])
def test_the_ai_sdk_tool_choice_required_after_a_server_run(server, upstream, major, api, mode):
    """generateText and streamText (which parses every streamed event, the server run's among them)."""
    before = len(upstream.requests)
    result = run_node(
        "tool_choice.mjs",
        major,
        api,
        mode,
        env={"CHATLOOP_BASE_URL": server.base_url, "CHATLOOP_MODEL": "chatloop"},
    )
    assert result["finishReason"] == "tool-calls", result
    assert [c["name"] for c in result["clientCalls"]] == ["record_interest"]
    assert Interest.model_validate(result["clientCalls"][0]["input"]) == EXPECTED
    assert ran_javascript(sent_since(upstream, before))
    if api == "responses":  # the server's run is a hosted code interpreter call the SDK renders
        assert result["hostedCalls"] == ["code_interpreter"], result


# --- the server's runs as code_interpreter_call items ----------------------------------------------
def assert_code_interpreter_call(item: Any) -> None:
    from openai.types.responses import ResponseCodeInterpreterToolCall

    assert isinstance(item, ResponseCodeInterpreterToolCall), item
    assert item.id and item.container_id and item.code == CODE and item.status == "completed"
    assert item.outputs and item.outputs[0].type == "logs" and str(TOTAL) in item.outputs[0].logs


def test_the_openai_sdk_parses_a_code_interpreter_call_before_the_message(server):
    response = client_of(server).responses.create(model="chatloop", input=QUESTION)
    assert [item.type for item in response.output] == ["code_interpreter_call", "message"]
    assert_code_interpreter_call(response.output[0])
    assert response.output_text == ANSWER


def test_a_streamed_code_interpreter_call_has_openais_events(server):
    with client_of(server).responses.stream(model="chatloop", input=QUESTION) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    order = CODE_INTERPRETER_EVENTS
    firsts = [kinds.index(kind) for kind in order]
    assert firsts == sorted(firsts), kinds
    added = [e for e in events if e.type == "response.output_item.added"]
    assert [e.item.type for e in added] == ["code_interpreter_call", "message"]
    assert kinds.index("response.output_item.done") < kinds.index("response.output_text.delta")
    code = "".join(e.delta for e in events if e.type == "response.code_interpreter_call_code.delta")
    done = next(e for e in events if e.type == "response.code_interpreter_call_code.done")
    assert code == done.code == CODE
    item_id = added[0].item.id
    assert all(
        e.item_id == item_id and e.output_index == 0
        for e in events
        if e.type.startswith("response.code_interpreter")
    )
    assert [item.type for item in final.output] == ["code_interpreter_call", "message"]
    assert_code_interpreter_call(final.output[0])
    assert final.output_text == ANSWER and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_code_interpreter_call_sent_back_is_the_earlier_run(server, upstream):
    client = client_of(server)
    first = client.responses.create(model="chatloop", input=QUESTION)
    before = len(upstream.requests)
    replay = [
        {"role": "user", "content": QUESTION},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"role": "user", "content": "Thanks. And what did you run?"},
    ]
    second = client.responses.create(model="chatloop", input=replay)
    assert second.status == "completed" and second.output_text
    messages = sent_since(upstream, before)[0]["messages"]
    calls = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert [c["function"]["name"] for c in calls] == ["execute_javascript"]
    assert json.loads(calls[0]["function"]["arguments"])["code"] == CODE
    (result,) = [m for m in messages if m["role"] == "tool"]
    assert result["tool_call_id"] == calls[0]["id"] and str(TOTAL) in result["content"]


@pytest.mark.slow
def test_the_agents_sdk_replays_a_result_as_the_next_input(server, upstream):
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)

    async def two_turns() -> tuple[Any, Any, int]:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        agent = Agent(
            name="calculator",
            instructions="Answer briefly.",
            model=OpenAIResponsesModel(model="chatloop", openai_client=client),
        )
        first = await Runner.run(agent, QUESTION)
        before = len(upstream.requests)
        second = await Runner.run(
            agent, [*first.to_input_list(), {"role": "user", "content": "Thanks. And what did you run?"}]
        )
        return first, second, before

    first, second, before = asyncio.run(two_turns())
    assert first.final_output == ANSWER
    hosted = [item.raw_item for item in first.new_items if item.type == "tool_call_item"]
    assert [getattr(raw, "type", None) for raw in hosted] == ["code_interpreter_call"]
    assert second.final_output
    messages = sent_since(upstream, before)[0]["messages"]
    calls = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert [json.loads(c["function"]["arguments"])["code"] for c in calls] == [CODE]
    assert any(m["role"] == "tool" and str(TOTAL) in m["content"] for m in messages)


# --- structured output on a model the catalog does not list ----------------------------------------
def test_parse_on_a_model_the_catalog_does_not_list(server, upstream):
    client = client_of(server)
    before = len(upstream.requests)
    completion = client.chat.completions.parse(
        model=f"openai:{UNLISTED}",
        messages=[{"role": "user", "content": "interest?"}],
        response_format=Interest,
    )
    assert completion.choices[0].message.parsed == EXPECTED
    parsed = client.responses.parse(model=f"openai:{UNLISTED}", input="interest?", text_format=Interest)
    assert parsed.output_parsed == EXPECTED
    bodies = sent_since(upstream, before)
    assert [b["model"] for b in bodies] == [UNLISTED, UNLISTED]  # tried, not refused before trying
    assert all(b["response_format"]["type"] == "json_schema" for b in bodies)
    assert bodies[0]["response_format"]["json_schema"]["schema"]["properties"].keys() >= {"total"}


def test_a_providers_rejection_of_the_format_moves_the_chain_on(server, upstream):
    rejection = error(
        400,
        None,
        "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
        param="response_format",
    )
    upstream.script(UNLISTED, rejection)
    before = len(upstream.requests)
    completion = client_of(server).chat.completions.parse(
        model=f"openai:{UNLISTED}",
        messages=[{"role": "user", "content": "interest?"}],
        response_format=Interest,
    )
    assert completion.choices[0].message.parsed == EXPECTED
    assert [b["model"] for b in sent_since(upstream, before)] == [UNLISTED, GPT_OSS]
    assert completion.model == f"groq:{GPT_OSS}"


# --- every parameter honoured, or a 400 naming it -------------------------------------------------
Check = Callable[[dict[str, Any]], bool]


def honoured_or_refused(
    server: Server,
    upstream: FakeLLM,
    api: str,
    params: dict[str, Any],
    names: set[str],
    forwarded: Check,
    codes: tuple[str, ...] = ("unsupported_parameter",),
) -> str:
    """Send ``params`` (as extra body fields, so the SDK passes them through untouched). Either every upstream
    request of the turn carries them (``forwarded``), or the answer is a 400 with one of ``codes`` whose ``param``
    is one of ``names`` and no model was called. Returns which happened."""
    before = len(upstream.requests)
    client = client_of(server)
    try:
        if api == "chat_completions":
            client.chat.completions.create(
                model="chatloop", messages=[{"role": "user", "content": "hi"}], extra_body=params
            )
        else:
            client.responses.create(model="chatloop", input="hi", extra_body=params)
    except openai.BadRequestError as refused:
        assert refused.code in codes and refused.param in names, refused.body
        assert any(name in refused.message for name in names), refused.message
        assert len(upstream.requests) == before  # refused before any model call
        return "refused"
    bodies = sent_since(upstream, before)
    assert bodies and all(forwarded(b) for b in bodies), (params, bodies)
    return "forwarded"


CHAT_PARAMETERS: dict[str, tuple[dict[str, Any], Check]] = {
    "stop": ({"stop": ["END"]}, lambda b: b.get("stop") in (["END"], "END")),
    "seed": ({"seed": 7}, lambda b: b.get("seed") == 7),
    "presence_penalty": ({"presence_penalty": 0.5}, lambda b: b.get("presence_penalty") == 0.5),
    "frequency_penalty": ({"frequency_penalty": 0.5}, lambda b: b.get("frequency_penalty") == 0.5),
    "logit_bias": ({"logit_bias": {"1734": -100}}, lambda b: b.get("logit_bias") == {"1734": -100}),
    "logprobs": (
        {"logprobs": True, "top_logprobs": 2},
        lambda b: b.get("logprobs") is True and b.get("top_logprobs") == 2,
    ),
    "reasoning_effort": ({"reasoning_effort": "low"}, lambda b: b.get("reasoning_effort") == "low"),
}


@pytest.mark.parametrize("name", CHAT_PARAMETERS)
def test_a_chat_completions_parameter_is_honoured_or_refused(server, upstream, name):
    params, forwarded = CHAT_PARAMETERS[name]
    honoured_or_refused(server, upstream, "chat_completions", params, set(params), forwarded)


RESPONSES_PARAMETERS: dict[str, tuple[dict[str, Any], Check]] = {
    "reasoning": ({"reasoning": {"effort": "low"}}, lambda b: b.get("reasoning_effort") == "low"),
    "text.verbosity": ({"text": {"verbosity": "low"}}, lambda b: b.get("verbosity") == "low"),
    "service_tier": ({"service_tier": "flex"}, lambda b: b.get("service_tier") == "flex"),
    "prompt_cache_key": ({"prompt_cache_key": "chatloop"}, lambda b: b.get("prompt_cache_key") == "chatloop"),
    "top_logprobs": ({"top_logprobs": 2}, lambda b: b.get("top_logprobs") == 2),
    "include": (
        {"include": ["message.output_text.logprobs"]},
        lambda b: b.get("logprobs") is True,
    ),
}


@pytest.mark.parametrize("name", RESPONSES_PARAMETERS)
def test_a_responses_parameter_is_honoured_or_refused(server, upstream, name):
    params, forwarded = RESPONSES_PARAMETERS[name]
    honoured_or_refused(server, upstream, "responses", params, {name, *params}, forwarded)


REFUSED = [
    ("responses", "background", {"background": True, "store": False}),  # background needs store (issue 31)
    ("responses", "prompt", {"prompt": {"id": "pmpt_123", "version": "2"}}),
    ("responses", "frobnicate", {"frobnicate": 1}),  # an unknown field, on either API
    ("chat_completions", "frobnicate", {"frobnicate": 1}),
]


@pytest.mark.parametrize("api,name,params", REFUSED, ids=[f"{api}-{name}" for api, name, _ in REFUSED])
def test_what_cannot_be_honoured_is_a_400_naming_it(server, upstream, api, name, params):
    # OpenAI answers an unknown field with code unknown_parameter; either code names the field in param.
    codes = (
        ("unsupported_parameter", "unknown_parameter") if name == "frobnicate" else ("unsupported_parameter",)
    )
    assert honoured_or_refused(server, upstream, api, params, {name}, lambda b: False, codes) == "refused"


def test_store_false_is_not_refused(server):
    response = client_of(server).responses.create(model="chatloop", input="hi", store=False)
    assert response.status == "completed" and response.store is False
    with pytest.raises(openai.NotFoundError):
        client_of(server).responses.retrieve(response.id)  # not kept


# store, previous_response_id and conversation (issue #26) are honoured: each does what it says, and an id that
# names nothing is a 404 before any model call, never a 200 that silently ignores it.
def test_store_true_keeps_the_response(server):
    response = client_of(server).responses.create(model="chatloop", input=QUESTION, store=True)
    assert response.store is True
    kept = client_of(server).responses.retrieve(response.id)
    assert kept.output_text == response.output_text == ANSWER
    assert [item.type for item in kept.output] == ["code_interpreter_call", "message"]


def test_previous_response_id_continues_from_the_stored_turn(server, upstream):
    first = client_of(server).responses.create(model="chatloop", input=QUESTION)
    before = len(upstream.requests)
    client_of(server).responses.create(
        model="chatloop", input="And what did you run?", previous_response_id=first.id
    )
    messages = sent_since(upstream, before)[0]["messages"]
    assert any(m["role"] == "user" and m["content"] == QUESTION for m in messages)
    calls = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert [json.loads(c["function"]["arguments"])["code"] for c in calls] == [
        CODE
    ]  # the earlier run, replayed


def test_a_conversation_carries_the_history(server, upstream):
    conversation = client_of(server).conversations.create()
    client_of(server).responses.create(model="chatloop", input=QUESTION, conversation=conversation.id)
    before = len(upstream.requests)
    client_of(server).responses.create(model="chatloop", input="Thanks!", conversation=conversation.id)
    messages = sent_since(upstream, before)[0]["messages"]
    assert [m["content"] for m in messages if m["role"] == "user"] == [QUESTION, "Thanks!"]


@pytest.mark.parametrize("params", [{"previous_response_id": "resp_123"}, {"conversation": "conv_123"}])
def test_an_id_that_names_nothing_is_a_404_with_no_model_call(server, upstream, params):
    before = len(upstream.requests)
    with pytest.raises(openai.NotFoundError):
        client_of(server).responses.create(model="chatloop", input="hi", extra_body=params)
    assert len(upstream.requests) == before


@pytest.mark.parametrize("api", ["chat_completions", "responses"])
def test_max_output_tokens_reaches_the_model(server, upstream, api):
    before = len(upstream.requests)
    if api == "chat_completions":
        client_of(server).chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": "hi"}], max_completion_tokens=64
        )
    else:
        client_of(server).responses.create(model="chatloop", input="hi", max_output_tokens=64)
    bodies = sent_since(upstream, before)
    assert bodies and all(64 in (b.get("max_tokens"), b.get("max_completion_tokens")) for b in bodies)


@pytest.mark.parametrize("model", [f"groq:{LLAMA}", f"openai:{UNLISTED}"])
@pytest.mark.parametrize("api", ["chat_completions", "responses"])
def test_parallel_tool_calls_false_is_honoured(server, upstream, api, model):
    """The model is sent ``parallel_tool_calls: false``, or a reply with two calls reaches the client as one. Also
    for a model the catalog does not mark parallel-capable (the unlisted one). Here the model ignores the flag."""
    two = [
        ("call_a", "record_interest", EXPECTED.model_dump_json()),
        ("call_b", "record_interest", EXPECTED.model_copy(update={"years": 20}).model_dump_json()),
    ]
    model_id = model.partition(":")[2]
    upstream.script(model_id, tool_calls(model_id, two, groq=True))
    before = len(upstream.requests)
    if api == "chat_completions":
        completion = client_of(server).chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            tools=[RECORD],
            parallel_tool_calls=False,
        )
        calls = [c.function.name for c in completion.choices[0].message.tool_calls or []]
    else:
        response = client_of(server).responses.create(
            model=model, input="hi", tools=[RESPONSES_RECORD], parallel_tool_calls=False
        )
        calls = [item.name for item in response.output if item.type == "function_call"]
    bodies = sent_since(upstream, before)
    forwarded = bool(bodies) and all(b.get("parallel_tool_calls") is False for b in bodies)
    assert forwarded or calls == ["record_interest"], (calls, [b.get("parallel_tool_calls") for b in bodies])


def test_metadata_is_echoed(server):
    response = client_of(server).responses.create(model="chatloop", input="hi", metadata={"ticket": "T-1"})
    assert response.metadata == {"ticket": "T-1"}


@pytest.mark.parametrize("truncation", ["auto", "disabled"])
def test_truncation_is_honoured_and_reported(server, truncation):
    response = client_of(server).responses.create(model="chatloop", input="hi", truncation=truncation)
    assert response.status == "completed" and response.truncation == truncation


def test_max_tool_calls_caps_the_servers_runs(server, upstream):
    """The model's first run fails (so execute_javascript stays offered) and it tries again: with max_tool_calls 1
    the second run never happens; without it, it does."""
    before = len(upstream.requests)
    try:
        response = client_of(server).responses.create(
            model="chatloop", input="compute twice please", max_tool_calls=1
        )
    except openai.BadRequestError as refused:
        assert refused.code == "unsupported_parameter" and refused.param == "max_tool_calls"
        assert len(upstream.requests) == before
        return
    assert response.status in ("completed", "incomplete")
    results = [
        m["content"] for b in sent_since(upstream, before) for m in b["messages"] if m["role"] == "tool"
    ]
    assert not any("14" in r for r in results), results
    before = len(upstream.requests)
    client_of(server).responses.create(model="chatloop", input="compute twice please")
    results = [
        m["content"] for b in sent_since(upstream, before) for m in b["messages"] if m["role"] == "tool"
    ]
    assert any("14" in r for r in results), results  # without the cap the second run happens


def test_include_code_interpreter_outputs_is_honoured(server):
    response = client_of(server).responses.create(
        model="chatloop", input=QUESTION, include=["code_interpreter_call.outputs"]
    )
    (run,) = [item for item in response.output if item.type == "code_interpreter_call"]
    assert run.outputs and str(TOTAL) in run.outputs[0].logs


@pytest.mark.parametrize(
    "api,params",
    [
        ("chat_completions", {"user": "user-4242"}),
        ("responses", {"user": "user-4242"}),
        ("responses", {"safety_identifier": "user-4242"}),
    ],
)
def test_the_end_user_identifier_is_logged_or_forwarded(server, upstream, caplog, api, params):
    before = len(upstream.requests)
    caplog.clear()
    if api == "chat_completions":
        client_of(server).chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": "hi"}], extra_body=params
        )
    else:
        client_of(server).responses.create(model="chatloop", input="hi", extra_body=params)
    logged = any("user-4242" in str(vars(record)) for record in caplog.records)
    bodies = sent_since(upstream, before)
    forwarded = bool(bodies) and all(
        "user-4242" in (b.get("user"), b.get("safety_identifier")) for b in bodies
    )
    assert logged or forwarded


# --- the offline demo model keeps the contract too -------------------------------------------------
@pytest.fixture(scope="module")
def demo(sandbox, store_path) -> Iterator[Server]:
    from chatloop.tools.base import ToolRegistry
    from chatloop.tools.javascript import ExecuteJavaScriptTool

    settings = Settings(conversation_store_path=store_path)
    with app_server(settings, registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]), keys={}) as served:
        yield served


@pytest.mark.parametrize("model_class", ["OpenAIChatModel", "OpenAIResponsesModel"])
def test_pydantic_ai_tool_output_with_the_demo_model(demo, model_class):
    import pydantic_ai.models.openai as models
    from pydantic_ai import Agent, ToolOutput
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=demo.base_url, api_key="unused")
    model = getattr(models, model_class)("demo:offline", provider=provider)
    question = "calculate compound interest: $10,000 at 5% annually for 15 years"
    result = Agent(model, output_type=ToolOutput(Interest)).run_sync(question)
    assert result.output.total == 20789.28  # the sandbox's result, through the client's output tool


WEATHER_FUNCTION: dict[str, Any] = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
WEATHER: Any = {"type": "function", "function": WEATHER_FUNCTION}


def demo_weather_call(demo: Server) -> list[Any]:
    """A conversation where the demo model called the client's get_weather and the client answered it with a
    result of its own shape (no ``result`` key), as the AI SDK's tools do."""
    client = client_of(demo)
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Oslo?"}]
    first = client.chat.completions.create(
        model="demo:offline", messages=messages, tools=[WEATHER], tool_choice="required"
    )
    message = first.choices[0].message
    assert message.tool_calls, message
    result = {
        "role": "tool",
        "tool_call_id": message.tool_calls[0].id,
        "content": '{"temp": 7, "city": "Oslo"}',
    }
    return [*messages, message.model_dump(exclude_none=True), result]


def test_the_demo_model_quotes_a_client_tool_result_whatever_its_shape(demo):
    completion = client_of(demo).chat.completions.create(
        model="demo:offline", messages=demo_weather_call(demo), tools=[WEATHER]
    )
    content = completion.choices[0].message.content or ""
    assert "7" in content and "None" not in content, content


def test_the_demo_model_holds_tool_choice_after_tool_results(demo):
    completion = client_of(demo).chat.completions.create(
        model="demo:offline", messages=demo_weather_call(demo), tools=[WEATHER], tool_choice="required"
    )
    assert completion.choices[0].finish_reason == "tool_calls", completion.choices[0].message


# --- truncation: auto trims, disabled refuses --------------------------------------------------------
@pytest.fixture
def small_window(upstream, tmp_path, monkeypatch, store_path) -> Iterator[Server]:
    """A chain of one model whose catalog entry (an operator's overlay) gives it a 3,000-token window."""
    overlay = tmp_path / "models.json"
    overlay.write_text(
        json.dumps({"models": {"openai:tiny-window-1": {"context_window": 3000, "tools": True}}})
    )
    monkeypatch.setenv("OPENAI_BASE_URL", upstream.openai_base_url)
    settings = Settings(
        model_chain="openai:tiny-window-1",
        model_catalog_file=str(overlay),
        conversation_store_path=store_path,
    )
    runtime = Runtime(settings, keys_loader=lambda s: dict(KEYS))
    with Server(create_app(settings, runtime=runtime)) as served:
        yield served


def long_history() -> list[dict[str, str]]:
    """About 6,000 tokens of earlier turns, then a short question: it fits only once old turns are dropped."""
    turns = []
    for n in range(30):
        turns.append({"role": "user", "content": f"Question {n}: " + "tell me more about it. " * 35})
        turns.append({"role": "assistant", "content": f"Answer {n}: " + "here is more about it. " * 35})
    return [*turns, {"role": "user", "content": "hi"}]


def test_truncation_disabled_refuses_what_does_not_fit(small_window, upstream):
    before = len(upstream.requests)
    with pytest.raises(openai.APIStatusError) as refused:
        client_of(small_window).responses.create(
            model="chatloop", input=long_history(), truncation="disabled"
        )
    assert refused.value.status_code in (400, 413) and "truncation" in refused.value.message
    assert len(upstream.requests) == before  # no model call


def test_truncation_auto_trims_and_says_so(small_window, upstream):
    before = len(upstream.requests)
    response = client_of(small_window).responses.create(
        model="chatloop", input=long_history(), truncation="auto"
    )
    assert response.status == "completed" and response.truncation == "auto"
    (sent,) = sent_since(upstream, before)
    assert len(sent["messages"]) < len(long_history()) and sent["messages"][-1]["content"] == "hi"


# --- the catalog decides who takes a parameter; a model it is silent on is tried ------------------
def serve(upstream: FakeLLM, chain: str, monkeypatch: pytest.MonkeyPatch, store_path: str) -> Server:
    monkeypatch.setenv("GROQ_BASE_URL", upstream.groq_base_url)
    monkeypatch.setenv("OPENAI_BASE_URL", upstream.openai_base_url)
    settings = Settings(
        model_chain=chain, rate_limit_max_wait_seconds=0.0, conversation_store_path=store_path
    )
    return Server(create_app(settings, runtime=Runtime(settings, keys_loader=lambda s: dict(KEYS))))


def test_a_parameter_no_model_of_the_chain_takes_is_a_400_with_no_model_call(
    upstream, monkeypatch, store_path
):
    before = len(upstream.requests)
    with (
        serve(
            upstream, f"groq:{LLAMA},groq:{GPT_OSS}", monkeypatch, store_path
        ) as server,  # neither takes logit_bias
        pytest.raises(openai.BadRequestError) as refused,
    ):
        client_of(server).chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": "hi"}], logit_bias={"1734": -100}
        )
    assert refused.value.code == "unsupported_parameter" and refused.value.param == "logit_bias"
    assert len(upstream.requests) == before


def test_a_model_that_does_not_take_a_parameter_is_passed_over(upstream, monkeypatch, store_path):
    before = len(upstream.requests)
    with serve(
        upstream, f"groq:{LLAMA},groq:{GPT_OSS}", monkeypatch, store_path
    ) as server:  # only gpt-oss takes it
        completion = client_of(server).chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": "hi"}], reasoning_effort="low"
        )
    assert completion.model == f"groq:{GPT_OSS}"
    bodies = sent_since(upstream, before)
    assert [b["model"] for b in bodies] == [GPT_OSS] and bodies[0]["reasoning_effort"] == "low"


def test_a_providers_rejection_of_a_parameter_moves_the_chain_on(upstream, monkeypatch, store_path):
    rejection = error(400, "unsupported_parameter", "Unsupported parameter: 'seed'.", param="seed")
    upstream.script(UNLISTED, rejection)
    before = len(upstream.requests)
    with serve(upstream, f"openai:{UNLISTED},groq:{GPT_OSS}", monkeypatch, store_path) as server:
        completion = client_of(server).chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": "hi"}], seed=7
        )
    assert completion.choices[0].message.content == "Hello from the wire."
    bodies = sent_since(upstream, before)
    assert [b["model"] for b in bodies] == [UNLISTED, GPT_OSS] and all(b["seed"] == 7 for b in bodies)
