"""The ``Send`` of a connection on Lambda: each server event posted to the client with the API Gateway Management
API's ``PostToConnection``, in order, text deltas coalesced while a post is in flight, every message fitted to
API Gateway's limits (``apigw_frames``).

Posting runs beside the turn, one post at a time: ``send`` queues the event and returns, so a slow post never holds
the model's stream; events that queue up while a post is in flight go out together (deltas joined) in the next
one. ``drain()`` waits until everything queued was posted. Nothing is retried (botocore's retries are off: a failed
post is logged, never repeated behind anyone's back), and nothing is posted past the deadline.

A connection the client closed answers ``GoneException`` (410): posting stops there, cleanly. The turn itself
goes on to its end (its response kept when it is stored) and the rest of its events are counted and dropped, once
logged. Any other failure (throttled, a fault, a timeout) stops posting the same way: sending later events after a
lost one would show the client a stream with a hole in it.

The management client is botocore's ``apigatewaymanagementapi``, built on the first post of a container (never
imported by an HTTP request: cold start), one per endpoint.

Usage::

    post = ConnectionPoster(management_client(endpoint), connection_id, deadline)
    await answer(runtime, socket, message, post, deadline=deadline, request_id=rid)
    await post.drain()
    post.posts, post.events, post.stopped          # what it did
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from chatloop.api.websocket.apigw_frames import coalesced, fitted
from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.observability import logger

CONNECT_SECONDS = 2.0
READ_SECONDS = 5.0
"""One post's bounds: the management API answers in milliseconds; a post waits no longer than the deadline either."""
_REGION = re.compile(r"^https://[^./]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?/")
_CLIENTS: dict[str, Any] = {}


def management_client(endpoint: str) -> Any:
    """botocore's ``apigatewaymanagementapi`` client for ``endpoint`` (``https://{api}.execute-api.{region}.
    amazonaws.com/{stage}``), with no retries, made once per container and endpoint."""
    client = _CLIENTS.get(endpoint)
    if client is None:
        import botocore.session  # the first post of a container: never on an HTTP request's path
        from botocore.config import Config

        region = _REGION.match(endpoint)
        client = botocore.session.get_session().create_client(
            "apigatewaymanagementapi",
            endpoint_url=endpoint,
            region_name=region.group(1) if region else None,
            config=Config(
                connect_timeout=CONNECT_SECONDS,
                read_timeout=READ_SECONDS,
                retries={"mode": "standard", "total_max_attempts": 1},
            ),
        )
        _CLIENTS[endpoint] = client
    return client


class ConnectionPoster:
    """A connection's ``Send`` (``session.Send``): see the module docstring."""

    def __init__(self, client: Any, connection_id: str, deadline: Deadline, *, coalesce: bool = True) -> None:
        self.client, self.connection_id, self.deadline = client, connection_id, deadline
        self.coalesce = coalesce
        self.events = 0
        """Events sent to it."""
        self.posts = 0
        """``PostToConnection`` calls that succeeded."""
        self.dropped = 0
        """Events not posted because posting had stopped."""
        self.stopped: str | None = None
        """Why posting stopped (``gone``, ``deadline``, an error code), or None while it goes on."""
        self._pending: list[JSONObject] = []
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, event: JSONObject) -> None:
        self.events += 1
        if self.stopped is not None:
            self.dropped += 1
            return
        self._pending.append(event)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._post_pending())

    async def drain(self) -> None:
        """Wait until every event sent so far was posted (or posting stopped)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
        if self.stopped is not None and self.dropped:
            logger.info(f"websocket {self.connection_id}: {self.dropped} events not posted ({self.stopped})")

    async def _post_pending(self) -> None:
        while self._pending and self.stopped is None:
            # the first of what is queued now: deltas that queued behind an in-flight post go as one
            batch = coalesced(self._pending) if self.coalesce else list(self._pending)
            first, rest = batch[0], batch[1:]
            self._pending[:] = rest
            try:
                messages = fitted([first])
            except (
                ValueError
            ) as error:  # over 128 KB with no text to trim: never sent whole (1009 would close)
                logger.warning(
                    f"websocket {self.connection_id}: a {first.get('type')} event cannot be sent: {error}"
                )
                self._stop("too_large", "an event could not be fitted to a message")
                self.dropped += 1 + len(self._pending)
                self._pending.clear()
                return
            for event, data in messages:
                if not await self._post(data):
                    self.dropped += 1 + len(self._pending)
                    self._pending.clear()
                    return
                if event.get("chatloop_trimmed"):
                    logger.warning(
                        f"websocket {self.connection_id}: a {event.get('type')} event over 128 KB was "
                        "sent with its longest texts trimmed"
                    )

    async def _post(self, data: bytes) -> bool:
        if self.deadline.expired():
            return self._stop("deadline", "the deadline passed")
        call = asyncio.to_thread(self.client.post_to_connection, ConnectionId=self.connection_id, Data=data)
        try:
            await asyncio.wait_for(call, timeout=self.deadline.remaining())
        except TimeoutError:
            return self._stop("deadline", "a post outlived the deadline")
        except Exception as error:  # botocore's ClientError, or a connection that failed
            code = _error_code(error)
            if code == "GoneException":
                return self._stop("gone", "the client closed the connection (410)")
            logger.warning(f"websocket {self.connection_id}: PostToConnection failed ({code}): {error}")
            return self._stop(code, "posting failed")
        self.posts += 1
        return True

    def _stop(self, reason: str, why: str) -> bool:
        self.stopped = reason
        logger.info(f"websocket {self.connection_id}: posting stopped: {why}; the turn goes on to its end")
        return False


def _error_code(error: Exception) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if isinstance(code, str) and code:
            return code
    return type(error).__name__
