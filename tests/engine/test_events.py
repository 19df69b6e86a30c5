"""The engine's typed events and turn summary: each payload is its own class, its ``data`` is the wire dict, and the
summary's ``wire()`` is the ``done`` dict."""

from __future__ import annotations

import json

import pytest

from chatloop.deadline import Deadline
from chatloop.engine import DecisionReason, StopReason, TurnRequest, TurnSummary, run_turn
from chatloop.engine.events import (
    DecisionMade,
    Delta,
    Done,
    LlmResponse,
    MessageComplete,
    Started,
    ToolCallResult,
    ToolCallStart,
    TurnError,
)
from chatloop.engine.messages import normalize_conversation
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.providers.errors import AllModelsFailed, RateLimited
from chatloop.tools.base import ToolRegistry
from tests.support.models import ScriptedModel, call
from tests.support.tools import FakeSearch


def reused_ids(request: ModelRequest, n: int) -> ModelResponse:
    """A server that names every call ``call_0`` (some OpenAI-compatible ones do)."""
    if n <= 2:
        return ModelResponse(
            model="",
            content="",
            tool_calls=[call("search_web", {"query": f"q{n}"}, id="call_0")],
            finish_reason="tool_calls",
        )
    return ModelResponse(model="", content="Found it.", finish_reason="stop")


async def turn(script) -> list:
    request = TurnRequest(messages=normalize_conversation([{"role": "user", "content": "look it up"}]))
    model = ScriptedModel(script)
    return [e async for e in run_turn(request, model, ToolRegistry([FakeSearch()]), Deadline.after(10))]


async def test_a_turn_yields_one_class_per_payload_and_done_carries_the_summary():
    events = await turn(reused_ids)
    assert isinstance(events[0], Started) and events[0].data["tools"] == ["search_web"]
    kinds = {type(e) for e in events}
    assert {Delta, LlmResponse, DecisionMade, ToolCallStart, ToolCallResult, MessageComplete, Done} <= kinds
    done = events[-1]
    assert isinstance(done, Done) and isinstance(done.summary, TurnSummary)
    assert done.data == done.summary.wire() and done.summary.stop_reason is StopReason.STOP
    assert list(done.data) == [
        "message",
        "stop_reason",
        "iterations",
        "tool_calls",
        "tool_counts",
        "usage",
        "model",
        "context",
    ]
    assert done.data["tool_calls"][0]["name"] == "search_web"
    assert all(e.name == e.type.value for e in events)
    assert all(
        isinstance(e, DecisionMade) and isinstance(e.decision.reason, DecisionReason)
        for e in events
        if e.type.value == "decision"
    )
    # Durations are the summary's (metrics read them), not the wire's.
    assert len(done.summary.durations_ms) == 2 and "duration_ms" not in done.data["tool_calls"][0]


async def test_events_are_snapshots_of_what_the_model_sent():
    """The second ``call_0`` gets a fresh id after its ``llm_response`` went out: that event still says what the
    model sent, while the tool events use the id the conversation uses."""
    events = await turn(reused_ids)
    responses = [e for e in events if isinstance(e, LlmResponse)]
    assert [r.data["tool_calls"][0]["id"] for r in responses[:2]] == ["call_0", "call_0"]
    results = [e.data["id"] for e in events if isinstance(e, ToolCallResult)]
    assert results[0] == "call_0" and results[1].startswith("call_0_")


def test_a_failed_summary_is_the_done_of_a_turn_that_did_not_end_on_its_own():
    summary = TurnSummary.failed("Stopped.", StopReason.CLIENT_DISCONNECTED)
    assert summary.wire() == {
        "message": {"role": "assistant", "content": "Stopped."},
        "stop_reason": "client_disconnected",
        "iterations": 0,
        "tool_calls": [],
        "tool_counts": {},
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "model": None,
    }
    assert TurnSummary.failed().wire()["stop_reason"] == "error"
    tagged = summary.with_request_id("req-1")
    assert list(tagged.wire())[-1] == "request_id" and tagged.wire()["request_id"] == "req-1"
    assert "request_id" not in summary.wire()  # a copy: the original is unchanged


@pytest.mark.parametrize(
    ("reason", "stop"),
    [
        (DecisionReason.DUPLICATE_LOOP, StopReason.LOOP_DETECTED),
        (DecisionReason.RESULT_LOOP, StopReason.LOOP_DETECTED),
        (DecisionReason.BUDGET_EXHAUSTED, StopReason.TOOL_BUDGET),
        (DecisionReason.DEADLINE, StopReason.DEADLINE),
        (DecisionReason.ITERATION_CAP, StopReason.ITERATION_CAP),
        (DecisionReason.JS_ALREADY_SUCCEEDED, None),
        (DecisionReason.EMPTY_REPLY, None),
        (DecisionReason.NO_TOOL_CALLS, None),
    ],
)
def test_a_guard_reason_names_its_stop_reason(reason, stop):
    assert reason.stop_reason is stop


def test_an_error_event_keeps_the_wire_shape_of_each_failure():
    one = TurnError.of(RateLimited("slow down", model="groq:a"), partial_kept=True)
    assert one.data == {
        "code": "rate_limited",
        "message": "slow down",
        "model": "groq:a",
        "partial_kept": True,
        "discard_partial": True,
    }
    chain = TurnError.of(
        AllModelsFailed("no model", [RateLimited("slow down", model="groq:a")], retry_after=2.04)
    )
    assert list(chain.data) == ["code", "message", "attempts", "retry_after"]
    assert chain.data["attempts"] == [{"model": "groq:a", "kind": "rate_limited", "message": "slow down"}]
    assert chain.data["retry_after"] == 2.0
    assert json.loads(json.dumps(TurnError("internal_error", "x").data)) == {
        "code": "internal_error",
        "message": "x",
    }
