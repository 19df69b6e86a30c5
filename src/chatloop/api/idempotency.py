"""Retried requests answered once: an ``Idempotency-Key`` header (the name Stripe and the IETF draft use) makes a
request run at most once within the expiry, with Powertools Idempotency's DynamoDB persistence layer keeping the
record (in progress, then the stored response).

- The same key and the same body again: the stored response, byte for byte (a stream is replayed as the same SSE
  event sequence), and no model call. A different body: 422. The first still running: 409 with ``retry-after``.
- Keys are scoped to the caller (API Gateway's API key id, or the IAM caller of a Function URL), the path and the
  key itself, so one client can never read another's stored answer.
- Only a 200 is stored, and only when it fits DynamoDB's 400 KB item limit (bodies are already redacted: no secret
  is stored). A failure of DynamoDB never fails the chat: the request runs without deduplication, logged and
  counted (``IdempotencyErrors``).
- No ``IDEMPOTENCY_TABLE_NAME``: nothing changes (``make run`` needs no AWS). boto3 is imported on first use.

Usage (in the app)::

    Route("/chat", idempotent(routes.chat), methods=["POST"])
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from anyio import to_thread
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from chatloop.api.adapter import gateway_context, invocation_from
from chatloop.api.errors import error_response
from chatloop.observability import logger, metrics

HEADER = "idempotency-key"
MAX_KEY_LENGTH = 255
MAX_STORED_BYTES = 350_000
"""DynamoDB items are at most 400 KB; the record's other attributes need the rest."""
REPLAYED_HEADER = "idempotent-replayed"
Route = Callable[[Request], Awaitable[Response]]


class Store:
    """Powertools' DynamoDB persistence layer for one table, built on first use."""

    def __init__(self, table_name: str, expires_after_seconds: int):
        self.table_name = table_name
        self.expires_after_seconds = expires_after_seconds
        self._layer: Any = None

    def layer(self) -> Any:
        if self._layer is None:
            from aws_lambda_powertools.utilities.idempotency import (
                DynamoDBPersistenceLayer,
                IdempotencyConfig,
            )

            layer = DynamoDBPersistenceLayer(table_name=self.table_name)
            config = IdempotencyConfig(
                event_key_jmespath="key",
                payload_validation_jmespath="body",
                raise_on_no_idempotency_key=True,
                expires_after_seconds=self.expires_after_seconds,
                hash_function="sha256",
            )
            layer.configure(config, function_name="chatloop")
            self._layer = layer
        return self._layer


def caller_of(request: Request) -> str:
    """Who is asking, as API Gateway or the Function URL established it: the scope of their keys."""
    context = gateway_context(request.scope.get("aws.event"), request.headers)
    identity = context.get("identity") or {}
    iam = (context.get("authorizer") or {}).get("iam") or {}
    for who in (
        identity.get("apiKeyId"),
        identity.get("apiKey"),
        iam.get("userArn"),
        identity.get("userArn"),
    ):
        if isinstance(who, str) and who:
            return who
    return "anonymous"


def idempotent(route: Route) -> Route:
    """``route`` with Idempotency-Key handling, when the app has a store (IDEMPOTENCY_TABLE_NAME)."""

    async def handle(request: Request) -> Response:
        store: Store | None = request.app.state.runtime.idempotency
        key = request.headers.get(HEADER)
        if store is None or key is None:
            return await route(request)
        if not key or len(key) > MAX_KEY_LENGTH:
            return error_response(
                request, 400, "invalid_idempotency_key", f"{HEADER}: 1 to {MAX_KEY_LENGTH} characters"
            )
        body = await request.body()
        data = {
            "key": f"{caller_of(request)}|{request.url.path}|{key}",
            "body": hashlib.sha256(body).hexdigest(),
        }
        claimed = await _claim(store, data, request)
        if isinstance(claimed, Response):
            return claimed
        if claimed is False:  # DynamoDB failed: answer anyway, once more than asked
            return await route(request)
        try:
            response = await route(request)
        except BaseException:
            await _release(store, data)
            raise
        if isinstance(response, StreamingResponse):
            return _recorded(response, store, data)
        await _save(store, data, response, bytes(response.body))
        return response

    return handle


