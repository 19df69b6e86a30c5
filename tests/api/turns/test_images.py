"""Images in (issue 44), through the real Lambda handler, the real ``groq``/``openai`` SDKs and the scripted upstream
(tests/support/fake_llm.py), and the fake Bedrock Runtime: each door's image part reaches a vision model as chat
completions' ``image_url`` part; a member that cannot see is passed over (a logged decision); a chain where none can
is a 400 naming the part, with no model call; hostile parts are 400s naming the part, with no model call; a stored
response keeps a 1 MB image byte for byte, and its continuation sends it again."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry
from tests.support import fake_bedrock as bedrock_replies
from tests.support.events import response_body, rest_event
from tests.support.fake_llm import FakeLLM, error, text
from tests.support.handler import handle, post
from tests.support.images import data_url, gif, padded_png, png

KEYS = {"groq": "gsk_test_key_0000000000", "openai": "sk-test-key-000000000000", "local": None}
SCOUT = "meta-llama/llama-4-scout-17b-16e-instruct"
TEXT_ONLY = "llama-3.3-70b-versatile"
GPT = "gpt-4.1-mini"
NOVA = "amazon.nova-pro-v1:0"
PICTURE = data_url(png(640, 480))
ROUTES = ["/chat", "/v1/chat/completions", "/v1/responses"]


def body_with(route: str, url: str, detail: str = "low", **extra: Any) -> dict[str, Any]:
    """A request asking about one image, in ``route``'s own shape."""
    parts: list[dict[str, Any]]
    if route == "/v1/responses":
        parts = [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": url, "detail": detail},
        ]
        return {"model": "chatloop", "input": [{"role": "user", "content": parts}], "store": False, **extra}
    parts = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": url, "detail": detail}},
    ]
    body: dict[str, Any] = {"messages": [{"role": "user", "content": parts}], **extra}
    return {**body, "stream": False} if route == "/chat" else {"model": "chatloop", **body}


def answer_of(route: str, body: str) -> str:
    data = json.loads(body)
    if route == "/chat":
        return str(data["message"]["content"])
    if route == "/v1/chat/completions":
        return str(data["choices"][0]["message"]["content"])
    return "".join(c["text"] for o in data["output"] if o["type"] == "message" for c in o["content"])


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeLLM]:
    """One scripted upstream for the module (a server's shutdown costs half a second), its base URLs set."""
    with FakeLLM() as llm, pytest.MonkeyPatch.context() as patch:
        patch.setenv("GROQ_BASE_URL", llm.groq_base_url)
        patch.setenv("OPENAI_BASE_URL", llm.openai_base_url)
        yield llm


@pytest.fixture
def fake_llm(upstream: FakeLLM) -> FakeLLM:
    """The module's upstream, with no request, script or default left from another test."""
    upstream.requests.clear()
    upstream.queues.clear()
    upstream.default = None
    return upstream


@pytest.fixture
def chain(app_runtime, fake_llm, tmp_path):
    """``chain("groq:a,openai:b")``: the handler's runtime with that chain, no tools, the scripted upstream."""

    def install(entries: str, **more: Any) -> None:
        store = str(tmp_path / "store.sqlite3")
        app_runtime(
            Settings(model_chain=entries, conversation_store_path=store, **more),
            registry=ToolRegistry([]),
            keys=KEYS,
        )

    return install


@pytest.mark.parametrize("route", ROUTES)
def test_each_door_sends_the_image_past_a_text_only_member_to_a_vision_one(route, chain, fake_llm, caplog):
    chain(f"groq:{TEXT_ONLY},openai:{GPT}")
    fake_llm.script(GPT, text(GPT, "A grey rectangle."))
    url = PICTURE if route != "/v1/responses" else "https://images.example.com/receipt.png"
    status, body = post(route, body_with(route, url))
    assert status == 200, body
    assert answer_of(route, body) == "A grey rectangle."
    assert fake_llm.requests_for(TEXT_ONLY) == []  # passed over, never called
    (sent,) = fake_llm.requests_for(GPT)
    assert sent["body"]["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
        ],
    }
    (decision,) = [m for m in caplog.messages if m.startswith("Vision decision")]
    assert f"models=openai:{GPT} skipped=groq:{TEXT_ONLY}" in decision


def test_the_groq_sdk_sends_the_image_to_a_groq_vision_model(chain, fake_llm):
    chain(f"groq:{SCOUT}")
    fake_llm.script(SCOUT, text(SCOUT, "A cat.", groq=True))
    status, body = post("/v1/chat/completions", body_with("/v1/chat/completions", PICTURE, "high"))
    assert status == 200 and answer_of("/v1/chat/completions", body) == "A cat."
    (sent,) = fake_llm.requests_for(SCOUT)
    assert sent["path"] == "/openai/v1/chat/completions"
    assert sent["body"]["messages"][0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": PICTURE, "detail": "high"},
    }


