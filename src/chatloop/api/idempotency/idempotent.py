"""Retried requests answered once: an ``Idempotency-Key`` header (the name Stripe and the IETF draft use) makes a
request run at most once within the expiry, with Powertools Idempotency's DynamoDB persistence layer keeping the
record (in progress, then the stored response).

- The same key and the same body again: the stored response, byte for byte (a stream is replayed as the same SSE
  event sequence), and no model call. A different body: 422. The first still running: 409 with ``retry-after``.
- Keys are scoped to the caller (``caller_of`` in ``api/http/caller.py``: API key id, IAM caller, JWT subject and
  issuer, Lambda-authorizer principal, all combined), the path and the key itself, so one client can never read
  another's stored answer. A request with no identity is never put in a shared scope: it runs without
  deduplication (a logged warning; nothing failed, so ``IdempotencyErrors`` is not counted).
- Only a 200 is stored, and only when it fits DynamoDB's 400 KB item limit (bodies are already redacted: no secret
  is stored). A failure of DynamoDB never fails the chat: the request runs without deduplication, logged and
  counted (``IdempotencyErrors``).
- Every DynamoDB call fits the request's deadline: at most IDEMPOTENCY_TIMEOUT_SECONDS and a fifth of the time
  left before the turn (half after it), connect and read timeouts and retries included (one botocore client per
  budget bucket, built on first use and kept for the container). A store that hangs degrades like one that
  refuses: a store failure.
- A turn that ends without a stored answer (an error, a non-200, an answer too large, a client that went away)
  releases its in-progress record (deleted, as Powertools does on failure), so a retry with the same key runs
  instead of getting 409s until the record expires.
- No ``IDEMPOTENCY_TABLE_NAME``: nothing changes (``make run`` needs no AWS). boto3 is imported on first use.

Usage (in the app)::

    Route("/chat", idempotent(chat.chat), methods=["POST"])
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, TypedDict

import anyio
from anyio import to_thread
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import error_response
from chatloop.api.http.request_limits import read_within
from chatloop.aws import bounded_config
from chatloop.observability import logger, metrics

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
    from boto3.session import Session

HEADER = "idempotency-key"
MAX_KEY_LENGTH = 255
MAX_STORED_BYTES = 350_000
"""DynamoDB items are at most 400 KB; the record's other attributes need the rest."""
REPLAYED_HEADER = "idempotent-replayed"
STOP_REASON = "chatloop.stop_reason"
"""Where the turn's stop reason is left in the request's scope (``serve.observed``): a streamed turn that ended
with ``all_models_failed`` is a failure, as its JSON form (a 503) is, and is not stored."""
Route = Callable[[Request], Awaitable[Response]]
BUCKETS = (0.5, 1.0, 2.0, 4.0, 8.0)
"""Budgets (seconds, retries included) a DynamoDB call can be given: one client each, built on first use."""
STORE_SHARE = 0.2
"""The largest share of a request's remaining time one store call may take before the turn (the turn needs the
rest)."""
END_SHARE = 0.5
"""... and after it (recording or releasing the answer), when what is left is the Lambda's safety margin."""


class StoredAnswer(TypedDict):
    """A recorded answer, replayed byte for byte."""

    status: int
    media_type: str
    headers: dict[str, str]
    body: str


class StoreTimeout(TimeoutError):
    """Too little of the request's time is left to ask the store anything."""


class Store:
    """Powertools' DynamoDB persistence layer for one table: one layer (and boto3 client) per call budget in
    ``BUCKETS``, each built on first use and kept for the container.

    ``store.layer(1.5)`` is the 1 s bucket's layer: its every call (connect, read, retries) ends within 1 s.
    """

    def __init__(self, table_name: str, expires_after_seconds: int):
        self.table_name = table_name
        self.expires_after_seconds = expires_after_seconds
        self._layers: dict[float, DynamoDBPersistenceLayer] = {}
        self._session: Session | None = None

    def layer(self, budget: float = BUCKETS[-1]) -> DynamoDBPersistenceLayer:
        bucket = max((b for b in BUCKETS if b <= budget), default=None)
        if bucket is None:
            raise StoreTimeout(f"{max(budget, 0):.2f} s is too little for a store call")
        if bucket not in self._layers:
            from aws_lambda_powertools.utilities.idempotency import (
                DynamoDBPersistenceLayer,
                IdempotencyConfig,
            )

            if self._session is None:  # one session for every bucket: the service model is loaded once
                import boto3

                self._session = boto3.session.Session()
            layer = DynamoDBPersistenceLayer(
                table_name=self.table_name, boto_config=bounded_config(bucket), boto3_session=self._session
            )
            config = IdempotencyConfig(
                event_key_jmespath="key",
                payload_validation_jmespath="body",
                raise_on_no_idempotency_key=True,
                expires_after_seconds=self.expires_after_seconds,
                hash_function="sha256",
            )
            layer.configure(config, function_name="chatloop")
            self._layers[bucket] = layer
        return self._layers[bucket]


