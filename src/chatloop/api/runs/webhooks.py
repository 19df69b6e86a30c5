"""Webhooks for background responses: when one ends (``response.completed``, ``failed``, ``cancelled``,
``incomplete``), an event ``{id, created_at, data: {id}, type, object: "event"}`` is POSTed to WEBHOOK_URL, signed
as OpenAI signs its webhooks (Standard Webhooks): ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``
= ``v1,`` + base64 HMAC-SHA256 of ``"{id}.{timestamp}.{body}"`` keyed with WEBHOOK_SECRET (``whsec_`` + base64), so
``openai``'s ``client.webhooks.unwrap(body, headers, secret=…)`` verifies it (openai-python ``lib/_webhooks.py``).

One attempt, bounded by ``TIMEOUT_SECONDS``; a failure is logged (the response itself is stored either way, and a
receiver can always ``GET`` it). Nothing is sent when WEBHOOK_URL is unset.

The receiver cannot steer the request elsewhere (issue #41): a redirect is never followed (a 3xx is a failed
delivery, logged with its status, not retried), and the URL's host is resolved once at every send, each address
checked against ``chatloop.netpolicy`` (never link-local or metadata; private or loopback only with
WEBHOOK_ALLOW_PRIVATE), and the connection made to those addresses only (``chatloop.pinning``), the name kept for the
``Host`` header and TLS. ``config`` checks the same at start.

Usage::

    await notify(settings, "resp_1", "completed")
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import hmac
import json
import secrets
import ssl
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from chatloop import netpolicy
from chatloop.jsontypes import JSONObject
from chatloop.observability import logger
from chatloop.pinning import pinned_transport

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
    what = f"webhook for {response_id} ({status})"
    host = urlsplit(settings.webhook_url).hostname or ""
    addresses = await netpolicy.resolved(host)
    reason = netpolicy.first_refusal(host, addresses, settings.webhook_allow_private)
    if reason or not addresses:
        why = reason or "its host did not resolve"
        hint = " (WEBHOOK_ALLOW_PRIVATE is off)" if reason == netpolicy.PRIVATE else ""
        logger.warning(f"{what} not sent: WEBHOOK_URL's host is {why}{hint}")
        return
    body, headers = signed(event_for(response_id, status), settings.webhook_secret)
    try:
        posted = _post(settings.webhook_url, body, headers, host, addresses)
        status_code = await asyncio.wait_for(posted, TIMEOUT_SECONDS)  # the whole delivery, however it drips
    except Exception as error:
        logger.warning(f"{what} not delivered: {type(error).__name__}")
        return
    if 200 <= status_code < 300:
        logger.info(f"{what} delivered: {status_code}")
    elif 300 <= status_code < 400:
        logger.warning(
            f"{what} not delivered: the receiver answered {status_code}, a redirect (never followed)"
        )
    else:
        logger.warning(f"{what} not delivered: the receiver answered {status_code}")


async def _post(url: str, body: bytes, headers: dict[str, str], host: str, addresses: tuple[str, ...]) -> int:
    """The receiver's status for one POST to ``url``, connected to ``addresses`` only, following no redirect and
    reading no answer body (the status is all that counts)."""
    import httpx2  # the first webhook pays for it, not cold start

    # A transport of its own also keeps the environment's proxies out of the way (``chatloop.pinning``).
    client = httpx2.AsyncClient(
        transport=pinned_transport(host, addresses, _tls()),
        follow_redirects=False,
        timeout=TIMEOUT_SECONDS,
    )
    async with client, client.stream("POST", url, content=body, headers=headers) as answer:
        return answer.status_code


@functools.cache
def _tls() -> ssl.SSLContext:
    """The trust store, loaded once per container (20-50 ms a load), for every webhook's connection."""
    import httpx2

    return httpx2.create_ssl_context()
