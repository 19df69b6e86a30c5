"""Tool calls that wait for a person's approval: asked for when the model makes them, answered in a later turn.

A turn whose model calls a tool in ``TurnRequest.approval_required`` ends (``StopReason.APPROVAL_REQUIRED``) with
one ``approval_request`` event per such call, each with a new id; nothing of that batch runs. A later turn carries
the person's answers (``TurnRequest.approvals``: the call as it was asked, under the request's id, approved or
not): before its first model call, the approved calls run as any call runs (budgets, deadline, guards) and the
denied ones are answered with the denial and its reason, under one logged decision (``approved`` when any ran,
else ``denied``); then the loop goes on. Which requests exist, who may answer them and whether an answer was
already used is the API's to check: the engine runs what it is given.

Usage::

    answers = (ApprovalAnswer(ToolCall("mcpr_1", "docs__create", '{"title": "x"}'), approve=True),)
    run_turn(TurnRequest(messages, approvals=answers), model, registry, deadline)
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chatloop.engine.events import ApprovalRequested
from chatloop.engine.guards import BatchPlan, Disposition, PlannedCall, ToolLedger, call_key
from chatloop.engine.policy import Action, Decision, DecisionInput
from chatloop.engine.record import TurnRecord
from chatloop.engine.summary import DecisionReason
from chatloop.providers.base import ModelResponse, ToolCall
from chatloop.tools.base import ToolRegistry

APPROVAL_ID_PREFIX = "mcpr_"
"""OpenAI's prefix for an ``mcp_approval_request`` item: an approval's id is that item's id."""


def new_approval_id() -> str:
    """An unguessable approval id (128 random bits): ``mcpr_`` and 32 hex digits."""
    return f"{APPROVAL_ID_PREFIX}{secrets.token_hex(16)}"


@dataclass(frozen=True)
class ApprovalAnswer:
    """A person's answer to one approval request: ``call`` as it was asked (its ``id`` is the request's, its
    ``name`` the tool's offered name), whether it may run, and the reason they gave."""

    call: ToolCall
    approve: bool
    reason: str | None = None


def requests(
    plan: BatchPlan, tools: ToolRegistry, make_id: Callable[[ToolCall], str] | None, record: TurnRecord
) -> list[ApprovalRequested]:
    """One ``approval_request`` per call of ``plan`` that waits for a person, each with a new id (``make_id``'s:
    the API seals it; else a random one), recorded under that id (what a JSON client answers with); the batch's
    other calls are recorded as not run (``approval_pending``)."""
    asked = plan.of(Disposition.APPROVAL)
    events = []
    for p in asked:
        origin = tools.origin(p.call.name)
        approval_id = make_id(p.call) if make_id is not None else new_approval_id()
        events.append(
            ApprovalRequested(
                approval_id, p.call.name, p.call.arguments, origin.get("server"), origin.get("server_tool")
            )
        )
    record.skipped((p.call for p in plan.calls if p not in asked), "approval_pending")
    record.skipped(
        (ToolCall(e.id, e.tool_name, e.arguments) for e in events), DecisionReason.APPROVAL_REQUIRED
    )
    return events


def answered_batch(
    ledger: ToolLedger, answers: Sequence[ApprovalAnswer], offered: set[str]
) -> tuple[ModelResponse, BatchPlan]:
    """The answered calls as the batch a model would have made, and its plan: approved calls planned as any call
    (a repeat, an exhausted budget or a tool no longer offered is answered without running), denied ones
    ``DENIED`` with the person's reason."""
    calls = [a.call for a in answers]
    approved = ledger.plan_batch([a.call for a in answers if a.approve], offered, client_tools=set())
    planned = {p.call.id: p for p in approved.calls}
    ordered = [
        planned.get(a.call.id)
        or PlannedCall(a.call, Disposition.DENIED, call_key(a.call.name, a.call.arguments), note=a.reason)
        for a in answers
    ]
    return ModelResponse(model="", content="", tool_calls=calls), BatchPlan(ordered)


def answered_decision(iteration: int, max_iterations: int, plan: BatchPlan) -> Decision:
    """The logged decision on a batch of answered approvals (no model call made it: ``iteration`` is the turn's
    count so far)."""
    counts = plan.counts()
    runnable = counts[Disposition.RUN.value]
    inputs = DecisionInput(
        iteration=iteration,
        max_iterations=max_iterations,
        has_tool_calls=True,
        valid_tool_calls=len(plan.calls),
        runnable_calls=runnable,
        over_budget_calls=counts[Disposition.OVER_BUDGET.value],
    )
    approved = any(p.disposition is not Disposition.DENIED for p in plan.calls)
    reason = DecisionReason.APPROVED if approved else DecisionReason.DENIED
    return Decision(inputs, Action.EXECUTE, reason, should_execute_tools=runnable > 0)
