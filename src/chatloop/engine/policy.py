"""``decide()``: a pure function from one model response's situation to a Decision.

The Decision keeps every input it used and a short ``reason``; the loop logs it
(``Decision.log_line()`` is the greppable ``Tool execution decision: ...`` line) and acts on ``action``.

Usage::

    decision = decide(DecisionInput(iteration=1, max_iterations=10, has_tool_calls=True, valid_tool_calls=1,
                                    runnable_calls=1, finish_reason="tool_calls"))
    decision.action is Action.EXECUTE and decision.reason == "execute"
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from chatloop.engine.summary import DecisionReason
from chatloop.jsontypes import JSONObject, JSONValue


class Action(StrEnum):
    EXECUTE = "execute"
    """Answer every tool call (running those that may run) and call the model again."""
    ANSWER = "answer"
    """The response's content is the turn's answer."""
    FINAL_CALL = "final_call"
    """Tool use is over: one more model call without tools, so the model answers from what it has."""
    REMIND = "remind"
    """The model wrote a ``<function=...>`` call as text: ask for a proper tool call."""
    NUDGE = "nudge"
    """Empty reply: ask once more."""
    CLIENT_TOOLS = "client_tools"
    """The model called a client-defined tool: end the turn and hand the calls to the client."""
    ASK_APPROVAL = "ask_approval"
    """The model called a tool that needs a person's approval: end the turn asking for it."""
    FALLBACK = "fallback"
    """No usable answer can be had: answer with the user-facing fallback text."""


@dataclass(frozen=True)
class DecisionInput:
    iteration: int
    max_iterations: int
    has_tool_calls: bool = False
    valid_tool_calls: int = 0
    """Calls with a name and JSON-object arguments."""
    runnable_calls: int = 0
    """Calls that will run now: valid, offered, within budget, not repeats."""
    duplicate_calls: int = 0
    duplicate_repeats_total: int = 0
    js_already_succeeded_calls: int = 0
    over_budget_calls: int = 0
    client_tool_calls: int = 0
    approval_calls: int = 0
    """Calls that could run but need a person's approval first."""
    finish_reason: str | None = None
    content_length: int = 0
    substantive_answer_chars: int = 200
    has_successful_js_execution: bool = False
    loop_detected: bool = False
    loop_kind: DecisionReason | None = None
    deadline_near: bool = False
    legacy_syntax: bool = False
    """A tool call was written as text (a tag) and could not be read: the model is reminded."""
    not_an_answer: bool = False
    """The reply was no answer (a tool's error, the tools or their results echoed, a call no tool can run): it was
    cut, and the model is reminded, asked without tools, or the fallback text answers."""
    text_tool_calls: int = 0
    """Calls recovered from text in this response (they are in the tool calls counted above)."""
    text_call_format: str | None = None
    reminders_left: int = 0
    nudges_left: int = 0
    final_call_made: bool = False
    """This response answered a call made without tools after tool use ended."""
    client_tool_required: bool = False
    """The client's ``tool_choice`` requires a call to one of its tools (``required`` or a named client tool): the
    turn must end with one, so a plain answer leads to a last call that offers only the client's tools."""

    @property
    def has_substantive_answer(self) -> bool:
        return self.content_length > self.substantive_answer_chars

    @property
    def too_many_iterations(self) -> bool:
        return self.iteration >= self.max_iterations

    @property
    def budget_exhausted(self) -> bool:
        return self.over_budget_calls > 0


@dataclass(frozen=True)
class Decision:
    inputs: DecisionInput
    action: Action
    reason: DecisionReason
    should_execute_tools: bool
    end_tool_use: bool = False
    """After executing this batch, offer no more tools this turn."""

    def fields(self) -> JSONObject:
        """The decision as the flat record logged and sent in the ``decision`` event."""
        fields = self._named()
        # Every input is a scalar: a shallow copy is what asdict() gave, without its deep copy per field.
        fields["inputs"] = dict(vars(self.inputs))
        return fields

    def _named(self) -> JSONObject:
        """The record's named fields (the log line's, and the event's before its ``inputs``)."""
        i = self.inputs
        return {
            "iteration": i.iteration,
            "hasToolCalls": i.has_tool_calls,
            "validToolCalls": i.valid_tool_calls,
            "finishReason": i.finish_reason,
            "contentLength": i.content_length,
            "hasSubstantiveAnswer": i.has_substantive_answer,
            "hasSuccessfulJsExecution": i.has_successful_js_execution,
            "duplicateCalls": i.duplicate_calls,
            "budgetExhausted": i.budget_exhausted,
            "loopDetected": i.loop_detected,
            "tooManyIterations": i.too_many_iterations,
            "deadlineNear": i.deadline_near,
            "textToolCalls": i.text_tool_calls,
            "textCallFormat": i.text_call_format,
            "shouldExecuteTools": self.should_execute_tools,
            "reason": self.reason,
            "action": self.action.value,
        }

    def log_line(self) -> str:
        f = self._named()
        order = [
            "iteration",
            "hasToolCalls",
            "validToolCalls",
            "finishReason",
            "contentLength",
            "hasSubstantiveAnswer",
            "hasSuccessfulJsExecution",
            "duplicateCalls",
            "budgetExhausted",
            "loopDetected",
            "tooManyIterations",
            "deadlineNear",
            "shouldExecuteTools",
            "reason",
        ]
        parts = [f"{k}={_fmt(f[k])}" for k in order]
        if self.inputs.text_tool_calls:  # only then, so every other line keeps the seeds' exact shape
            parts += [
                f"textToolCalls={self.inputs.text_tool_calls}",
                f"format={self.inputs.text_call_format}",
            ]
        return "Tool execution decision: " + " ".join(parts)


