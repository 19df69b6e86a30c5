"""Per-turn guards: call keys, duplicate and result-loop detection, per-tool budgets.

A ``ToolLedger`` lives for one user turn. ``plan_batch`` sorts a batch of tool calls into what may
run and what is answered without running, so the policy sees counts and the loop sees dispositions.

Usage::

    ledger = ToolLedger(caps={"execute_javascript": 3}, answered_once=frozenset({"execute_javascript"}))
    plan = ledger.plan_batch(calls, offered={"execute_javascript"}, client_tools=set())
    plan.counts()["run"]          # calls that will execute
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from chatloop.engine.summary import DecisionReason
from chatloop.providers.base import ToolCall


def call_key(name: str, arguments: str) -> str:
    """Tool name plus arguments re-serialised with sorted keys and compact separators.

    ``{"a": 1, "b": 2}`` and ``{"b":2,"a":1}`` give the same key; text that is not JSON is
    compared stripped of surrounding white space.
    """
    try:
        canonical = json.dumps(
            json.loads(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    except (TypeError, ValueError):
        canonical = (arguments or "").strip()
    return f"{name}:{canonical}"


def duplicate_answer(earlier_content: str, duplicate_of: str | None) -> str:
    """A repeated call's tool message: the earlier result, marked as a duplicate that was not run again."""
    try:
        parsed = json.loads(earlier_content)
    except ValueError:
        parsed = None
    body = (
        {**parsed, "duplicate_of": duplicate_of}
        if isinstance(parsed, dict)
        else {"result": earlier_content, "duplicate_of": duplicate_of}
    )
    body["note"] = "identical to an earlier call; not run again"
    return json.dumps(body)


