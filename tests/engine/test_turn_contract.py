"""The turn's side of OpenAI's contract, through run_turn with scripted models and the real Deno sandbox: what was
shown is the answer, tool_choice holds to the end, parallel_tool_calls and max_tool_calls are honoured."""

from __future__ import annotations

import pytest

from chatloop.engine import EventType
from chatloop.providers.base import ModelRequest, ModelResponse
from tests.support.models import ScriptedModel, call, js, last_result, offered
from tests.support.turns import COMPOUND_CODE, drive

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
FINAL = {
    "type": "function",
    "function": {
        "name": "final_result",
        "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}},
    },
}


def narrating_calculator(request: ModelRequest, n: int) -> ModelResponse:
    """Says what it is about to do, then calls the sandbox (as OpenAI's own models narrate); answers from the result."""
    if n == 1:
        return ModelResponse("", content="Let me compute that.", tool_calls=[js(COMPOUND_CODE)])
    return ModelResponse(
        "", content=f"After 15 years the balance is ${last_result(request)}.", finish_reason="stop"
    )


async def test_text_before_a_server_tool_call_is_part_of_the_answer_set_off_by_a_seam(registry):
    turn = await drive(ScriptedModel(narrating_calculator), registry)
    deltas = turn.of(EventType.DELTA)
    assert turn.answer == "Let me compute that.\n\nAfter 15 years the balance is $20789.28."
    assert turn.streamed == turn.answer  # what the client was shown is exactly the answer
    seams = [d for d in deltas if d.get("seam")]
    assert [s["content"] for s in seams] == ["\n\n"] and seams[0]["iteration"] == 2
    assert turn.of(EventType.MESSAGE_COMPLETE)[-1]["content"] == turn.answer


async def test_a_fallback_text_is_streamed_too_so_the_deltas_still_add_up(registry):
    def never_answers(request, n):
        content = "Working on it." if n == 1 else ""
        return ModelResponse("", content=content, tool_calls=[js(f"throw new Error('attempt {n}')")])

    turn = await drive(ScriptedModel(never_answers), registry, max_iterations=2)
    assert turn.done["stop_reason"] == "iteration_cap"
    assert turn.answer.startswith("Working on it.\n\nI ") and turn.streamed == turn.answer


def obeys_tool_choice(request: ModelRequest, n: int) -> ModelResponse:
    """Runs the sandbox first (its code fails, so the sandbox stays offered), then answers in plain text unless
    ``tool_choice`` forces a tool: a model that calls a client tool only when it must."""
    if n == 1:
        return ModelResponse(
            "", tool_calls=[js("throw new Error('no data yet')")], finish_reason="tool_calls"
        )
    if request.tool_choice not in (None, "auto") and "final_result" in offered(request):
        return ModelResponse("", tool_calls=[call("final_result", {"amount": 20789.28}, "call_final")])
    return ModelResponse("", content="It is 20789.28.", finish_reason="stop")


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "final_result"}}])
async def test_a_required_client_tool_choice_holds_to_the_end(registry, choice):
    model = ScriptedModel(obeys_tool_choice)
    turn = await drive(model, registry, client_tools=[FINAL], tool_choice=choice)
    assert turn.done["stop_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in turn.done["message"]["tool_calls"]] == ["final_result"]
    first, middle, last = model.requests
    assert first.tool_choice == choice and "execute_javascript" in offered(first)
    assert middle.tool_choice is None  # not forced again on the server's own round (seed 001)
    assert offered(last) == ["final_result"] and last.tool_choice == choice
    reasons = [d["reason"] for d in turn.of(EventType.DECISION)]
    assert reasons == ["execute", "client_tool_required", "client_tools"]
    # The text the model wrote on the middle call was shown, so it stays beside the call.
    assert turn.answer == "It is 20789.28." == turn.streamed


async def test_auto_tool_choice_lets_the_turn_end_in_text(registry):
    model = ScriptedModel(obeys_tool_choice)
    turn = await drive(model, registry, client_tools=[FINAL], tool_choice="auto")
    assert turn.done["stop_reason"] == "stop" and turn.answer == "It is 20789.28." and model.calls == 2


async def test_a_client_call_beside_a_long_answer_still_goes_to_the_client(registry):
    long_text = "Here is a long explanation. " * 20

    def both(request, n):
        return ModelResponse("", content=long_text, tool_calls=[call("get_weather", {"city": "Oslo"}, "c1")])

    turn = await drive(ScriptedModel(both), registry, client_tools=[WEATHER])
    assert turn.done["stop_reason"] == "tool_calls" and turn.done["message"]["tool_calls"][0]["id"] == "c1"
    assert turn.answer == long_text


async def test_parallel_tool_calls_false_runs_only_the_first_call(registry):
    def two_at_once(request, n):
        if n == 1:
            return ModelResponse("", tool_calls=[js("1 + 1", "a"), js("2 + 2", "b")])
        return ModelResponse("", content=f"Got {last_result(request)}.", finish_reason="stop")

    model = ScriptedModel(two_at_once)
    turn = await drive(model, registry, parallel_tool_calls=False)
    assert turn.done["tool_counts"] == {"execute_javascript": 1} and turn.answer == "Got 2."
    skipped = [c for c in turn.done["tool_calls"] if c["status"] == "skipped"]
    assert [(c["id"], c["reason"]) for c in skipped] == [("b", "parallel_tool_calls_false")]
    assert model.requests[0].parallel_tool_calls is False


async def test_max_tool_calls_caps_the_servers_runs_for_the_turn(registry):
    def keeps_calculating(
        request, n
    ):  # its code fails every time, so it would go on while the tool is offered
        if "execute_javascript" in offered(request):
            return ModelResponse("", tool_calls=[js(f"throw new Error('try {n}')", f"c{n}")])
        return ModelResponse("", content="Done.", finish_reason="stop")

    turn = await drive(ScriptedModel(keeps_calculating), registry, max_tool_calls=2)
    assert turn.done["tool_counts"] == {"execute_javascript": 2}
    assert turn.done["stop_reason"] == "tool_budget" and turn.answer.endswith("Done.")
