"""API Gateway / Function URL events shaped like ``sam local generate-event`` output, and a fake Lambda context.

Usage::

    event = rest_event("POST", "/chat", {"messages": [...]}, base64=True)
    response = handler(event, FakeContext(remaining_ms=28000))
"""

from __future__ import annotations

import base64 as b64
import json
import uuid
from typing import Any

from scripts.invoke_local import LocalContext as FakeContext  # noqa: F401  (re-exported for the tests)


def _body(body: Any, base64: bool) -> tuple[str | None, bool]:
    if body is None:
        return None, False
    if isinstance(
        body, bytes
    ):  # raw bytes (possibly not UTF-8) travel base64-encoded, as API Gateway sends them
        return b64.b64encode(body).decode(), True
    text = body if isinstance(body, str) else json.dumps(body)
    return (b64.b64encode(text.encode()).decode(), True) if base64 else (text, False)


def rest_event(
    method: str,
    path: str,
    body: Any = None,
    base64: bool = False,
    stage: str = "prod",
    request_id: str | None = None,
) -> dict[str, Any]:
    """A REST API (v1 payload) proxy event: ``path`` excludes the stage, ``requestContext.path`` includes it."""
    text, encoded = _body(body, base64)
    rid = request_id or str(uuid.uuid4())
    return {
        "body": text,
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "isBase64Encoded": encoded,
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": {"proxy": path[1:]},
        "stageVariables": None,
        "headers": {
            "Accept": "*/*",
            "Content-Type": "application/json",
            "Host": "abc123.execute-api.us-east-1.amazonaws.com",
            "User-Agent": "curl/8.5.0",
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Port": "443",
            "x-api-key": "test-api-key",
        },
        "multiValueHeaders": {"Accept": ["*/*"], "Content-Type": ["application/json"]},
        "requestContext": {
            "accountId": "123456789012",
            "resourceId": "123456",
            "stage": stage,
            "requestId": rid,
            "requestTime": "21/Nov/2026:23:00:00 +0000",
            "requestTimeEpoch": 1795302000000,
            "identity": {"sourceIp": "127.0.0.1", "userAgent": "curl/8.5.0", "apiKey": "test-api-key"},
            "path": f"/{stage}{path}",
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "apiId": "abc123",
            "protocol": "HTTP/1.1",
        },
    }


def http_event(
    method: str,
    path: str,
    body: Any = None,
    base64: bool = False,
    request_id: str | None = None,
    domain: str = "abc123.execute-api.us-east-1.amazonaws.com",
) -> dict[str, Any]:
    """An HTTP API (v2 payload) event on the ``$default`` stage."""
    text, encoded = _body(body, base64)
    rid = request_id or str(uuid.uuid4())
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "cookies": [],
        "headers": {
            "accept": "*/*",
            "content-type": "application/json",
            "host": domain,
            "user-agent": "curl/8.5.0",
            "x-forwarded-proto": "https",
            "x-forwarded-port": "443",
        },
        "requestContext": {
            "accountId": "123456789012",
            "apiId": domain.split(".")[0],
            "domainName": domain,
            "domainPrefix": domain.split(".")[0],
            "requestId": rid,
            "routeKey": "$default",
            "stage": "$default",
            "time": "21/Nov/2026:23:00:00 +0000",
            "timeEpoch": 1795302000000,
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "curl/8.5.0",
            },
        },
        "body": text,
        "isBase64Encoded": encoded,
    }


def function_url_event(
    method: str, path: str, body: Any = None, base64: bool = False, request_id: str | None = None
) -> dict[str, Any]:
    """A Lambda Function URL event (the v2 shape, on a lambda-url domain, with IAM authorizer context)."""
    event = http_event(
        method, path, body, base64, request_id, domain="abcdefghijk.lambda-url.us-east-1.on.aws"
    )
    event["requestContext"]["authorizer"] = {
        "iam": {
            "accessKey": "AKIA0000000000EXAMPLE",
            "accountId": "123456789012",
            "callerId": "AIDA0000000000EXAMPLE",
            "userArn": "arn:aws:iam::123456789012:user/ops",
            "userId": "AIDA0000000000EXAMPLE",
        }
    }
    return event


def response_body(response: dict[str, Any]) -> str:
    body = response.get("body") or ""
    return b64.b64decode(body).decode() if response.get("isBase64Encoded") else body


def parse_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append((lines["event"], json.loads(lines["data"])))
    return events


CODE_INTERPRETER_EVENTS = [
    "response.output_item.added",
    "response.code_interpreter_call.in_progress",
    "response.code_interpreter_call_code.delta",
    "response.code_interpreter_call_code.done",
    "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call.completed",
    "response.output_item.done",
]
"""The Responses API events of one sandbox run (a ``code_interpreter_call`` item), in the order they are sent."""
