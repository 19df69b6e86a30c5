"""``run_turn``: one user turn of the tool loop, as a stream of events.

Call the model; accumulate its message; ``decide()``; answer every tool call (running those that
may run, in parallel); repeat until the model answers or a guard ends the turn. Always ends with
exactly one ``done`` event, whatever failed.

Usage::

    async for event in run_turn(TurnRequest(messages=msgs), model, registry, Deadline.after(28)):
        print(event.name, event.data)
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from chatloop.config import Settings
from chatloop.deadline import Deadline, until
from chatloop.engine import prompts
from chatloop.engine.events import Event, EventType, StopReason
from chatloop.engine.guards import (
    JAVASCRIPT_TOOL,
    BatchPlan,
    Disposition,
    PlannedCall,
    ToolLedger,
    duplicate_answer,
)
from chatloop.engine.messages import LEGACY_CALL, LegacyTextFilter, strip_legacy_calls
from chatloop.engine.policy import Action, Decision, DecisionInput, decide
from chatloop.engine.request import TurnRequest
from chatloop.observability import log_decision, log_fallback, log_turn_end, logger
from chatloop.providers.base import (
    ChatModel,
    ModelFallback,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    Usage,
)
from chatloop.providers.errors import AllModelsFailed, DeadlineExceeded, ModelError, Transient
from chatloop.providers.stream import parse_text_tool_calls
from chatloop.tools.base import ToolRegistry, ToolResult

MIN_CALL_SECONDS = 0.5
"""Below this, no model call is started: the turn answers with the fallback text."""
RENDER_MARGIN_SECONDS = 0.25
"""Kept back from the last model call so the response is rendered before the deadline."""

NOT_RUN_STATUS = {
    Disposition.INVALID_ARGUMENTS: ("error", None),
    Disposition.NOT_OFFERED: ("error", None),
    Disposition.JS_ALREADY_SUCCEEDED: ("skipped", "js_already_succeeded"),
    Disposition.OVER_BUDGET: ("skipped", "budget_exhausted"),
    Disposition.CLIENT: ("skipped", "client_tools_pending"),
}

_GUARD_FOR_REASON = {
    "duplicate_loop": StopReason.LOOP_DETECTED,
    "result_loop": StopReason.LOOP_DETECTED,
    "budget_exhausted": StopReason.TOOL_BUDGET,
    "deadline": StopReason.DEADLINE,
    "iteration_cap": StopReason.ITERATION_CAP,
}


def run_turn(
    request: TurnRequest,
    model: ChatModel,
    tools: ToolRegistry,
    deadline: Deadline,
    settings: Settings | None = None,
) -> AsyncIterator[Event]:
    """Run one user turn. See the module docstring."""
    return _Turn(request, model, tools, deadline, settings or Settings()).run()


class _Turn:
    def __init__(
        self,
        request: TurnRequest,
        model: ChatModel,
        tools: ToolRegistry,
        deadline: Deadline,
        settings: Settings,
    ):
        self.request, self.model, self.tools, self.deadline, self.settings = (
            request,
            model,
            tools,
            deadline,
            settings,
        )
        self.max_iterations = min(request.max_iterations or settings.max_iterations, settings.max_iterations)
        enabled = tools.names() if request.tool_names is None else request.tool_names
        self.builtin = [n for n in enabled if tools.get(n) is not None]
        self.client_names = request.client_tool_names()
        self.ledger = ToolLedger(budgets=dict(settings.tool_budgets))
        self.messages = list(request.messages)
        if settings.system_prompt_guidance and JAVASCRIPT_TOOL in self.builtin:
            self.messages = prompts.with_guidance(self.messages)
        self.iteration = 0
        self.usage = Usage()
        self.records: list[dict[str, Any]] = []
        self.guard: StopReason | None = None
        self.tools_ended: str | None = None  # why tool use ended for the turn (a decision reason)
        self.final_call_made = False
        self.reminders = self.nudges = 0
        self.last_error: str | None = None
        self.last_result: str | None = None
        self.answered_by: str | None = None
        self.call_ids = {c["id"] for m in self.messages for c in m.get("tool_calls") or []}

    # --- the loop --------------------------------------------------------------------------
    async def run(self) -> AsyncIterator[Event]:
        answer: dict[str, Any] = {"role": "assistant", "content": ""}
        stop = StopReason.ERROR
        try:
            yield Event(
                EventType.STATUS, {"status": "started", "model": self.model.name, "tools": self.builtin}
            )
            outcome: list[Any] = []
            while not outcome:
                async for event in self._iterate(outcome):
                    yield event
            stop, answer = outcome
        except (GeneratorExit, asyncio.CancelledError):
            raise
        except AllModelsFailed as exc:
            stop, answer = StopReason.ALL_MODELS_FAILED, self._fallback_message(StopReason.ALL_MODELS_FAILED)
            yield Event(EventType.ERROR, {"code": exc.kind, "message": exc.message,
                                          "attempts": [{"model": a.model, "kind": a.kind, "message": a.message}
                                                       for a in exc.attempts]})  # fmt: skip
        except ModelError as exc:
            stop, answer = StopReason.ERROR, self._fallback_message(StopReason.ERROR)
            yield Event(EventType.ERROR, {"code": exc.kind, "message": exc.message, "model": exc.model})
        except Exception:
            logger.exception("turn failed")
            stop, answer = StopReason.ERROR, self._fallback_message(StopReason.ERROR)
            yield Event(
                EventType.ERROR,
                {"code": "internal_error", "message": "internal error while running the turn"},
            )
        if answer.get("content") or answer.get("tool_calls"):
            yield Event(EventType.MESSAGE_COMPLETE, dict(answer))
        yield Event(EventType.DONE, self._summary(stop, answer))
        self._log_end(stop)

    async def _iterate(self, outcome: list[Any]) -> AsyncIterator[Event]:
        """One model call and what follows it. Appends ``(stop_reason, answer)`` to ``outcome`` to end the turn."""
        self.iteration += 1
        if self.deadline.remaining() < MIN_CALL_SECONDS:
            self.iteration -= 1
            outcome.extend(self._end_with_fallback(StopReason.DEADLINE))
            return
        offered, forced_by = self._offer()
        request = self._model_request(offered)
        response: ModelResponse | None = None
        visible = LegacyTextFilter()
        streamed = False
        try:
            # The adapters bound their own calls; this bounds any ChatModel, so no model outlives the deadline.
            async for item in until(request.deadline, self.model.stream(request)):
                if isinstance(item, TextDelta):
                    text = visible.feed(item.text)
                    if text:
                        streamed = True
                        yield Event(EventType.DELTA, {"content": text, "iteration": self.iteration})
                elif isinstance(item, ModelFallback):
                    yield self._fallback_event(item)
                    if item.discard_partial:
                        visible = LegacyTextFilter()
                elif isinstance(item, ModelResponse):
                    response = item
        except (DeadlineExceeded, TimeoutError) as exc:
            if isinstance(exc, TimeoutError):
                exc = DeadlineExceeded(
                    f"{self.model.name} did not answer before the deadline", model=self.model.name
                )
            # discard_partial: text this call already streamed is not part of the answer.
            yield Event(EventType.ERROR, {"code": exc.kind, "message": exc.message, "model": exc.model,
                                          "discard_partial": streamed})  # fmt: skip
            if offered and not self.final_call_made:
                # The call ran into the reserve kept for the answer: spend the reserve on a tool-less answer.
                self._end_tool_use("deadline")
                return
            outcome.extend(self._end_with_fallback(StopReason.DEADLINE))
            return
        tail = visible.flush()
        if tail:
            yield Event(EventType.DELTA, {"content": tail, "iteration": self.iteration})
        if response is None:
            raise Transient("the model stream ended without a response", model=self.model.name)
        self.answered_by = response.model
        self.usage.add(response.usage)
        yield Event(EventType.LLM_RESPONSE, {
            "iteration": self.iteration, "model": response.model, "content": response.content,
            "tool_calls": [c.to_message() for c in response.tool_calls], "finish_reason": response.finish_reason,
            "usage": response.usage.as_dict() if response.usage else None,
        })  # fmt: skip

        legacy = bool(LEGACY_CALL.search(response.content or "")) and not response.tool_calls
        if legacy:
            recovered = parse_text_tool_calls(response.content, set(offered))
            if recovered:
                response.tool_calls = recovered
                yield Event(
                    EventType.STATUS, {"status": "legacy_syntax_recovered", "iteration": self.iteration}
                )
            response.content = strip_legacy_calls(response.content)
        self._make_ids_unique(response.tool_calls)
        plan = self.ledger.plan_batch(
            response.tool_calls, offered=set(offered), client_tools=self.client_names
        )
        decision = self._decide(response, plan, legacy and not response.tool_calls)
        fields = decision.fields()
        self._log_decision(decision, fields, response)
        yield Event(EventType.DECISION, fields)

        action = decision.action
        if action is Action.ANSWER:
            self._skip_all(plan, decision.reason)
            stop = (
                self.guard
                or forced_by
                or (StopReason.LENGTH if response.finish_reason == "length" else StopReason.STOP)
            )
            outcome.extend((stop, {"role": "assistant", "content": response.content}))
        elif action is Action.FALLBACK:
            self._skip_all(plan, decision.reason)
            reason = self.guard or forced_by or _GUARD_FOR_REASON.get(decision.reason) or StopReason.ERROR
            outcome.extend(self._end_with_fallback(reason))
        elif action is Action.CLIENT_TOOLS:
            client = plan.of(Disposition.CLIENT)
            self._skip_all(BatchPlan([p for p in plan.calls if p not in client]), "client_tools_pending")
            message = {"role": "assistant", "content": response.content,
                       "tool_calls": [p.call.to_message() for p in client]}  # fmt: skip
            outcome.extend((StopReason.TOOL_CALLS, message))
        elif action is Action.NUDGE:
            self.nudges += 1
            self.messages.append({"role": "system", "content": prompts.EMPTY_REPLY_NUDGE})
        elif action is Action.REMIND:
            self.reminders += 1
            if response.content:
                self.messages.append({"role": "assistant", "content": response.content})
            self.messages.append({"role": "system", "content": prompts.LEGACY_SYNTAX_REMINDER})
            yield Event(EventType.STATUS, {"status": "retrying", "reason": "legacy_syntax_reminder",
                                           "reminder": self.reminders})  # fmt: skip
        elif action is Action.FINAL_CALL:
            self._skip_all(plan, decision.reason)
            self._end_tool_use(decision.reason)
        else:  # Action.EXECUTE
            async for event in self._execute(response, plan):
                yield event
            if decision.end_tool_use:
                self.ledger.loop = decision.reason
                self._end_tool_use(decision.reason)

    # --- deciding --------------------------------------------------------------------------
    def _offer(self) -> tuple[list[str], StopReason | None]:
        """Tool names offered to the next call, and the guard that withheld them (cap or deadline), if any."""
        if self.tools_ended:
            return [], None
        available = self.ledger.offerable(self.builtin) + sorted(self.client_names)
        if not available:
            return [], None
        if self.iteration >= self.max_iterations:
            return [], StopReason.ITERATION_CAP
        if self.deadline.remaining() < self.settings.deadline_reserve_seconds + MIN_CALL_SECONDS:
            return [], StopReason.DEADLINE
        return available, None

    def _model_request(self, offered: list[str]) -> ModelRequest:
        r = self.request
        tool_choice = r.tool_choice if self.iteration == 1 and offered else None
        if isinstance(tool_choice, dict) and tool_choice.get("function", {}).get("name") not in offered:
            tool_choice = None
        if offered:
            # A call made while tools are offered must leave the reserve for the answer that follows.
            call_deadline = self.deadline.minus(self.settings.deadline_reserve_seconds)
        else:
            call_deadline = self.deadline.minus(RENDER_MARGIN_SECONDS)
        schemas = self.tools.schemas(n for n in offered if n not in self.client_names)
        schemas += [t for t in r.client_tools if t["function"]["name"] in offered]
        return ModelRequest(
            messages=list(self.messages), deadline=call_deadline, tools=schemas or None, tool_choice=tool_choice,
            parallel_tool_calls=r.parallel_tool_calls if schemas else None,
            temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens,
        )  # fmt: skip

    def _decide(self, response: ModelResponse, plan: BatchPlan, legacy: bool) -> Decision:
        counts = plan.counts()
        repeats = self.ledger.count_repeats(plan)
        calls = response.tool_calls
        return decide(DecisionInput(
            iteration=self.iteration, max_iterations=self.max_iterations,
            has_tool_calls=bool(calls),
            valid_tool_calls=sum(1 for c in calls if c.name and c.parsed_arguments() is not None),
            runnable_calls=counts[Disposition.RUN.value],
            duplicate_calls=repeats, duplicate_repeats_total=self.ledger.duplicate_repeats,
            js_already_succeeded_calls=counts[Disposition.JS_ALREADY_SUCCEEDED.value],
            over_budget_calls=counts[Disposition.OVER_BUDGET.value],
            client_tool_calls=counts[Disposition.CLIENT.value],
            finish_reason=response.finish_reason, content_length=len((response.content or "").strip()),
            substantive_answer_chars=self.settings.substantive_answer_chars,
            has_successful_js_execution=JAVASCRIPT_TOOL in self.ledger.succeeded,
            loop_detected=self.ledger.loop is not None, loop_kind=self.ledger.loop,
            deadline_near=self.deadline.remaining() < self.settings.deadline_reserve_seconds,
            legacy_syntax=legacy, reminders_left=self.settings.legacy_syntax_reminders - self.reminders,
            nudges_left=1 - self.nudges, final_call_made=self.final_call_made,
        ))  # fmt: skip

    def _make_ids_unique(self, calls: list[ToolCall]) -> None:
        """Some OpenAI-compatible servers reuse ids (``call_0`` in every reply); a conversation with two calls of one
        id is invalid, so a repeated id gets a fresh one."""
        for call in calls:
            if call.id in self.call_ids:
                call.id = f"{call.id}_{uuid.uuid4().hex[:8]}"
            self.call_ids.add(call.id)

    def _end_tool_use(self, reason: str) -> None:
        """No more tools this turn: the next call is made without tools, with a note saying why."""
        self.tools_ended = reason
        self.final_call_made = True
        self.guard = self.guard or _GUARD_FOR_REASON.get(reason)
        self.messages.append({"role": "system", "content": prompts.final_answer_note(reason)})

    # --- executing -------------------------------------------------------------------------
    async def _execute(self, response: ModelResponse, plan: BatchPlan) -> AsyncIterator[Event]:
        assistant = {"role": "assistant", "content": response.content or "",
                     "tool_calls": [c.to_message() for c in response.tool_calls]}  # fmt: skip
        self.messages.append(assistant)
        yield Event(EventType.MESSAGE_COMPLETE, {**assistant, "iteration": self.iteration})
        runs = plan.of(Disposition.RUN)
        for p in runs:
            yield Event(
                EventType.TOOL_CALL_START,
                {"id": p.call.id, "name": p.call.name, "arguments": p.call.arguments},
            )
        tool_deadline = self.deadline.minus(self.settings.deadline_reserve_seconds)
        results = await asyncio.gather(*(self._run_tool(p.call, tool_deadline) for p in runs))
        by_id = {p.call.id: r for p, r in zip(runs, results, strict=True)}
        budget_was_open = {n for n in self.builtin if self.ledger.budget_left(n) != 0}
        for p in plan.calls:
            if p.call.id in by_id:
                result = by_id[p.call.id]
                status, reason, content = ("ok" if result.ok else "error"), None, result.content
                (self.last_result, self.last_error) = (
                    (content, self.last_error) if result.ok else (self.last_result, result.error)
                )
                if self.ledger.record(p.call.name, p.key, p.call.id, content, result.ok, executed=True):
                    self.ledger.loop = self.ledger.loop or "result_loop"
            else:
                status, reason, content = self._answer_without_running(p)
                self.ledger.record(p.call.name, p.key, p.call.id, content, ok=False, executed=False)
            self.messages.append(
                {"role": "tool", "tool_call_id": p.call.id, "name": p.call.name, "content": content}
            )
            self._record(p.call, status, content, reason)
            data = {"id": p.call.id, "name": p.call.name, "status": status, "content": content}
            if p.call.id in by_id:
                data["duration_ms"] = round(by_id[p.call.id].duration_ms, 1)
            if reason:
                data["reason"] = reason
            yield Event(EventType.TOOL_CALL_RESULT, data)
        if plan.of(Disposition.OVER_BUDGET):
            self.guard = self.guard or StopReason.TOOL_BUDGET
        for name in budget_was_open:
            if (
                self.ledger.budget_left(name) == 0
                and name not in self.ledger.succeeded
                and self.guard is None
            ):
                self.guard = StopReason.TOOL_BUDGET  # the budget, not an answer, ended this tool's use
        if self.ledger.loop and not self.tools_ended:
            self._end_tool_use(self.ledger.loop)

    async def _run_tool(self, call: ToolCall, deadline: Deadline) -> ToolResult:
        tool = self.tools.get(call.name)
        assert tool is not None  # plan_batch only lets offered, registered tools run
        try:
            return await tool.run(call.parsed_arguments() or {}, deadline)
        except Exception as exc:  # a tool must never take the turn down with it
            logger.exception("tool failed", extra={"tool": call.name})
            message = f"{type(exc).__name__}: tool failed"
            return ToolResult(content=json.dumps({"error": message}), ok=False, error=message)

    def _answer_without_running(self, p: PlannedCall) -> tuple[str, str | None, str]:
        """``(status, reason, tool message content)`` for a call that is answered but not run."""
        if p.disposition is Disposition.DUPLICATE:
            earlier = self.ledger.earlier_result(p.key)
            return "skipped", "duplicate", duplicate_answer(earlier[1] if earlier else "{}", p.duplicate_of)
        status, reason = NOT_RUN_STATUS[p.disposition]
        message = prompts.not_run(p.disposition.value, name=p.call.name, arguments=p.call.arguments,
                                  budget=self.ledger.budgets.get(p.call.name),
                                  available=self.ledger.offerable(self.builtin))  # fmt: skip
        return status, reason, json.dumps({"error": message})

    # --- bookkeeping -----------------------------------------------------------------------
    def _skip_all(self, plan: BatchPlan, reason: str) -> None:
        for p in plan.calls:
            self._record(p.call, "skipped", None, reason)

    def _record(self, call: ToolCall, status: str, result: str | None, reason: str | None) -> None:
        entry: dict[str, Any] = {"id": call.id, "name": call.name, "arguments": call.arguments,
                                 "status": status, "result": result}  # fmt: skip
        if reason:
            entry["reason"] = reason
        self.records.append(entry)

    def _fallback_message(self, stop: StopReason) -> dict[str, Any]:
        text = prompts.fallback_text(
            stop.value, dict(self.ledger.executions), self.last_error, self.last_result
        )
        return {"role": "assistant", "content": text}

    def _end_with_fallback(self, stop: StopReason) -> tuple[StopReason, dict[str, Any]]:
        return stop, self._fallback_message(stop)

    def _fallback_event(self, item: ModelFallback) -> Event:
        log_fallback(item.from_model, item.to_model, item.reason, item.retry_after, item.discard_partial)
        return Event(EventType.MODEL_FALLBACK, {
            "from": item.from_model, "to": item.to_model, "reason": item.reason, "retry_after": item.retry_after,
            "discard_partial": item.discard_partial, "message": item.message,
        })  # fmt: skip

    def _summary(self, stop: StopReason, answer: dict[str, Any]) -> dict[str, Any]:
        return {
            "message": answer, "stop_reason": stop.value, "iterations": self.iteration,
            "tool_calls": self.records, "tool_counts": dict(self.ledger.executions),
            "usage": self.usage.as_dict(), "model": self.answered_by or self.model.name,
        }  # fmt: skip

    def _log_decision(self, decision: Decision, fields: dict[str, Any], response: ModelResponse) -> None:
        content = None
        if self.settings.log_content:  # off by default: message text can hold personal data
            content = {
                "content": response.content,
                "tool_calls": [c.to_message() for c in response.tool_calls],
            }
        log_decision(decision.log_line(), fields, content)

    def _log_end(self, stop: StopReason) -> None:
        log_turn_end(stop.value, stop is StopReason.STOP, self.iteration, dict(self.ledger.executions),
                     self.usage.as_dict(), self.answered_by)  # fmt: skip
