"""Running and answering one batch of tool calls.

Every call of a batch gets its tool message: those that may run run in parallel, each bounded by the turn's deadline
less the reserve kept for the answer; the others are answered with why they did not run (a repeated call with the
earlier result). Then the guards learn what the batch did: a budget used up, a result seen before.

Usage::

    executor = ToolExecutor(registry, state, deadline, reserve_seconds=4.0, enabled=["execute_javascript"])
    async for event in executor.execute(response, plan):
        ...   # message_complete, tool_call_start per run, tool_call_result per call
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from chatloop.deadline import Deadline
from chatloop.engine import prompts
from chatloop.engine.events import MessageComplete, ToolCallResult, ToolCallStart
from chatloop.engine.guards import BatchPlan, Disposition, PlannedCall, duplicate_answer
from chatloop.engine.state import TurnState
from chatloop.engine.summary import DecisionReason, StopReason, calls_json
from chatloop.observability import logger
from chatloop.providers.base import ModelResponse, ToolCall
from chatloop.tools.base import ToolRegistry, ToolResult, cap_tool_message

NOT_RUN_STATUS: dict[Disposition, tuple[str, str | None]] = {
    Disposition.INVALID_ARGUMENTS: ("error", None),
    Disposition.NOT_OFFERED: ("error", None),
    Disposition.JS_ALREADY_SUCCEEDED: ("skipped", DecisionReason.JS_ALREADY_SUCCEEDED),
    Disposition.OVER_BUDGET: ("skipped", DecisionReason.BUDGET_EXHAUSTED),
    Disposition.CLIENT: ("skipped", "client_tools_pending"),
    Disposition.APPROVAL: ("skipped", "approval_pending"),
}
"""``(status, reason)`` of a call answered without running, by why it did not run."""


class ToolExecutor:
    """Runs and answers the batches of one turn, adding their messages to its ``state``."""

    def __init__(
        self,
        tools: ToolRegistry,
        state: TurnState,
        deadline: Deadline,
        reserve_seconds: float,
        enabled: list[str],
    ):
        self.tools = tools
        self.state = state
        self.deadline = deadline
        self.reserve_seconds = reserve_seconds
        self.enabled = enabled
        """The turn's own tools (what an unknown call is told is available)."""

    async def execute(
        self, response: ModelResponse, plan: BatchPlan, ends: DecisionReason | None = None
    ) -> AsyncIterator[MessageComplete | ToolCallStart | ToolCallResult]:
        """Answer every call of the batch, running those that may run (in parallel), then update the guards.
        ``ends``: the decision already found this batch a loop (a second repeat); tool use ends after it for that
        reason, whatever loop the batch's results show."""
        calls = calls_json(response.tool_calls)
        content = response.content or ""
        self.state.messages.append({"role": "assistant", "content": content, "tool_calls": calls})
        yield MessageComplete(content, tuple(response.tool_calls), iteration=self.state.iteration)
        runs = plan.of(Disposition.RUN)
        for p in runs:
            server, server_tool = self._server(p.call.name)
            yield ToolCallStart(p.call.id, p.call.name, p.call.arguments, server, server_tool)
        results = await self._run_all(runs)
        ledger = self.state.ledger
        budget_was_open = {n for n in self.enabled if ledger.runs_left_of(n) != 0}
        for p in plan.calls:
            yield self._answer(p, results.get(p.call.id))
        self._update_guards(plan, budget_was_open, ends)

    async def _run_all(self, runs: list[PlannedCall]) -> dict[str, ToolResult]:
        deadline = self.deadline.minus(self.reserve_seconds)
        results = await asyncio.gather(*(self._run(p.call, deadline) for p in runs))
        return {p.call.id: result for p, result in zip(runs, results, strict=True)}

    async def _run(self, call: ToolCall, deadline: Deadline) -> ToolResult:
        tool = self.tools.get(call.name)
        if tool is None:  # plan_batch only lets offered, registered tools run: a bug if reached
            raise LookupError(f"tool {call.name!r} is not registered")
        try:
            result = await tool.run(call.parsed_arguments() or {}, deadline)
            # Whatever the tool, the model gets at most 16 KiB.
            result.content = cap_tool_message(result.content)
            return result
        except Exception as exc:  # a tool must never take the turn down with it
            logger.exception("tool failed", extra={"tool": call.name})
            message = f"{type(exc).__name__}: tool failed"
            return ToolResult(content=json.dumps({"error": message}), ok=False, error=message)

    def _answer(self, p: PlannedCall, result: ToolResult | None) -> ToolCallResult:
        """One call's tool message (its result, or why it did not run), added to the conversation and recorded."""
        state, call = self.state, p.call
        reason: str | None = None
        if result is None:
            status, reason, content = self._answer_without_running(p)
            state.ledger.record(call.name, p.key, call.id, content, ok=False, executed=False)
        else:
            status, content = ("ok" if result.ok else "error"), result.content
            state.record.tool_result(result)
            if state.ledger.record(call.name, p.key, call.id, content, result.ok, executed=True):
                state.ledger.loop = state.ledger.loop or DecisionReason.RESULT_LOOP
        state.messages.append(
            {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}
        )
        server, server_tool = self._server(call.name)
        duration_ms = None if result is None else result.duration_ms
        state.record.tool_call(call, status, content, reason, server, server_tool, duration_ms)
        details = None if result is None else result.details
        return ToolCallResult(
            call.id, call.name, status, content, server, server_tool, duration_ms, reason, details
        )

    def _answer_without_running(self, p: PlannedCall) -> tuple[str, str | None, str]:
        """``(status, reason, tool message content)`` for a call that is answered but not run."""
        ledger = self.state.ledger
        if p.disposition is Disposition.DUPLICATE:
            earlier = ledger.earlier_result(p.key)
            return "skipped", "duplicate", duplicate_answer(earlier[1] if earlier else "{}", p.duplicate_of)
        if p.disposition is Disposition.DENIED:
            return "skipped", DecisionReason.DENIED, json.dumps({"error": prompts.denied(p.note)})
        status, reason = NOT_RUN_STATUS[p.disposition]
        message = prompts.not_run(
            p.disposition.value,
            name=p.call.name,
            arguments=p.call.arguments,
            cap=ledger.caps.get(p.call.name),
            available=ledger.offerable(self.enabled),
        )
        return status, reason, json.dumps({"error": message})

    def _update_guards(self, plan: BatchPlan, budget_was_open: set[str], ends: DecisionReason | None) -> None:
        """After a batch: a call over budget, or a budget this batch used up without a success, is a budget stop;
        a detected loop ends tool use. The one place a batch ends it: a batch that is both the decision's loop and
        a result loop gets one final-answer note, the decision's (its log line's reason)."""
        ledger = self.state.ledger
        used_up = any(ledger.runs_left_of(n) == 0 and n not in ledger.succeeded for n in budget_was_open)
        if plan.of(Disposition.OVER_BUDGET) or used_up:
            self.state.trip(StopReason.TOOL_BUDGET)
        if ends is not None:
            ledger.loop = ends
        if ledger.loop and not self.state.tools_ended:
            self.state.end_tool_use(ledger.loop)

    def _server(self, name: str) -> tuple[str | None, str | None]:
        """``(server label, name there)`` for a tool that runs on a server (an MCP tool), else ``(None, None)``."""
        origin = self.tools.origin(name)
        return origin.get("server"), origin.get("server_tool")
