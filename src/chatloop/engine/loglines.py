"""The engine's log lines, one per decision: a tool decision per model response, a context decision before each model
call, a fallback, and the turn's end. They are part of the contract: ``make logs | grep "Tool execution decision"``
and CloudWatch Logs Insights queries on their fields read them.

Usage::

    log_decision("Tool execution decision: iteration=1 ...", {"iteration": 1, ...})
    log_turn_end("end_turn", True, 2, {"execute_javascript": 1}, usage, "groq:...")
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Protocol

from chatloop.observability import logger


def log_decision(
    line: str, fields: Mapping[str, object], content: Mapping[str, object] | None = None
) -> None:
    """One record per model response: ``Tool execution decision: ...`` as the message (for grep), the same fields
    as a ``decision`` object (for CloudWatch Logs Insights), and the content only when LOG_CONTENT is on."""
    extra: dict[str, object] = {"decision": fields}
    if content is not None:
        extra["content"] = content
    logger.info(line, extra=extra)


class FitDecision(Protocol):
    """What ``log_context_decision`` reads of a context fit (the providers' ``ContextFit``)."""

    @property
    def action(self) -> str: ...
    @property
    def model(self) -> str | None: ...
    @property
    def estimated_tokens(self) -> int: ...
    @property
    def window(self) -> int | None: ...
    @property
    def trimmed_messages(self) -> int: ...
    @property
    def shortened_tool_results(self) -> int: ...
    @property
    def skipped(self) -> list[str]: ...
    def summary(self) -> Mapping[str, object]: ...


def log_context_decision(fit: FitDecision, iteration: int) -> None:
    """``Context decision: ...`` before each model call, greppable like the tool decisions: how the conversation
    was fitted to the model's window (``fits``, ``skip`` smaller models, or ``trim`` old turns)."""
    line = (
        f"Context decision: iteration={iteration} action={fit.action} model={fit.model} "
        f"estimatedTokens={fit.estimated_tokens} window={fit.window} trimmedMessages={fit.trimmed_messages} "
        f"shortenedToolResults={fit.shortened_tool_results} skipped={','.join(fit.skipped) or '-'}"
    )
    logger.info(line, extra={"context": {"iteration": iteration, **fit.summary(), "model": fit.model}})


def log_turn_end(
    stop_reason: str,
    converged: bool,
    iterations: int,
    tool_counts: dict[str, int],
    usage: dict[str, int],
    model: str | None,
) -> None:
    """One line per turn: ``converged at 2 iterations tool_counts={...}`` or ``<stop_reason> at N iterations ...``."""
    counts = json.dumps(tool_counts, separators=(",", ":"))
    head = "converged" if converged else stop_reason
    logger.info(
        f"{head} at {iterations} iterations tool_counts={counts}",
        extra={
            "turn": {
                "stop_reason": stop_reason,
                "iterations": iterations,
                "tool_counts": tool_counts,
                "usage": usage,
                "model": model,
            }
        },
    )


def log_fallback(
    from_model: str, to_model: str | None, reason: str, retry_after: float | None, discard_partial: bool
) -> None:
    logger.warning(
        f"model fallback: from={from_model} to={to_model} reason={reason} retry_after={retry_after}",
        extra={
            "fallback": {
                "from": from_model,
                "to": to_model,
                "reason": reason,
                "retry_after": retry_after,
                "discard_partial": discard_partial,
            }
        },
    )
