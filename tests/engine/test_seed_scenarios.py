"""The seed scenarios, through run_turn with scripted models and the real Deno execute_javascript tool."""

from __future__ import annotations

import asyncio
import io
import json
import time

from chatloop.config import Settings
from chatloop.engine import EventType
from chatloop.observability import logger
from chatloop.providers.base import ModelResponse, TextDelta
from chatloop.providers.failures import AllModelsFailed, RateLimited
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.models import (
    ScriptedModel,
    call,
    js,
    last_result,
    offered,
    stubborn_calculator,
    tool_results,
)
from tests.support.tools import FakeSearch
from tests.support.turns import COMPOUND, COMPOUND_CODE, drive


async def test_compound_interest_takes_one_execution_and_two_model_calls(registry):
    model = ScriptedModel(
        stubborn_calculator(COMPOUND_CODE, "At 5% for 15 years, $10,000 grows to ${result}.")
    )
    turn = await drive(model, registry)
    assert model.calls == 2
    assert turn.done["tool_counts"] == {"execute_javascript": 1}
    assert turn.done["stop_reason"] == "stop"
    assert "20789.28" in turn.answer
    first, second = model.requests
    assert offered(first) == ["execute_javascript"] and second.tools is None  # JS withdrawn after success
    assert first.tool_choice is None and first.parallel_tool_calls is None  # not sent unless the client asked
    assert "answer to the user immediately" in first.messages[0]["content"]  # system guidance (seed 000)
    # the assistant message keeps its tool_calls and the UI can show the executed code
    complete = turn.of(EventType.MESSAGE_COMPLETE)[0]
    assert json.loads(complete["tool_calls"][0]["function"]["arguments"])["code"] == COMPOUND_CODE


async def test_five_and_ten_factorial_run_as_two_parallel_calls(registry, sandbox):
    def script(request, n):
        if n == 1:
            return ModelResponse(
                "",
                tool_calls=[
                    js("let f=1; for (let i=2;i<=5;i++) f*=i; f", "a"),
                    js("let f=1; for (let i=2;i<=10;i++) f*=i; f", "b"),
                ],
            )
        results = [r["result"] for r in tool_results(request)]
        return ModelResponse("", content=f"5! = {results[0]} and 10! = {results[1]}")

    turn = await drive(ScriptedModel(script), registry, "calculate 5! and 10!")
    assert turn.answer == "5! = 120 and 10! = 3628800"
    assert turn.done["tool_counts"] == {"execute_javascript": 2} and turn.model.calls == 2
    durations = [r["duration_ms"] for r in turn.of(EventType.TOOL_CALL_RESULT)]
    assert len(durations) == 2


async def test_a_failing_call_then_a_fixed_one(registry):
    def script(request, n):
        if n == 1:
            return ModelResponse("", tool_calls=[js("const x = ; x", "bad")])
        if n == 2:
            assert offered(request) == ["execute_javascript"]  # a failure leaves JS offered
            assert "SyntaxError" in tool_results(request)[0]["error"]
            return ModelResponse("", tool_calls=[js("const x = 6 * 7; x", "good")])
        return ModelResponse("", content=f"It is {last_result(request)}.")

    turn = await drive(ScriptedModel(script), registry, "what is 6 times 7, computed")
    assert turn.answer == "It is 42." and turn.done["stop_reason"] == "stop"
    assert [c["status"] for c in turn.done["tool_calls"]] == ["error", "ok"]


async def test_calculation_plus_a_second_tool(sandbox):
    search = FakeSearch()
    registry = ToolRegistry([ExecuteJavaScriptTool(sandbox), search])

    def script(request, n):
        if n == 1:
            return ModelResponse("", tool_calls=[js(COMPOUND_CODE, "calc")])
        if n == 2:
            assert offered(request) == ["search_web"]  # only JS is withdrawn
            return ModelResponse("", tool_calls=[call("search_web", {"query": "best savings accounts"}, "s")])
        assert request.tools is not None  # search stays offered; the model chooses to answer
        return ModelResponse("", content="Interest: $20789.28. Accounts: see results.")

    turn = await drive(ScriptedModel(script), registry)
    assert turn.done["tool_counts"] == {"execute_javascript": 1, "search_web": 1}
    assert turn.model.calls == 3 and turn.done["stop_reason"] == "stop"


