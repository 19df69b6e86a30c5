"""Serving a turn through a renderer: the one path every turn endpoint takes once its request is checked.

``turn_events`` runs the engine for the request (with the request id on ``done`` and the turn's metrics recorded);
``serve_turn`` answers with its renderer, streamed or not. A stream is guarded once here for every API (whatever
fails mid-way, the renderer's terminal event still goes out), each chunk is redacted once as it leaves, and the
deltas are redacted as one text (``held_secrets``) before any renderer sees them.

Usage (an endpoint)::

    events = turn_events(ctx, turn, model, registry)
    return await serve_turn(ctx, ChatRenderer(), events, stream=body.stream)
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Protocol

from starlette.responses import Response, StreamingResponse

from chatloop.api.http.context import AdmittedTurn, RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.http.ratelimit_headers import given_back
from chatloop.api.http.wire import JSONBody, with_heartbeats
from chatloop.api.turns.metrics import record_turn_metrics
from chatloop.engine import Event, StopReason, TurnRequest, TurnSummary, run_turn
from chatloop.engine.events import Delta, Done, TurnError
from chatloop.observability import logger, metrics
from chatloop.providers.base import ChatModel
from chatloop.providers.chain import FallbackChain
from chatloop.redaction import SecretHold, redact
from chatloop.tools.base import ToolRegistry

INTERNAL_ERROR = TurnError("internal_error", "internal error while sending the response")
"""What a stream that broke mid-way tells its client (the traceback stays in the log)."""


class Renderer(Protocol):
    """One wire API's view of a turn's events (``chat.endpoint.ChatRenderer``,
    ``openai.chat_completions.CompletionRenderer``, ``openai.responses.render.ResponsesRenderer``): it only renders.
    A renderer serves one request; it may keep state between its calls."""

    stream_failure_log: str
    """The log line (with the traceback) when its stream breaks mid-way."""

    def frames(self, events: AsyncIterator[Event]) -> AsyncIterator[str]:
        """The stream: SSE frames, unredacted, a chunk at a time (frames known together may share a chunk)."""
        ...

    def broken(self) -> str:
        """The frames that end a stream which broke before its terminal event ('' when that went out)."""
        ...

    async def answer(self, summary: TurnSummary, errors: Sequence[TurnError]) -> tuple[int, object]:
        """Not streamed: the status and JSON body for the turn's summary (``errors``: the turn's ``error`` events;
        a renderer may answer a turn every model failed with an error response instead: ``failed_turn``)."""
        ...


async def budgeted(
    ctx: RequestContext,
    turn: TurnRequest,
    model: FallbackChain,
    registry: ToolRegistry,
) -> ChatModel:
    """The turn's model metered by the caller's budget (``api/turns/budgets.py``): a 429 or 503 now, before the response
    starts, when the budget refuses it (``api.turns.admission`` gives back what the turn had taken). The chain
    itself, with no store call, when no BUDGET_* limit is set."""
    if not ctx.settings.budgets_on():
        return model
    from chatloop.api.turns.budgets import admit

    return await admit(ctx, turn, model, registry)  # refused: the admission gives the approvals back


async def admitted_to_queue(
    ctx: RequestContext, turn: TurnRequest, model: FallbackChain, registry: ToolRegistry
) -> AdmittedTurn | None:
    """A background turn admitted by the caller's budget before anything is queued (``budgets.admit_queued``): the
    plain turn's 429 (or 503) now (``api.turns.admission`` gives back the approvals it answers). The admission's ``finish`` gives its slot
    back when the turn is not queued after all. None when no BUDGET_* limit is set (no store call)."""
    if not ctx.settings.budgets_on():
        return None
    from chatloop.api.turns.budgets import admit_queued

    return await admit_queued(ctx, turn, model, registry)


@contextlib.asynccontextmanager
async def queued_slot(ctx: RequestContext) -> AsyncIterator[None]:
    """A background worker's turn, holding the concurrent-turn slot its queueing took: renewed for the worker's own
    deadline as it starts, given back as it ends, however it ends (``budgets.renew_queued``, ``end_queued``)."""
    if not ctx.settings.budgets_on():
        yield
        return
    from chatloop.api.turns.budgets import end_queued, renew_queued

    lease = await renew_queued(ctx)
    try:
        yield
    finally:
        await end_queued(ctx, lease)


async def released_from_queue(ctx: RequestContext, turn_id: str) -> None:
    """A queued turn that will not run: its concurrent-turn slot given back now (``budgets.release_queued``)."""
    if not ctx.settings.budgets_on():
        return
    from chatloop.api.turns.budgets import release_queued

    await release_queued(ctx, turn_id)


def turn_events(
    ctx: RequestContext,
    turn: TurnRequest,
    model: FallbackChain,
    registry: ToolRegistry,
    conversation_id: str | None = None,
    *,
    metered: ChatModel | None = None,
) -> AsyncIterator[Event]:
    """The turn's events, with the request id on ``done``, metrics recorded from them, and traced when tracing is on
    (``conversation_id``: the stored conversation the turn belongs to); ``metered``: ``model`` under the caller's
    budget (``budgeted``)."""
    from chatloop.api.http.traced import traced_if_enabled  # with the first turn, not at import (cold start)

    def run(chain: FallbackChain) -> AsyncIterator[Event]:
        # The budget's wrapper holds the turn's chain, whose models tracing traces in place: metered calls are traced.
        called: ChatModel = chain if metered is None or metered is model else metered
        return run_turn(turn, called, registry, ctx.deadline, ctx.runtime.limits)

    events = measured(stamped(traced_if_enabled(ctx, model, run, conversation_id), ctx), ctx)
    if metered is None or metered is model:
        return events
    return given_back(ctx, events)


async def stamped(events: AsyncIterator[Event], ctx: RequestContext) -> AsyncIterator[Event]:
    """The turn's events with the request id on ``done``, whose stop reason is left in the request's scope for
    idempotency (a failed stream is not stored)."""
    async for event in events:
        if isinstance(event, Done):
            event = Done(event.summary.with_request_id(ctx.request_id))
            ctx.stop_reason = (
                event.summary.stop_reason.value
            )  # the idempotency wrapper: a failed stream is not kept
        yield event


async def measured(events: AsyncIterator[Event], ctx: RequestContext) -> AsyncIterator[Event]:
    """The turn's events as they are; once they end, the request counted (behind the adapter), the turn's metrics
    recorded from its ``done`` summary, and flushed (behind the adapter)."""
    summary: TurnSummary | None = None
    async for event in events:
        if isinstance(event, Done):
            summary = event.summary
        yield event
    behind_adapter = ctx.invocation is not None
    if behind_adapter:  # the handler counts requests under Mangum; behind the adapter, the turn does
        metrics.add_metric(name="Requests", unit="Count", value=1)
    if summary is not None:
        record_turn_metrics(summary, in_lambda=ctx.in_lambda)
    if behind_adapter:  # no log_metrics decorator around a long-running server: flush per request
        metrics.flush_metrics()


async def observed_by(
    observe: Callable[[Event], object], events: AsyncIterator[Event]
) -> AsyncIterator[Event]:
    """``events`` as they are, each one before ``done`` that is no ``error`` also given to ``observe`` (a body built
    from the events rather than the summary, as the Responses API's is), with the deltas redacted as one text first
    (``held_secrets``), as a stream's are."""
    async for event in held_secrets(events):
        if not isinstance(event, Done | TurnError):
            observe(event)
        yield event


async def serve_turn(
    ctx: RequestContext,
    renderer: Renderer,
    events: AsyncIterator[Event],
    *,
    stream: bool,
    keep_running: Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]] | None = None,
) -> Response:
    """The turn's response through ``renderer``: its event stream (``keep_running`` may wrap the bytes, as a stored
    response does to outlive its client), or its JSON body once the turn is done."""
    if stream:
        return event_stream(turn_chunks(renderer, events, keep_running), ctx)
    summary = TurnSummary.failed()  # a turn always ends with its Done: this stands in for none
    errors: list[TurnError] = []
    async for event in events:
        if isinstance(event, Done):
            summary = event.summary
        elif isinstance(event, TurnError):
            errors.append(event)
    status, body = await renderer.answer(summary, errors)
    return JSONBody(body, status_code=status, headers={"x-request-id": ctx.request_id})


