"""Request and response limits: what a client may send, and what a buffered Lambda response may weigh.

Every limit is a setting (``MAX_BODY_BYTES``, ``MAX_JSON_DEPTH``, ``MAX_MESSAGES``) or a platform fact
(Lambda's 6 MB synchronous response payload), and every breach is a clear 4xx before any model call.

Usage::

    raw = await read_within(request, limit=6_000_000)      # RequestError(413) past the limit, read no further
    data = parse_json_body(raw, max_depth=64)              # RequestError(400/413) on anything unusable
    response = fit_lambda_response(mangum_response)          # never over Lambda's payload limit
"""

from __future__ import annotations

import json
from collections.abc import Sized
from typing import Any

from starlette.requests import ClientDisconnect, Request

from chatloop.api.http.errors import RequestError
from chatloop.textsafe import text_safe_value

LAMBDA_PAYLOAD_BYTES = 6_000_000
"""Lambda's synchronous response payload limit (6 MB), measured on the response as Lambda serialises it."""


async def read_within(request: Request, limit: int) -> bytes:
    """The request's body, read no further than ``limit`` bytes: a declared or a streamed (chunked) body past it is
    a 413 before the rest arrives, so no client can make the server hold more than ``limit`` bytes of its body.
    Read once per request; ``request.body()`` returns it afterwards."""
    declared = request.headers.get("content-length", "")
    # Plain ASCII digits only (``str.isdigit`` takes ``²``, which ``int()`` refuses), and no ``int()`` of thousands
    # of digits (past its conversion limit): a longer number is past any limit. Anything else: the read counts.
    if declared.isascii() and declared.isdigit() and (len(declared) > 18 or int(declared) > limit):
        raise _too_large(limit)
    if getattr(request, "_body", None) is None:
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
        except ClientDisconnect:
            raise RequestError(
                400, "invalid_request", "the client went away before sending its body"
            ) from None
        request._body = b"".join(chunks)  # what Starlette's own request.body() keeps, for every later reader
    return within(request._body, limit)


def within(body: bytes, limit: int) -> bytes:
    """``body`` when it is no larger than ``limit`` bytes, else the 413 (a body given whole: a WebSocket message's)."""
    if len(body) > limit:
        raise _too_large(limit)
    return body


def _too_large(limit: int) -> RequestError:
    return RequestError(413, "body_too_large", f"the body is larger than {limit} bytes")


def parse_json_body(raw: bytes, max_depth: int) -> object:
    """The body as JSON with text-safe strings, or a ``RequestError`` naming the problem."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(
            400, "invalid_json", f"the body is not valid UTF-8 (byte {exc.start}: {exc.reason})"
        ) from None
    try:
        data = json.loads(text or "null")
    except json.JSONDecodeError as exc:
        raise RequestError(
            400, "invalid_json", f"the body is not valid JSON ({exc.msg} at position {exc.pos})"
        ) from None
    except RecursionError:
        raise RequestError(
            400, "invalid_json", f"the body is nested more than {max_depth} levels deep"
        ) from None
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise RequestError(
            400, "invalid_json", f"the body holds a number that is too large ({exc})"
        ) from None
    if json_depth(data, max_depth) > max_depth:
        raise RequestError(400, "invalid_json", f"the body is nested more than {max_depth} levels deep")
    return text_safe_value(data)  # lone surrogates (valid JSON escapes, invalid UTF-8) become U+FFFD


def json_depth(value: object, stop_after: int) -> int:
    """How deeply ``value`` nests lists and objects (a scalar is 0), counted without recursion and no further
    than ``stop_after + 1``."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth > stop_after:
                return depth
            stack.extend((child, depth) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_message_count(messages: Sized, max_messages: int) -> None:
    if len(messages) > max_messages:
        raise RequestError(
            413,
            "too_many_messages",
            f"messages: {len(messages)} messages is more than the {max_messages} allowed (MAX_MESSAGES)",
            param="messages",
        )


def fit_lambda_response(response: dict[str, Any], limit: int = LAMBDA_PAYLOAD_BYTES) -> dict[str, Any]:
    """``response`` (Mangum's) within Lambda's payload limit: long strings in a JSON or SSE body are cut, shortest
    cut first, until it fits. The answer's shape and its last event stay; only long fields shrink."""
    if _size(response) <= limit or response.get("isBase64Encoded"):
        return response
    body = str(response.get("body") or "")
    for keep in (65_536, 16_384, 4_096, 1_024, 256):
        smaller = {**response, "body": _shrink_body(body, keep)}
        if _size(smaller) <= limit:
            return smaller
    error = {
        "error": {"code": "response_too_large", "message": "the response is larger than Lambda can return"}
    }
    return {
        **response,
        "statusCode": 502,
        "body": json.dumps(error),
        "headers": {"content-type": "application/json"},
    }


def _size(response: dict[str, Any]) -> int:
    # json.dumps with ensure_ascii escapes every non-ASCII character: the largest the payload can be on the wire.
    return len(json.dumps(response))


def _shrink_body(body: str, keep: int) -> str:
    try:
        return json.dumps(_cut_strings(json.loads(body), keep), ensure_ascii=False)
    except ValueError:
        pass
    events = []
    for block in body.split("\n\n"):  # SSE: each event's data is JSON
        head, sep, data = block.rpartition("data: ")
        try:
            events.append(head + sep + json.dumps(_cut_strings(json.loads(data), keep), ensure_ascii=False))
        except ValueError:
            events.append(block)
    return "\n\n".join(events)


def _cut_strings(value: object, keep: int) -> object:
    if isinstance(value, str):
        return value if len(value) <= keep else value[:keep] + f"… [cut: {len(value)} characters in all]"
    if isinstance(value, list):
        return [_cut_strings(v, keep) for v in value]
    if isinstance(value, dict):
        return {k: _cut_strings(v, keep) for k, v in value.items()}
    return value