async def test_identical_arguments_in_different_json_spellings_run_once(sandbox):
    search = FakeSearch()
    registry = ToolRegistry([search])
    spellings = [
        '{"query": "a", "lang": "en"}',
        '{"lang":"en","query":"a"}',
        '{ "query" : "a" , "lang" : "en" }',
    ]

    def script(request, n):
        if request.tools:
            return ModelResponse("", tool_calls=[call("search_web", spellings[n - 1], f"c{n}")])
        return ModelResponse("", content="Here is what I found.")

    turn = await drive(ScriptedModel(script), registry, "search a")
    assert search.queries == ["a"]  # executed once
    results = turn.of(EventType.TOOL_CALL_RESULT)
    assert json.loads(results[1]["content"])["duplicate_of"] == "c1" and results[1]["reason"] == "duplicate"
    third = json.loads(results[2]["content"])  # a second repeat still points at the call that ran, unwrapped
    assert third["duplicate_of"] == "c1" and third["results"] == ["result for a"]
    assert turn.done["stop_reason"] == "loop_detected"  # the second repeat ended tool use
    assert turn.model.calls == 4 and turn.model.requests[-1].tools is None
    assert turn.answer == "Here is what I found."


async def test_identical_calls_inside_one_parallel_batch_run_once(sandbox):
    search = FakeSearch()

    def script(request, n):
        if n == 1:
            return ModelResponse(
                "",
                tool_calls=[
                    call("search_web", {"query": "x"}, "a"),
                    call("search_web", '{"query":"x"}', "b"),
                ],
            )
        return ModelResponse("", content="done")

    turn = await drive(ScriptedModel(script), ToolRegistry([search]), "search x")
    assert search.queries == ["x"] and turn.done["tool_counts"] == {"search_web": 1}
    assert [c["status"] for c in turn.done["tool_calls"]] == ["ok", "skipped"]


async def test_identical_results_end_tool_use(sandbox):
    search = FakeSearch(same_result=True)

    def script(request, n):
        if request.tools:
            return ModelResponse("", tool_calls=[call("search_web", {"query": f"try {n}"}, f"c{n}")])
        return ModelResponse("", content="I could not find anything.")

    turn = await drive(ScriptedModel(script), ToolRegistry([search]), "find it")
    assert search.queries == ["try 1", "try 2"]
    assert turn.done["stop_reason"] == "loop_detected" and turn.model.calls == 3
    assert "same result" in turn.model.requests[-1].messages[-1]["content"]  # the final-answer note says why


async def test_a_batch_that_is_both_loops_ends_tool_use_once():
    """The second repeated call comes in a batch whose new call returns a result seen before: a duplicate loop and a
    result loop at once. Tool use ends once, for the reason the decision gave, with one note."""
    search = FakeSearch(same_result=True)

    def script(request, n):
        if not request.tools:
            return ModelResponse("", content="I could not find anything.")
        batch = [call("search_web", {"query": "first"}, f"r{n}")]  # a repeat after the first call
        if n == 3:
            batch.append(call("search_web", {"query": "other"}, "new"))  # runs: the same result again
        return ModelResponse("", tool_calls=batch)

    turn = await drive(ScriptedModel(script), ToolRegistry([search]), "find it")
    assert search.queries == ["first", "other"] and turn.model.calls == 4
    assert [d["reason"] for d in turn.of(EventType.DECISION)] == [
        "execute",
        "duplicate_call",
        "duplicate_loop",
        "no_tool_calls",
    ]
    last = turn.model.requests[-1]
    assert last.tools is None
    notes = [m["content"] for m in last.messages if m["role"] == "system"]
    assert len(notes) == 1 and notes[0] == last.messages[-1]["content"]
    assert "same tool call again" in notes[0]  # the decision's reason, as its log line says
    assert turn.done["stop_reason"] == "loop_detected"
    assert turn.answer == "I could not find anything."


async def test_forced_tool_choice_applies_to_the_first_call_only(sandbox):
    registry = ToolRegistry([ExecuteJavaScriptTool(sandbox), FakeSearch()])

    def script(request, n):
        if n == 1:
            return ModelResponse("", tool_calls=[js("2 + 2", "a")])
        return ModelResponse("", content="4")

    turn = await drive(
        ScriptedModel(script), registry, "2+2", tool_choice="required", parallel_tool_calls=False
    )
    first, second = turn.model.requests
    assert first.tool_choice == "required" and first.parallel_tool_calls is False
    assert second.tool_choice is None and second.tools is not None  # reset to auto; search still offered


