"""decide() is pure: a table of situations and the action and reason each must give."""

import pytest

from chatloop.engine.policy import Action, DecisionInput, decide

BASE = {"iteration": 2, "max_iterations": 10}

CASES = [
    # (name, inputs, action, reason, shouldExecuteTools)
    ("plain answer", {"content_length": 40}, Action.ANSWER, "no_tool_calls", False),
    (
        "calls run",
        {"has_tool_calls": True, "valid_tool_calls": 1, "runnable_calls": 1},
        Action.EXECUTE,
        "execute",
        True,
    ),
    (
        "calls run though finish_reason=stop",
        {"has_tool_calls": True, "valid_tool_calls": 1, "runnable_calls": 1, "finish_reason": "stop"},
        Action.EXECUTE,
        "execute",
        True,
    ),
    (
        "substantive answer beside calls",
        {"has_tool_calls": True, "valid_tool_calls": 1, "runnable_calls": 1, "content_length": 201},
        Action.ANSWER,
        "substantive_answer",
        False,
    ),
    (
        "exactly at the threshold is not substantive",
        {"has_tool_calls": True, "valid_tool_calls": 1, "runnable_calls": 1, "content_length": 200},
        Action.EXECUTE,
        "execute",
        True,
    ),
    (
        "js already succeeded",
        {
            "has_tool_calls": True,
            "valid_tool_calls": 1,
            "js_already_succeeded_calls": 1,
            "has_successful_js_execution": True,
        },
        Action.FINAL_CALL,
        "js_already_succeeded",
        False,
    ),
    (
        "js repeat beside a new other call runs the other",
        {"has_tool_calls": True, "valid_tool_calls": 2, "runnable_calls": 1, "js_already_succeeded_calls": 1},
        Action.EXECUTE,
        "execute",
        True,
    ),
    (
        "first repeat answered from the earlier result",
        {"has_tool_calls": True, "valid_tool_calls": 1, "duplicate_calls": 1, "duplicate_repeats_total": 1},
        Action.EXECUTE,
        "duplicate_call",
        False,
    ),
    (
        "second repeat ends tool use",
        {"has_tool_calls": True, "valid_tool_calls": 1, "duplicate_calls": 1, "duplicate_repeats_total": 2},
        Action.EXECUTE,
        "duplicate_loop",
        False,
    ),
    (
        "result loop seen earlier",
        {
            "has_tool_calls": True,
            "valid_tool_calls": 1,
            "runnable_calls": 1,
            "loop_detected": True,
            "loop_kind": "result_loop",
        },
        Action.FINAL_CALL,
        "result_loop",
        False,
    ),
    (
        "over budget",
        {"has_tool_calls": True, "valid_tool_calls": 1, "over_budget_calls": 1},
        Action.FINAL_CALL,
        "budget_exhausted",
        False,
    ),
    (
        "deadline near",
        {"has_tool_calls": True, "valid_tool_calls": 1, "runnable_calls": 1, "deadline_near": True},
        Action.FINAL_CALL,
        "deadline",
        False,
    ),
    (
        "at the cap with content",
        {"iteration": 10, "has_tool_calls": True, "valid_tool_calls": 1, "content_length": 5},
        Action.ANSWER,
        "iteration_cap",
        False,
    ),
    (
        "at the cap without content",
        {"iteration": 10, "has_tool_calls": True, "valid_tool_calls": 1},
        Action.FALLBACK,
        "iteration_cap",
        False,
    ),
    (
        "tools asked for after the final call",
        {"has_tool_calls": True, "valid_tool_calls": 1, "final_call_made": True, "loop_kind": "result_loop"},
        Action.FALLBACK,
        "result_loop",
        False,
    ),
    (
        "invalid calls get error messages",
        {"has_tool_calls": True, "valid_tool_calls": 0},
        Action.EXECUTE,
        "invalid_tool_calls",
        False,
    ),
    (
        "client tool",
        {"has_tool_calls": True, "valid_tool_calls": 1, "client_tool_calls": 1},
        Action.CLIENT_TOOLS,
        "client_tools",
        False,
    ),
    (
        "a call that needs approval is asked for, even beside runnable ones and a long answer",
        {
            "has_tool_calls": True,
            "valid_tool_calls": 2,
            "runnable_calls": 1,
            "approval_calls": 1,
            "content_length": 500,
        },
        Action.ASK_APPROVAL,
        "approval_required",
        False,
    ),
    (
        "a client tool goes first: the approval waits for a later batch",
        {"has_tool_calls": True, "valid_tool_calls": 2, "client_tool_calls": 1, "approval_calls": 1},
        Action.CLIENT_TOOLS,
        "client_tools",
        False,
    ),
    ("empty reply nudged once", {"nudges_left": 1}, Action.NUDGE, "empty_reply", False),
    ("empty reply twice", {"nudges_left": 0}, Action.FALLBACK, "empty_reply", False),
    (
        "legacy syntax reminded",
        {"legacy_syntax": True, "reminders_left": 2},
        Action.REMIND,
        "legacy_syntax",
        False,
    ),
    (
        "legacy syntax after reminders",
        {"legacy_syntax": True, "reminders_left": 0},
        Action.FINAL_CALL,
        "legacy_syntax",
        False,
    ),
    (
        "legacy syntax in the final call's answer",
        {"legacy_syntax": True, "reminders_left": 0, "final_call_made": True, "content_length": 30},
        Action.ANSWER,
        "legacy_syntax",
        False,
    ),
    (
        "legacy syntax and nothing else in the final call's answer",
        {"legacy_syntax": True, "reminders_left": 0, "final_call_made": True},
        Action.FALLBACK,
        "legacy_syntax",
        False,
    ),
    (
        "legacy syntax at the cap",
        {"iteration": 10, "legacy_syntax": True, "reminders_left": 2},
        Action.FALLBACK,
        "legacy_syntax",
        False,
    ),
    # Issue #36: a reply that is no answer (a tool's error JSON, the tools echoed), tools offered or not.
    (
        "no answer: reminded",
        {"not_an_answer": True, "reminders_left": 2},
        Action.REMIND,
        "not_an_answer",
        False,
    ),
    (
        "no answer, no reminder left: a call without tools",
        {"not_an_answer": True, "reminders_left": 0},
        Action.FINAL_CALL,
        "not_an_answer",
        False,
    ),
    (
        "no answer on the call without tools, words before it: they answer",
        {"not_an_answer": True, "final_call_made": True, "content_length": 20},
        Action.ANSWER,
        "not_an_answer",
        False,
    ),
    (
        "no answer on the call without tools, nothing else: the fallback text",
        {"not_an_answer": True, "final_call_made": True},
        Action.FALLBACK,
        "not_an_answer",
        False,
    ),
    (
        "no answer at the cap, words before it: they answer",
        {"iteration": 10, "not_an_answer": True, "reminders_left": 2, "content_length": 20},
        Action.ANSWER,
        "not_an_answer",
        False,
    ),
]


