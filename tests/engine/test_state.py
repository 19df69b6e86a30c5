"""The turn's state (one "ended by", one stop-reason rule) and a tool's own policy (answered once it succeeded,
guidance) declared on the tool, not known to the engine by name."""

from __future__ import annotations

import json

import pytest

from chatloop.deadline import Deadline
from chatloop.engine import DecisionReason, EngineLimits, StopReason, TurnRequest, run_turn
from chatloop.engine.events import Done, ToolCallResult
from chatloop.engine.guards import ToolLedger
from chatloop.engine.state import TurnState
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.tools.base import ToolResult
from tests.support.models import ScriptedModel, call, offered

R, S = DecisionReason, StopReason


@pytest.mark.parametrize(
    ("budget_tripped", "ended_by", "withheld_by", "otherwise", "expected"),
    [
        (False, None, None, S.STOP, S.STOP),  # nothing tripped: the answer's own reason
        (False, None, None, S.LENGTH, S.LENGTH),
        (False, None, S.ITERATION_CAP, S.STOP, S.ITERATION_CAP),  # the cap withheld the tools from the answer
        (False, None, S.DEADLINE, S.STOP, S.DEADLINE),
        (False, R.RESULT_LOOP, None, S.STOP, S.LOOP_DETECTED),  # a guard ended tool use
        (False, R.DUPLICATE_LOOP, S.ITERATION_CAP, S.STOP, S.LOOP_DETECTED),  # ... and comes before the cap
        (False, R.DEADLINE, None, S.STOP, S.DEADLINE),
        (False, R.JS_ALREADY_SUCCEEDED, None, S.STOP, S.STOP),  # not a guard: the answer is a plain answer
        (False, R.LEGACY_SYNTAX, S.ITERATION_CAP, S.STOP, S.ITERATION_CAP),
        (True, None, None, S.STOP, S.TOOL_BUDGET),  # a budget used up, other tools still offered
        (True, R.RESULT_LOOP, None, S.STOP, S.TOOL_BUDGET),  # the first guard wins
        (False, None, None, S.ERROR, S.ERROR),  # a fallback with no guard
    ],
)
def test_the_stop_reason_is_the_first_guard_then_the_withholding_guard_then_the_answers_own(
    budget_tripped, ended_by, withheld_by, otherwise, expected
):
    state = TurnState([{"role": "user", "content": "hi"}], ToolLedger())
    if budget_tripped:
        state.trip(S.TOOL_BUDGET)
    if ended_by is not None:
        state.end_tool_use(ended_by)
        assert state.tools_ended and state.ended_by is ended_by
        assert state.messages[-1]["role"] == "system"  # the model is told why tool use ended
    assert state.stop_reason(withheld_by, otherwise) is expected


def test_tool_use_ends_once_with_the_first_reason_and_one_note():
    state = TurnState([{"role": "user", "content": "hi"}], ToolLedger())
    state.end_tool_use(R.DUPLICATE_LOOP)
    state.end_tool_use(R.RESULT_LOOP)
    notes = [m["content"] for m in state.messages if m["role"] == "system"]
    assert state.ended_by is R.DUPLICATE_LOOP and len(notes) == 1
    assert notes[0].startswith("You asked for the same tool call again.")


def test_the_answered_once_note_names_the_tool_that_answered():
    state = TurnState([], ToolLedger(answered_once=frozenset({"lookup"}), succeeded={"lookup"}))
    state.end_tool_use(R.JS_ALREADY_SUCCEEDED)
    assert state.messages[-1]["content"].startswith("lookup already returned a result for this question.")


class Lookup:
    """A tool that answers once it succeeded, under a name the engine has never heard of."""

    name = "lookup"
    description = "Look a fact up."
    parameters = {"type": "object", "properties": {"q": {"type": "string"}}}
    answered_once_succeeded = True
    guidance = "Call lookup once, then answer."

    def __init__(self):
        self.runs = 0

    async def run(self, arguments, deadline):
        self.runs += 1
        return ToolResult(content=json.dumps({"result": f"fact {self.runs}"}), ok=True)


class PlainCalculator(Lookup):
    """Named like the JavaScript tool, declaring nothing: it is an ordinary tool."""

    name = "execute_javascript"
    answered_once_succeeded = False
    guidance = ""


def keeps_calling(name: str):
    """Calls ``name`` with new arguments while it is offered, answers when it is not (or after three calls)."""

    def script(request: ModelRequest, n: int) -> ModelResponse:
        if name in offered(request) and n <= 3:
            return ModelResponse(
                model="", content="", tool_calls=[call(name, {"q": n})], finish_reason="tool_calls"
            )
        return ModelResponse(model="", content="Done.", finish_reason="stop")

    return script


async def drive(tool, name):
    from chatloop.tools.base import ToolRegistry

    model = ScriptedModel(keeps_calling(name))
    request = TurnRequest(messages=[{"role": "user", "content": "what is it?"}])
    events = [
        e async for e in run_turn(request, model, ToolRegistry([tool]), Deadline.after(10), EngineLimits())
    ]
    return events, model


async def test_a_tool_that_declares_it_is_answered_once_it_succeeded_gets_the_guard_whatever_its_name():
    tool = Lookup()
    events, model = await drive(tool, "lookup")
    assert tool.runs == 1  # withdrawn after its first success: the next call is the answer
    assert model.requests[0].messages[0] == {"role": "system", "content": "Call lookup once, then answer."}
    assert model.requests[1].tools is None
    done = events[-1]
    assert isinstance(done, Done) and done.summary.message.content == "Done."


async def test_a_tool_named_execute_javascript_that_declares_nothing_is_an_ordinary_tool():
    tool = PlainCalculator()
    events, model = await drive(tool, "execute_javascript")
    assert tool.runs == 3  # offered again after each success
    assert all(m["role"] != "system" for m in model.requests[0].messages)  # no guidance it did not give
    results = [e for e in events if isinstance(e, ToolCallResult)]
    assert [r.status for r in results] == ["ok", "ok", "ok"]