async def test_iteration_cap_ends_with_the_fallback_text(sandbox):
    search = FakeSearch()

    def script(request, n):
        if request.tools:
            return ModelResponse("", tool_calls=[call("search_web", {"query": f"q{n}"})])
        return ModelResponse("", content="")  # a model that gives nothing at the cap

    turn = await drive(ScriptedModel(script), ToolRegistry([search]), "loop", max_iterations=3)
    assert turn.model.calls == 3 and turn.model.requests[-1].tools is None  # the last call has no tools
    assert turn.done["stop_reason"] == "iteration_cap" and turn.done["iterations"] == 3
    assert "ran search_web 2×" in turn.answer and "rephrase" in turn.answer


async def test_request_cannot_raise_the_server_cap(sandbox):
    model = ScriptedModel(
        lambda r, n: (
            ModelResponse("", tool_calls=[call("search_web", {"query": f"{n}"})])
            if r.tools
            else ModelResponse("", content="ok")
        )
    )
    turn = await drive(
        model, ToolRegistry([FakeSearch()]), "x", settings=Settings(max_iterations=2), max_iterations=50
    )
    assert model.calls == 2 and turn.done["stop_reason"] == "iteration_cap"


async def test_deadline_ends_the_turn_in_time_with_an_answer(registry):
    class Slow(ScriptedModel):
        async def stream(self, request):
            await asyncio.sleep(min(0.6, request.deadline.remaining()))
            async for item in super().stream(request):
                yield item

    model = Slow(
        lambda r, n: (
            ModelResponse("", tool_calls=[call("search_web", {"query": f"q{n}"})])
            if r.tools
            else ModelResponse("", content="partial answer")
        )
    )
    settings = Settings(deadline_reserve_seconds=0.8)
    start = time.monotonic()
    turn = await drive(model, ToolRegistry([FakeSearch()]), "count", settings=settings, deadline=2.0)
    assert time.monotonic() - start < 2.0
    assert turn.done["stop_reason"] == "deadline"
    assert turn.answer  # never empty


async def test_no_time_at_all_answers_with_the_fallback_and_no_model_call(registry):
    model = ScriptedModel(stubborn_calculator("1"))
    turn = await drive(model, registry, deadline=0.1)
    assert model.calls == 0 and turn.done["stop_reason"] == "deadline" and "ran out of time" in turn.answer


async def test_plan_mode_makes_one_call_without_tools(registry):
    model = ScriptedModel(lambda r, n: ModelResponse("", content="Which rate should I use?"))
    turn = await drive(model, registry, tool_names=[])
    assert model.calls == 1 and model.requests[0].tools is None and turn.done["stop_reason"] == "stop"


