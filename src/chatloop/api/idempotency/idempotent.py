"""Retried requests answered once: an ``Idempotency-Key`` header (the name Stripe and the IETF draft use) makes a
request run at most once within the expiry, with Powertools Idempotency's DynamoDB persistence layer keeping the
record (in progress, then the stored response). The records are ``store/idempotency.py``'s; this module is the
route wrapper.

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
  store-call time bucket, built on first use and kept for the container). A store that hangs degrades like one that
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
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
from anyio import to_thread
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import error_response
from chatloop.api.http.request_limits import read_within
from chatloop.observability import logger, metrics

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord

    from chatloop.store.idempotency import IdempotencyRecords, StoredAnswer

HEADER = "idempotency-key"
MAX_KEY_LENGTH = 255
MAX_STORED_BYTES = 350_000
"""DynamoDB items are at most 400 KB; the record's other attributes need the rest."""
REPLAYED_HEADER = "idempotent-replayed"
Route = Callable[[Request], Awaitable[Response]]
STORE_SHARE = 0.2
"""The largest share of a request's remaining time one store call may take before the turn (the turn needs the
rest)."""
END_SHARE = 0.5
"""... and after it (recording or releasing the answer), when what is left is the Lambda's safety margin."""


@dataclass(frozen=True)
class Claimed:
    """The request is claimed: it runs, and its answer is recorded (or its claim released)."""


@dataclass(frozen=True)
class Unrecorded:
    """The records failed (logged and counted): the request runs anyway, once more than asked, and nothing is kept."""


@dataclass(frozen=True)
class Answered:
    """The request does not run: ``response`` is the recorded answer replayed, or why it cannot be had (409, 422)."""

    response: Response


Claim = Claimed | Unrecorded | Answered
"""What claiming a request's record decided (``_claim``)."""


def call_time(request: Request, share: float = STORE_SHARE) -> float:
    """Seconds one store call may take now: IDEMPOTENCY_TIMEOUT_SECONDS, and at most ``share`` of the time left
    (a fifth before the turn, half after it)."""
    ctx = RequestContext.of(request)
    return min(ctx.settings.idempotency_timeout_seconds, ctx.remaining_ms() / 1000 * share)


def idempotent(route: Route) -> Route:
    """``route`` with Idempotency-Key handling, when the app has a store (IDEMPOTENCY_TABLE_NAME)."""

    async def handle(request: Request) -> Response:
        records: IdempotencyRecords | None = request.app.state.runtime.stores.idempotency
        key = request.headers.get(HEADER)
        if records is None or key is None:
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
        claim = await _claim(records, data, request)
        if isinstance(claim, Answered):
            return claim.response
        if isinstance(claim, Unrecorded):
            return await route(request)
        try:
            response = await route(request)
        except BaseException:
            await _release(records, data, request)
            raise
        if isinstance(response, StreamingResponse):
            return RecordedStream(response, records, data, request)
        await _save(records, data, request, response, bytes(response.body))
        return response

    return handle


async def _claim(
    records: IdempotencyRecords, data: dict[str, str], request: Request, attempt: int = 0
) -> Claim:
    """Claim the request's record (in progress): ``Claimed`` when it is this request's, else what the record already
    there says (``_answer_for``), ``Unrecorded`` when the records fail."""
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyItemAlreadyExistsError,
        IdempotencyItemNotFoundError,
        IdempotencyValidationError,
    )

    try:
        layer = records.layer(call_time(request))  # no region or credentials fails here: a store failure too
        remaining_ms = RequestContext.of(request).remaining_ms()
        await to_thread.run_sync(layer.save_inprogress, data, remaining_ms)
        return Claimed()
    except IdempotencyValidationError:
        return Answered(_mismatch(request))
    except IdempotencyItemAlreadyExistsError as exc:
        try:
            record = exc.old_data_record or await to_thread.run_sync(
                records.layer(call_time(request)).get_record, data
            )
        except IdempotencyValidationError:
            return Answered(_mismatch(request))
        except IdempotencyItemNotFoundError:
            record = None  # it expired or was released meanwhile
        except Exception as failure:
            return _store_failed(failure)
        if record is None:
            if attempt:
                return _store_failed(RuntimeError("the record vanished twice"))
            return await _claim(records, data, request, attempt + 1)
        return Answered(_answer_for(record, request))
    except Exception as failure:
        return _store_failed(failure)


