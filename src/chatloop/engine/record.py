"""What a turn did: the tool-call records, usage, answering model, fallbacks and text-call recoveries that its
``TurnSummary`` reports.

The loop decides and acts; this module only remembers.

Usage::

    record = TurnRecord()
    record.tool_call(call, "ok", '{"result": 2}')
    record.summary(StopReason.STOP, answer, iterations=2, tool_counts={"execute_javascript": 1}, model="demo:offline")
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from chatloop.engine import prompts
from chatloop.engine.events import FallbackMade
from chatloop.engine.loglines import log_fallback
from chatloop.engine.summary import AssistantMessage, Fallback, StopReason, ToolCallRecord, TurnSummary
from chatloop.providers.base import ContextFit, ModelFallback, ModelResponse, ToolCall, Usage
from chatloop.providers.textcall_formats import TextCalls
from chatloop.tools.base import ToolResult


@dataclass
class TurnRecord:
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    """One entry per tool call the model made."""
    usage: Usage = field(default_factory=Usage)
    answered_by: str | None = None
    """The ``provider:model`` of the latest response."""
    last_error: str | None = None
    last_result: str | None = None
    context: ContextFit | None = None
    """How the latest model call's conversation was fitted to its context window."""
    fallbacks: list[Fallback] = field(default_factory=list)
    text_call_recoveries: Counter[str] = field(default_factory=Counter)

    def response(self, response: ModelResponse) -> None:
        self.answered_by = response.model
        self.usage.add(response.usage)

    def tool_result(self, result: ToolResult) -> None:
        """Keep the latest result and error: the fallback text reports them."""
        if result.ok:
            self.last_result = result.content
        else:
            self.last_error = result.error

    def tool_call(
        self,
        call: ToolCall,
        status: str,
        result: str | None,
        reason: str | None = None,
        server: str | None = None,
        server_tool: str | None = None,
        duration_ms: float | None = None,
    ) -> ToolCallRecord:
        entry = ToolCallRecord(
            call.id,
            call.name,
            call.arguments,
            status,
            result,
            reason=reason,
            server=server,
            server_tool=server_tool,
            duration_ms=duration_ms,
        )
        self.tool_calls.append(entry)
        return entry

    def skipped(self, calls: Iterable[ToolCall], reason: str) -> None:
        for call in calls:
            self.tool_call(call, "skipped", None, reason)

    def fallback(self, item: ModelFallback) -> FallbackMade:
        """``model_fallback``, logged as it is made (every switch is a log line and an event)."""
        log_fallback(item.from_model, item.to_model, item.reason, item.retry_after, item.discard_partial)
        self.fallbacks.append(Fallback(item.from_model, item.reason))
        return FallbackMade.of(item)

    def text_calls(self, found: TextCalls) -> None:
        self.text_call_recoveries[found.format] += len(found.calls)

    def fallback_text(self, stop: StopReason, tool_counts: Mapping[str, int]) -> str:
        """The user-facing answer when no model answer could be had: what was tried and what to do next."""
        return prompts.fallback_text(stop, dict(tool_counts), self.last_error, self.last_result)

    def summary(
        self,
        stop: StopReason,
        answer: AssistantMessage,
        *,
        iterations: int,
        tool_counts: Mapping[str, int],
        model: str,
    ) -> TurnSummary:
        """The turn's summary (its ``done`` event)."""
        return TurnSummary(
            message=answer,
            stop_reason=stop,
            iterations=iterations,
            tool_calls=tuple(self.tool_calls),
            tool_counts=dict(tool_counts),
            usage=Usage(self.usage.prompt_tokens, self.usage.completion_tokens, self.usage.total_tokens),
            model=self.answered_by or model,
            context=self.context,
            fallbacks=tuple(self.fallbacks),
            text_call_recoveries=dict(self.text_call_recoveries),
        )
