"""Background responses (``background: true`` on ``/v1/responses``): answered at once, ``queued``; the turn runs to
its end apart from the request, and is polled, followed, resumed and cancelled through the store from any copy.

Where the turn runs:

- ``make run`` (no ``AWS_LAMBDA_FUNCTION_NAME``): a task of this process.
- Lambda: not here. A container is frozen once its response is sent, so nothing it starts then makes progress; the
  turn is handed to an asynchronous invocation of this same function (``lambda.invoke``, ``InvocationType=Event``,
  qualified by ``AWS_LAMBDA_FUNCTION_VERSION``, so the same code runs it; boto3 honours ``AWS_ENDPOINT_URL_LAMBDA``).
  Lambda queues the event and delivers it, in stream mode through the Web Adapter as a POST of the raw event to
  ``AWS_LWA_PASS_THROUGH_PATH`` (default ``/events``: awslabs/aws-lambda-web-adapter README, "Non-HTTP Event
  Triggers", and ``src/lib.rs`` ``fetch_response``: a pass-through request goes to that path), in buffered mode to
  the handler itself (``src/app.py``). That path refuses a request that is not the adapter's, and one that carries an
  API Gateway request context (``x-amzn-request-context``: a client reaching it through the API).

Lambda retries a failed asynchronous invocation and may deliver one twice: the worker claims the turn with a
conditional status move ``queued -> in_progress`` (``store.runs``), so only one delivery ever runs it; the others
answer ``{"ran": false}``.

Usage::

    POST /v1/responses {"background": true, "input": "…"}       -> 200 {"id": "resp_…", "status": "queued", …}
    POST /v1/responses/resp_…/cancel                           -> the response, cancelled (or already ended)
    await run_worker(runtime, {"chatloop_background": {"response_id": "resp_…", "owner": "…"}}, seconds_left=880.0)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from chatloop.api.http import adapter
from chatloop.api.http.context import RESPONSE_ID_PREFIX, RequestContext, response_id
from chatloop.api.http.errors import RequestError
from chatloop.api.http.wire import JSONBody
from chatloop.api.items.store import checked_id, not_found, store_context, store_errors
from chatloop.api.openai.responses.render import skeleton
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.openai.responses.sealed_request import seal_secrets
from chatloop.api.openai.responses.stored import Keeping, input_items
from chatloop.api.openai.responses.worker import EVENT_KEY, invoke_self, run_worker
from chatloop.api.runs.follow import end_response, follow_response, longest_turn, replay, settled
from chatloop.api.runs.journal import response_log, stored_event
from chatloop.api.runs.record import call_deadline
from chatloop.api.runs.running import keep_task
from chatloop.api.runs.turn import ask_to_stop, cancel_queued, stop_here
from chatloop.api.runs.webhooks import notify
from chatloop.api.turns.serve import released_from_queue
from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject, json_object
from chatloop.observability import logger
from chatloop.store.model import StoredEvent

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from chatloop.api.openai.responses.objects import ResponseEcho
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings
    from chatloop.store.protocol import RunRecords

CANCEL_WAIT_SECONDS = 3.0
"""How long ``cancel`` waits for the running turn to end (it ends within ~1 s) before answering as it stands."""


def is_event(event: object) -> bool:
    """Whether a Lambda event (or the body the adapter passed through) is a background turn to run."""
    return isinstance(event, Mapping) and isinstance(event.get(EVENT_KEY), Mapping)


# --- queueing ---------------------------------------------------------------------------------------------
async def queue(ctx: RequestContext, body: ResponsesBody, keeping: Keeping, echo: ResponseEcho) -> Response:
    """Keep the response ``queued`` (its record, ``response.queued`` as event 0, the run with the request), start
    its worker, and answer: the response, or with ``stream`` its events followed from the journal."""
    runs = queueable(keeping)
    if keeping.store is None or keeping.owner is None:
        raise TypeError("a queueable response is stored for a caller")
    store, owner, deadline = keeping.store, keeping.owner, ctx.store_deadline()
    rid = response_id(ctx.request_id)
    queued = _queued(rid, echo)
    # Kept until its worker runs it: its MCP servers' credentials sealed, never at rest in the clear.
    raw = await seal_secrets(
        ctx.runtime, owner, rid, json_object(json.loads(await ctx.raw_body(ctx.settings.max_body_bytes)))
    )
    first = {"type": "response.queued", "sequence_number": 0, "response": queued}
    with store_errors():
        await store.responses.create(owner, queued, input_items(body), deadline)
        await response_log(store, owner, rid).append([stored_event(first)], deadline)
        await runs.begin(owner, rid, rid, "queued", deadline, raw, background=True)
    await _start_worker(ctx, owner, rid)
    logger.info(f"background response {rid} queued")
    if not body.stream:
        return JSONBody(queued)
    events = [StoredEvent(0, json_object(first))]
    followed = follow_response(store, owner, rid, events, 0, ctx.deadline, longest_turn(ctx.settings))
    return StreamingResponse(
        replay(followed),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-request-id": ctx.request_id},
    )


def queueable(keeping: Keeping) -> RunRecords:
    """The runs a background response is queued in: a 400 naming ``background`` when it cannot be (checked before
    its budget is: bad input is refused before anything is counted)."""
    if keeping.store is None or keeping.owner is None:
        raise RequestError(400, "invalid_request", "background: requires store: true", param="background")
    return keeping.store.runs


def _queued(rid: str, echo: ResponseEcho) -> JSONObject:
    queued = skeleton(rid.removeprefix(RESPONSE_ID_PREFIX), echo, int(time.time()))
    return json_object({**queued, "status": "queued", "background": True, "store": True})


async def _start_worker(ctx: RequestContext, owner: str, rid: str) -> None:
    settings = ctx.settings
    payload: JSONObject = {EVENT_KEY: {"response_id": rid, "owner": owner}}
    if not settings.lambda_function_name:  # make run: this process runs it
        keep_task(asyncio.get_running_loop().create_task(_run_here(ctx.runtime, payload, settings)))
        return
    try:
        await asyncio.wait_for(
            asyncio.to_thread(invoke_self, settings, json.dumps(payload).encode(), 5.0), timeout=6.0
        )
    except Exception as error:  # the turn never starts: say so now, and leave no queued record behind
        logger.exception("the asynchronous invocation of a background response failed")
        store = ctx.runtime.stores.conversations()
        with store_errors():
            stored = await store.responses.get(owner, rid, call_deadline())
            if stored is not None:
                failure: JSONObject = {"code": "server_error", "message": "the turn could not be started"}
                await end_response(store, owner, rid, stored, "failed", call_deadline(), error=failure)
        raise RequestError(
            503, "background_unavailable", "the background turn could not be started; try again"
        ) from error


async def _run_here(runtime: Runtime, payload: JSONObject, settings: Settings) -> None:
    try:
        await run_worker(runtime, payload, settings.background_timeout_seconds)
    except Exception:
        logger.exception("a background turn failed in this process")


# --- the endpoints ----------------------------------------------------------------------------------------
async def events(request: Request) -> Response:
    """``POST /events`` (AWS_LWA_PASS_THROUGH_PATH): the asynchronous invocation, as the Web Adapter passes it
    through in stream mode. Only the adapter's own requests are taken, and none that came through API Gateway."""
    if not adapter.from_adapter(request) or _through_gateway(request):
        logger.warning(
            "a request to the pass-through path was refused: not an event the adapter passed through"
        )
        raise RequestError(
            403, "forbidden", "this path takes only the function's own asynchronous invocations"
        )
    try:
        event = json.loads(await request.body())
    except ValueError:
        raise RequestError(400, "invalid_request", "the event is not JSON") from None
    if not is_event(event):
        raise RequestError(400, "invalid_request", "not an event this function handles")
    ctx = RequestContext.of(request)
    invocation, settings = ctx.invocation, ctx.settings
    seconds_left = invocation.seconds_left() if invocation else settings.background_timeout_seconds
    return JSONBody(await run_worker(ctx.runtime, event, seconds_left))


