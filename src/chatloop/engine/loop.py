"""``run_turn``: one user turn of the tool loop, as a stream of events.

Each iteration reads as its phases: **ask** the model (streaming its text), **decide** what its response
calls for (a pure ``decide()``, logged), then **act**: answer, execute the tool calls and go round again,
or end tool use so the next call answers. Always ends with exactly one ``done`` event, whatever failed.

Text reaches the client as the model writes it (after the text-call filter's hold), and all of it is the turn's
answer: text a model writes before calling a tool ("Let me compute that.") stays, a ``seam`` delta (a blank line)
separates one model call's text from the next, and a fallback text is shown as deltas too. A call made again for
the reply it began (a reminder, a nudge, the forced last call, the next model after a cut) continues it: what it
repeats is not shown again (``engine.retold``). So the concatenated ``delta`` events always equal the content of the
answer in ``done``, whatever happened in between, and each sentence is in it once.

Every phase is an async stream of ``Event``s that ends with its result, the way a ``ChatModel`` stream
ends with its ``ModelResponse``: the asking phase with the response, an acting phase with a ``TurnEnd``
when the turn is over. No phase hands results back through shared lists. What a call is asked with lives in
``ask``, the running of tool calls in ``execute``, the turn's state in ``state``.

Usage::

    async for event in run_turn(TurnRequest(messages=msgs), model, registry, Deadline.after(28)):
        print(event.name, event.data)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from chatloop.deadline import Deadline, until
from chatloop.engine import approvals, prompts
from chatloop.engine.ask import (
    MIN_CALL_SECONDS,
    Offer,
    model_request,
    next_offer,
    read_reply,
    text_filter,
)
from chatloop.engine.deciding import decision_of, logged, make_ids_unique, one_call_unless_parallel
from chatloop.engine.events import (
    ApprovalRequested,
    ContextFitted,
    Delta,
    Done,
    Event,
    LlmResponse,
    MessageComplete,
    Retrying,
    Started,
    TextCallsRecovered,
    ToolsUnavailable,
    TurnError,
)
from chatloop.engine.execute import ToolExecutor
from chatloop.engine.guards import BatchPlan, Disposition
from chatloop.engine.limits import EngineLimits
from chatloop.engine.loglines import log_context_decision, log_turn_end
from chatloop.engine.policy import Action, Decision
from chatloop.engine.request import TurnRequest
from chatloop.engine.retold import Retold
from chatloop.engine.state import TurnSetup
from chatloop.engine.summary import AssistantMessage, DecisionReason, StopReason
from chatloop.engine.textcalls import Reply
from chatloop.observability import logger
from chatloop.providers.base import (
    ChatModel,
    ContextFit,
    ModelFallback,
    ModelResponse,
    TextDelta,
    ToolCall,
)
from chatloop.providers.failures import AllModelsFailed, DeadlineExceeded, ModelError, Transient
from chatloop.tools.base import ToolRegistry

BUDGET_KINDS = frozenset({"budget", "budget_unavailable"})
"""``ModelError.kind`` of a call the caller's budget refused (``providers/budgeted.py``): the turn ends ``budget``."""


@dataclass(frozen=True)
class TurnEnd:
    """The last item of a phase that ends the turn: why it stopped, text still to show (a fallback text, or an
    answer held back whole) and the client tools' calls it answers with (the answer's content is what was shown)."""

    stop: StopReason
    show: str = ""
    client_calls: tuple[ToolCall, ...] | None = None


def run_turn(
    request: TurnRequest,
    model: ChatModel,
    tools: ToolRegistry,
    deadline: Deadline,
    limits: EngineLimits | None = None,
) -> AsyncIterator[Event]:
    """Run one user turn. See the module docstring."""
    return _Turn(TurnSetup.of(request, model, tools, deadline, limits or EngineLimits())).run()


