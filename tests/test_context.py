"""Fitting long conversations to context windows, before any model is called: a small-window model added through
MODEL_CATALOG_FILE, the real groq SDK, and a scripted upstream that counts tokens its own way and rejects an
over-window request as Groq does (400 context_length_exceeded)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

import app as lambda_app
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.providers.base import ModelRequest
from chatloop.providers.catalog import Catalog, CatalogError
from chatloop.providers.context import EXCERPT_CHARS, TokenEstimator, message_chars, trim
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.events import FakeContext, response_body, rest_event
from tests.support.fake_llm import FakeLLM, Reply, error, text
from tests.support.models import assert_valid_conversation

SMALL, LARGE = "small-ctx-model", "large-ctx-model"
WINDOW = 4000
UPSTREAM_CHARS_PER_TOKEN = 3.6


def upstream_tokens(body: dict[str, Any]) -> int:
    """The upstream's own count (it is not ours): 3.6 characters a token plus 4 a message, and the tool schemas."""
    chars = sum(
        len(json.dumps(m.get("content") or "")) + len(json.dumps(m.get("tool_calls") or []))
        for m in body["messages"]
    )
    return math.ceil((chars + len(json.dumps(body.get("tools") or []))) / UPSTREAM_CHARS_PER_TOKEN) + 4 * len(
        body["messages"]
    )


