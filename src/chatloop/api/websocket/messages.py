"""WebSocket mode's messages: a client's text message read as the one event the server takes (``response.create``:
the fields of a ``POST /v1/responses`` body, ``stream`` implicit, ``background`` refused, and the WebSocket-only
``stream_id``), and anything wrong as the spec's ``error`` event.

The checks are the POST's own: the JSON is read by ``parse_json_body`` (the same 400 ``invalid_json`` and depth
limit) and the body by the Responses door's schema in the pipeline, so an error event carries the same ``code``,
``message`` and ``param`` as the POST's 400 (``error_event`` maps a ``RequestError``; nothing is checked twice).
The shapes are openai-python 3.54's ``types/responses/responses_client_event.py`` (``ResponseCreate``) and
``responses_server_event.py`` (``ResponseWsError``: ``error{type, code, message, param, headers}``, ``status``,
``stream_id``), which openai-node 7.60's ``resources/responses/ws-base`` reads the same way (an ``error`` event is
emitted to the client's error handler; the socket stays open).

Usage::

    create = read_event(text, settings)          # a ClientEvent, or a RequestError naming what is wrong
    await send(error_event(error, create.stream_id))
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chatloop.api.http.errors import CODE_TYPES, OPENAI_TYPES, RequestError
from chatloop.api.http.request_limits import parse_json_body
from chatloop.jsontypes import JSONObject

if TYPE_CHECKING:
    from chatloop.config import Settings

CREATE = "response.create"
MAX_STREAM_ID_CHARS = 256
"""A ``stream_id`` is a client's lane name, echoed on every event of its responses: kept short."""


@dataclass(frozen=True)
class ClientEvent:
    """A ``response.create``: its body as ``POST /v1/responses`` takes it (``stream: true``), and its lane."""

    body: JSONObject
    stream_id: str | None


def read_event(message: str | bytes, settings: Settings) -> ClientEvent:
    """The client's message as a ``response.create`` (a ``RequestError`` naming the field otherwise, as the POST's
    400 would: the body's own fields are checked by the pipeline)."""
    raw = message.encode("utf-8", "surrogatepass") if isinstance(message, str) else message
    if len(raw) > settings.websocket_max_message_bytes:  # the transport closes first; a Lambda event may not
        raise RequestError(
            413,
            "message_too_large",
            f"the message is larger than {settings.websocket_max_message_bytes} bytes",
        )
    data = parse_json_body(raw, settings.max_json_depth)
    if not isinstance(data, dict):
        raise RequestError(400, "invalid_request", "the message must be a JSON object")
    kind = data.pop("type", None)
    if kind != CREATE:
        shown = json.dumps(kind) if isinstance(kind, str) else "missing"
        raise RequestError(
            400,
            "invalid_request",
            f"type: {shown} is not an event this server takes (only 'response.create')",
            param="type",
        )
    stream_id = data.pop("stream_id", None)
    if stream_id is not None and (
        not isinstance(stream_id, str) or not 0 < len(stream_id) <= MAX_STREAM_ID_CHARS
    ):
        raise RequestError(
            400,
            "invalid_request",
            f"stream_id: a string of 1 to {MAX_STREAM_ID_CHARS} characters",
            param="stream_id",
        )
    if data.get("background"):
        raise RequestError(
            400,
            "unsupported_parameter",
            "background: background responses are not supported in WebSocket mode",
            param="background",
        )
    if data.get("stream", True) is not True:
        raise RequestError(
            400, "invalid_request", "stream: is implicit in WebSocket mode; leave it out", param="stream"
        )
    data["stream"] = True
    return ClientEvent(data, stream_id)


def lane_of(message: str | bytes) -> str | None:
    """The ``stream_id`` a message names, read leniently (None for anything else: ``read_event`` says what is
    wrong). The local route runs a lane's responses in order with it."""
    try:
        data = json.loads(message)
    except (ValueError, RecursionError):
        return None
    lane = data.get("stream_id") if isinstance(data, dict) else None
    return lane if isinstance(lane, str) else None


def error_event(error: RequestError, stream_id: str | None = None) -> JSONObject:
    """The spec's ``error`` event for what the POST would have answered with ``error`` (the same ``type``, ``code``,
    ``message`` and ``param``; its status and headers kept beside them)."""
    detail: JSONObject = {
        "type": CODE_TYPES.get(error.code) or OPENAI_TYPES.get(error.status, "invalid_request_error"),
        "code": error.code,
        "message": error.message,
        "param": error.param,
    }
    if error.headers:
        detail["headers"] = dict(error.headers)
    event: JSONObject = {"type": "error", "status": error.status, "error": detail}
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event
