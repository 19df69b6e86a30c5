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
    await run_worker(app, {"chatloop_background": {"response_id": "resp_…", "owner": "…"}}, seconds_left=880.0)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.http.wire import JSONBody
from chatloop.api.openai.conversations.endpoints import not_found, store_context, store_errors
from chatloop.api.runs.journaled import WORKER_SCOPE
from chatloop.api.runs.record import call_deadline, runs_of
from chatloop.api.runs.running import keep_task, stop_here
from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject, json_object
from chatloop.observability import logger
from chatloop.store.model import StoredEvent

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from chatloop.api.openai.responses.objects import ResponseEcho
    from chatloop.api.openai.responses.schemas import ResponsesBody
    from chatloop.api.openai.responses.stored import Keeping
    from chatloop.config import Settings

EVENT_KEY = "chatloop_background"
"""The asynchronous invocation's payload: ``{"chatloop_background": {"response_id": …, "owner": …}}``."""
CANCEL_WAIT_SECONDS = 3.0
"""How long ``cancel`` waits for the running turn to end (it ends within ~1 s) before answering as it stands."""


def is_worker(request: Request) -> bool:
    """Whether this request is a background worker running its turn (not a client asking for one)."""
    return WORKER_SCOPE in request.scope


def is_event(event: object) -> bool:
    """Whether a Lambda event (or the body the adapter passed through) is a background turn to run."""
    return isinstance(event, Mapping) and isinstance(event.get(EVENT_KEY), Mapping)


# --- queueing ---------------------------------------------------------------------------------------------
async def queue(request: Request, body: ResponsesBody, keeping: Keeping, echo: ResponseEcho) -> Response:
    """Keep the response ``queued`` (its record, ``response.queued`` as event 0, the run with the request), start
    its worker, and answer: the response, or with ``stream`` its events followed from the journal."""
    from chatloop.api.openai.responses.stored import input_items, stored_event

    ctx = RequestContext.of(request)
    if keeping.store is None or keeping.owner is None:
        raise RequestError(400, "invalid_request", "background: requires store: true", param="background")
    store, owner, deadline = keeping.store, keeping.owner, ctx.store_deadline()
    rid = f"resp_{ctx.request_id}"
    queued = _queued(rid, echo)
    raw = json.loads(await request.body())
    runs = runs_of(store)
    if runs is None:
        raise RequestError(400, "invalid_request", "background: this store keeps no runs", param="background")
    first = {"type": "response.queued", "sequence_number": 0, "response": queued}
    with store_errors():
        await store.create_response(owner, queued, input_items(body), deadline)
        await store.append_events(owner, rid, [stored_event(first)], deadline)
        await runs.begin(owner, rid, rid, "queued", deadline, json_object(raw), background=True)
    await _start_worker(request, owner, rid)
    logger.info(f"background response {rid} queued")
    if not body.stream:
        return JSONBody(queued)
    from chatloop.api.openai.responses.stored import longest_turn, replay
    from chatloop.api.runs.follow import follow_response

    events = [StoredEvent(0, json_object(first))]
    followed = follow_response(store, owner, rid, events, 0, ctx.deadline, longest_turn(request))
    return StreamingResponse(
        replay(followed),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-request-id": ctx.request_id},
    )


def _queued(rid: str, echo: ResponseEcho) -> JSONObject:
    from chatloop.api.openai.responses.endpoint import _skeleton

    skeleton = _skeleton(rid.removeprefix("resp_"), echo, int(time.time()))
    return json_object({**skeleton, "status": "queued", "background": True, "store": True})


