"""``TurnScope``: what a turn's trace knows of its request (the engine knows no HTTP).

Its own module, imported with the first traced turn: ``chatloop.tracing`` is imported by every cold start, and a
dataclass costs ~0.7 ms to define.

Usage::

    TurnScope("req-1", headers={"traceparent": "00-..."}, conversation_id="conv_1", flush=True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from chatloop.deadline import Deadline


@dataclass(frozen=True)
class TurnScope:
    """What a turn's trace knows of its request (the engine knows no HTTP)."""

    request_id: str
    headers: Mapping[str, str] = field(default_factory=dict)
    """The request's headers: an incoming ``traceparent`` (or X-Ray's ``x-amzn-trace-id``) is continued."""
    conversation_id: str | None = None
    flush: bool = False
    """Export the turn's spans and metrics once its last event was taken, before its stream ends (on Lambda: the
    environment is frozen once the response is sent, and a frozen environment exports nothing)."""
    deadline: Deadline | None = None
    """The request's deadline: the flush at the end waits no longer than what is left of it."""
    lambda_trace_id: str | None = None
    """``_X_AMZN_TRACE_ID`` of the invocation (buffered mode), continued when the request carries no trace header."""
