"""The invocation as the AWS Lambda Web Adapter (LWA) hands it to the app in stream mode.

Under LWA there is no ``(event, context)`` handler: uvicorn serves the app and the adapter forwards the Lambda
context as JSON in the ``x-amzn-lambda-context`` header (the Rust runtime's ``Context`` serialised with serde:
``request_id``, ``deadline`` in Unix milliseconds, ``invoked_function_arn``, ``xray_trace_id``, ``env_config``)
and API Gateway's request context in ``x-amzn-request-context`` (``requestId``, ``stage``, ...). Sources:
awslabs/aws-lambda-web-adapter ``src/lib.rs`` (both headers) and awslabs/aws-lambda-rust-runtime
``lambda-runtime/src/types.rs`` (the ``Context`` fields).

Usage::

    invocation = invocation_from(request.headers)
    if invocation: invocation.seconds_left()
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LAMBDA_CONTEXT_HEADER = "x-amzn-lambda-context"
REQUEST_CONTEXT_HEADER = "x-amzn-request-context"


@dataclass(frozen=True)
class Invocation:
    deadline_ms: int
    """When Lambda stops the invocation, in Unix milliseconds."""
    request_id: str
    """API Gateway's request id when there is one (the correlation id), else Lambda's."""

    def seconds_left(self) -> float:
        return self.deadline_ms / 1000 - time.time()


def invocation_from(headers: Mapping[str, str]) -> Invocation | None:
    """The invocation behind a request served through LWA, or None (``make run``, tests, Mangum)."""
    context = _json_object(headers.get(LAMBDA_CONTEXT_HEADER))
    deadline = context.get("deadline")
    if not isinstance(deadline, int) or isinstance(deadline, bool) or deadline <= 0:
        return None
    gateway_id = _json_object(headers.get(REQUEST_CONTEXT_HEADER)).get("requestId")
    return Invocation(deadline, str(gateway_id or context.get("request_id") or ""))


def gateway_context(event: Mapping[str, Any] | None, headers: Mapping[str, str]) -> dict[str, Any]:
    """API Gateway's request context (stage path, identity, ...): from the Lambda event in buffered mode (Mangum),
    from the adapter's ``x-amzn-request-context`` header in stream mode, else empty (``make run``)."""
    context = (event or {}).get("requestContext")
    if isinstance(context, dict) and context:
        return context
    return _json_object(headers.get(REQUEST_CONTEXT_HEADER))


def _json_object(text: str | None) -> dict[str, Any]:
    if not text or len(text) > 64 * 1024:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