async def _start_worker(request: Request, owner: str, rid: str) -> None:
    ctx = RequestContext.of(request)
    settings = ctx.settings
    payload: JSONObject = {EVENT_KEY: {"response_id": rid, "owner": owner}}
    if not settings.lambda_function_name:  # make run: this process runs it
        keep_task(asyncio.get_running_loop().create_task(_run_here(request.app, payload, settings)))
        return
    try:
        await asyncio.wait_for(
            asyncio.to_thread(invoke_self, settings, json.dumps(payload).encode(), 5.0), timeout=6.0
        )
    except Exception as error:  # the turn never starts: say so now, and leave no queued record behind
        logger.exception("the asynchronous invocation of a background response failed")
        from chatloop.api.runs.follow import end_response

        store = ctx.runtime.conversations()
        with store_errors():
            stored = await store.get_response(owner, rid, call_deadline())
            if stored is not None:
                failure: JSONObject = {"code": "server_error", "message": "the turn could not be started"}
                await end_response(store, owner, rid, stored, "failed", call_deadline(), error=failure)
        raise RequestError(
            503, "background_unavailable", "the background turn could not be started; try again"
        ) from error


async def _run_here(app: Starlette, payload: JSONObject, settings: Settings) -> None:
    try:
        await run_worker(app, payload, settings.background_timeout_seconds)
    except Exception:
        logger.exception("a background turn failed in this process")


_CLIENTS: dict[float, Any] = {}


def invoke_self(settings: Settings, payload: bytes, timeout: float) -> int:
    """``lambda.invoke`` of this function, ``InvocationType=Event`` (202: queued by Lambda)."""
    client = _CLIENTS.get(timeout)
    if client is None:
        import boto3

        from chatloop.aws import bounded_config

        client = _CLIENTS[timeout] = boto3.session.Session().client("lambda", config=bounded_config(timeout))
    qualifier = {"Qualifier": settings.lambda_function_version} if settings.lambda_function_version else {}
    answer = client.invoke(
        FunctionName=settings.lambda_function_name, InvocationType="Event", Payload=payload, **qualifier
    )
    status = int(answer["StatusCode"])
    if status != 202:
        raise RuntimeError(f"lambda.invoke answered {status}")
    return status


# --- the worker -------------------------------------------------------------------------------------------
async def run_worker(app: Starlette, event: Mapping[str, Any], seconds_left: float) -> JSONObject:
    """Run the background turn ``event`` names, once: ``{"ran": true}``, or ``{"ran": false}`` when another
    delivery claimed it first, it was cancelled while queued, or it is gone."""
    from chatloop.api.openai.responses.endpoint import responses
    from chatloop.api.runs.follow import end_response

    task = event.get(EVENT_KEY)
    if not isinstance(task, Mapping):
        return {"ran": False, "reason": "not a background event"}
    rid, owner = task.get("response_id"), task.get("owner")
    if not isinstance(rid, str) or not isinstance(owner, str) or not rid.startswith("resp_"):
        return {"ran": False, "reason": "malformed event"}
    runtime = app.state.runtime
    store = runtime.conversations()
    runs = runs_of(store)
    if runs is None:
        return {"ran": False, "reason": "no runs in this store"}
    claimed = await runs.move(owner, rid, rid, {"queued"}, "in_progress", call_deadline())
    if claimed is None:
        logger.info(f"background response {rid}: not run here (claimed before, cancelled, or gone)")
        return {"ran": False, "reason": "already claimed"}
    raw = await runs.request_of(owner, rid, call_deadline())
    stored = await store.get_response(owner, rid, call_deadline())
    if raw is None or stored is None:
        await runs.move(owner, rid, rid, {"in_progress"}, "failed", call_deadline())
        return {"ran": False, "reason": "gone"}
    await store.update_response(owner, rid, {**stored.body, "status": "in_progress"}, [], call_deadline())
    margin = runtime.settings.lambda_safety_margin_seconds
    seconds = min(runtime.settings.background_timeout_seconds, seconds_left - margin)
    request = _worker_request(app, {**raw, "stream": True}, owner, rid, Deadline.after(seconds))
    logger.info(f"background response {rid}: running ({seconds:.0f} s at most)")
    try:
        response = await responses(request)
    except Exception as error:  # its history went away meanwhile, say: the response fails, with the reason
        failure: JSONObject = {"code": "server_error", "message": "the turn failed before it started"}
        if isinstance(error, RequestError):
            failure = {"code": error.code, "message": error.message}
        else:  # a fault: logged here, never its text in the response
            logger.exception(f"background response {rid}: the turn could not start")
        await end_response(store, owner, rid, stored, "failed", call_deadline(), error=failure)
        await runs.move(owner, rid, rid, {"in_progress"}, "failed", call_deadline())
        from chatloop.api.runs.webhooks import notify

        await notify(runtime.settings, rid, "failed")  # an ending like any other: its webhook is sent
        return {"ran": True, "status": "failed"}
    if isinstance(response, StreamingResponse):
        async for _ in response.body_iterator:  # the journal, not this stream, is what clients read
            pass
    run = await runs.get(owner, rid, call_deadline())
    return {"ran": True, "status": run.status if run is not None else "unknown"}