def turn_chunks(
    renderer: Renderer,
    events: AsyncIterator[Event],
    keep_running: Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]] | None = None,
) -> AsyncIterator[bytes]:
    """The turn's stream as it leaves, whatever carries it: the renderer's chunks, redacted and guarded
    (``guarded``), and wrapped by ``keep_running`` (a stored response's, to outlive its client). ``event_stream``
    sends them as SSE; ``wire.sse_data`` gives back the events they carry."""
    chunks = guarded(renderer, events)
    return keep_running(chunks) if keep_running else chunks


def event_stream(chunks: AsyncIterator[bytes], ctx: RequestContext) -> StreamingResponse:
    return StreamingResponse(
        with_heartbeats(chunks, ctx.settings.sse_heartbeat_seconds),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-request-id": ctx.request_id},
    )


async def guarded(renderer: Renderer, events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    """The renderer's stream as bytes, each chunk redacted once, whole (no configured secret or key-shaped string
    leaves, whatever produced it), and always ending with the renderer's terminal event: whatever fails on the
    way is logged and followed by ``renderer.broken()``."""
    try:
        async for chunk in renderer.frames(held_secrets(events)):
            yield redact(chunk).encode()
    except Exception:
        logger.exception(renderer.stream_failure_log)
        ending = renderer.broken()
        if ending:
            yield redact(ending).encode()


def failed_turn(summary: TurnSummary, errors: Sequence[TurnError]) -> RequestError | None:
    """The error response for a turn every model failed (None for any other turn), as the OpenAI APIs answer it:
    429 with ``retry-after`` while the whole chain cools down after rate limits, else 503."""
    if summary.stop_reason is not StopReason.ALL_MODELS_FAILED:
        return None
    failure = next((e for e in errors if e.code == "all_models_failed"), None)
    detail = failure.message if failure else "no model could answer"
    retry_after = failure.retry_after if failure else None
    if retry_after is not None:
        seconds = str(max(1, math.ceil(retry_after)))
        return RequestError(429, "rate_limit_exceeded", detail, headers={"retry-after": seconds})
    return RequestError(503, "all_models_failed", detail)


async def held_secrets(events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """The turn's events with their ``delta`` text redacted as one stream: a secret a model writes across several
    deltas is held until it can be redacted whole (``SecretHold``), then released; anything else releases what is
    held first, so no text is lost or reordered."""
    hold = SecretHold()
    last: Delta | None = None
    async for event in events:
        if isinstance(event, Delta):
            if event.seam and (held := hold.flush()):  # the text before the seam goes out before it
                yield _from_hold(held, last)
            last = event
            text = hold.feed(event.content)
            if text:
                yield replace(event, content=text)
            continue
        rest = hold.flush()
        if rest:
            yield _from_hold(rest, last)
        yield event
    rest = hold.flush()
    if rest:
        yield _from_hold(rest, last)


def _from_hold(text: str, last: Delta | None) -> Delta:
    return Delta(text, last.iteration if last else 0)
