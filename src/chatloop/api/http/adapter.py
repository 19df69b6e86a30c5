"""The invocation as the AWS Lambda Web Adapter (LWA) hands it to the app in stream mode.

Under LWA there is no ``(event, context)`` handler: uvicorn serves the app and the adapter forwards the Lambda
context as JSON in the ``x-amzn-lambda-context`` header (the Rust runtime's ``Context`` serialised with serde:
``request_id``, ``deadline`` in Unix milliseconds, ``invoked_function_arn``, ``xray_trace_id``, ``env_config``)
and API Gateway's request context in ``x-amzn-request-context`` (``requestId``, ``stage``, ...). Sources:
awslabs/aws-lambda-web-adapter ``src/lib.rs`` (both headers) and awslabs/aws-lambda-rust-runtime
``lambda-runtime/src/types.rs`` (the ``Context`` fields).

Those headers are trusted only when the adapter is the one sending them (the adapter overwrites both on every
request it forwards, but without it in front a client can write them and pick its own deadline, request id and
identity). Both must hold:

- the process runs under the adapter: ``TRUST_ADAPTER_HEADERS``, which ``src/run.sh`` sets when Lambda started it
  with the adapter as its exec wrapper (``AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap`` and the Lambda runtime API
  present); ``make run``, tests and any other server leave it unset;
- the request comes over loopback (the adapter forwards to ``127.0.0.1``; ``run.sh`` binds nothing else and turns
  off uvicorn's proxy headers, so the peer address is the socket's, not a client's ``X-Forwarded-For``).

Otherwise both headers are ignored: no invocation (the deadline is REQUEST_TIMEOUT_SECONDS), no gateway context
(no identity, no stage path).

Usage::

    invocation = invocation_of(request)          # None unless the adapter sent it
    if invocation: invocation.seconds_left()
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import NamedTuple

from starlette.requests import HTTPConnection

LAMBDA_CONTEXT_HEADER = "x-amzn-lambda-context"
REQUEST_CONTEXT_HEADER = "x-amzn-request-context"
LOOPBACK = frozenset({"127.0.0.1", "::1"})


class Invocation(NamedTuple):  # a tuple, not a frozen dataclass: no methods generated at import (cold start)
    deadline_ms: int
    """When Lambda stops the invocation, in Unix milliseconds."""
    request_id: str
    """API Gateway's request id when there is one (the correlation id), else Lambda's."""
    xray_trace_id: str | None = None
    """The invocation's X-Ray trace header (``Root=...;Parent=...;Sampled=...``), continued by its trace."""

    def seconds_left(self) -> float:
        return self.deadline_ms / 1000 - time.time()


def invocation_from(
    headers: Mapping[str, str], gateway: Mapping[str, object] | None = None
) -> Invocation | None:
    """The invocation behind a request served through LWA, or None (``make run``, tests, Mangum). ``gateway``: the
    ``x-amzn-request-context`` header already parsed (read from ``headers`` when not given)."""
    context = _json_object(headers.get(LAMBDA_CONTEXT_HEADER))
    deadline = context.get("deadline")
    if not isinstance(deadline, int) or isinstance(deadline, bool) or deadline <= 0:
        return None
    if gateway is None:
        gateway = _json_object(headers.get(REQUEST_CONTEXT_HEADER))
    gateway_id = gateway.get("requestId")
    xray = context.get("xray_trace_id")
    return Invocation(
        deadline, str(gateway_id or context.get("request_id") or ""), xray if isinstance(xray, str) else None
    )


def from_adapter(request: HTTPConnection) -> bool:
    """Whether this request's ``x-amzn-*`` headers were written by the Web Adapter (see the module docstring)."""
    runtime = getattr(request.app.state, "runtime", None)
    if runtime is None or not runtime.settings.trust_adapter_headers:
        return False
    peer = request.scope.get("client") or ("",)  # the socket's peer: run.sh turns uvicorn's proxy headers off
    return peer[0] in LOOPBACK


def invocation_of(request: HTTPConnection) -> Invocation | None:
    """The adapter's invocation for this request (stream mode), or None (``RequestContext.invocation`` keeps it for
    the request)."""
    return invocation_from(request.headers, _adapter_gateway(request)) if from_adapter(request) else None


def gateway_context(request: HTTPConnection) -> dict[str, object]:
    """API Gateway's request context (stage path, identity, ...): from the Lambda event in buffered mode (Mangum),
    from the adapter's ``x-amzn-request-context`` header in stream mode when the adapter sent it, else empty."""
    context = (request.scope.get("aws.event") or {}).get("requestContext")
    if isinstance(context, dict) and context:
        return context
    if not from_adapter(request):
        return {}
    return _adapter_gateway(request)


def _adapter_gateway(request: HTTPConnection) -> dict[str, object]:
    """The adapter's ``x-amzn-request-context`` header as JSON (the invocation's request id and the caller's
    identity both come from it; ``RequestContext`` keeps them for the request)."""
    return _json_object(request.headers.get(REQUEST_CONTEXT_HEADER))


def _json_object(text: str | None) -> dict[str, object]:
    if not text or len(text) > 64 * 1024:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
