"""Error responses: ``{"error": {"code", "message"}}`` on /chat and /health, OpenAI's error shape on /v1.

Messages name the problem; no stack trace, key or internal path ever appears in one.

Usage::

    raise RequestError(400, "invalid_request", "messages[2]: unknown role 'wizard'")
"""

from __future__ import annotations

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from chatloop.api.http.wire import JSONBody
from chatloop.observability import logger
from chatloop.redaction import redact

OPENAI_TYPES = {
    400: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "service_unavailable",
}
"""OpenAI's error ``type`` per status; the status is what the ``openai`` SDK maps to its exception class
(400 BadRequestError, 404 NotFoundError, 413 APIStatusError, 429 RateLimitError, 5xx InternalServerError)."""


CODE_TYPES = {"insufficient_quota": "insufficient_quota"}
"""Codes whose ``type`` OpenAI gives as the code itself (a spent quota's 429), not the status's."""


def openai_error(
    message: str, code: str, kind: str = "invalid_request_error", param: str | None = None
) -> dict[str, dict[str, str | None]]:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def stream_error(
    code: str, message: str, param: str | None = None, kind: str = "server_error"
) -> dict[str, object]:
    """The fields of a Responses stream's ``error`` event: openai-python reads ``code``, ``message`` and ``param``
    flat (``ResponseErrorEvent``), the Open Responses spec in an ``error`` object (``ErrorStreamingEvent``: type,
    code, message, param); both are sent, so either reader finds them."""
    return {"code": code, "message": message, "param": param, **openai_error(message, code, kind, param)}


class RequestError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        self.status, self.code, self.message, self.param = status, code, redact(message), param
        self.headers = headers
        super().__init__(message)


def error_response(
    request: Request,
    status: int,
    code: str,
    message: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    if request.url.path.startswith("/v1/"):
        kind = CODE_TYPES.get(code) or OPENAI_TYPES.get(status, "invalid_request_error")
        body = openai_error(message, code, kind, param)
    else:
        body = {"error": {"code": code, "message": message}}
    # Also set by the NoSniff middleware, which the 500 of an unhandled exception never passes through.
    return JSONBody(
        body, status_code=status, headers={**(headers or {}), "x-content-type-options": "nosniff"}
    )


def from_validation(error: ValidationError) -> RequestError:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    message, code = first["msg"], "invalid_request"
    if first["type"] == "extra_forbidden":  # as OpenAI answers an unrecognized request argument
        message, code = "unknown field", "unsupported_parameter"
    return RequestError(400, code, f"{where}: {message}", param=where)


async def on_request_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, RequestError):  # registered for RequestError only
        raise exc
    return error_response(request, exc.status, exc.code, exc.message, exc.param, exc.headers)


async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
    status = getattr(exc, "status_code", 500)
    code = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
    message = {
        404: f"no such path: {request.url.path}",
        405: f"{request.method} is not allowed on {request.url.path}",
    }
    return error_response(request, status, code, message.get(status, "request failed"))


async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error")
    return error_response(request, 500, "internal_error", "internal error")
