"""Powertools Logger and Metrics for the whole package, and secret redaction for every log line.

Defaults keep a missing ``POWERTOOLS_*`` variable from ever breaking a request.

Usage::

    from chatloop.observability import logger, metrics, redact
    logger.info("model fallback: ...", extra={"fallback": {...}})
    redact("Incorrect API key provided: gsk_abc...")   # -> "Incorrect API key provided: [REDACTED]"
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from chatloop.config import from_environment

if TYPE_CHECKING:
    from chatloop.engine.summary import TurnSummary

SERVICE = from_environment("POWERTOOLS_SERVICE_NAME") or "chatloop"
NAMESPACE = from_environment("POWERTOOLS_METRICS_NAMESPACE") or "ChatLoop"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

# Key-shaped strings: OpenAI (sk-...), Groq (gsk_...), AWS access key ids. Known secret values are added
# at run time with register_secret().
_KEY_PATTERNS = re.compile(r"\b(?:sk-[A-Za-z0-9_\-*]{8,}|gsk_[A-Za-z0-9*]{8,}|(?:AKIA|ASIA)[0-9A-Z]{16})")
_SECRETS: list[str] = []
"""Longest first, so a secret that contains another is replaced whole."""


def register_secret(value: str | None) -> None:
    """Never let ``value`` appear in a log line, a response or a tool result (API keys, AWS credentials),
    whatever its length: a 4-character test key echoed by a provider error is still a key."""
    if value and value not in _SECRETS:
        _SECRETS.append(value)
        _SECRETS.sort(key=len, reverse=True)


_KEY_PREFIXES = ("sk-", "gsk_", "AKIA", "ASIA")
"""Every key pattern starts with one of these: text holding none of them (most of it) skips the regex."""


def redact(text: str) -> str:
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, "[REDACTED]")
    if not any(prefix in text for prefix in _KEY_PREFIXES):
        return text
    return _KEY_PATTERNS.sub("[REDACTED]", text)


_KEY_STARTS = ("sk-", "gsk_", "AKIA", "ASIA")
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-*")


class SecretHold:
    """Redaction that holds across a stream of text pieces: a secret split over several deltas (``gsk_ab`` then
    ``cdef…``) is redacted whole, as ``redact`` would redact the concatenation.

    Like the text-call filter holds a tag, it holds back the few characters at the end of what came so far that
    could begin a secret (a prefix of a registered secret, or a word that starts like a key); everything before them
    leaves at once, redacted. Text that cannot begin a secret is never delayed.

    Usage::

        hold = SecretHold()
        for piece in pieces:
            send(hold.feed(piece))
        send(hold.flush())
    """

    def __init__(self) -> None:
        self.pending = ""

    def feed(self, text: str) -> str:
        self.pending += text
        cut = _whole_secrets_before(self.pending, len(self.pending) - self._held(self.pending))
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return redact(out) if out else ""

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return redact(out) if out else ""

    @staticmethod
    def _held(text: str) -> int:
        """How many characters at the end of ``text`` could begin a secret (linear in the trailing word)."""
        held = 0
        for secret in _SECRETS:  # the longest end of text that a secret starts with
            for k in range(min(len(secret) - 1, len(text)), held, -1):
                if text.endswith(secret[:k]):
                    held = k
                    break
        start = len(text)
        while start > 0 and text[start - 1] in _KEY_CHARS:
            start -= 1
        tail = text[start:]
        for i in range(len(tail)):  # the earliest start in the trailing word of something shaped like a key
            rest = tail[i:]
            if any(rest.startswith(p) or p.startswith(rest) for p in _KEY_STARTS):
                return max(held, len(rest))
        return held


def _whole_secrets_before(text: str, cut: int) -> int:
    """``cut``, moved back to the start of any registered secret that would straddle it."""
    for secret in _SECRETS:
        at = text.find(secret, max(0, cut - len(secret) + 1))
        if 0 <= at < cut:
            cut = at
    return cut


def redact_value(value: object) -> object:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict | list):
        dumped = json.dumps(value, default=str)
        cleaned = redact(dumped)
        return value if cleaned == dumped else json.loads(cleaned)
    return value


class _RedactingFilter(logging.Filter):
    _STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        for key, value in list(vars(record).items()):
            if key not in self._STANDARD and isinstance(value, str | dict | list):
                setattr(record, key, redact_value(value))
        return True


logger.addFilter(_RedactingFilter())
for _secret_var in ("GROQ_API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
    register_secret(from_environment(_secret_var))


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


def metric_safe(name: str) -> str:
    """A model or reason as a metric name's suffix: ``groq:openai/gpt-oss-120b`` -> ``groq_openai_gpt-oss-120b``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:200]