async def _claim(store: Store, data: dict[str, Any], request: Request, attempt: int = 0) -> Response | bool:
    """True: this request runs and records its answer. False: the store failed (run unrecorded). A Response: the
    stored answer, or why it cannot be had (409, 422)."""
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyItemAlreadyExistsError,
        IdempotencyItemNotFoundError,
        IdempotencyValidationError,
    )

    try:
        layer = store.layer()  # no region or credentials fails here: that is a store failure too
        await to_thread.run_sync(layer.save_inprogress, data, _remaining_ms(request))
        return True
    except IdempotencyValidationError:
        return _mismatch(request)
    except IdempotencyItemAlreadyExistsError as exc:
        try:
            record = exc.old_data_record or await to_thread.run_sync(layer.get_record, data)
        except IdempotencyValidationError:
            return _mismatch(request)
        except IdempotencyItemNotFoundError:
            record = None  # it expired or was released meanwhile
        except Exception as failure:
            return _store_failed(failure)
        if record is None:
            if attempt:
                return _store_failed(RuntimeError("the record vanished twice"))
            return await _claim(store, data, request, attempt + 1)
        if record.status == "COMPLETED" and record.response_data:
            return _replay(json.loads(record.response_data))
        seconds = max(1, math.ceil(float(record.in_progress_expiry_timestamp or 0) / 1000 - time.time()))
        return error_response(
            request,
            409,
            "request_in_progress",
            "a request with this Idempotency-Key is still running; retry after it ends",
            headers={"retry-after": str(min(seconds, 30))},
        )
    except Exception as failure:
        return _store_failed(failure)


def _mismatch(request: Request) -> Response:
    return error_response(
        request,
        422,
        "idempotency_key_reused",
        "this Idempotency-Key was used with a different request body; use a new key for a new request",
    )


def _store_failed(failure: BaseException) -> bool:
    logger.warning(f"idempotency store failed ({type(failure).__name__}): answering without deduplication")
    metrics.add_metric(name="IdempotencyErrors", unit="Count", value=1)
    return False


def _remaining_ms(request: Request) -> int:
    """How long the in-progress record holds: until this invocation must end (a retry after that runs again)."""
    context = request.scope.get("aws.context")
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        return int(context.get_remaining_time_in_millis())
    invocation = invocation_from(request.headers)  # stream mode, behind the adapter
    if invocation is not None:
        return max(0, int(invocation.seconds_left() * 1000))
    return int(request.app.state.runtime.settings.request_timeout_seconds * 1000)  # make run


def _replay(stored: dict[str, Any]) -> Response:
    headers = {**stored.get("headers", {}), REPLAYED_HEADER: "true"}
    return Response(
        stored["body"], status_code=stored["status"], headers=headers, media_type=stored["media_type"]
    )


async def _release(store: Store, data: dict[str, Any]) -> None:
    """Forget the in-progress record: the request did not finish, so a retry must run it."""
    try:
        await to_thread.run_sync(store.layer().delete_record, data, RuntimeError("not completed"))
    except Exception as failure:
        _store_failed(failure)


async def _save(store: Store, data: dict[str, Any], response: Response, body: bytes) -> None:
    if response.status_code != 200:
        await _release(store, data)
        return
    if len(body) > MAX_STORED_BYTES:
        logger.info(f"idempotency: the answer is {len(body)} bytes, over {MAX_STORED_BYTES}; not stored")
        await _release(store, data)
        return
    stored = {
        "status": response.status_code,
        "media_type": response.media_type or response.headers.get("content-type", "application/json"),
        "headers": {k: v for k, v in response.headers.items() if k in {"x-request-id", "cache-control"}},
        "body": body.decode("utf-8"),
    }
    try:
        await to_thread.run_sync(store.layer().save_success, data, stored)
    except Exception as failure:
        _store_failed(failure)


def _recorded(response: StreamingResponse, store: Store, data: dict[str, Any]) -> Response:
    """``response`` streaming as it is produced, its events recorded once the stream is complete."""
    chunks = response.body_iterator

    async def teed() -> AsyncIterator[bytes]:
        seen: list[bytes] = []
        finished = False
        try:
            async for chunk in chunks:
                piece = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
                if piece != b": ping\n\n":  # heartbeats are the connection's, not the answer's
                    seen.append(piece)
                yield piece
            finished = True
        finally:
            if finished:
                await _save(store, data, response, b"".join(seen))
            else:  # the client went away: the turn did not finish, so a retry must run it
                await _release(store, data)

    response.body_iterator = teed()
    return response