def result_hash(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


class Disposition(StrEnum):
    RUN = "run"
    DUPLICATE = "duplicate"
    """Same key as an earlier call of this turn (or of this batch): answered with that result."""
    INVALID_ARGUMENTS = "invalid_arguments"
    NOT_OFFERED = "not_offered"
    JS_ALREADY_SUCCEEDED = "js_already_succeeded"
    OVER_BUDGET = "over_budget"
    CLIENT = "client"
    """A client-defined tool (/v1): the client runs it."""
    APPROVAL = "approval"
    """A tool that needs a person's approval first: the turn ends asking for it."""
    DENIED = "denied"
    """A call a person did not approve: answered with the denial (``PlannedCall.note``: their reason)."""


@dataclass
class PlannedCall:
    call: ToolCall
    disposition: Disposition
    key: str
    duplicate_of: str | None = None
    note: str | None = None
    """A denied call's reason, as the person gave it."""


@dataclass
class BatchPlan:
    calls: list[PlannedCall]

    def counts(self) -> Counter[str]:
        return Counter(p.disposition.value for p in self.calls)

    def of(self, disposition: Disposition) -> list[PlannedCall]:
        return [p for p in self.calls if p.disposition is disposition]


@dataclass
class ToolLedger:
    caps: Mapping[str, int] = field(default_factory=dict)
    """Runs per tool per turn (TOOL_BUDGETS, a tool's own default): a tool at its cap is not run again."""
    max_runs: int | None = None
    """A cap on all tool runs of the turn together (the Responses API's ``max_tool_calls``), beside the per-tool caps."""
    answered_once: frozenset[str] = frozenset()
    """Tools whose first success answers the question (``Tool.answered_once_succeeded``): withdrawn after it."""
    executions: Counter[str] = field(default_factory=Counter)
    succeeded: set[str] = field(default_factory=set)
    duplicate_repeats: int = 0
    loop: DecisionReason | None = None
    """``duplicate_loop`` or ``result_loop`` once a loop is detected: tool use ends for the turn."""
    _results: dict[str, tuple[str, str]] = field(default_factory=dict)
    _result_hashes: set[tuple[str, str]] = field(default_factory=set)

    # --- what is offered -------------------------------------------------------------------
    def runs_left_of(self, name: str) -> int | None:
        """Runs ``name`` has left this turn (its own cap and the turn's, whichever is less); None: no limit."""
        cap = self.caps.get(name)
        left = None if cap is None else max(0, cap - self.executions[name])
        runs_left = self.runs_left()
        if runs_left is None:
            return left
        return runs_left if left is None else min(left, runs_left)

    def runs_left(self) -> int | None:
        if self.max_runs is None:
            return None
        return max(0, self.max_runs - sum(self.executions.values()))

    def withdrawn(self, name: str) -> DecisionReason | None:
        """Why ``name`` is no longer offered this turn, or None."""
        if self.loop:
            return self.loop
        if name in self.answered_once and name in self.succeeded:
            return DecisionReason.JS_ALREADY_SUCCEEDED
        if self.runs_left_of(name) == 0:
            return DecisionReason.BUDGET_EXHAUSTED
        return None

    @property
    def answered(self) -> bool:
        """Whether a tool whose success answers the question has succeeded."""
        return not self.answered_once.isdisjoint(self.succeeded)

    def offerable(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if self.withdrawn(n) is None]

    # --- one batch -------------------------------------------------------------------------
    def plan_batch(
        self,
        calls: list[ToolCall],
        offered: set[str],
        client_tools: set[str],
        approval: frozenset[str] = frozenset(),
    ) -> BatchPlan:
        """Each call's disposition; ``approval``: tools whose calls, when they could run, wait for a person."""
        planned: list[PlannedCall] = []
        seen_in_batch: dict[str, str] = {}
        runs: Counter[str] = Counter()
        for call in calls:
            key = call_key(call.name, call.arguments)
            earlier = self._results.get(key)
            if earlier is not None or key in seen_in_batch:
                of = earlier[0] if earlier is not None else seen_in_batch[key]
                planned.append(PlannedCall(call, Disposition.DUPLICATE, key, duplicate_of=of))
                continue
            seen_in_batch[key] = call.id
            if call.name in client_tools:
                disposition = Disposition.CLIENT
            elif call.parsed_arguments() is None:
                disposition = Disposition.INVALID_ARGUMENTS
            elif call.name not in offered:
                why = self.withdrawn(call.name)
                disposition = (
                    Disposition.JS_ALREADY_SUCCEEDED
                    if why is DecisionReason.JS_ALREADY_SUCCEEDED
                    else Disposition.OVER_BUDGET
                    if why is DecisionReason.BUDGET_EXHAUSTED
                    else Disposition.NOT_OFFERED
                )
            else:
                left = self.runs_left_of(call.name)
                total_left = self.runs_left()
                if (left is not None and runs[call.name] >= left) or (
                    total_left is not None and sum(runs.values()) >= total_left
                ):
                    disposition = Disposition.OVER_BUDGET
                elif call.name in approval:
                    disposition = Disposition.APPROVAL
                else:
                    disposition = Disposition.RUN
                    runs[call.name] += 1
            planned.append(PlannedCall(call, disposition, key))
        return BatchPlan(planned)

    def count_repeats(self, plan: BatchPlan) -> int:
        repeats = len(plan.of(Disposition.DUPLICATE))
        self.duplicate_repeats += repeats
        return repeats

    def earlier_result(self, key: str) -> tuple[str, str] | None:
        return self._results.get(key)

    def record(self, name: str, key: str, call_id: str, content: str, ok: bool, executed: bool) -> bool:
        """Remember a call's answer (the first one for a key: a repeat always points at the original).
        Returns True when an executed tool repeated an earlier result."""
        self._results.setdefault(key, (call_id, content))
        if not executed:
            return False
        self.executions[name] += 1
        if ok:
            self.succeeded.add(name)
        fingerprint = (name, result_hash(content))
        if fingerprint in self._result_hashes:
            return True
        self._result_hashes.add(fingerprint)
        return False
