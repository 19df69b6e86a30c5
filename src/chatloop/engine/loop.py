"""``run_turn``: one user turn of the tool loop, as a stream of events.

Each iteration reads as its phases: **ask** the model (streaming its text), **decide** what its response
calls for (a pure ``decide()``, logged), then **act**: answer, execute the tool calls and go round again,
or end tool use so the next call answers. Always ends with exactly one ``done`` event, whatever failed.

Text reaches the client as the model writes it (after the text-call filter's hold), and all of it is the turn's
answer: text a model writes before calling a tool ("Let me compute that.") stays, a ``seam`` delta (a blank line)
separates one model call's text from the next, and a fallback text is shown as deltas too. So the concatenated
``delta`` events always equal the content of the answer in ``done``, whatever happened in between (a model that
failed mid-answer included: its text stays, the seam follows, then the next model's answer).

Every phase is an async stream of ``Event``s that ends with its result, the way a ``ChatModel`` stream
ends with its ``ModelResponse``: the asking phase with the response, an acting phase with a ``TurnEnd``
when the turn is over. No phase hands results back through shared lists.

Usage::

    async for event in run_turn(TurnRequest(messages=msgs), model, registry, Deadline.after(28)):
        print(event.name, event.data)
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from chatloop.config import Settings
from chatloop.deadline import Deadline, until
from chatloop.engine import prompts
from chatloop.engine.answers import describe, judge_final
from chatloop.engine.events import (
    ContextFitted,
    DecisionMade,
    Delta,
    Done,
    Event,
    LlmResponse,
    MessageComplete,
    Retrying,
    Started,
    TextCallsRecovered,
    ToolCallResult,
    ToolCallStart,
    ToolsUnavailable,
    TurnError,
)
from chatloop.engine.guards import (
    JAVASCRIPT_TOOL,
    BatchPlan,
    Disposition,
    PlannedCall,
    ToolLedger,
    duplicate_answer,
)
from chatloop.engine.policy import Action, Decision, DecisionInput, decide
from chatloop.engine.record import TurnRecord
from chatloop.engine.request import TurnRequest
from chatloop.engine.summary import AssistantMessage, DecisionReason, StopReason, TurnSummary
from chatloop.engine.textcalls import Reply, read_text_calls
from chatloop.engine.textfilter import TextCallFilter
from chatloop.observability import log_context_decision, log_decision, log_turn_end, logger
from chatloop.providers.base import (
    ChatModel,
    ContextFit,
    ModelFallback,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
)
from chatloop.providers.errors import AllModelsFailed, DeadlineExceeded, ModelError, Transient
from chatloop.providers.textcalls import tool_keys
from chatloop.tools.base import ToolRegistry, ToolResult, cap_tool_message

MIN_CALL_SECONDS = 0.5
"""Below this, no model call is started: the turn answers with the fallback text."""
RENDER_MARGIN_SECONDS = 0.25
"""Kept back from the last model call so the response is rendered before the deadline."""

NOT_RUN_STATUS: dict[Disposition, tuple[str, str | None]] = {
    Disposition.INVALID_ARGUMENTS: ("error", None),
    Disposition.NOT_OFFERED: ("error", None),
    Disposition.JS_ALREADY_SUCCEEDED: ("skipped", DecisionReason.JS_ALREADY_SUCCEEDED),
    Disposition.OVER_BUDGET: ("skipped", DecisionReason.BUDGET_EXHAUSTED),
    Disposition.CLIENT: ("skipped", "client_tools_pending"),
}


@dataclass(frozen=True)
class TurnEnd:
    """The last item of a phase that ends the turn: why it stopped, text still to show (a fallback text, or an
    answer held back whole) and the client tools' calls it answers with (the answer's content is what was shown)."""

    stop: StopReason
    show: str = ""
    client_calls: tuple[ToolCall, ...] | None = None


@dataclass(frozen=True)
class Offer:
    """What the next model call may use: tool names, and the guard that withheld every tool, if one did."""

    tools: list[str]
    withheld_by: StopReason | None = None


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
        self.request = request
        self.model = model
        self.tools = tools
        self.deadline = deadline
        self.settings = settings
        self.max_iterations = min(request.max_iterations or settings.max_iterations, settings.max_iterations)
        enabled = tools.names() if request.tool_names is None else request.tool_names
        self.builtin = [n for n in enabled if tools.get(n) is not None]
        self.client_names = request.client_tool_names()
        self.ledger = ToolLedger(
            budgets=tools.budgets(settings.tool_budgets), max_runs=request.max_tool_calls
        )
        self.client_required = request.requires_client_tool()
        self.messages = list(request.messages)
        if settings.system_prompt_guidance and JAVASCRIPT_TOOL in self.builtin:
            self.messages = prompts.with_guidance(self.messages)
        self.iteration = 0
        self.record = TurnRecord()
        self.guard: StopReason | None = None
        self.tools_ended: DecisionReason | None = None  # why tool use ended for the turn
        self.final_call_made = False
        self.reminders = 0
        self.nudges = 0
        self.call_ids = {c["id"] for m in self.messages for c in m.get("tool_calls") or []}
        self.shown: list[str] = []
        """Every piece of text sent as a ``delta``: the answer's content is their concatenation."""
        self.new_segment = True
        """The next text shown starts a new model call's text (a seam goes before it)."""
        self.call_shown = False
        """Whether the current model call has shown any text."""

    # --- the loop --------------------------------------------------------------------------
    async def run(self) -> AsyncIterator[Event]:
        yield Started(self.model.name, tuple(self.builtin))
        if self.tools.unavailable and self.request.tool_names != []:  # e.g. an MCP server that is down
            yield ToolsUnavailable(dict(self.tools.unavailable))
        end: TurnEnd | None = None
        try:
            while end is None:
                async for item in self._iteration():
                    if isinstance(item, TurnEnd):
                        end = item
                    else:
                        yield item
        except (GeneratorExit, asyncio.CancelledError):
            self._log_end(StopReason.CLIENT_DISCONNECTED)  # no further model call or tool run starts
            raise
        except ModelError as exc:
            stop = StopReason.ALL_MODELS_FAILED if isinstance(exc, AllModelsFailed) else StopReason.ERROR
            end = self._end_with_fallback(stop)
            yield TurnError.of(exc)
        except Exception:
            logger.exception("turn failed")
            yield TurnError("internal_error", "internal error while running the turn")
        end = end or self._end_with_fallback(StopReason.ERROR)
        if end.show:
            # A fallback text, or an answer held back whole, is set off from any text shown before it.
            self.new_segment = True
            for piece in self._show(end.show):
                yield piece
        answer = AssistantMessage("".join(self.shown), end.client_calls)
        if answer.content or answer.tool_calls:
            yield MessageComplete(answer.content, answer.tool_calls)
        yield Done(self._summary(end.stop, answer))
        self._log_end(end.stop)

    async def _iteration(self) -> AsyncIterator[Event | TurnEnd]:
        """One model call and what follows it: ask, decide, act."""
        if self.deadline.remaining() < MIN_CALL_SECONDS:
            yield self._end_with_fallback(StopReason.DEADLINE)
            return
        self.iteration += 1
        offer = self._offer()
        reply: Reply | None = None
        async for item in self._ask(offer):
            if isinstance(item, Reply):
                reply = item
            else:
                yield item
        if reply is None:  # the call ran out of time (its error event is out)
            end = self._after_timeout(offer)
            if end is not None:
                yield end
            return
        response = reply.response
        self._make_ids_unique(response.tool_calls)
        self._one_call_unless_parallel(response)
        plan = self.ledger.plan_batch(
            response.tool_calls, offered=set(offer.tools), client_tools=self.client_names
        )
        decision = self._decide(reply, plan)
        yield self._logged(decision, response)
        async for step in self._act(decision, response, plan, offer):
            yield step

    # --- ask -------------------------------------------------------------------------------
    async def _ask(self, offer: Offer) -> AsyncIterator[Event | Reply]:
        """One model call: its text as ``delta`` events (never a tool call written as text), fallbacks as they
        happen, then its ``Reply``. When the call runs out of time: an ``error`` event and no reply."""
        request = self._model_request(offer.tools)
        visible = self._text_filter(request, offer)
        streamed = False
        self.new_segment, self.call_shown = True, False
        response: ModelResponse | None = None
        try:
            # The adapters bound their own calls; this bounds any ChatModel, so no model outlives the deadline.
            async for item in until(request.deadline, self.model.stream(request)):
                if isinstance(item, TextDelta):
                    text = visible.feed(item.text)
                    if text:
                        streamed = True
                        for piece in self._show(text):
                            yield piece
                elif isinstance(item, ModelFallback):
                    yield self.record.fallback(item)
                    if item.discard_partial:  # the text shown stays; the next model's follows a seam
                        visible = self._text_filter(request, offer)
                        self.new_segment = True
                elif isinstance(item, ContextFit):
                    event = self._fitted(item)
                    if event is not None:
                        yield event
                else:
                    response = item
        except (DeadlineExceeded, TimeoutError) as exc:
            late = exc if isinstance(exc, DeadlineExceeded) else self._late()
            # The text this call already showed stays part of the answer (the client has it); what follows is
            # set off by a seam.
            yield TurnError.of(late, discard_partial=streamed)
            return
        if response is None:
            raise Transient("the model stream ended without a response", model=self.model.name)
        reply = self._read(response, request, offer, visible.released)
        tail = visible.finish(response.content)
        if tail:
            for piece in self._show(tail):
                yield piece
        self.record.response(response)
        yield LlmResponse.of(response, self.iteration)
        if reply.text_calls:
            self.record.text_calls(reply.text_calls)
            yield TextCallsRecovered.of(reply.text_calls, self.iteration)
        yield reply

    # --- what the user may be shown (text-call filter and the final answer check) -----------------
    def _withdrawn(self, offer: Offer) -> list[dict[str, Any]]:
        """The turn's tools when this call is made without them after tools were in play (a guard ended tool use,
        or the tool that answered was withdrawn): the final, tool-less call. Empty otherwise."""
        if offer.tools or not (self.iteration > 1 or self.final_call_made or offer.withheld_by):
            return []
        return self.tools.schemas(self.builtin) + list(self.request.client_tools)

    def _text_filter(self, request: ModelRequest, offer: Offer) -> TextCallFilter:
        """Holds back what may be a call written as text; on the final call, what may be one after tools were
        withdrawn, until ``_read`` has judged it."""
        tools = request.tools or self._withdrawn(offer)
        return TextCallFilter(hold_json=bool(tools), tools=tool_keys(tools or []))

    def _read(self, response: ModelResponse, request: ModelRequest, offer: Offer, shown: str) -> Reply:
        """The reply as the engine reads it: calls written as text recovered; on the final call, a text that is no
        answer (a pseudo call, a tool error, the tools echoed) cut to the words before it (as they were ``shown``,
        so the answer is what was streamed), logged."""
        reply = read_text_calls(response, request.tools)
        withdrawn = self._withdrawn(offer)
        if withdrawn and not response.tool_calls:
            judged = judge_final(response.content, withdrawn, structured=bool(request.response_format))
            if judged.reason is not None:
                logger.warning(describe(judged), extra={"iteration": self.iteration})
                same = judged.content and shown.strip() == judged.content
                response.content = shown if same else judged.content
        return reply

    def _offer(self) -> Offer:
        """The tools offered to the next call, or none, with the guard (cap or deadline) that withheld them. When
        the client's ``tool_choice`` requires one of its tools, its tools stay offered to the last call."""
        last_call = sorted(self.client_names) if self.client_required else []
        if self.tools_ended:
            return Offer(last_call)
        available = self.ledger.offerable(self.builtin) + sorted(self.client_names)
        if not available:
            return Offer([])
        if self.iteration >= self.max_iterations:
            return Offer(last_call, StopReason.ITERATION_CAP)
        if self.deadline.remaining() < self.settings.deadline_reserve_seconds + MIN_CALL_SECONDS:
            return Offer(last_call, StopReason.DEADLINE)
        return Offer(available)

    def _tool_choice(self, offered: list[str]) -> str | dict[str, Any] | None:
        """The client's ``tool_choice`` goes with the first call, and with the last call when it requires a client
        tool; any other call chooses freely, so a forced server tool is not forced again every round (seed 001)."""
        choice = self.request.tool_choice
        if not offered or choice is None:
            return None
        last_call = self.client_required and (self.tools_ended or not set(offered) - self.client_names)
        if self.iteration != 1 and not last_call:
            return None
        if isinstance(choice, dict) and choice.get("function", {}).get("name") not in offered:
            return None
        return choice

    def _model_request(self, offered: list[str]) -> ModelRequest:
        r = self.request
        tool_choice = self._tool_choice(offered)
        # A call made while tools are offered must leave the reserve for the answer that follows.
        reserve = self.settings.deadline_reserve_seconds if offered else RENDER_MARGIN_SECONDS
        schemas = self.tools.schemas(n for n in offered if n not in self.client_names)
        schemas += [t for t in r.client_tools if t["function"]["name"] in offered]
        return ModelRequest(
            messages=list(self.messages),
            deadline=self.deadline.minus(reserve),
            tools=schemas or None,
            tool_choice=tool_choice,
            parallel_tool_calls=r.parallel_tool_calls if schemas else None,
            temperature=r.temperature,
            top_p=r.top_p,
            max_tokens=r.max_tokens,
            response_format=r.response_format,
            params=dict(r.model_params),
            allow_trimming=r.allow_trimming,
        )

    def _after_timeout(self, offer: Offer) -> TurnEnd | None:
        """A call that ran out of time. While tools were offered, it ran into the reserve kept for the answer:
        spend the reserve on a tool-less answer. Otherwise the turn ends."""
        if offer.tools and not self.final_call_made:
            self._end_tool_use(DecisionReason.DEADLINE)
            return None
        return self._end_with_fallback(StopReason.DEADLINE)

    def _fitted(self, fit: ContextFit) -> Event | None:
        """Log how the conversation was fitted to the context window; a status event when it was trimmed or models
        were passed over for it."""
        self.record.context = fit
        log_context_decision(fit, self.iteration)
        if fit.action == "fits":
            return None
        return ContextFitted(fit, self.iteration)

    def _make_ids_unique(self, calls: list[ToolCall]) -> None:
        """Some OpenAI-compatible servers reuse ids (``call_0`` in every reply); a conversation with two calls of one
        id is invalid, so a repeated id gets a fresh one."""
        for call in calls:
            if call.id in self.call_ids:
                call.id = f"{call.id}_{uuid.uuid4().hex[:8]}"
            self.call_ids.add(call.id)

    # --- decide ----------------------------------------------------------------------------
    def _decide(self, reply: Reply, plan: BatchPlan) -> Decision:
        counts = plan.counts()
        response = reply.response
        calls = response.tool_calls
        return decide(
            DecisionInput(
                iteration=self.iteration,
                max_iterations=self.max_iterations,
                has_tool_calls=bool(calls),
                valid_tool_calls=sum(1 for c in calls if c.name and c.parsed_arguments() is not None),
                runnable_calls=counts[Disposition.RUN.value],
                duplicate_calls=self.ledger.count_repeats(plan),
                duplicate_repeats_total=self.ledger.duplicate_repeats,
                js_already_succeeded_calls=counts[Disposition.JS_ALREADY_SUCCEEDED.value],
                over_budget_calls=counts[Disposition.OVER_BUDGET.value],
                client_tool_calls=counts[Disposition.CLIENT.value],
                finish_reason=response.finish_reason,
                content_length=len((response.content or "").strip()),
                substantive_answer_chars=self.settings.substantive_answer_chars,
                has_successful_js_execution=JAVASCRIPT_TOOL in self.ledger.succeeded,
                loop_detected=self.ledger.loop is not None,
                loop_kind=self.ledger.loop,
                deadline_near=self.deadline.remaining() < self.settings.deadline_reserve_seconds,
                legacy_syntax=reply.unrunnable_text_call,
                text_tool_calls=len(reply.text_calls.calls) if reply.text_calls else 0,
                text_call_format=reply.text_calls.format if reply.text_calls else None,
                reminders_left=self.settings.legacy_syntax_reminders - self.reminders,
                nudges_left=1 - self.nudges,
                final_call_made=self.final_call_made,
                client_tool_required=self.client_required,
            )
        )

    def _logged(self, decision: Decision, response: ModelResponse) -> Event:
        """Log the decision (the greppable line and its record) and return it as the ``decision`` event."""
        line = decision.log_line()
        calls = tuple((c.name, self.tools.source(c.name)) for c in response.tool_calls)
        event = DecisionMade(decision)
        if any(source for _, source in calls):  # tools run elsewhere (an MCP server): name tool and server
            line += " tools=" + ",".join(f"{name}@{source}" if source else name for name, source in calls)
            event = DecisionMade(decision, calls)
        content = None
        if self.settings.log_content:  # off by default: message text can hold personal data
            content = {
                "content": response.content,
                "tool_calls": [c.to_message() for c in response.tool_calls],
            }
        log_decision(line, event.data, content)
        return event

    # --- act -------------------------------------------------------------------------------
    async def _act(
        self, decision: Decision, response: ModelResponse, plan: BatchPlan, offer: Offer
    ) -> AsyncIterator[Event | TurnEnd]:
        """Carry the decision out; ends with a ``TurnEnd`` when it ends the turn."""
        action = decision.action
        if action is Action.EXECUTE:
            async for event in self._execute(response, plan):
                yield event
            if decision.end_tool_use:
                self.ledger.loop = decision.reason
                self._end_tool_use(decision.reason)
        elif action is Action.CLIENT_TOOLS:
            yield self._hand_to_client(response, plan)
        elif action is Action.NUDGE:
            self.nudges += 1
            self.messages.append({"role": "system", "content": prompts.EMPTY_REPLY_NUDGE})
        elif action is Action.REMIND:
            yield self._remind(response)
        else:
            self.record.skipped((p.call for p in plan.calls), decision.reason)
            if action is Action.FINAL_CALL:
                self._end_tool_use(decision.reason)
            elif action is Action.ANSWER:
                # The answer is what was shown; a call whose text was all held back (it looked like a call as it
                # came) shows its content now.
                held = "" if self.call_shown else response.content
                yield TurnEnd(self._answer_stop(response, offer), held)
            else:  # Action.FALLBACK
                guard = decision.reason.stop_reason
                yield self._end_with_fallback(self.guard or offer.withheld_by or guard or StopReason.ERROR)

    def _answer_stop(self, response: ModelResponse, offer: Offer) -> StopReason:
        """A guard that ended tool use is the stop reason of the answer that followed it."""
        natural = StopReason.LENGTH if response.finish_reason == "length" else StopReason.STOP
        return self.guard or offer.withheld_by or natural

    def _hand_to_client(self, response: ModelResponse, plan: BatchPlan) -> TurnEnd:
        """Calls to client-defined tools end the turn; the server's calls in the same batch are skipped."""
        client = plan.of(Disposition.CLIENT)
        self.record.skipped((p.call for p in plan.calls if p not in client), "client_tools_pending")
        held = "" if self.call_shown else response.content
        return TurnEnd(StopReason.TOOL_CALLS, held, tuple(p.call for p in client))

    def _remind(self, response: ModelResponse) -> Retrying:
        self.reminders += 1
        if response.content:
            self.messages.append({"role": "assistant", "content": response.content})
        self.messages.append({"role": "system", "content": prompts.LEGACY_SYNTAX_REMINDER})
        return Retrying(self.reminders)

    def _end_tool_use(self, reason: DecisionReason) -> None:
        """No more tools this turn: the next call is made without tools, with a note saying why."""
        self.tools_ended = reason
        self.final_call_made = True
        self.guard = self.guard or reason.stop_reason
        client_tools = sorted(self.client_names) if self.client_required else None
        self.messages.append({"role": "system", "content": prompts.final_answer_note(reason, client_tools)})

    # --- execute ---------------------------------------------------------------------------
    async def _execute(self, response: ModelResponse, plan: BatchPlan) -> AsyncIterator[Event]:
        """Answer every call of the batch, running those that may run (in parallel), then update the guards."""
        calls = [c.to_message() for c in response.tool_calls]
        assistant = {"role": "assistant", "content": response.content or "", "tool_calls": calls}
        self.messages.append(assistant)
        yield MessageComplete(response.content or "", tuple(response.tool_calls), iteration=self.iteration)
        runs = plan.of(Disposition.RUN)
        for p in runs:
            server, server_tool = self._server(p.call.name)
            yield ToolCallStart(p.call.id, p.call.name, p.call.arguments, server, server_tool)
        results = await self._run_tools(runs)
        budget_was_open = {n for n in self.builtin if self.ledger.budget_left(n) != 0}
        for p in plan.calls:
            yield self._answer_call(p, results.get(p.call.id))
        self._update_guards(plan, budget_was_open)

    async def _run_tools(self, runs: list[PlannedCall]) -> dict[str, ToolResult]:
        deadline = self.deadline.minus(self.settings.deadline_reserve_seconds)
        results = await asyncio.gather(*(self._run_tool(p.call, deadline) for p in runs))
        return {p.call.id: result for p, result in zip(runs, results, strict=True)}

    async def _run_tool(self, call: ToolCall, deadline: Deadline) -> ToolResult:
        tool = self.tools.get(call.name)
        if tool is None:  # plan_batch only lets offered, registered tools run: a bug if reached
            raise LookupError(f"tool {call.name!r} is not registered")
        try:
            result = await tool.run(call.parsed_arguments() or {}, deadline)
            result.content = cap_tool_message(
                result.content
            )  # whatever the tool, the model gets at most 16 KiB
            return result
        except Exception as exc:  # a tool must never take the turn down with it
            logger.exception("tool failed", extra={"tool": call.name})
            message = f"{type(exc).__name__}: tool failed"
            return ToolResult(content=json.dumps({"error": message}), ok=False, error=message)

    def _answer_call(self, p: PlannedCall, result: ToolResult | None) -> ToolCallResult:
        """One call's tool message (its result, or why it did not run), added to the conversation and recorded."""
        reason: str | None = None
        if result is None:
            status, reason, content = self._answer_without_running(p)
            self.ledger.record(p.call.name, p.key, p.call.id, content, ok=False, executed=False)
        else:
            status, content = ("ok" if result.ok else "error"), result.content
            self.record.tool_result(result)
            if self.ledger.record(p.call.name, p.key, p.call.id, content, result.ok, executed=True):
                self.ledger.loop = self.ledger.loop or DecisionReason.RESULT_LOOP
        self.messages.append(
            {"role": "tool", "tool_call_id": p.call.id, "name": p.call.name, "content": content}
        )
        server, server_tool = self._server(p.call.name)
        duration_ms = None if result is None else result.duration_ms
        self.record.tool_call(p.call, status, content, reason, server, server_tool, duration_ms)
        return ToolCallResult(
            p.call.id, p.call.name, status, content, server, server_tool, duration_ms, reason
        )

    def _answer_without_running(self, p: PlannedCall) -> tuple[str, str | None, str]:
        """``(status, reason, tool message content)`` for a call that is answered but not run."""
        if p.disposition is Disposition.DUPLICATE:
            earlier = self.ledger.earlier_result(p.key)
            return "skipped", "duplicate", duplicate_answer(earlier[1] if earlier else "{}", p.duplicate_of)
        status, reason = NOT_RUN_STATUS[p.disposition]
        message = prompts.not_run(
            p.disposition.value,
            name=p.call.name,
            arguments=p.call.arguments,
            budget=self.ledger.budgets.get(p.call.name),
            available=self.ledger.offerable(self.builtin),
        )
        return status, reason, json.dumps({"error": message})

    def _update_guards(self, plan: BatchPlan, budget_was_open: set[str]) -> None:
        """After a batch: a call over budget, or a budget this batch used up without a success, is a budget stop;
        a detected loop ends tool use."""
        used_up = any(
            self.ledger.budget_left(n) == 0 and n not in self.ledger.succeeded for n in budget_was_open
        )
        if plan.of(Disposition.OVER_BUDGET) or used_up:
            self.guard = self.guard or StopReason.TOOL_BUDGET
        if self.ledger.loop and not self.tools_ended:
            self._end_tool_use(self.ledger.loop)

    # --- bookkeeping -----------------------------------------------------------------------
    def _server(self, name: str) -> tuple[str | None, str | None]:
        """``(server label, name there)`` for a tool that runs on a server (an MCP tool), else ``(None, None)``."""
        origin = self.tools.origin(name)
        return origin.get("server"), origin.get("server_tool")

    def _show(self, text: str) -> list[Delta]:
        """``text`` as ``delta`` events, after a seam when it starts a new model call's text."""
        events = []
        if self.new_segment:
            self.new_segment = False
            seam = _seam("".join(self.shown[-2:]))
            if seam:
                self.shown.append(seam)
                events.append(Delta(seam, self.iteration, seam=True))
        self.shown.append(text)
        self.call_shown = True
        events.append(Delta(text, self.iteration))
        return events

    def _one_call_unless_parallel(self, response: ModelResponse) -> None:
        """``parallel_tool_calls: false``: a reply with several calls keeps its first; the rest are recorded as
        skipped (a model may ignore the parameter, or not take it at all)."""
        if self.request.parallel_tool_calls is not False or len(response.tool_calls) < 2:
            return
        extra = response.tool_calls[1:]
        response.tool_calls = response.tool_calls[:1]
        self.record.skipped(extra, "parallel_tool_calls_false")
        logger.info(
            f"Parallel tool calls decision: iteration={self.iteration} kept=1 dropped={len(extra)} "
            "reason=parallel_tool_calls_false",
            extra={
                "parallel_tool_calls": {
                    "kept": response.tool_calls[0].name,
                    "dropped": [c.name for c in extra],
                }
            },
        )

    def _late(self) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"{self.model.name} did not answer before the deadline", model=self.model.name
        )

    def _end_with_fallback(self, stop: StopReason) -> TurnEnd:
        return TurnEnd(stop, self.record.fallback_text(stop, self.ledger.executions))

    def _summary(self, stop: StopReason, answer: AssistantMessage) -> TurnSummary:
        return self.record.summary(
            stop,
            answer,
            iterations=self.iteration,
            tool_counts=self.ledger.executions,
            model=self.model.name,
        )

    def _log_end(self, stop: StopReason) -> None:
        log_turn_end(
            stop.value,
            stop is StopReason.STOP,
            self.iteration,
            dict(self.ledger.executions),
            self.record.usage.as_dict(),
            self.record.answered_by,
        )


def _seam(before: str) -> str:
    """What separates two model calls' texts: a blank line, less the line breaks ``before`` already ends with."""
    if not before or before.endswith("\n\n"):
        return ""
    return "\n" if before.endswith("\n") else "\n\n"
