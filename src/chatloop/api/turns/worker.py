"""Whether a request is a background worker running a queued turn (``api.openai.responses.background``), not a
client asking for one: the worker's request was checked, and its approvals claimed, when it was queued.

Usage::

    if is_worker(request):            # its answers were claimed when it was queued; it compacts the conversation
        ...
"""

from __future__ import annotations

from starlette.requests import HTTPConnection

WORKER_SCOPE = "chatloop.background"
"""In the scope of the request a background worker makes for the turn it runs (its value: the response id)."""


def is_worker(request: HTTPConnection) -> bool:
    """Whether this request is a background worker running its turn (not a client asking for one)."""
    return WORKER_SCOPE in request.scope
