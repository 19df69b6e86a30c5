"""Provider failures as a small typed taxonomy, classified from status code, error code, message and headers.

Usage::

    err = classify(status=429, body={"error": {"code": "rate_limit_exceeded", "message": "... try again in 5.289s"}},
                   headers={}, model="groq:llama-3.3-70b-versatile")
    isinstance(err, RateLimited) and err.retry_after == 5.289
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from chatloop.redaction import redact


class ModelError(Exception):
    """A model call failed. ``kind`` is the short name used in events, logs and metrics."""

    kind = "error"
    fallback = True
    """Whether another model may succeed where this one failed."""

    def __init__(
        self, message: str, *, model: str = "", status: int | None = None, retry_after: float | None = None
    ):
        self.message = redact(message)
        self.model = model
        self.status = status
        self.retry_after = retry_after
        super().__init__(self.message)


class RateLimited(ModelError):
    kind = "rate_limited"


class RequestTooLarge(ModelError):
    """Groq 413: prompt + max_tokens exceed the tier's tokens per minute. Retrying cannot help."""

    kind = "request_too_large"


class ContextTooLong(ModelError):
    kind = "context_too_long"


class ModelGone(ModelError):
    """Decommissioned or unknown model: disabled for the life of the container."""

    kind = "model_gone"


class ToolUseFailed(ModelError):
    """Groq 400 ``tool_use_failed``: the model's tool call did not parse or validate."""

    kind = "tool_use_failed"

    def __init__(
        self,
        message: str,
        *,
        failed_generation: str | None = None,
        model: str = "",
        status: int | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message, model=model, status=status, retry_after=retry_after)
        self.failed_generation = failed_generation


class AuthFailed(ModelError):
    """401/403: every model of this provider is skipped for the turn."""

    kind = "auth"


class Transient(ModelError):
    """5xx, 498 capacity, timeouts, connection errors, a stream cut mid-way."""

    kind = "transient"


class ImageUnreadable(ModelError):
    """An image by URL could not be fetched for a model that takes only the bytes (IMAGE_FETCH): another model of
    the chain may take the URL itself."""

    kind = "image_unreadable"


class DeadlineExceeded(ModelError):
    """The call ran out of the time the deadline gave it: no other model would have time either."""

    kind = "deadline"
    fallback = False


class BadRequest(ModelError):
    """Any other 4xx: the request itself is wrong; not retried on other models, reported to the client."""

    kind = "bad_request"
    fallback = False


class AllModelsFailed(ModelError):
    kind = "all_models_failed"
    fallback = False

    def __init__(self, message: str, attempts: list[ModelError], retry_after: float | None = None):
        super().__init__(message)
        self.attempts = attempts
        self.retry_after = retry_after
        """Set when every model is cooling down after a rate limit: seconds until the first may be called."""


_DURATION = re.compile(
    r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?"
)
_TRY_AGAIN = re.compile(r"try again in\s+([0-9hms.]+)", re.IGNORECASE)


def parse_duration(text: str | None) -> float | None:
    """Seconds in Groq's duration forms: ``"6s"``, ``"1.57s"``, ``"2m59.56s"``, ``"120ms"``, ``"7"``."""
    if text is None:
        return None
    text = str(text).strip()
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    match = _DURATION.fullmatch(text)
    if not match or not any(match.groups()):
        return None
    h, m, s, ms = (float(g) if g else 0.0 for g in match.groups())
    return h * 3600 + m * 60 + s + ms / 1000


def retry_after_from(headers: Mapping[str, str], message: str) -> float | None:
    """The wait a 429 asks for: ``retry-after``, else the ``x-ratelimit-reset-*`` headers, else the message."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for name in ("retry-after",):
        value = parse_duration(lowered.get(name))
        if value is not None:
            return value
    parsed = (
        parse_duration(lowered.get(n)) for n in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
    )
    resets = [r for r in parsed if r is not None]
    if resets:
        return max(resets)
    match = _TRY_AGAIN.search(message or "")
    return parse_duration(match.group(1).rstrip(".")) if match else None


def classify(
    status: int | None, body: object, headers: Mapping[str, str] | None = None, model: str = ""
) -> ModelError:
    """Map an HTTP error from an OpenAI-compatible API to a ModelError subclass. ``body`` is the error's JSON as
    the SDK parsed it (an object, usually ``{"error": {...}}``), or whatever else it had."""
    headers = headers or {}
    error = body.get("error", body) if isinstance(body, dict) else {}
    error = error if isinstance(error, dict) else {"message": str(error)}
    code = str(error.get("code") or "")
    message = str(error.get("message") or body or f"HTTP {status}")
    lowered = message.lower()

    if status == 413 or (code == "rate_limit_exceeded" and "request too large" in lowered):
        return RequestTooLarge(message, model=model, status=status)
    if status == 429:
        return RateLimited(
            message, model=model, status=status, retry_after=retry_after_from(headers, message)
        )
    if (
        code == "context_length_exceeded"
        or "reduce the length of the messages" in lowered
        or ("context" in lowered and ("length" in lowered or "window" in lowered) and status == 400)
    ):
        return ContextTooLong(message, model=model, status=status)
    if code in {"model_decommissioned", "model_not_found"} or status == 404:
        return ModelGone(message, model=model, status=status)
    if code == "tool_use_failed":
        generation = error.get("failed_generation")
        return ToolUseFailed(message, model=model, status=status, failed_generation=generation)
    if status in (401, 403):
        return AuthFailed(message, model=model, status=status)
    if status is None or status >= 500 or status in (408, 409, 498):
        return Transient(message, model=model, status=status)
    return BadRequest(message, model=model, status=status)
