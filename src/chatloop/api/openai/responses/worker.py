"""The background worker: a queued ``/v1/responses`` turn run once, apart from the request that queued it
(``api.openai.responses.background`` queues it and hands it over: ``invoke_self`` on Lambda, a task of this process
under ``make run``). The worker claims the turn (``queued -> in_progress``, so a second delivery runs nothing), then
runs the stored request as ``POST /v1/responses`` on behalf of its caller, under the response's own id; its events
reach clients through the journal.

Usage::

    await run_worker(app, {"chatloop_background": {"response_id": "resp_…", "owner": "…"}}, seconds_left=880.0)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from chatloop.api.http.context import RequestContext
from chatloop.api.http.errors import RequestError
from chatloop.api.openai.responses.run import checked, respond
from chatloop.api.openai.responses.sealed_request import open_secrets
from chatloop.api.runs.follow import end_response
from chatloop.api.runs.record import call_deadline
from chatloop.api.runs.webhooks import notify
from chatloop.api.turns.serve import queued_slot, released_from_queue
from chatloop.api.turns.worker import WORKER_SCOPE
from chatloop.aws import bounded_config
from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.observability import logger

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from chatloop.config import Settings
    from chatloop.store.model import StoredResponse
    from chatloop.store.protocol import ConversationStore, RunRecords

EVENT_KEY = "chatloop_background"
"""The asynchronous invocation's payload: ``{"chatloop_background": {"response_id": …, "owner": …}}``."""

_CLIENTS: dict[float, Any] = {}


def invoke_self(settings: Settings, payload: bytes, timeout: float) -> int:
    """``lambda.invoke`` of this function, ``InvocationType=Event`` (202: queued by Lambda)."""
    client = _CLIENTS.get(timeout)
    if client is None:
        import boto3  # with the first asynchronous invocation, not at import (cold start)

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
    task = event.get(EVENT_KEY)
    if not isinstance(task, Mapping):
        return {"ran": False, "reason": "not a background event"}
    rid, owner = task.get("response_id"), task.get("owner")
    if not isinstance(rid, str) or not isinstance(owner, str) or not rid.startswith("resp_"):
        return {"ran": False, "reason": "malformed event"}
    runtime = app.state.runtime
    store = runtime.stores.conversations()
    runs = store.runs
    claimed = await runs.move(owner, rid, rid, {"queued"}, "in_progress", call_deadline())
    if claimed is None:
        logger.info(f"background response {rid}: not run here (claimed before, cancelled, or gone)")
        return {"ran": False, "reason": "already claimed"}
    raw = await runs.request_of(owner, rid, call_deadline())
    stored = await store.responses.get(owner, rid, call_deadline())
    if raw is None or stored is None:
        await runs.move(owner, rid, rid, {"in_progress"}, "failed", call_deadline())
        gone = _worker_request(app, {}, owner, rid, call_deadline())
        await released_from_queue(
            RequestContext.of(gone), rid.removeprefix("resp_")
        )  # its slot, taken when queued
        return {"ran": False, "reason": "gone"}
    await store.responses.update(owner, rid, {**stored.body, "status": "in_progress"}, [], call_deadline())
    margin = runtime.settings.lambda_safety_margin_seconds
    seconds = min(runtime.settings.background_timeout_seconds, seconds_left - margin)
    deadline = Deadline.after(seconds)
    logger.info(f"background response {rid}: running ({seconds:.0f} s at most)")
    slot = RequestContext.of(_worker_request(app, {}, owner, rid, deadline))
    async with queued_slot(slot):  # the caller's slot, taken when queued, until it ends
        return await _run(app, raw, deadline, store, runs, owner, rid, stored)


async def _run(
    app: Starlette,
    raw: JSONObject,
    deadline: Deadline,
    store: ConversationStore,
    runs: RunRecords,
    owner: str,
    rid: str,
    stored: StoredResponse,
) -> JSONObject:
    """The claimed turn run to its end: ``{"ran": true, "status": …}``."""
    runtime = app.state.runtime
    try:
        body = await open_secrets(runtime, owner, rid, raw)  # sealed when it was queued
        request = _worker_request(app, {**body, "stream": True}, owner, rid, deadline)
        response = await respond(request, await checked(request))
    except Exception as error:  # its history went away meanwhile, say: the response fails, with the reason
        failure: JSONObject = {"code": "server_error", "message": "the turn failed before it started"}
        if isinstance(error, RequestError):
            failure = {"code": error.code, "message": error.message}
        else:  # a fault: logged here, never its text in the response
            logger.exception(f"background response {rid}: the turn could not start")
        await end_response(store, owner, rid, stored, "failed", call_deadline(), error=failure)
        await runs.move(owner, rid, rid, {"in_progress"}, "failed", call_deadline())
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