def history(turns: int, with_tools: bool = True) -> list[dict[str, Any]]:
    """Earlier turns, each a question, a tool exchange with a long result, and an answer; then the new question."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for n in range(turns):
        messages.append({"role": "user", "content": f"Question {n}: " + "why " * 40})
        if with_tools:
            call = {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "execute_javascript", "arguments": json.dumps({"code": f"{n} + 1"})},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            result = json.dumps({"result": n + 1, "output": "log line " * 150})
            messages.append(
                {"role": "tool", "tool_call_id": f"call_{n}", "name": "execute_javascript", "content": result}
            )
        messages.append({"role": "assistant", "content": f"Answer {n}: " + "because " * 30})
    messages.append({"role": "user", "content": "And the last question?"})
    return messages


@pytest.fixture
def catalog_file(tmp_path):
    path = tmp_path / "models.json"
    path.write_text(
        json.dumps(
            {
                "models": {
                    f"groq:{SMALL}": {"context_window": WINDOW, "tools": True},
                    f"groq:{LARGE}": {"context_window": WINDOW * 4, "tools": True},
                    "groq:llama-3.3-70b-versatile": {"context_window": 8192},  # one field of a packaged entry
                }
            }
        )
    )
    return str(path)


@pytest.fixture
def upstream(monkeypatch):
    with FakeLLM() as llm:
        llm.rejected = []

        def answer(body: dict[str, Any]) -> Reply:
            window = WINDOW if body["model"] == SMALL else WINDOW * 4
            used = upstream_tokens(body)
            if used + (body.get("max_tokens") or 0) > window:
                llm.rejected.append(body["model"])
                return error(
                    400, "context_length_exceeded", "Please reduce the length of the messages or completion."
                )
            assert_valid_conversation(body["messages"])  # every request the upstream receives
            return text(body["model"], "Short answer.", groq=True, usage=(used, 3))

        llm.default = answer
        monkeypatch.setenv("GROQ_BASE_URL", llm.groq_base_url)
        yield llm


def serve(catalog_file: str, chain: str, sandbox) -> Runtime:
    settings = Settings(model_chain=chain, model_catalog_file=catalog_file)
    runtime = Runtime(
        settings,
        registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
        keys_loader=lambda s: {"groq": "gsk_ctx_test_000000000"},
    )
    lambda_app.app.state.runtime = runtime
    return runtime


def chat(messages: list[dict[str, Any]], **extra: Any) -> tuple[int, dict[str, Any]]:
    body = {"messages": messages, "stream": False, "tools": [], **extra}
    response = lambda_app.handler(rest_event("POST", "/chat", body), FakeContext())
    return response["statusCode"], json.loads(response_body(response))


def scaled(fraction: float) -> list[dict[str, Any]]:
    """A history that the upstream counts at ``fraction`` of WINDOW (within 1 %), the answer's reserve (200)
    included: whole earlier turns, then the last question padded to the exact size."""
    target = fraction * WINDOW - 200
    turns = 0
    while upstream_tokens({"messages": history(turns + 1)}) < target * 0.9:
        turns += 1
    messages = history(turns)
    while upstream_tokens({"messages": messages}) < target - 0.01 * WINDOW:
        messages[-1] = {"role": "user", "content": messages[-1]["content"] + " and more"}
    return messages


# --- the catalog overlay ---------------------------------------------------------------------------
def test_model_catalog_file_adds_models_and_overrides_fields(catalog_file):
    catalog = Catalog.load(overlay=catalog_file)
    assert catalog.get(f"groq:{SMALL}").context_window == WINDOW and catalog.get(f"groq:{SMALL}").known
    llama = catalog.get("groq:llama-3.3-70b-versatile")
    assert llama.context_window == 8192 and llama.parallel_tool_calls  # the rest of the packaged entry stays
    assert (
        Catalog.load().get("groq:llama-3.3-70b-versatile").context_window == 131072
    )  # the packaged one is untouched


def test_a_broken_catalog_file_fails_at_start_with_its_name(tmp_path):
    bad = tmp_path / "models.json"
    bad.write_text("{not json")
    with pytest.raises(CatalogError, match="MODEL_CATALOG_FILE"):
        Catalog.load(overlay=str(bad))


# --- trimming --------------------------------------------------------------------------------------
def test_trimming_keeps_systems_the_question_and_the_current_turn_whole():
    messages = history(6)
    current = [
        {"role": "user", "content": "Now compute this."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c_now",
                    "type": "function",
                    "function": {"name": "execute_javascript", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c_now", "name": "execute_javascript", "content": "x" * 5000},
    ]
    messages = messages[:-1] + current
    size = lambda ms: sum(message_chars(m) for m in ms)  # noqa: E731
    full = size(messages)
    trimmed = trim(messages, lambda ms: size(ms) <= full * 0.5)
    assert_valid_conversation(trimmed.messages)
    assert (
        trimmed.messages[0]["role"] == "system" and trimmed.messages[-3:] == current
    )  # the current turn untouched
    assert trimmed.shortened == 6 and trimmed.dropped > 0 and size(trimmed.messages) <= full * 0.5
    assert all(
        len(m["content"]) < 2 * EXCERPT_CHARS + 100 for m in trimmed.messages[:-3] if m["role"] == "tool"
    )


def test_shortening_old_tool_results_comes_before_dropping_turns():
    messages = history(3)
    size = lambda ms: sum(message_chars(m) for m in ms)  # noqa: E731
    shortened_size = size(trim(messages, lambda ms: False).messages)  # as far as it goes
    trimmed = trim(messages, lambda ms: size(ms) <= size(messages) - 100)
    assert trimmed.dropped == 0 and trimmed.shortened == 3 and len(trimmed.messages) == len(messages)
    assert shortened_size < size(trimmed.messages)


# --- the whole request, against an upstream that rejects what does not fit -------------------------
@pytest.mark.parametrize("fraction", [0.5, 0.99, 1.01, 3.0])
def test_no_call_is_ever_rejected_for_its_length(catalog_file, upstream, sandbox, fraction):
    serve(catalog_file, f"groq:{SMALL}", sandbox)
    messages = scaled(fraction)
    counted = (upstream_tokens({"messages": messages}) + 200) / WINDOW
    assert abs(counted - fraction) < 0.02 or fraction > 1.5  # the history is the size the case says
    status, data = chat(messages, max_tokens=200)
    assert status == 200 and data["message"]["content"] == "Short answer."
    assert upstream.rejected == []
    context = data["context"]
    if fraction <= 0.5:
        assert context["action"] == "fits" and context["trimmed_messages"] == 0
    if fraction > 1:
        assert context["action"] == "trim" and context["window"] == WINDOW
        sent = upstream.requests[-1]["body"]["messages"]
        assert sent[0]["content"].startswith("You are terse.") and sent[-1] == messages[-1]


def test_a_larger_window_in_the_chain_is_chosen_instead_of_trimming(catalog_file, upstream, sandbox):
    serve(catalog_file, f"groq:{SMALL},groq:{LARGE}", sandbox)
    status, data = chat(scaled(3.0), max_tokens=200)
    assert status == 200 and upstream.rejected == []
    assert data["context"]["action"] == "skip" and data["context"]["skipped_models"] == [f"groq:{SMALL}"]
    assert data["model"] == f"groq:{LARGE}" and data["context"]["trimmed_messages"] == 0
    assert [r["body"]["model"] for r in upstream.requests] == [LARGE]  # no call wasted on the small one


def test_the_estimate_learns_each_models_ratio_from_reported_usage(catalog_file, upstream, sandbox):
    runtime = serve(catalog_file, f"groq:{SMALL}", sandbox)
    estimator: TokenEstimator = runtime.chain().health.estimator
    assert estimator.scale == {}
    for n in range(4):
        chat(history(n + 1, with_tools=False), max_tokens=200)
    learned = estimator.scale[f"groq:{SMALL}"]
    request = ModelRequest(messages=history(3, with_tools=False), deadline=None, max_tokens=200)
    truth = upstream_tokens({"messages": request.messages}) + 200
    estimate = estimator.tokens(request, f"groq:{SMALL}")
    assert truth <= estimate <= truth * 1.25  # conservative, and within 25 % of the upstream's own count
    assert learned != 1.0  # it learned how this model counts


def test_a_question_larger_than_every_window_is_a_413_with_no_model_call(catalog_file, upstream, sandbox):
    serve(catalog_file, f"groq:{SMALL},groq:{LARGE}", sandbox)
    status, data = chat([{"role": "user", "content": "word " * 60_000}])
    assert status == 413 and data["error"]["code"] == "context_length_exceeded"
    assert "16000 tokens" in data["error"]["message"]
    assert upstream.requests == []
