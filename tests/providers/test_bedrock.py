"""``bedrock:`` chain members through boto3's real ``bedrock-runtime`` client against the fake Bedrock Runtime
(tests/support/fake_bedrock.py): ConverseStream's text and tool uses as the loop's deltas and calls, the request in
Converse's shape, SigV4 on every request, errors in the chain's taxonomy, usage, and a calculation turn with the
real Deno sandbox."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.engine import EventType, TurnRequest, run_turn
from chatloop.providers.base import ModelFallback, ModelRequest, ModelResponse, TextDelta
from chatloop.providers.catalog import Catalog
from chatloop.providers.chain import FallbackChain
from chatloop.providers.converse import ConverseFolder, converse_messages, converse_params
from chatloop.providers.factory import ChainMisconfigured, build_chain, build_model
from chatloop.providers.failures import AllModelsFailed, BadRequest
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.fake_bedrock import ACCESS_KEY, REGION, SECRET_KEY, cut, error, text, tool_use
from tests.support.fake_llm import text as groq_text

NOVA = "amazon.nova-lite-v1:0"
HAIKU = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
G70 = "llama-3.3-70b-versatile"
KEYS = {"groq": "gsk_test_key_0000000000"}
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


def chain(*entries: str) -> FallbackChain:
    catalog = Catalog.load()
    models = [build_model(e, KEYS, catalog) for e in entries]
    assert all(models), entries
    return FallbackChain([m for m in models if m], catalog=catalog)


def request(messages=None, **kw) -> ModelRequest:
    messages = messages or [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    return ModelRequest(messages=messages, deadline=Deadline.after(10), **kw)


async def collect(model, req):
    items = [item async for item in model.stream(req)]
    assert isinstance(items[-1], ModelResponse)
    return items, items[-1]


async def test_a_streamed_answer_is_signed_shaped_for_converse_and_its_deltas_make_the_message(fake_bedrock):
    fake_bedrock.script(NOVA, text("The answer is 42.", pieces=4, usage=(20, 5), cache=(100, 7)))
    items, response = await collect(
        chain(f"bedrock:{NOVA}"),
        request(max_tokens=300, temperature=0.2, top_p=0.9, params={"stop": ["END"]}),
    )
    deltas = [i.text for i in items if isinstance(i, TextDelta)]
    assert len(deltas) == 4 and "".join(deltas) == response.content == "The answer is 42."
    assert response.model == f"bedrock:{NOVA}" and response.finish_reason == "stop"
    # Cache reads and writes are tokens the model read: the prompt counts them.
    assert response.usage.as_dict() == {"prompt_tokens": 127, "completion_tokens": 5, "total_tokens": 132}
    sent = fake_bedrock.requests_for(NOVA)[0]
    assert sent["operation"] == "converse-stream" and sent["signed"] is True
    assert sent["headers"]["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/")
    assert f"/{REGION}/bedrock/aws4_request" in sent["headers"]["authorization"]
    assert sent["body"] == {
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "system": [{"text": "be brief"}],
        "inferenceConfig": {"maxTokens": 300, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"]},
    }


async def test_a_streamed_tool_call_is_assembled_from_its_input_deltas_and_tool_choice_holds(fake_bedrock):
    args = json.dumps({"code": "10000 * Math.pow(1.05, 15)"})
    fake_bedrock.script(
        HAIKU, *[tool_use([("tooluse_a", "execute_javascript", args)], preface="Let me compute.")] * 3
    )
    choices = ({"type": "function", "function": {"name": "execute_javascript"}}, "required", "auto")
    for choice in choices:
        _items, response = await collect(
            chain(f"bedrock:{HAIKU}"), request(tools=JS_TOOL, tool_choice=choice)
        )
        assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
            ("tooluse_a", "execute_javascript", args)
        ]
        assert response.finish_reason == "tool_calls" and response.content == "Let me compute."
    configs = [r["body"]["toolConfig"] for r in fake_bedrock.requests_for(HAIKU)]
    assert [c["toolChoice"] for c in configs] == [
        {"tool": {"name": "execute_javascript"}},
        {"any": {}},
        {"auto": {}},
    ]
    assert configs[0]["tools"] == [
        {
            "toolSpec": {
                "name": "execute_javascript",
                "description": "run js",
                "inputSchema": {"json": JS_TOOL[0]["function"]["parameters"]},
            }
        }
    ]


def test_tool_choice_none_sends_no_tools_and_tells_earlier_tool_exchanges_as_text():
    history = [
        {"role": "user", "content": "6*7?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "js", "arguments": '{"code":"6*7"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": '{"result": 42}'},
        {"role": "user", "content": "and again, without tools"},
    ]
    info = Catalog.load().get(f"bedrock:{NOVA}")
    params = converse_params(
        info, ModelRequest(messages=history, deadline=Deadline.after(5), tools=JS_TOOL, tool_choice="none")
    )
    assert "toolConfig" not in params
    blocks = [b for m in params["messages"] for b in m["content"]]
    assert all(set(b) == {"text"} for b in blocks) and "42" in json.dumps(blocks)
    # With tools offered: the calls as toolUse, results and the next user text merged into one user message.
    params = converse_params(info, ModelRequest(messages=history, deadline=Deadline.after(5), tools=JS_TOOL))
    assert [m["role"] for m in params["messages"]] == ["user", "assistant", "user"]
    assert params["messages"][1]["content"] == [
        {"toolUse": {"toolUseId": "t1", "name": "js", "input": {"code": "6*7"}}}
    ]
    assert params["messages"][2]["content"] == [
        {"toolResult": {"toolUseId": "t1", "content": [{"json": {"result": 42}}]}},
        {"text": "and again, without tools"},
    ]


def test_structured_output_goes_as_output_config_or_is_refused_by_name():
    catalog = Catalog.load()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    params = converse_params(catalog.get(f"bedrock:{HAIKU}"), request(response_format=fmt))
    assert params["outputConfig"]["textFormat"]["structure"]["jsonSchema"] == {
        "schema": json.dumps(schema),
        "name": "answer",
    }
    with pytest.raises(BadRequest, match="json_object"):
        converse_params(catalog.get(f"bedrock:{HAIKU}"), request(response_format={"type": "json_object"}))
    # The catalog says which Bedrock models serve it: the chain passes the others over, by name.
    able, passed_over = chain(f"bedrock:{NOVA}", f"bedrock:{HAIKU}").supports(response_format=fmt)
    assert able == [f"bedrock:{HAIKU}"] and passed_over == [f"bedrock:{NOVA}"]


async def test_throttling_falls_back_to_the_next_member_after_exactly_one_bedrock_request(
    fake_bedrock, fake_llm
):
    fake_bedrock.script(
        NOVA, error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
    )
    fake_llm.script(G70, groq_text(G70, "from groq", groq=True))
    c = chain(f"bedrock:{NOVA}", f"groq:{G70}")
    items, response = await collect(c.for_turn(), request())
    fallback = next(i for i in items if isinstance(i, ModelFallback))
    assert (fallback.from_model, fallback.to_model, fallback.reason) == (
        f"bedrock:{NOVA}",
        f"groq:{G70}",
        "rate_limited",
    )
    assert (
        response.content == "from groq" and len(fake_bedrock.requests_for(NOVA)) == 1
    )  # botocore retried nothing
    assert c.health.cooling(f"bedrock:{NOVA}") > 0  # cools down as after Groq's 429s


async def test_input_too_long_is_a_context_overflow_and_the_chain_moves_to_a_larger_window(fake_bedrock):
    micro = "amazon.nova-micro-v1:0"  # 128k tokens; Haiku's window is 200k
    fake_bedrock.script(micro, error(400, "ValidationException", "Input is too long for requested model."))
    fake_bedrock.script(HAIKU, text("fits here"))
    items, response = await collect(chain(f"bedrock:{micro}", f"bedrock:{HAIKU}").for_turn(), request())
    assert next(i for i in items if isinstance(i, ModelFallback)).reason == "context_too_long"
    assert response.content == "fits here"


async def test_model_access_not_granted_disables_that_model_once_with_what_to_fix(fake_bedrock, caplog):
    fake_bedrock.script(
        NOVA,
        error(
            403, "AccessDeniedException", "You don't have access to the model with the specified model ID."
        ),
    )
    fake_bedrock.script(HAIKU, text("one"), text("two"))
    c = chain(f"bedrock:{NOVA}", f"bedrock:{HAIKU}")
    with caplog.at_level(logging.WARNING):
        await collect(c.for_turn(), request())
        _, response = await collect(c.for_turn(), request())
    assert response.content == "two" and len(fake_bedrock.requests_for(NOVA)) == 1
    assert f"bedrock:{NOVA}" in c.health.disabled
    said = [r.getMessage() for r in caplog.records if "Model access" in r.getMessage()]
    assert len(said) == 1 and NOVA in said[0]


async def test_an_exception_event_mid_stream_is_a_cut_stream_and_the_next_member_answers(fake_bedrock):
    fake_bedrock.script(
        NOVA, cut(text("partial answer that is void", pieces=4), after=3, exception="throttlingException")
    )
    fake_bedrock.script(HAIKU, text("whole answer"))
    items, response = await collect(chain(f"bedrock:{NOVA}", f"bedrock:{HAIKU}").for_turn(), request())
    fallback = next(i for i in items if isinstance(i, ModelFallback))
    assert fallback.reason == "transient" and fallback.discard_partial is True
    assert response.content == "whole answer"


async def test_a_request_signed_with_other_credentials_is_an_auth_failure_and_no_secret_is_shown(
    fake_bedrock, monkeypatch, caplog
):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong/secret/for/this/fake/0000000000000")
    from chatloop.providers import bedrock

    bedrock.drop_clients()
    fake_bedrock.script(NOVA, text("never"))
    with caplog.at_level(logging.DEBUG), pytest.raises(AllModelsFailed) as failed:
        async for _ in chain(f"bedrock:{NOVA}").for_turn().stream(request()):
            pass
    assert [e.kind for e in failed.value.attempts] == ["auth"]  # InvalidSignatureException
    said = " ".join(r.getMessage() for r in caplog.records) + str(failed.value) + repr(failed.value.attempts)
    assert "wrong/secret" not in said and SECRET_KEY not in said


def test_the_factory_takes_a_bedrock_entry_without_a_key_when_a_region_is_set(monkeypatch):
    entries = f"bedrock:{HAIKU},groq:{G70}"
    assert build_chain(Settings(model_chain=entries), {"groq": None}).entries() == [f"bedrock:{HAIKU}"]
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(ChainMisconfigured, match="no AWS_REGION configured"):  # never the demo in its place
        build_chain(Settings(model_chain=entries), {"groq": None})


async def test_usage_is_summed_over_a_calculation_turn_in_the_real_sandbox(fake_bedrock, sandbox):
    fake_bedrock.script(
        NOVA,
        tool_use(
            [
                ("tu_1", "execute_javascript", '{"code": "6*7"}'),
                ("tu_2", "execute_javascript", '{"code": "2**10"}'),
            ],
            usage=(100, 20),
        ),
        text("6*7 is 42 and 2**10 is 1024.", usage=(150, 5)),
    )
    events = [
        e
        async for e in run_turn(
            TurnRequest(messages=[{"role": "user", "content": "6*7 and 2**10?"}]),
            chain(f"bedrock:{NOVA}").for_turn(),
            ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
            Deadline.after(20),
        )
    ]
    assert events[-1].data["usage"] == {"prompt_tokens": 250, "completion_tokens": 25, "total_tokens": 275}
    assert [e.data.get("status") for e in events if e.type is EventType.TOOL_CALL_RESULT] == ["ok", "ok"]
    # Both calls ran; their results went back together in the one user message after the assistant's (as text here:
    # the loop's answer call offers no tools once the sandbox has answered, and Converse refuses toolUse blocks
    # without a toolConfig).
    second = fake_bedrock.requests_for(NOVA)[1]["body"]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    said = json.dumps(second[2])
    assert "tu_1" in said and "42" in said and "tu_2" in said and "1024" in said


def test_a_failed_run_goes_back_as_a_tool_result_with_status_error():
    _, out = converse_messages(
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "a", "function": {"name": "js", "arguments": "{}"}},
                    {"id": "b", "function": {"name": "js", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": '{"error": "ReferenceError: x is not defined"}'},
            {"role": "tool", "tool_call_id": "b", "content": "plain words"},
        ]
    )
    assert out[2]["content"] == [
        {
            "toolResult": {
                "toolUseId": "a",
                "content": [{"json": {"error": "ReferenceError: x is not defined"}}],
                "status": "error",
            }
        },
        {"toolResult": {"toolUseId": "b", "content": [{"text": "plain words"}]}},
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "tool", "system", "developer"])},
            optional={
                "content": st.one_of(
                    st.none(),
                    st.text(max_size=20),
                    st.lists(
                        st.dictionaries(st.sampled_from(["type", "text"]), st.text(max_size=8)), max_size=3
                    ),
                ),
                "tool_call_id": st.text(max_size=5),
                "tool_calls": st.lists(
                    st.fixed_dictionaries(
                        {
                            "id": st.text(max_size=4),
                            "function": st.fixed_dictionaries(
                                {"name": st.text(max_size=4), "arguments": st.text(max_size=12)}
                            ),
                        }
                    ),
                    max_size=2,
                ),
            },
        ),
        max_size=8,
    )
)
def test_any_conversation_becomes_alternating_converse_messages_without_blank_blocks(messages):
    _, out = converse_messages(messages)
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(out))
    assert all(m["content"] for m in out)
    assert not any(b.get("text") == "" for m in out for b in m["content"])


async def test_what_waits_for_a_call_in_flight_starts_when_a_bedrock_request_goes_out(fake_bedrock):
    from chatloop.providers import warmup

    started: list[int] = []
    fake_bedrock.script(NOVA, text("hello"))
    warmup.when_in_flight(lambda: started.append(-1))  # the sandbox's spare Deno process waits for this
    await collect(chain(f"bedrock:{NOVA}"), request())
    assert -1 in started


async def test_a_turn_out_of_time_closes_the_bedrock_stream_and_a_silent_model_passes_the_turn_on(
    fake_bedrock,
):
    slow = text("a long answer, word by word, " * 4, pieces=40)
    slow.event_delay = 0.2
    fake_bedrock.script(NOVA, slow)
    with pytest.raises(Exception) as out_of_time:
        async for _ in (
            chain(f"bedrock:{NOVA}")
            .for_turn()
            .stream(ModelRequest(messages=[{"role": "user", "content": "hi"}], deadline=Deadline.after(1.0)))
        ):
            pass
    assert "deadline" in repr(out_of_time.value).lower()
    for _ in range(50):  # the server sees its client go, well before the 40 events' 8 s
        if fake_bedrock.aborted:
            break
        await asyncio.sleep(0.1)
    assert fake_bedrock.aborted == [NOVA]

    silent = text("too late")
    silent.delay = 3.0
    fake_bedrock.script(NOVA, silent)
    fake_bedrock.script(HAIKU, text("from the next member"))
    catalog = Catalog.load()
    quick = Settings(model_chain=f"bedrock:{NOVA},bedrock:{HAIKU}", model_first_chunk_timeout_seconds=0.5)
    members = [build_model(f"bedrock:{m}", {}, catalog, quick) for m in (NOVA, HAIKU)]
    items, response = await collect(FallbackChain([m for m in members if m], catalog=catalog), request())
    assert next(i for i in items if isinstance(i, ModelFallback)).reason == "transient"
    assert response.content == "from the next member"


async def test_a_bedrock_api_key_is_sent_as_a_bearer_token_and_shown_nowhere(monkeypatch, caplog):
    from chatloop.providers import bedrock
    from tests.support.fake_bedrock import FakeBedrock

    with FakeBedrock(tls=True) as keyed:  # botocore sends a bearer token over HTTPS only
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        for name, value in keyed.environment().items():
            if not name.startswith("AWS_") or "KEY" not in name:
                monkeypatch.setenv(name, value)
        monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", keyed.bearer_token)
        bedrock.drop_clients()
        keyed.script(NOVA, text("keyed"))
        try:
            with caplog.at_level(logging.DEBUG):
                items, response = await collect(chain(f"bedrock:{NOVA}"), request())
        finally:
            bedrock.drop_clients()
    assert response.content == "keyed"
    sent = keyed.requests_for(NOVA)[0]
    assert sent["headers"]["authorization"] == f"Bearer {keyed.bearer_token}" and sent["signed"]
    said = " ".join(r.getMessage() for r in caplog.records) + repr(items)
    assert keyed.bearer_token not in said


def test_images_go_as_image_blocks_from_data_urls_only():
    png = "iVBORw0KGgo="  # the PNG signature, base64
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}
    _, out = converse_messages([{"role": "user", "content": [{"type": "text", "text": "what is it?"}, part]}])
    assert out[0]["content"][1] == {"image": {"format": "png", "source": {"bytes": b"\x89PNG\r\n\x1a\n"}}}
    for url in (
        "https://example.com/cat.png",
        "data:image/tiff;base64,AAAA",
        "data:image/png;base64,not base64!",
    ):
        with pytest.raises(BadRequest, match="messages"):
            converse_messages(
                [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
            )


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["contentBlockStart", "contentBlockDelta", "messageStop", "metadata", "other"]),
            st.recursive(
                st.none() | st.integers() | st.text(max_size=6),
                lambda inner: st.dictionaries(
                    st.sampled_from(
                        [
                            "delta",
                            "text",
                            "toolUse",
                            "input",
                            "start",
                            "toolUseId",
                            "name",
                            "contentBlockIndex",
                            "stopReason",
                            "usage",
                            "inputTokens",
                        ]
                    ),
                    inner,
                    max_size=3,
                ),
                max_leaves=6,
            ),
            max_size=1,
        ),
        max_size=8,
    )
)
def test_the_stream_folder_survives_any_event_shape(events):
    folder = ConverseFolder()
    for event in events:
        try:
            folder.add(event)
        except (AttributeError, TypeError, ValueError) as exc:  # a malformed event must not be a crash either
            raise AssertionError(f"{event!r}: {exc!r}") from exc
    folder.tool_calls(), folder.finish_reason(), folder.usage()


def test_a_named_tool_choice_holds_on_models_without_converses_tool_form():
    catalog = Catalog.load()
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    named = {"type": "function", "function": {"name": "get_weather"}}
    asked = request(tools=[*JS_TOOL, weather], tool_choice=named)
    llama = converse_params(catalog.get("bedrock:us.meta.llama3-3-70b-instruct-v1:0"), asked)["toolConfig"]
    # Llama on Converse takes auto/any only: the named tool alone, with any, is the same obligation.
    assert llama == {
        "tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object"}}}}],
        "toolChoice": {"any": {}},
    }
    claude = converse_params(catalog.get(f"bedrock:{HAIKU}"), asked)["toolConfig"]
    assert claude["toolChoice"] == {"tool": {"name": "get_weather"}} and len(claude["tools"]) == 2


async def test_the_trace_context_goes_with_a_bedrock_request_inside_its_signature(fake_bedrock):
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    fake_bedrock.script(NOVA, text("traced"))
    await collect(chain(f"bedrock:{NOVA}"), request(headers={"traceparent": parent}))
    sent = fake_bedrock.requests_for(NOVA)[0]
    assert sent["headers"]["traceparent"] == parent and sent["signed"]


def test_a_conversation_that_starts_with_the_assistant_gets_a_user_turn_first():
    # Converse refuses a conversation that does not start with a user message; chat completions allow it.
    _, out = converse_messages(
        [{"role": "assistant", "content": "Hello! Ask me anything."}, {"role": "user", "content": "2+2?"}]
    )
    assert [m["role"] for m in out] == ["user", "assistant", "user"] and out[0]["content"][0]["text"]


async def test_a_request_converse_cannot_take_is_a_bad_request_not_a_fallback(fake_bedrock):
    with pytest.raises(BadRequest, match="maxTokens"):
        await collect(chain(f"bedrock:{NOVA}", f"bedrock:{HAIKU}").for_turn(), request(max_tokens=0))
    assert not fake_bedrock.requests  # botocore refused it before sending