@pytest.mark.parametrize("route", ROUTES)
def test_a_text_only_chain_refuses_an_image_naming_the_part(route, chain, fake_llm):
    chain(f"groq:{TEXT_ONLY},groq:openai/gpt-oss-120b")
    status, body = post(route, body_with(route, PICTURE))
    assert status == 400, body
    error = json.loads(body)["error"]
    part = "input[0].content[1]" if route == "/v1/responses" else "messages[0].content[1]"
    assert error["message"].startswith(f"{part}: ") and error["code"] == "unsupported_image"
    assert error.get("param", part) == part  # /chat's errors carry no param: its message names the part
    assert f"groq:{TEXT_ONLY}: no vision support" in error["message"]
    assert fake_llm.requests == []


def test_bedrock_is_sent_the_bytes_and_passed_over_for_a_url(app_runtime, fake_bedrock):
    app_runtime(Settings(model_chain=f"bedrock:{NOVA}"), registry=ToolRegistry([]), keys={})
    fake_bedrock.script(NOVA, bedrock_replies.text("A tiny GIF."))
    image = gif(3, 2)
    status, body = post("/v1/responses", body_with("/v1/responses", data_url(image, "image/gif")))
    assert status == 200 and answer_of("/v1/responses", body) == "A tiny GIF."
    (sent,) = fake_bedrock.requests_for(NOVA)
    blocks = sent["body"]["messages"][0]["content"]
    assert blocks[0] == {"text": "What is this?"}
    assert (
        blocks[1]["image"]["format"] == "gif"
        and base64.b64decode(blocks[1]["image"]["source"]["bytes"]) == image
    )
    status, body = post("/v1/responses", body_with("/v1/responses", "https://images.example.com/a.png"))
    assert status == 400 and json.loads(body)["error"]["param"] == "input[0].content[1]"
    assert "cannot read an image by URL" in json.loads(body)["error"]["message"]
    assert len(fake_bedrock.requests) == 1  # the URL turn called nothing


BAD_URL = st.one_of(
    st.text(max_size=40).filter(lambda u: not u.startswith(("https://", "data:"))),
    st.sampled_from(
        ["http://example.com/a.png", "ftp://x/y.png", "https://", "https:///x", "javascript:alert(1)"]
    ),
    st.builds(lambda s: f"data:image/png;base64,{s}", st.text(max_size=40)),
    st.builds(
        lambda t: data_url(png(2, 2), t), st.sampled_from(["image/svg+xml", "image/jpeg", "text/html", ""])
    ),
    st.just("https://example.com/" + "a" * 3000),
    st.just(data_url(padded_png(5000))),  # past IMAGE_MAX_BYTES
)
IMAGE = st.fixed_dictionaries({"url": BAD_URL, "detail": st.sampled_from(["auto", "high", "max", "", "LOW"])})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    image=st.one_of(IMAGE, st.text(max_size=10), st.none()),
    role=st.sampled_from(["user", "assistant", "system"]),
)
def test_hostile_image_parts_are_400s_naming_the_part(chain, fake_llm, image, role):
    chain(f"openai:{GPT}", image_max_bytes=4096)
    content = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": image}]
    status, body = post(
        "/v1/chat/completions", {"model": "chatloop", "messages": [{"role": role, "content": content}]}
    )
    assert status == 400, body
    error = json.loads(body)["error"]
    assert error["param"] == "messages[0].content[1]", error
    assert fake_llm.requests == []


@pytest.mark.parametrize(
    ("part", "role", "problem"),
    [
        ({"type": "input_image", "file_id": "file-abc"}, "user", "file_id is not supported"),
        ({"type": "input_image"}, "user", "needs an image_url"),
        ({"type": "input_image", "image_url": PICTURE}, "assistant", "user message only"),
        ({"type": "input_image", "image_url": PICTURE, "detail": "ultra"}, "user", "detail must be one of"),
        ({"type": "input_image", "image_url": "http://example.com/a.png"}, "user", "must be https"),
    ],
)
def test_a_bad_input_image_is_a_400_naming_it(chain, fake_llm, part, role, problem):
    chain(f"openai:{GPT}")
    content = [{"type": "input_text", "text": "look"}, part]
    status, body = post("/v1/responses", {"model": "chatloop", "input": [{"role": role, "content": content}]})
    assert status == 400, body
    error = json.loads(body)["error"]
    assert error["param"] == "input[0].content[1]" and problem in error["message"], error
    assert fake_llm.requests == []