class _Turn:
    def __init__(self, setup: TurnSetup):
        self.setup = setup
        self.state = setup.first_state()
        self.executor = ToolExecutor(
            setup.tools, self.state, setup.deadline, setup.limits.deadline_reserve_seconds, setup.builtin
        )

    # --- the loop --------------------------------------------------------------------------
    async def run(self) -> AsyncIterator[Event]:
        setup, state = self.setup, self.state
        yield Started(setup.model.name, tuple(setup.builtin))
        if setup.tools.unavailable and setup.request.tool_names != []:  # e.g. an MCP server that is down
            yield ToolsUnavailable(dict(setup.tools.unavailable))
        end: TurnEnd | None = None
        try:
            if setup.request.approvals:  # a person's answers to earlier approval requests go first
                async for event in self._answered_approvals():
                    yield event
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
            if exc.kind in BUDGET_KINDS:  # the caller's budget refused the call: no model was called
                stop = StopReason.BUDGET
            end = self._end_with_fallback(stop)
            yield TurnError.of(exc)
        except Exception:
            logger.exception("turn failed")
            yield TurnError("internal_error", "internal error while running the turn")
        end = end or self._end_with_fallback(StopReason.ERROR)
        if end.show:
            # A fallback text, or an answer held back whole, is set off from any text shown before it.
            state.shown.new_segment = True
            for piece in self._show(end.show):
                yield piece
        answer = AssistantMessage(state.shown.text, end.client_calls)
        if answer.content or answer.tool_calls:
            yield MessageComplete(answer.content, answer.tool_calls)
        summary = state.record.summary(
            end.stop,
            answer,
            iterations=state.iteration,
            tool_counts=state.ledger.executions,
            model=setup.model.name,
        )
        yield Done(summary)
        self._log_end(end.stop)

    async def _iteration(self) -> AsyncIterator[Event | TurnEnd]:
        """One model call and what follows it: ask, decide, act."""
        if self.setup.deadline.remaining() < MIN_CALL_SECONDS:
            yield self._end_with_fallback(StopReason.DEADLINE)
            return
        self.state.iteration += 1
        offer = next_offer(self.setup, self.state)
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
        make_ids_unique(self.state, response.tool_calls)
        one_call_unless_parallel(self.setup, self.state, response)
        plan = self.state.ledger.plan_batch(
            response.tool_calls,
            offered=set(offer.tools),
            client_tools=set(self.setup.client_names),
            approval=self.setup.request.approval_required,
        )
        decision = decision_of(self.setup, self.state, reply, plan)
        yield logged(self.setup, decision, response)
        async for step in self._act(decision, response, plan, offer):
            yield step

    # --- ask -------------------------------------------------------------------------------
    async def _ask(self, offer: Offer) -> AsyncIterator[Event | Reply]:
        """One model call: its text as ``delta`` events (never a tool call written as text), fallbacks as they
        happen, then its ``Reply``. When the call runs out of time: an ``error`` event and no reply."""
        setup, state = self.setup, self.state
        request = model_request(setup, state, offer.tools)
        visible = text_filter(setup, state, request, offer)
        retold = Retold(state.shown.said())  # a call made again for the same reply continues it
        streamed = False
        state.shown.start_call()
        response: ModelResponse | None = None
        try:
            # The adapters bound their own calls; this bounds any ChatModel, so no model outlives the deadline.
            async for item in until(request.deadline, setup.model.stream(request)):
                if isinstance(item, TextDelta):
                    text = state.shown.unsaid(retold, visible.feed(item.text))
                    if text:
                        streamed = True
                        for piece in self._show(text):
                            yield piece
                elif isinstance(item, ModelFallback):
                    yield state.record.fallback(item)
                    # The text shown stays; the next model's text continues it, or follows a seam.
                    if item.discard_partial:
                        visible = text_filter(setup, state, request, offer)
                        retold = Retold(state.shown.said())
                        state.shown.start_call()
                elif isinstance(item, ContextFit):
                    event = self._fitted(item)
                    if event is not None:
                        yield event
                else:
                    response = item
        except (DeadlineExceeded, TimeoutError) as exc:
            late = exc if isinstance(exc, DeadlineExceeded) else self._late()
            # The text this call already showed stays part of the answer (the client has it); the next call
            # continues it, or follows a seam.
            yield TurnError.of(late, partial_kept=streamed)
            return
        if response is None:
            raise Transient("the model stream ended without a response", model=setup.model.name)
        reply = read_reply(setup, state, response, request, offer, visible.released)
        tail = state.shown.unsaid(retold, visible.finish(response.content)) + state.shown.unsaid(retold, None)
        if tail:
            for piece in self._show(tail):
                yield piece
        state.record.response(response)
        yield LlmResponse.of(response, state.iteration)
        if reply.text_calls:
            state.record.text_calls(reply.text_calls)
            yield TextCallsRecovered.of(reply.text_calls, state.iteration)
        yield reply

    def _after_timeout(self, offer: Offer) -> TurnEnd | None:
        """A call that ran out of time. While tools were offered, it ran into the reserve kept for the answer:
        spend the reserve on a tool-less answer. Otherwise the turn ends."""
        if offer.tools and not self.state.tools_ended:
            self.state.end_tool_use(DecisionReason.DEADLINE)
            return None
        return self._end_with_fallback(StopReason.DEADLINE)

    def _fitted(self, fit: ContextFit) -> ContextFitted | None:
        """Log how the conversation was fitted to the context window; a status event when it was trimmed or models
        were passed over for it."""
        self.state.record.context = fit
        log_context_decision(fit, self.state.iteration)
        if fit.action == "fits":
            return None
        return ContextFitted(fit, self.state.iteration)

    # --- act -------------------------------------------------------------------------------
    async def _act(
        self, decision: Decision, response: ModelResponse, plan: BatchPlan, offer: Offer
    ) -> AsyncIterator[Event | TurnEnd]:
        """Carry the decision out; ends with a ``TurnEnd`` when it ends the turn."""
        state = self.state
        action = decision.action
        if action is Action.EXECUTE:
            # A decision that ends tool use (a second repeat) ends it where a loop in the batch's results would:
            # after the batch is answered, once.
            ends = decision.reason if decision.end_tool_use else None
            state.shown.new_reply()
            async for event in self.executor.execute(response, plan, ends):
                yield event
        elif action is Action.CLIENT_TOOLS:
            yield self._hand_to_client(response, plan)
        elif action is Action.ASK_APPROVAL:
            for item in self._ask_approval(response, plan):
                yield item
        elif action is Action.NUDGE:
            state.nudges += 1
            state.messages.append({"role": "system", "content": prompts.EMPTY_REPLY_NUDGE})
        elif action is Action.REMIND:
            yield self._remind(response, decision.reason)
        else:
            state.record.skipped((p.call for p in plan.calls), decision.reason)
            if action is Action.FINAL_CALL:
                state.end_tool_use(decision.reason)
            elif action is Action.ANSWER:
                # The answer is what was shown; a call whose text was all held back (it looked like a call as it
                # came) shows its content now.
                natural = StopReason.LENGTH if response.finish_reason == "length" else StopReason.STOP
                held = "" if state.shown.call_shown else response.content
                yield TurnEnd(state.stop_reason(offer.withheld_by, natural), held)
            else:  # Action.FALLBACK
                guard = decision.reason.stop_reason or StopReason.ERROR
                yield self._end_with_fallback(state.stop_reason(offer.withheld_by, guard))

    def _hand_to_client(self, response: ModelResponse, plan: BatchPlan) -> TurnEnd:
        """Calls to client-defined tools end the turn; the server's calls in the same batch are skipped."""
        client = plan.of(Disposition.CLIENT)
        self.state.record.skipped((p.call for p in plan.calls if p not in client), "client_tools_pending")
        held = "" if self.state.shown.call_shown else response.content
        return TurnEnd(StopReason.TOOL_CALLS, held, tuple(p.call for p in client))

    def _ask_approval(self, response: ModelResponse, plan: BatchPlan) -> list[ApprovalRequested | TurnEnd]:
        """Calls that need a person's approval end the turn, one ``approval_request`` each (``engine.approvals``);
        nothing else of the batch runs (the model may call it again once the answers are in)."""
        asked = approvals.requests(plan, self.setup.tools, self.setup.request.approval_id, self.state.record)
        held = "" if self.state.shown.call_shown else response.content
        return [*asked, TurnEnd(StopReason.APPROVAL_REQUIRED, held)]

    async def _answered_approvals(self) -> AsyncIterator[Event]:
        """The person's answers: approved calls run as any call does, denied ones are told so, one decision."""
        setup, state = self.setup, self.state
        offered = set(state.ledger.offerable(setup.builtin))
        response, plan = approvals.answered_batch(state.ledger, setup.request.approvals, offered)
        yield logged(
            self.setup, approvals.answered_decision(state.iteration, setup.max_iterations, plan), response
        )
        async for event in self.executor.execute(response, plan):
            yield event

    def _remind(self, response: ModelResponse, reason: DecisionReason) -> Retrying:
        """Ask again, saying what was wrong. The reply so far goes back as the assistant's words, so the model can
        go on from it (and what it says again is not shown again: ``engine.retold``)."""
        state = self.state
        state.reminders += 1
        if response.content:
            state.messages.append({"role": "assistant", "content": response.content})
        if reason is DecisionReason.NOT_AN_ANSWER:
            state.messages.append({"role": "system", "content": prompts.NOT_AN_ANSWER_REMINDER})
            return Retrying(state.reminders, "not_an_answer_reminder")
        state.messages.append({"role": "system", "content": prompts.LEGACY_SYNTAX_REMINDER})
        return Retrying(state.reminders)

    # --- bookkeeping -----------------------------------------------------------------------
    def _show(self, text: str) -> list[Delta]:
        return self.state.shown.show(text, self.state.iteration)

    def _late(self) -> DeadlineExceeded:
        name = self.setup.model.name
        return DeadlineExceeded(f"{name} did not answer before the deadline", model=name)

    def _end_with_fallback(self, stop: StopReason) -> TurnEnd:
        return TurnEnd(stop, self.state.record.fallback_text(stop, self.state.ledger.executions))

    def _log_end(self, stop: StopReason) -> None:
        record = self.state.record
        log_turn_end(
            stop.value,
            stop is StopReason.STOP,
            self.state.iteration,
            dict(self.state.ledger.executions),
            record.usage.as_dict(),
            record.answered_by,
        )
