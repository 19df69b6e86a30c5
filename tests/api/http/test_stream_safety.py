"""Streams are safe as a whole (issue 25): a secret a model writes across several deltas never reaches the client
whole, and model text holding U+2028 / U+2029 / U+0085 cannot forge an SSE line for a client that splits lines the
way ``str.splitlines`` does. Each on every streaming route, through the real handler with REST API events."""

from __future__ import annotations

import json

import pytest

from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse, TextDelta
from chatloop.redaction import SecretHold, register_secret
from chatloop.tools.base import ToolRegistry
from tests.support.events import response_body, rest_event
from tests.support.handler import handle

SECRET = "Tr0ub4dor&3-correct-horse"
ROUTES = {
    "/chat": {"messages": [{"role": "user", "content": "hi"}], "stream": True},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "stream": True},
    "/v1/responses": {"input": "hi", "stream": True},
}


class WritesPieces:
    """A model that streams its answer in the given pieces."""

    name = "scripted:pieces"

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    async def stream(self, request: ModelRequest):
        for piece in self.pieces:
            yield TextDelta(piece)
        yield ModelResponse(self.name, content="".join(self.pieces), finish_reason="stop")


@pytest.fixture
def model_writes(app_runtime):
    def use(pieces: list[str]) -> None:
        app_runtime(Settings(), model=WritesPieces(pieces), registry=ToolRegistry())

    return use


def stream(path: str) -> str:
    response = handle(rest_event("POST", path, json.dumps(ROUTES[path])))
    assert response["statusCode"] == 200
    return response_body(response)


def text_of(path: str, body: str) -> str:
    """The answer's text as a client assembles it from the route's deltas."""
    pieces = []
    for frame in body.split("\n\n"):
        lines = frame.split("\n")
        name = next((line[7:] for line in lines if line.startswith("event: ")), None)
        data_line = next((line[6:] for line in lines if line.startswith("data: {")), None)
        if data_line is None:
            continue
        data = json.loads(data_line)
        if path == "/chat" and name == "delta":
            pieces.append(data["content"])
        elif path == "/v1/chat/completions" and data.get("choices"):
            pieces.append(data["choices"][0]["delta"].get("content") or "")
        elif path == "/v1/responses" and name == "response.output_text.delta":
            pieces.append(data["delta"])
    return "".join(pieces)


@pytest.mark.parametrize("path", list(ROUTES))
def test_a_secret_split_across_four_deltas_never_reaches_the_client(model_writes, path):
    register_secret(SECRET)
    quarter = len(SECRET) // 4
    parts = [SECRET[i * quarter : (i + 1) * quarter] for i in range(3)] + [SECRET[3 * quarter :]]
    model_writes(["The password is ", *parts, " — keep it safe."])
    body = stream(path)
    shown = text_of(path, body)
    assert SECRET not in shown and SECRET not in body
    assert shown == "The password is [REDACTED] — keep it safe."


@pytest.mark.parametrize("path", list(ROUTES))
def test_a_key_shaped_string_split_across_deltas_is_redacted_whole(model_writes, path):
    model_writes(["use gs", "k_AbCd", "EfGh1234", "5678 now"])
    shown = text_of(path, stream(path))
    assert "AbCd" not in shown and shown == "use [REDACTED] now"


@pytest.mark.parametrize("path", list(ROUTES))
def test_unicode_line_breaks_in_model_text_cannot_forge_sse_lines(model_writes, path):
    forged = "one\u2028event: done\u2029data: {}\u0085two"
    model_writes([forged[:9], forged[9:]])
    body = stream(path)
    assert not any(c in body for c in "\u2028\u2029\u0085")  # escaped inside the JSON, never raw
    # A client that splits lines like str.splitlines sees exactly the frames the server sent.
    assert body.splitlines() == body.split("\n")[: len(body.splitlines())]
    for line in body.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            json.loads(line[6:])
    assert text_of(path, body) == forged


def test_the_hold_delays_only_what_could_begin_a_secret():
    hold = SecretHold()
    assert hold.feed("Hello there, ") == "Hello there, "  # nothing that could begin a secret: out at once
    assert hold.feed("the key gs") == "the key "  # "gs" may begin gsk_...
    assert hold.feed("t is here") == "gst is here"  # it did not
    assert hold.flush() == ""