def test_more_images_than_the_limit_is_a_400_naming_the_first_past_it(chain, fake_llm):
    chain(f"openai:{GPT}", image_max_count=2)
    part = {"type": "image_url", "image_url": {"url": PICTURE}}
    messages = [{"role": "user", "content": [part, part]}, {"role": "user", "content": ["x", part]}]
    status, body = post("/v1/chat/completions", {"model": "chatloop", "messages": messages})
    assert status == 400 and json.loads(body)["error"]["param"] == "messages[1].content[1]", body
    assert fake_llm.requests == []


def as_caller(event: dict[str, Any]) -> dict[str, Any]:
    event["requestContext"]["identity"]["apiKeyId"] = "key-a"  # a caller: what is stored is its own
    return event


def test_a_stored_response_keeps_a_1_mb_image_byte_for_byte(chain, fake_llm):
    chain(f"openai:{GPT}")
    fake_llm.default = lambda body: text(GPT, "Seen.")
    url = data_url(padded_png(1_000_000))
    response = handle(
        as_caller(rest_event("POST", "/v1/responses", body_with("/v1/responses", url, "auto", store=True)))
    )
    assert response["statusCode"] == 200, response_body(response)
    rid = json.loads(response_body(response))["id"]
    listed = handle(as_caller(rest_event("GET", f"/v1/responses/{rid}/input_items")))
    (item,) = json.loads(response_body(listed))["data"]
    assert item["content"][1] == {"type": "input_image", "image_url": url, "file_id": None, "detail": "auto"}
    follow_up = {"model": "chatloop", "input": "And now?", "previous_response_id": rid, "store": False}
    response = handle(as_caller(rest_event("POST", "/v1/responses", follow_up)))
    assert response["statusCode"] == 200, response_body(response)
    again = fake_llm.requests[-1]["body"]["messages"]
    assert again[0]["content"][1] == {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
ANY_PART = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {"type": st.just("input_image")}, optional={"image_url": JSON, "detail": JSON, "file_id": JSON}
    ),
    st.fixed_dictionaries({"type": st.just("image_url")}, optional={"image_url": JSON}),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(part=ANY_PART, route=st.sampled_from(["/v1/responses", "/v1/chat/completions"]))
def test_any_part_is_answered_or_refused_never_a_crash(chain, fake_llm, part, route):
    chain(f"openai:{GPT}")
    fake_llm.requests.clear()
    fake_llm.default = lambda body: text(GPT, "fine")
    content = [{"type": "input_text" if route == "/v1/responses" else "text", "text": "look"}, part]
    message = [{"role": "user", "content": content}]
    body = (
        {"model": "chatloop", "input": message}
        if route == "/v1/responses"
        else {"model": "chatloop", "messages": message}
    )
    status, answer = post(route, body)
    assert status in (200, 400), answer
    if status == 400:
        assert json.loads(answer)["error"]["param"].startswith(("input", "messages")), answer
        assert fake_llm.requests == []


def test_compaction_tells_an_image_and_keeps_it(chain, fake_llm):
    chain(f"openai:{GPT}")
    fake_llm.default = lambda body: text(GPT, "The user sent a receipt and asked about it.")
    body = body_with("/v1/responses", PICTURE)
    del body["store"]
    response = handle(as_caller(rest_event("POST", "/v1/responses/compact", body)))
    assert response["statusCode"] == 200, response_body(response)
    (asked,) = fake_llm.requests
    told = json.dumps(asked["body"]["messages"])
    assert "[image]" in told and PICTURE not in told  # the summary is written from text, never the bytes
    kept, compaction = json.loads(response_body(response))["output"]
    assert kept["content"][1] == {
        "type": "input_image",
        "image_url": PICTURE,
        "file_id": None,
        "detail": "low",
    }
    assert compaction["type"] == "compaction"
    hostile = body_with("/v1/responses", "http://example.com/a.png")
    del hostile["store"]
    response = handle(as_caller(rest_event("POST", "/v1/responses/compact", hostile)))
    assert response["statusCode"] == 400 and len(fake_llm.requests) == 1


def test_a_model_the_catalog_does_not_know_is_tried_and_its_refusal_passes_the_turn_on(
    chain, fake_llm, monkeypatch
):
    monkeypatch.setenv("LOCAL_BASE_URL", fake_llm.openai_base_url)
    chain(f"local:tiny-text-model,openai:{GPT}")
    fake_llm.script("tiny-text-model", error(400, None, "this model does not support image input"))
    fake_llm.script(GPT, text(GPT, "A chart."))
    status, body = post("/v1/chat/completions", body_with("/v1/chat/completions", PICTURE))
    assert status == 200 and answer_of("/v1/chat/completions", body) == "A chart.", body
    (tried,) = fake_llm.requests_for("tiny-text-model")
    assert tried["body"]["messages"][-1]["content"][1]["image_url"]["url"] == PICTURE
