"""The CloudWatch metrics of one turn (EMF, flushed by the handler's ``log_metrics``), from its summary: beside
``serve.py``, their one caller.

Usage::

    record_turn_metrics(summary, in_lambda=ctx.in_lambda)
"""

from __future__ import annotations

from collections import Counter

from aws_lambda_powertools.metrics import MetricUnit, single_metric

from chatloop.engine.summary import TurnSummary
from chatloop.observability import MCP_METRIC_SERVERS, NAMESPACE, SERVICE, metric_safe, metrics
from chatloop.tools.javascript.tool import TOOL_NAME as SANDBOX


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