def budget_of(request: Request, share: float = STORE_SHARE) -> float:
    """Seconds one store call may take now: IDEMPOTENCY_TIMEOUT_SECONDS, and at most ``share`` of the time left
    (a fifth before the turn, half after it)."""
    ctx = RequestContext.of(request)
    return min(ctx.settings.idempotency_timeout_seconds, ctx.remaining_ms() / 1000 * share)


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
        ctx = RequestContext.of(request)  # the request's clock starts now (make run)
        caller = ctx.caller
        if caller is None:  # never a shared scope: another caller could replay this answer
            logger.warning("idempotency: the request names no caller; answering without deduplication")
            return await route(request)
        body = await read_within(request, request.app.state.runtime.settings.max_body_bytes)  # 413 past it
        data = {  # the record's key (caller, path, Idempotency-Key) and the body's hash
            "key": f"{caller}|{request.url.path}|{key}",
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
            await _release(store, data, request)
            raise
        if isinstance(response, StreamingResponse):
            return RecordedStream(response, store, data, request)
        await _save(store, data, request, response, bytes(response.body))
        return response

    return handle


async def _claim(store: Store, data: dict[str, str], request: Request, attempt: int = 0) -> Response | bool:
    """True: this request runs and records its answer. False: the store failed (run unrecorded). A Response: the
    stored answer, or why it cannot be had (409, 422)."""
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyItemAlreadyExistsError,
        IdempotencyItemNotFoundError,
        IdempotencyValidationError,
    )

    try:
        layer = store.layer(budget_of(request))  # no region or credentials fails here: a store failure too
        remaining_ms = RequestContext.of(request).remaining_ms()
        await to_thread.run_sync(layer.save_inprogress, data, remaining_ms)
        return True
    except IdempotencyValidationError:
        return _mismatch(request)
    except IdempotencyItemAlreadyExistsError as exc:
        try:
            record = exc.old_data_record or await to_thread.run_sync(
                store.layer(budget_of(request)).get_record, data
            )
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


def _replay(stored: StoredAnswer) -> Response:
    headers = {**stored.get("headers", {}), REPLAYED_HEADER: "true"}
    return Response(
        stored["body"], status_code=stored["status"], headers=headers, media_type=stored["media_type"]
    )


async def _release(store: Store, data: dict[str, str], request: Request) -> None:
    """Forget the in-progress record: the request did not finish, so a retry must run it. Shielded: it runs when
    the request is being cancelled (a client that went away) too."""
    with anyio.CancelScope(shield=True):
        try:
            layer = store.layer(budget_of(request, END_SHARE))
            await to_thread.run_sync(layer.delete_record, data, RuntimeError("not completed"))
        except Exception as failure:
            _store_failed(failure)


async def _save(
    store: Store, data: dict[str, str], request: Request, response: Response, body: bytes
) -> None:
    if response.status_code != 200:
        await _release(store, data, request)
        return
    if len(body) > MAX_STORED_BYTES:
        logger.info(f"idempotency: the answer is {len(body)} bytes, over {MAX_STORED_BYTES}; not stored")
        await _release(store, data, request)
        return
    stored: StoredAnswer = {
        "status": response.status_code,
        "media_type": response.media_type or response.headers.get("content-type", "application/json"),
        "headers": {k: v for k, v in response.headers.items() if k in {"x-request-id", "cache-control"}},
        "body": body.decode("utf-8"),
    }
    with anyio.CancelScope(shield=True):
        try:
            layer = store.layer(budget_of(request, END_SHARE))
            await to_thread.run_sync(layer.save_success, data, dict(stored))
        except Exception as failure:
            _store_failed(failure)


class RecordedStream(Response):
    """A streamed answer, sent as it is produced and recorded once it is complete. When it does not complete (the
    client went away, the stream failed), its in-progress record is released once the response is over: a retry
    with the same key runs again."""

    def __init__(self, inner: StreamingResponse, store: Store, data: dict[str, str], request: Request):
        self.inner, self.store, self.data, self.request = inner, store, data, request
        self.status_code = inner.status_code
        self.media_type = inner.media_type
        self.background = None
        self.raw_headers = inner.raw_headers
        self.finished = False
        self._chunks = inner.body_iterator
        inner.body_iterator = self._teed()

    async def _teed(self) -> AsyncIterator[bytes]:
        seen: list[bytes] = []
        async for chunk in self._chunks:
            piece = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
            if piece != b": ping\n\n":  # heartbeats are the connection's, not the answer's
                seen.append(piece)
            yield piece
        self.finished = True
        if (
            self.request.scope.get(STOP_REASON) == "all_models_failed"
        ):  # nothing to replay: a retry runs again
            await _release(self.store, self.data, self.request)
        else:
            await _save(self.store, self.data, self.request, self, b"".join(seen))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.inner(scope, receive, send)
        finally:
            if not self.finished:  # the turn did not finish: nothing is stored, so a retry must run it
                await _release(self.store, self.data, self.request)
