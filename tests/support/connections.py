"""The API Gateway Management API as the WebSocket tests meet it: moto's ``apigatewaymanagementapi`` (in-process
under ``mock_aws``, or a moto server) keeps what ``PostToConnection`` sent to each connection, and these helpers read
it back message by message, hold posts to make events queue up, and make a connection gone (a 410, as API Gateway
answers for a socket the client closed: moto itself never does).

Usage::

    with mock_aws():
        client = management_client(ENDPOINT)
        ... posts ...
        posted(CONNECTION)                      # the messages sent, in order, as JSON objects
        gate = hold_posts(client)               # the next post waits until gate.set()
        make_gone(client, CONNECTION)           # every later post to it: GoneException (410)
"""

from __future__ import annotations

import json
import threading
from typing import Any
from urllib.parse import quote

ENDPOINT = "https://abc123wsid.execute-api.us-east-1.amazonaws.com/prod"
CONNECTION = "CvKq3cmIoAMCJ0g="
ACCOUNT = "123456789012"


def posted(connection_id: str, region: str = "us-east-1", data: bytes | None = None) -> list[dict[str, Any]]:
    """The messages posted to ``connection_id``, in order: moto keeps a connection's posts as one run of bytes
    (``data``, when read from a moto server), each a JSON object, so they are read back one after another."""
    if data is None:
        from moto.apigatewaymanagementapi.models import apigatewaymanagementapi_backends

        backend = apigatewaymanagementapi_backends[ACCOUNT][region]
        key = quote(connection_id, safe="")  # moto keys a connection by its id as the request's path wrote it
        data = backend.connections[key].data if key in backend.connections else b""
    text, decoder, found, at = data.decode(), json.JSONDecoder(), [], 0
    while at < len(text):
        value, at = decoder.raw_decode(text, at)
        found.append(value)
    return found


def hold_posts(client: Any) -> threading.Event:
    """Each post of ``client`` waits (in its thread) until the returned event is set."""
    gate = threading.Event()

    def wait(**_: Any) -> None:  # a handler's answer would stand for the call's: it returns None
        gate.wait(10)

    client.meta.events.register("before-call.apigatewaymanagementapi.PostToConnection", wait)
    return gate


def make_gone(client: Any, connection_id: str) -> list[str]:
    """Every later post of ``client`` to ``connection_id`` fails as API Gateway answers once the client closed the
    socket (410, ``GoneException``), before it reaches moto. Returns the list each refused post's connection id is
    added to."""
    from botocore.exceptions import ClientError

    refused: list[str] = []

    def gone(params: dict[str, Any], **_: Any) -> None:
        if params.get("ConnectionId") != connection_id:
            return
        refused.append(connection_id)
        error = {
            "Error": {"Code": "GoneException", "Message": ""},
            "ResponseMetadata": {"HTTPStatusCode": 410},
        }
        raise ClientError(error, "PostToConnection")

    client.meta.events.register("provide-client-params.apigatewaymanagementapi.PostToConnection", gone)
    return refused