def _through_gateway(request: Request) -> bool:
    """Whether the request carries an API Gateway request context: the adapter sends ``x-amzn-request-context`` on
    every request, the serialised ``RequestContext`` of the event, which for a pass-through event holds no
    ``requestId``/``stage`` (src/lib.rs ``fetch_response``); for an API Gateway or Function URL request it does."""
    text = request.headers.get("x-amzn-request-context")
    if not text:
        return False
    try:
        context = json.loads(text)
    except ValueError:
        return True  # not what the adapter writes
    return bool(context) and not (isinstance(context, dict) and set(context) <= {"type"})


def handle_event(app: Starlette, event: Mapping[str, Any], remaining_ms: float) -> JSONObject:
    """Buffered mode: the handler's answer to the asynchronous invocation (run on the handler's event loop)."""
    loop = asyncio.get_event_loop()
    return loop.run_until_complete(run_worker(app.state.runtime, event, remaining_ms / 1000))


async def cancel_response(request: Request) -> Response:
    """``POST /v1/responses/{id}/cancel``: only a background response can be cancelled (OpenAI); idempotent; the
    response as it stands afterwards (``cancelled``, or how it ended before)."""
    store, owner, deadline = store_context(request)
    rid = checked_id(str(request.path_params["response_id"]))
    longest = longest_turn(RequestContext.of(request).settings)
    with store_errors():
        stored = await settled(store, owner, rid, longest, deadline)
        if stored is None:
            raise not_found("response", rid)
        if stored.body.get("background") is not True:
            raise RequestError(
                400, "invalid_request", "only a background response can be cancelled", param="response_id"
            )
        run = await ask_to_stop(store, owner, rid, deadline)
        # No worker has it: end it here (a delivery that comes later finds it cancelled and runs nothing).
        if run is not None and run.status == "queued" and await cancel_queued(store, owner, rid, deadline):
            stored = await end_response(store, owner, rid, stored, "cancelled", deadline)
            await released_from_queue(RequestContext.of(request), rid.removeprefix(RESPONSE_ID_PREFIX))
            await notify(RequestContext.of(request).settings, rid, "cancelled")
            return JSONBody(stored.body)
        stop_here((owner, rid))
        waited = Deadline.after(min(CANCEL_WAIT_SECONDS, deadline.remaining()))
        while stored is not None and stored.body.get("status") in ("queued", "in_progress"):
            if waited.expired():
                break
            await asyncio.sleep(0.1)
            stored = await store.responses.get(owner, rid, deadline)
    if stored is None:
        raise not_found("response", rid)
    return JSONBody(stored.body)