def _answer_for(record: DataRecord, request: Request) -> Response:
    """What a record another request holds answers, by its status (as Powertools' ``_handle_for_status``): a
    completed one its answer replayed; one still in progress a 409 with ``retry-after``."""
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


def _mismatch(request: Request) -> Response:
    return error_response(
        request,
        422,
        "idempotency_key_reused",
        "this Idempotency-Key was used with a different request body; use a new key for a new request",
    )


def _store_failed(failure: BaseException) -> Unrecorded:
    logger.warning(f"idempotency store failed ({type(failure).__name__}): answering without deduplication")
    metrics.add_metric(name="IdempotencyErrors", unit="Count", value=1)
    return Unrecorded()


def _replay(stored: StoredAnswer) -> Response:
    headers = {**stored.get("headers", {}), REPLAYED_HEADER: "true"}
    return Response(
        stored["body"], status_code=stored["status"], headers=headers, media_type=stored["media_type"]
    )


async def _release(records: IdempotencyRecords, data: dict[str, str], request: Request) -> None:
    """Forget the in-progress record: the request did not finish, so a retry must run it. Shielded: it runs when
    the request is being cancelled (a client that went away) too."""
    with anyio.CancelScope(shield=True):
        try:
            layer = records.layer(call_time(request, END_SHARE))
            await to_thread.run_sync(layer.delete_record, data, RuntimeError("not completed"))
        except Exception as failure:
            _store_failed(failure)


async def _save(
    records: IdempotencyRecords, data: dict[str, str], request: Request, response: Response, body: bytes
) -> None:
    if response.status_code != 200:
        await _release(records, data, request)
        return
    if len(body) > MAX_STORED_BYTES:
        logger.info(f"idempotency: the answer is {len(body)} bytes, over {MAX_STORED_BYTES}; not stored")
        await _release(records, data, request)
        return
    stored: StoredAnswer = {
        "status": response.status_code,
        "media_type": response.media_type or response.headers.get("content-type", "application/json"),
        "headers": {k: v for k, v in response.headers.items() if k in {"x-request-id", "cache-control"}},
        "body": body.decode("utf-8"),
    }
    with anyio.CancelScope(shield=True):
        try:
            layer = records.layer(call_time(request, END_SHARE))
            await to_thread.run_sync(layer.save_success, data, dict(stored))
        except Exception as failure:
            _store_failed(failure)


class RecordedStream(StreamingResponse):
    """A streamed answer, sent as it is produced and recorded once it is complete. When it does not complete (the
    client went away, the stream failed), its in-progress record is released once the response is over: a retry
    with the same key runs again."""

    def __init__(
        self, inner: StreamingResponse, records: IdempotencyRecords, data: dict[str, str], request: Request
    ):
        self.records, self.data, self.request = records, data, request
        self.finished = False
        super().__init__(
            self._teed(inner.body_iterator),
            status_code=inner.status_code,
            media_type=inner.media_type,
            background=inner.background,
        )
        self.raw_headers = inner.raw_headers  # the inner response's headers, as they were

    async def _teed(self, chunks: AsyncIterable[str | bytes | memoryview]) -> AsyncIterator[bytes]:
        seen: list[bytes] = []
        async for chunk in chunks:
            piece = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
            if piece != b": ping\n\n":  # heartbeats are the connection's, not the answer's
                seen.append(piece)
            yield piece
        self.finished = True
        if (
            RequestContext.of(self.request).stop_reason == "all_models_failed"
        ):  # nothing to replay: a retry runs again
            await _release(self.records, self.data, self.request)
        else:
            await _save(self.records, self.data, self.request, self, b"".join(seen))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self.finished:  # the turn did not finish: nothing is stored, so a retry must run it
                await _release(self.records, self.data, self.request)