def _worker_request(app: Starlette, body: JSONObject, owner: str, rid: str, deadline: Deadline) -> Request:
    """The ``POST /v1/responses`` the worker runs: the stored request, on behalf of its caller, under the response's
    own id, with the worker's deadline."""
    data = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/responses",
        "raw_path": b"/v1/responses",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        "client": None,
        "server": None,
        "app": app,
        WORKER_SCOPE: rid,
    }
    sent = False

    async def receive() -> dict[str, object]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": data, "more_body": False}

    request = Request(scope, receive)
    ctx = RequestContext.of(request)
    # What a client's request works out from its headers, the worker knows: whose turn, which id, how long.
    ctx.__dict__.update(caller=owner, request_id=rid.removeprefix("resp_"), deadline=deadline)
    return request


# --- the endpoints ----------------------------------------------------------------------------------------
async def events(request: Request) -> Response:
    """``POST /events`` (AWS_LWA_PASS_THROUGH_PATH): the asynchronous invocation, as the Web Adapter passes it
    through in stream mode. Only the adapter's own requests are taken, and none that came through API Gateway."""
    from chatloop.api.http import adapter

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
    invocation = adapter.invocation_of(request)
    settings = RequestContext.of(request).settings
    seconds_left = invocation.seconds_left() if invocation else settings.background_timeout_seconds
    return JSONBody(await run_worker(request.app, event, seconds_left))


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
    return loop.run_until_complete(run_worker(app, event, remaining_ms / 1000))


async def cancel_response(request: Request) -> Response:
    """``POST /v1/responses/{id}/cancel``: only a background response can be cancelled (OpenAI); idempotent; the
    response as it stands afterwards (``cancelled``, or how it ended before)."""
    from chatloop.api.openai.responses.stored import checked_id, longest_turn
    from chatloop.api.runs.follow import end_response, settled

    store, owner, deadline = store_context(request)
    rid = checked_id(str(request.path_params["response_id"]))
    longest = longest_turn(request)
    with store_errors():
        stored = await settled(store, owner, rid, longest, deadline)
        if stored is None:
            raise not_found("response", rid)
        if stored.body.get("background") is not True:
            raise RequestError(
                400, "invalid_request", "only a background response can be cancelled", param="response_id"
            )
        runs = runs_of(store)
        run = await runs.cancel(owner, rid, deadline) if runs is not None else None
        queued = run is not None and runs is not None and run.status == "queued"
        # No worker has it: end it here (a delivery that comes later finds it cancelled and runs nothing).
        if (
            queued
            and runs is not None
            and await runs.move(owner, rid, rid, {"queued"}, "cancelled", deadline)
        ):
            stored = await end_response(store, owner, rid, stored, "cancelled", deadline)
            from chatloop.api.runs.webhooks import notify

            await notify(RequestContext.of(request).settings, rid, "cancelled")
            return JSONBody(stored.body)
        stop_here((owner, rid))
        waited = Deadline.after(min(CANCEL_WAIT_SECONDS, deadline.remaining()))
        while stored is not None and stored.body.get("status") in ("queued", "in_progress"):
            if waited.expired():
                break
            await asyncio.sleep(0.1)
            stored = await store.get_response(owner, rid, deadline)
    if stored is None:
        raise not_found("response", rid)
    return JSONBody(stored.body)