def _fmt(value: JSONValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def decide(i: DecisionInput) -> Decision:
    """What to do with one model response. Pure: the same input always gives the same Decision."""
    return _called_tools(i) if i.has_tool_calls else _no_tool_calls(i)


def _made(
    i: DecisionInput, action: Action, reason: DecisionReason, execute: bool = False, end: bool = False
) -> Decision:
    return Decision(i, action, reason, execute, end)


def _answer_or_fallback(i: DecisionInput, reason: DecisionReason) -> Decision:
    return _made(i, Action.ANSWER if i.content_length > 0 else Action.FALLBACK, reason)


def _no_tool_calls(i: DecisionInput) -> Decision:
    """A reply without tool calls: the answer, unless it is no answer yet (a reminder, a nudge, the last call)."""
    R = DecisionReason  # every branch names one
    calls_left = i.iteration < i.max_iterations
    if i.legacy_syntax or i.not_an_answer:
        why = R.LEGACY_SYNTAX if i.legacy_syntax else R.NOT_AN_ANSWER
        if i.final_call_made:
            # The call without tools was made and the model still wrote no answer: what is left of its text
            # (the words before the call or the echo) is the answer; asking again would run the turn to the cap.
            return _answer_or_fallback(i, why)
        if not calls_left:
            return _answer_or_fallback(i, why) if i.not_an_answer else _made(i, Action.FALLBACK, why)
        return _made(i, Action.REMIND if i.reminders_left > 0 else Action.FINAL_CALL, why)
    if i.client_tool_required and not i.final_call_made:
        return _made(i, Action.FINAL_CALL, R.CLIENT_TOOL_REQUIRED)
    if i.content_length == 0:
        if i.nudges_left > 0 and calls_left:
            return _made(i, Action.NUDGE, R.EMPTY_REPLY)
        return _made(i, Action.FALLBACK, R.EMPTY_REPLY)
    return _made(i, Action.ANSWER, R.NO_TOOL_CALLS)


def _called_tools(i: DecisionInput) -> Decision:
    """A reply that called tools: hand them back, ask approval, run them, or end tool use, in this order."""
    R = DecisionReason  # every branch names one
    # A call to a client's tool ends the turn whatever else the reply holds: the client asked for its tools, and
    # OpenAI's contract returns text and tool calls together.
    if i.client_tool_calls > 0:
        return _made(i, Action.CLIENT_TOOLS, R.CLIENT_TOOLS)
    # A call that needs a person's approval is asked for before anything else of the batch runs.
    if i.approval_calls > 0:
        return _made(i, Action.ASK_APPROVAL, R.APPROVAL_REQUIRED)
    # A long answer alongside the server's tool calls is taken as the answer (seed 000's rule).
    if i.has_substantive_answer:
        return _made(i, Action.ANSWER, R.SUBSTANTIVE_ANSWER)
    if i.iteration >= i.max_iterations:
        return _answer_or_fallback(i, R.ITERATION_CAP)
    if i.final_call_made:
        # Tool use had already ended and the model still asked for tools: do not ask a third time.
        return _answer_or_fallback(i, i.loop_kind or R.TOOLS_WITHDRAWN)
    if i.deadline_near:
        return _made(i, Action.FINAL_CALL, R.DEADLINE)
    if i.loop_detected:
        return _made(i, Action.FINAL_CALL, i.loop_kind or R.RESULT_LOOP)
    if i.duplicate_repeats_total >= 2:
        # A second repeat: answer this batch (running anything new in it), then end tool use.
        return _made(i, Action.EXECUTE, R.DUPLICATE_LOOP, execute=i.runnable_calls > 0, end=True)
    if i.runnable_calls > 0:
        return _made(i, Action.EXECUTE, R.EXECUTE, execute=True)
    if (
        i.js_already_succeeded_calls > 0
        and i.js_already_succeeded_calls + i.duplicate_calls >= i.valid_tool_calls
    ):
        return _made(i, Action.FINAL_CALL, R.JS_ALREADY_SUCCEEDED)
    if i.over_budget_calls > 0:
        return _made(i, Action.FINAL_CALL, R.BUDGET_EXHAUSTED)
    if i.duplicate_calls > 0:
        return _made(i, Action.EXECUTE, R.DUPLICATE_CALL)
    return _made(i, Action.EXECUTE, R.INVALID_TOOL_CALLS)