MCP_METRIC_SERVERS: set[str] = set()
"""Operator-configured MCP server labels, each its own ``server`` dimension; a client-supplied server counts as
``client`` (a request must not be able to create metrics)."""


def record_server_metrics(summary: TurnSummary) -> None:
    """``MCPToolCalls`` and ``MCPToolErrors`` per server (dimensions ``service`` and ``server``), one EMF record each,
    from the turn's tool calls that ran on a server."""
    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for call in summary.tool_calls:
        if not call.server or call.duration_ms is None:  # only calls that ran
            continue
        dimension = call.server if call.server in MCP_METRIC_SERVERS else "client"
        calls[dimension] += 1
        errors[dimension] += call.status == "error"
    for server, count in calls.items():
        for name, value in (("MCPToolCalls", count), ("MCPToolErrors", errors[server])):
            with single_metric(
                name=name,
                unit=MetricUnit.Count,
                value=value,
                namespace=NAMESPACE,
                default_dimensions={"service": SERVICE},
            ) as metric:
                metric.add_dimension(name="server", value=server)


"""The tool whose runs are counted as sandbox metrics (SandboxErrors, SandboxMilliseconds)."""


def record_turn_metrics(summary: TurnSummary, in_lambda: bool) -> None:
    """CloudWatch metrics (EMF, flushed by the handler's ``log_metrics``) from one turn's summary: iterations, tool
    executions, skipped tool calls, fallbacks, the stop reason, text tool-call recoveries and sandbox milliseconds.
    Outside Lambda nothing is recorded (nothing would flush it)."""
    if not in_lambda:
        return
    metrics.add_metric(name="Iterations", unit=MetricUnit.Count, value=summary.iterations)
    metrics.add_metric(name="ToolExecutions", unit=MetricUnit.Count, value=sum(summary.tool_counts.values()))
    skipped = [c.reason or "unknown" for c in summary.tool_calls if c.status == "skipped"]
    metrics.add_metric(name="ToolCallsSkipped", unit=MetricUnit.Count, value=len(skipped))
    for reason in set(skipped):  # why tool calls were not run, by reason (the dashboard's breakdown)
        metrics.add_metric(
            name=f"ToolCallsSkipped_{reason}", unit=MetricUnit.Count, value=skipped.count(reason)
        )
    metrics.add_metric(name="ModelFallbacks", unit=MetricUnit.Count, value=len(summary.fallbacks))
    for fallback in summary.fallbacks:  # which models fail over, and why
        metrics.add_metric(
            name=f"FallbackFrom_{metric_safe(fallback.from_model)}", unit=MetricUnit.Count, value=1
        )
        metrics.add_metric(
            name=f"FallbackReason_{metric_safe(fallback.reason)}", unit=MetricUnit.Count, value=1
        )
    from chatloop.tools.javascript.tool import (
        TOOL_NAME as SANDBOX,  # here: the tool's module imports this one
    )

    runs = [c for c in summary.tool_calls if c.name == SANDBOX and c.duration_ms is not None]
    sandbox_errors = sum(1 for c in summary.tool_calls if c.name == SANDBOX and c.status == "error")
    metrics.add_metric(name="SandboxErrors", unit=MetricUnit.Count, value=sandbox_errors)
    metrics.add_metric(name=f"Stop_{summary.stop_reason.value}", unit=MetricUnit.Count, value=1)
    # Which models need text tool-call recovery, by format.
    for text_format, count in summary.text_call_recoveries.items():
        metrics.add_metric(name=f"TextToolCalls_{text_format}", unit=MetricUnit.Count, value=count)
    # Each run's milliseconds as its tool_call_result event reports them (to 0.1 ms), summed.
    sandbox_ms = sum(round(c.duration_ms or 0.0, 1) for c in runs)
    if sandbox_ms:
        metrics.add_metric(name="SandboxMilliseconds", unit=MetricUnit.Milliseconds, value=sandbox_ms)
    record_server_metrics(summary)
