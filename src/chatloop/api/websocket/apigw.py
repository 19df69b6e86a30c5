"""API Gateway WebSocket API events, read: which of the three routes an event is, its connection, the caller
API Gateway established, the management endpoint that answers the connection, and the client's message.

An API Gateway WebSocket API invokes the function with a Lambda proxy event per route (AWS docs, "Set up WebSocket
API integrations": ``requestContext.eventType`` is ``CONNECT``, ``MESSAGE`` or ``DISCONNECT``, ``routeKey`` the route,
``connectionId`` the socket, ``domainName`` and ``stage`` where its ``@connections`` live). The caller is read from
``$connect``'s request context with the HTTP API's own reading (``api.http.caller.identities``): a route with
``ApiKeyRequired`` gives ``identity.apiKeyId``, so the same key is the same ``apikey:<id>`` caller on both APIs. The
event also carries the key itself (``identity.apiKey``, the handshake's ``x-api-key`` header): the event is never
logged and no field of it but those read here goes anywhere.

Usage::

    event = websocket_event(raw)             # None: not a WebSocket API event
    if event.kind == "connect": caller_from(event.context)
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Mapping
from typing import Any, NamedTuple

from chatloop.api.http.caller import identities
from chatloop.api.websocket import (  # the cheap checks src/app.py asks of every event, kept in the package
    EVENT_TYPES,
    Kind,
)

MESSAGE_BYTES = 128 * 1024
"""API Gateway's largest WebSocket message (frames of 32 KB at most make it up): a larger one never reaches us,
and an event claiming one is refused before anything parses it."""


class WebSocketEvent(
    NamedTuple
):  # a tuple, not a frozen dataclass: no methods generated at import (cold start)
    kind: Kind
    connection_id: str
    request_id: str
    """API Gateway's request id of this event (the correlation id of its log lines)."""
    endpoint: str
    """The management API's endpoint for this connection: ``https://{domainName}/{stage}``."""
    context: Mapping[str, Any]
    """The event's ``requestContext``, as API Gateway sent it."""
    message: bytes | str | None = None
    """``$default``'s message: text, or bytes for a binary frame (``isBase64Encoded``)."""


class EventError(ValueError):
    """A WebSocket event that is not what API Gateway sends (a field missing, a message too large)."""


def websocket_event(event: Mapping[str, Any]) -> WebSocketEvent:
    """The event read, or ``EventError`` naming what is wrong with it."""
    context = event.get("requestContext")
    if not isinstance(context, Mapping) or context.get("eventType") not in EVENT_TYPES:
        raise EventError("not an API Gateway WebSocket event")
    kind = EVENT_TYPES[str(context["eventType"])]
    connection_id, domain, stage = (
        context.get("connectionId"),
        context.get("domainName"),
        context.get("stage"),
    )
    for name, value in (("connectionId", connection_id), ("domainName", domain), ("stage", stage)):
        if not isinstance(value, str) or not value or len(value) > 256:
            raise EventError(f"requestContext.{name} is missing or not a short text")
    request_id = context.get("requestId")
    endpoint = f"https://{domain}/{stage}"
    message = _message(event) if kind == "message" else None
    rid = request_id if isinstance(request_id, str) else ""
    return WebSocketEvent(kind, str(connection_id), rid, endpoint, context, message)


def caller_from(context: Mapping[str, Any]) -> str | None:
    """The caller of a ``$connect``, as ``caller_of`` names the HTTP API's (``apikey:<id>``, ``iam:<arn>``, ...), or
    None when API Gateway established no identity."""
    parts = identities(dict(context))
    return "|".join(f"{kind}:{value}" for kind, value in parts) or None


def _message(event: Mapping[str, Any]) -> bytes | str:
    body = event.get("body")
    if body is None:
        return ""
    if not isinstance(body, str):
        raise EventError("the message body is not text")
    if len(body) > MESSAGE_BYTES * 4 // 3 + 4:  # base64 of the largest message, or its text (chars <= bytes)
        raise EventError("the message is larger than API Gateway's 128 KB")
    if event.get("isBase64Encoded") is True:
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise EventError("the binary message is not base64") from None
    return body


def turn_id(request_id: str) -> str:
    """A message's turn id from its API Gateway request id (base64 text: ``CvKrAFxPoAMFk_w=``), in the characters
    a response id takes (``resp_`` + it: ``api.items.store.RESPONSE_ID``); a fresh one when there is none."""
    safe = request_id.replace("+", "-").replace("/", "_").rstrip("=")
    return (
        safe
        if safe and len(safe) <= 100 and safe.replace("-", "").replace("_", "").isalnum()
        else uuid.uuid4().hex
    )


def status(code: int, message: str | None = None) -> dict[str, Any]:
    """A route's answer to API Gateway (for ``$connect``, a status other than 2xx refuses the handshake; the body of
    ``$default``'s answer is dropped, as no route response is configured)."""
    answer: dict[str, Any] = {"statusCode": code}
    if message is not None:
        answer["body"] = message
    return answer