@pytest.mark.parametrize(("name", "inputs", "action", "reason", "execute"), CASES, ids=[c[0] for c in CASES])
def test_decide(name, inputs, action, reason, execute):
    decision = decide(DecisionInput(**{**BASE, **inputs}))
    assert (decision.action, decision.reason, decision.should_execute_tools) == (action, reason, execute)
    assert decision.fields()["inputs"]["iteration"] == inputs.get("iteration", 2)  # every input is kept


def test_second_repeat_with_new_calls_runs_them_then_ends_tool_use():
    decision = decide(
        DecisionInput(
            **BASE,
            has_tool_calls=True,
            valid_tool_calls=3,
            runnable_calls=1,
            duplicate_calls=2,
            duplicate_repeats_total=2,
        )
    )
    assert decision.action is Action.EXECUTE and decision.should_execute_tools and decision.end_tool_use


def test_log_line_has_the_seed_format():
    decision = decide(
        DecisionInput(
            iteration=2,
            max_iterations=10,
            has_tool_calls=True,
            valid_tool_calls=1,
            js_already_succeeded_calls=1,
            has_successful_js_execution=True,
            finish_reason="tool_calls",
        )
    )
    assert decision.log_line() == (
        "Tool execution decision: iteration=2 hasToolCalls=true validToolCalls=1 finishReason=tool_calls "
        "contentLength=0 hasSubstantiveAnswer=false hasSuccessfulJsExecution=true duplicateCalls=0 "
        "budgetExhausted=false loopDetected=false tooManyIterations=false deadlineNear=false "
        "shouldExecuteTools=false reason=js_already_succeeded"
    )
