"""The decide phase of an iteration: the reply's calls made fit to decide on (unique ids, one call unless parallel
tool calls are on), the pure ``decide()`` given every input the turn's state holds, and the decision logged as its
``decision`` event.

Usage::

    make_ids_unique(state, response.tool_calls)
    one_call_unless_parallel(setup, state, response)
    yield logged(setup, decision_of(setup, state, reply, plan), response)
"""

from __future__ import annotations

import uuid

from chatloop.engine.events import DecisionMade
from chatloop.engine.guards import BatchPlan, Disposition
from chatloop.engine.loglines import log_decision
from chatloop.engine.policy import Decision, DecisionInput, decide
from chatloop.engine.state import TurnSetup, TurnState
from chatloop.engine.textcalls import Reply
from chatloop.observability import logger
from chatloop.providers.base import ModelResponse, ToolCall


def make_ids_unique(state: TurnState, calls: list[ToolCall]) -> None:
    """Some OpenAI-compatible servers reuse ids (``call_0`` in every reply); a conversation with two calls of one
    id is invalid, so a repeated id gets a fresh one."""
    call_ids = state.call_ids
    for call in calls:
        if call.id in call_ids:
            call.id = f"{call.id}_{uuid.uuid4().hex[:8]}"
        call_ids.add(call.id)


def one_call_unless_parallel(setup: TurnSetup, state: TurnState, response: ModelResponse) -> None:
    """``parallel_tool_calls: false``: a reply with several calls keeps its first; the rest are recorded as
    skipped (a model may ignore the parameter, or not take it at all)."""
    if setup.request.parallel_tool_calls is not False or len(response.tool_calls) < 2:
        return
    extra = response.tool_calls[1:]
    response.tool_calls = response.tool_calls[:1]
    state.record.skipped(extra, "parallel_tool_calls_false")
    logger.info(
        f"Parallel tool calls decision: iteration={state.iteration} kept=1 dropped={len(extra)} "
        "reason=parallel_tool_calls_false",
        extra={
            "parallel_tool_calls": {
                "kept": response.tool_calls[0].name,
                "dropped": [c.name for c in extra],
            }
        },
    )


def decision_of(setup: TurnSetup, state: TurnState, reply: Reply, plan: BatchPlan) -> Decision:
    """The pure ``decide()`` over every input the turn's state holds for this reply."""
    ledger = state.ledger
    counts = plan.counts()
    response = reply.response
    calls = response.tool_calls
    reserve = setup.limits.deadline_reserve_seconds
    return decide(
        DecisionInput(
            iteration=state.iteration,
            max_iterations=setup.max_iterations,
            has_tool_calls=bool(calls),
            valid_tool_calls=sum(1 for c in calls if c.name and c.parsed_arguments() is not None),
            runnable_calls=counts[Disposition.RUN.value],
            duplicate_calls=ledger.count_repeats(plan),
            duplicate_repeats_total=ledger.duplicate_repeats,
            js_already_succeeded_calls=counts[Disposition.JS_ALREADY_SUCCEEDED.value],
            over_budget_calls=counts[Disposition.OVER_BUDGET.value],
            client_tool_calls=counts[Disposition.CLIENT.value],
            approval_calls=counts[Disposition.APPROVAL.value],
            finish_reason=response.finish_reason,
            content_length=len((response.content or "").strip()),
            substantive_answer_chars=setup.limits.substantive_answer_chars,
            has_successful_js_execution=ledger.answered,
            loop_detected=ledger.loop is not None,
            loop_kind=ledger.loop,
            deadline_near=setup.deadline.remaining() < reserve,
            legacy_syntax=reply.unrunnable_text_call,
            not_an_answer=reply.not_an_answer is not None,
            text_tool_calls=len(reply.text_calls.calls) if reply.text_calls else 0,
            text_call_format=reply.text_calls.format if reply.text_calls else None,
            reminders_left=setup.limits.legacy_syntax_reminders - state.reminders,
            nudges_left=1 - state.nudges,
            final_call_made=state.tools_ended,
            client_tool_required=setup.client_required,
        )
    )


def logged(setup: TurnSetup, decision: Decision, response: ModelResponse) -> DecisionMade:
    """Log the decision (the greppable line and its record) and return it as the ``decision`` event."""
    line = decision.log_line()
    calls = tuple((c.name, setup.tools.source(c.name)) for c in response.tool_calls)
    event = DecisionMade(decision)
    if any(source for _, source in calls):  # tools run elsewhere (an MCP server): name tool and server
        line += " tools=" + ",".join(f"{name}@{source}" if source else name for name, source in calls)
        event = DecisionMade(decision, calls)
    content = None
    if setup.limits.log_content:  # off by default: message text can hold personal data
        content = {
            "content": response.content,
            "tool_calls": [c.to_message() for c in response.tool_calls],
        }
    log_decision(line, event.data, content)
    return event
