"""Webhooks for background responses: when one ends (``response.completed``, ``failed``, ``cancelled``,
``incomplete``), an event ``{id, created_at, data: {id}, type, object: "event"}`` is POSTed to WEBHOOK_URL, signed
as OpenAI signs its webhooks (Standard Webhooks): ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``
= ``v1,`` + base64 HMAC-SHA256 of ``"{id}.{timestamp}.{body}"`` keyed with WEBHOOK_SECRET (``whsec_`` + base64), so
``openai``'s ``client.webhooks.unwrap(body, headers, secret=…)`` verifies it (openai-python ``lib/_webhooks.py``).

One attempt, bounded by ``TIMEOUT_SECONDS``; a failure is logged (the response itself is stored either way, and a
receiver can always ``GET`` it). Nothing is sent when WEBHOOK_URL is unset.

Usage::

    await notify(settings, "resp_1", "completed")
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import secrets
import time
import urllib.request
from typing import TYPE_CHECKING

from chatloop.jsontypes import JSONObject
from chatloop.observability import logger

if TYPE_CHECKING:
    from chatloop.config import Settings

TIMEOUT_SECONDS = 5.0
ENDINGS = frozenset({"completed", "failed", "cancelled", "incomplete"})


def signed(event: JSONObject, secret: str, timestamp: int | None = None) -> tuple[bytes, dict[str, str]]:
    """The event's body and its Standard Webhooks headers."""
    body = json.dumps(event, separators=(",", ":")).encode()
    stamp = str(timestamp if timestamp is not None else int(time.time()))
    webhook_id = str(event["id"])
    key = base64.b64decode(secret.removeprefix("whsec_")) if secret.startswith("whsec_") else secret.encode()
    digest = hmac.new(key, f"{webhook_id}.{stamp}.".encode() + body, hashlib.sha256).digest()
    headers = {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": stamp,
        "webhook-signature": "v1," + base64.b64encode(digest).decode(),
    }
    return body, headers


def event_for(response_id: str, status: str) -> JSONObject:
    return {
        "id": f"evt_{secrets.token_hex(16)}",
        "created_at": int(time.time()),
        "data": {"id": response_id},
        "type": f"response.{status}",
        "object": "event",
    }


async def notify(settings: Settings, response_id: str, status: str) -> None:
    """POST the signed event for a background response that ended with ``status`` (no-op without WEBHOOK_URL)."""
    if not settings.webhook_url or status not in ENDINGS:
        return
    body, headers = signed(event_for(response_id, status), settings.webhook_secret)
    request = urllib.request.Request(settings.webhook_url, data=body, headers=headers, method="POST")  # noqa: S310 - an operator's URL
    try:
        status_code = await asyncio.to_thread(_send, request)
    except Exception as error:
        logger.warning(f"webhook for {response_id} ({status}) not delivered: {type(error).__name__}")
        return
    logger.info(f"webhook for {response_id} ({status}) delivered: {status_code}")


def _send(request: urllib.request.Request) -> int:
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:  # noqa: S310 - an operator's URL
        return int(answer.status)