async def test_a_continued_conversation_gets_a_fresh_budget(registry):
    history = [
        {"role": "user", "content": COMPOUND},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "old",
                    "type": "function",
                    "function": {
                        "name": "execute_javascript",
                        "arguments": json.dumps({"code": COMPOUND_CODE}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "old", "content": '{"result": "20789.28"}'},
        {"role": "assistant", "content": "$20,789.28"},
        {"role": "user", "content": "actually, make it 20 years instead"},
    ]
    model = ScriptedModel(stubborn_calculator("(10000 * Math.pow(1.05, 20)).toFixed(2)"))
    turn = await drive(model, registry, messages=history)
    assert turn.done["tool_counts"] == {"execute_javascript": 1} and "26532.98" in turn.answer
    assert model.requests[0].tools  # JS is offered again: the earlier turn's success does not count


async def test_legacy_syntax_is_recovered_and_never_reaches_the_answer(registry):
    def script(request, n):
        if n == 1:
            return ModelResponse("", content='<function=execute_javascript>{"code": "6 * 7"}</function>')
        return ModelResponse("", content=f"The result is {last_result(request)}.")

    turn = await drive(ScriptedModel(script, chunk=3), registry, "6*7?")
    assert turn.answer == "The result is 42." and turn.done["tool_counts"] == {"execute_javascript": 1}
    assert "<function" not in turn.streamed and "function=" not in turn.streamed


async def test_unrecoverable_legacy_syntax_gets_at_most_two_reminders(registry):
    def script(request, n):
        if request.tools:
            return ModelResponse("", content="Sure. <function=search_web{query: x}>")
        return ModelResponse("", content="I cannot search, sorry.")

    turn = await drive(ScriptedModel(script, chunk=4), registry, "search x")
    assert turn.model.calls == 4  # 1 + 2 reminders + the final call without tools
    reminders = [e for e in turn.of(EventType.STATUS) if e.get("reason") == "legacy_syntax_reminder"]
    assert len(reminders) == 2
    # What each reminded call wrote before its pseudo call was shown, so it stays part of the answer (the seams
    # keep the calls' texts apart); the pseudo calls themselves never reach the client.
    assert turn.answer.endswith("\n\nI cannot search, sorry.") and "<function" not in turn.streamed
    assert turn.answer == turn.streamed


async def test_empty_content_with_tool_calls_and_finish_reason_stop_still_executes(registry):
    def script(request, n):
        if n == 1:
            return ModelResponse("", content="", tool_calls=[js("5 * 24")], finish_reason="stop")
        return ModelResponse("", content=f"5! is {last_result(request)}")

    turn = await drive(ScriptedModel(script), registry, "5 factorial")
    assert turn.answer == "5! is 120"
    decision = turn.of(EventType.DECISION)[0]
    assert decision["finishReason"] == "stop" and decision["shouldExecuteTools"] is True


async def test_invalid_arguments_and_unknown_tools_get_error_messages(registry):
    def script(request, n):
        if n == 1:
            return ModelResponse(
                "",
                tool_calls=[
                    call("execute_javascript", '{"code": "1+', "bad"),
                    call("open_browser", {"url": "x"}, "nope"),
                ],
            )
        if n == 2:
            errors = [r["error"] for r in tool_results(request)]
            assert errors[0].startswith("InvalidArguments") and errors[1].startswith("UnknownTool")
            return ModelResponse("", tool_calls=[js("1 + 1", "fixed")])
        return ModelResponse("", content=f"{last_result(request)}")

    turn = await drive(ScriptedModel(script), registry, "1+1")
    assert turn.answer == "2" and turn.done["tool_counts"] == {"execute_javascript": 1}


async def test_a_substantive_answer_with_tool_calls_ends_the_turn(registry):
    long_answer = "A thorough explanation. " * 12
    model = ScriptedModel(lambda r, n: ModelResponse("", content=long_answer, tool_calls=[js("1")]))
    turn = await drive(model, registry, "explain")
    assert (
        model.calls == 1 and turn.answer == long_answer and turn.done["tool_calls"][0]["status"] == "skipped"
    )
    turn = await drive(
        ScriptedModel(
            lambda r, n: (
                ModelResponse("", content=long_answer, tool_calls=[js("1")])
                if n == 1
                else ModelResponse("", content="ok")
            )
        ),
        registry,
        "explain",
        settings=Settings(substantive_answer_chars=10_000),
    )
    assert turn.model.calls == 2  # configurable


async def test_different_failing_code_ends_at_the_tool_budget(registry):
    def script(request, n):
        if request.tools:
            return ModelResponse("", tool_calls=[js(f"undefinedVariable{n} + 1")])
        return ModelResponse("", content="I could not compute it.")

    turn = await drive(ScriptedModel(script), registry, "compute")
    assert turn.done["tool_counts"] == {"execute_javascript": 3}
    assert turn.done["stop_reason"] == "tool_budget" and turn.model.calls == 4


async def test_calls_over_budget_inside_one_batch_are_answered_not_run(registry):
    model = ScriptedModel(
        lambda r, n: (
            ModelResponse("", tool_calls=[js(f"{i} + 0") for i in range(4)])
            if n == 1
            else ModelResponse("", content="done")
        )
    )
    turn = await drive(model, registry, "four sums", settings=Settings(tool_caps={"execute_javascript": 3}))
    statuses = [(c["status"], c.get("reason")) for c in turn.done["tool_calls"]]
    assert statuses[:3] == [("ok", None)] * 3 and statuses[3] == ("skipped", "budget_exhausted")
    assert "BudgetExhausted" in turn.of(EventType.TOOL_CALL_RESULT)[3]["content"]


async def test_an_empty_reply_is_nudged_once_then_answered_with_the_fallback(registry):
    model = ScriptedModel(
        lambda r, n: ModelResponse("", content="") if n == 1 else ModelResponse("", content="Hi!")
    )
    turn = await drive(model, registry, "hello")
    assert turn.answer == "Hi!" and model.calls == 2
    assert model.requests[1].messages[-1]["role"] == "system"  # the nudge is not a user turn
    model = ScriptedModel(lambda r, n: ModelResponse("", content=""))
    turn = await drive(model, registry, "hello")
    assert model.calls == 2 and turn.answer and turn.done["stop_reason"] == "error"


async def test_done_is_last_and_once_even_when_every_model_fails(registry):
    class Failing(ScriptedModel):
        async def stream(self, request):
            raise AllModelsFailed("all models failed", [RateLimited("slow down", model="groq:x", status=429)])
            yield  # pragma: no cover

    turn = await drive(Failing(lambda r, n: None), registry, "hi")
    assert turn.done["stop_reason"] == "all_models_failed" and turn.answer
    assert turn.of(EventType.ERROR)[0]["code"] == "all_models_failed"


async def test_decision_lines_are_logged_with_the_seed_fields(registry):
    stream = io.StringIO()
    handler = logger.registered_handler
    old = handler.setStream(stream)
    try:
        await drive(ScriptedModel(stubborn_calculator(COMPOUND_CODE)), registry)
    finally:
        handler.setStream(old)
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    decisions = [r for r in records if r["message"].startswith("Tool execution decision: ")]
    assert len(decisions) == 2
    assert "iteration=1 " in decisions[0]["message"] and "reason=execute" in decisions[0]["message"]
    assert (
        "hasSuccessfulJsExecution=true" in decisions[1]["message"]
        and decisions[1]["decision"]["iteration"] == 2
    )
    assert any(
        r["message"].startswith('converged at 2 iterations tool_counts={"execute_javascript":1}')
        for r in records
    )
    assert COMPOUND not in stream.getvalue()  # no message content unless LOG_CONTENT is on


async def test_a_model_that_ignores_the_deadline_cannot_outlive_it(registry):
    class Hanging(ScriptedModel):
        async def stream(self, request):
            self.requests.append(request)
            await asyncio.sleep(30)  # a ChatModel that never looks at request.deadline
            yield ModelResponse("", content="too late")

    start = time.monotonic()
    turn = await drive(
        Hanging(lambda r, n: None),
        registry,
        "hi",
        settings=Settings(deadline_reserve_seconds=0.8),
        deadline=2.0,
    )
    assert time.monotonic() - start < 2.0
    assert turn.done["stop_reason"] == "deadline" and turn.answer and turn.model.calls == 2
    assert turn.model.requests[1].tools is None  # the reserve went to a tool-less final attempt


async def test_reused_tool_call_ids_are_made_unique(registry):
    """A server that names every call call_0: the conversation sent back must still be valid."""

    def script(request, n):
        if n == 1:
            return ModelResponse("", tool_calls=[js("const = 1", "call_0")])
        if n == 2:
            return ModelResponse("", tool_calls=[js("6 * 7", "call_0")])
        return ModelResponse("", content=f"{last_result(request)}")

    turn = await drive(ScriptedModel(script), registry, "6*7")  # ScriptedModel checks every conversation
    assert turn.answer == "42"
    ids = [c["id"] for c in turn.done["tool_calls"]]
    assert len(set(ids)) == 2 and ids[0] == "call_0"


async def test_text_streamed_before_a_timeout_stays_and_the_answer_follows_a_seam(registry):
    class StallsMidReply(ScriptedModel):
        async def stream(self, request):
            self.requests.append(request)
            if len(self.requests) == 1:
                yield TextDelta("Let me think")
                await asyncio.sleep(30)
            yield ModelResponse("", content="Short answer.")

    turn = await drive(
        StallsMidReply(lambda r, n: None),
        registry,
        "hi",
        # The reserve is what the answer call gets after the cut: well above MIN_CALL_SECONDS, so a timeout that
        # fires late on a loaded machine still leaves time for it (at 0.8 s it once fell back to the fallback text).
        settings=Settings(deadline_reserve_seconds=1.5),
        deadline=3.0,
    )
    error = turn.of(EventType.ERROR)[0]
    assert error["code"] == "deadline" and error["partial_kept"] is True  # the call was cut mid-text
    assert turn.answer == "Let me think\n\nShort answer." == turn.streamed
    assert turn.done["stop_reason"] == "deadline"


async def test_an_answer_cut_by_the_deadline_and_restarted_by_the_last_call_is_said_once(registry):
    """Issue #36: the call without tools after a timeout starts the answer again from the top; what it repeats of
    the cut text is not shown again, and it follows without a seam."""

    class StallsMidAnswer(ScriptedModel):
        async def stream(self, request):
            self.requests.append(request)
            if len(self.requests) == 1:
                yield TextDelta("The balance after 15 years is ")
                await asyncio.sleep(30)
            yield TextDelta("The balance after 15 years is $20,789.28.")
            yield ModelResponse("", content="The balance after 15 years is $20,789.28.")

    turn = await drive(
        StallsMidAnswer(lambda r, n: None),
        registry,
        "hi",
        settings=Settings(deadline_reserve_seconds=1.5),
        deadline=3.0,
    )
    assert turn.answer == "The balance after 15 years is $20,789.28." == turn.streamed
    assert not any(d.get("seam") for d in turn.of(EventType.DELTA))
