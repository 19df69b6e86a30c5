"""``x_chatloop``: what a turn did beyond OpenAI's fields, on a ``chat.completion`` and a ``response`` alike (the
stop reason, iterations, the tool records, the context fitted, the request id).

Usage::

    completion["x_chatloop"] = extension(summary)
"""

from __future__ import annotations

from chatloop.engine import TurnSummary


def extension(summary: TurnSummary) -> dict[str, object]:
    """``x_chatloop``: what the turn did beyond OpenAI's fields (the stop reason, the tool records ...)."""
    return {
        "stop_reason": summary.stop_reason.value,
        "iterations": summary.iterations,
        "tool_calls": [c.wire() for c in summary.tool_calls],
        "tool_counts": dict(summary.tool_counts),
        "context": summary.context.summary() if summary.context else None,
        "request_id": summary.request_id,
    }
