"""The background worker: a queued ``/v1/responses`` turn run once, apart from the request that queued it
(``api.openai.responses.background`` queues it and hands it over: ``invoke_self`` on Lambda, a task of this process
under ``make run``). The worker claims the turn (``queued -> in_progress``, so a second delivery runs nothing), then
runs it as a ``TurnJob`` (its caller, its response's id, its deadline, the stored request, and what its queueing
did: ``QUEUED``) in a context with no request at all (``RequestContext.for_job``) through the same ``/v1/responses``
door as a client's request, never queued again; its events reach clients through the journal.

Usage::

    await run_worker(runtime, {"chatloop_background": {"response_id": "resp_…", "owner": "…"}}, seconds_left=880.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.responses import StreamingResponse

from chatloop.api.http.context import RESPONSE_ID_PREFIX, RequestContext, TurnJob
from chatloop.api.http.errors import RequestError
from chatloop.api.openai.responses.run import ResponsesDoor
from chatloop.api.openai.responses.schemas import ResponsesBody
from chatloop.api.openai.responses.sealed_request import open_secrets
from chatloop.api.runs.follow import end_response
from chatloop.api.runs.record import call_deadline
from chatloop.api.runs.webhooks import notify
from chatloop.api.turns.checks import body_of
from chatloop.api.turns.pipeline import run_door
from chatloop.api.turns.serve import queued_slot, released_from_queue
from chatloop.aws import bounded_config
from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.observability import logger

if TYPE_CHECKING:
    from chatloop.api.runtime import Runtime
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
async def run_worker(runtime: Runtime, event: Mapping[str, Any], seconds_left: float) -> JSONObject:
    """Run the background turn ``event`` names, once: ``{"ran": true}``, or ``{"ran": false}`` when another
    delivery claimed it first, it was cancelled while queued, or it is gone."""
    task = event.get(EVENT_KEY)
    if not isinstance(task, Mapping):
        return {"ran": False, "reason": "not a background event"}
    rid, owner = task.get("response_id"), task.get("owner")
    if not isinstance(rid, str) or not isinstance(owner, str) or not rid.startswith(RESPONSE_ID_PREFIX):
        return {"ran": False, "reason": "malformed event"}
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
        gone = TurnJob(owner, rid, call_deadline(), {})
        await released_from_queue(
            RequestContext.for_job(runtime, gone), gone.request_id
        )  # its slot, taken when queued
        return {"ran": False, "reason": "gone"}
    await store.responses.update(owner, rid, {**stored.body, "status": "in_progress"}, [], call_deadline())
    margin = runtime.settings.lambda_safety_margin_seconds
    seconds = min(runtime.settings.background_timeout_seconds, seconds_left - margin)
    logger.info(f"background response {rid}: running ({seconds:.0f} s at most)")
    job = TurnJob(owner, rid, Deadline.after(seconds), raw)
    ctx = RequestContext.for_job(runtime, job)
    async with queued_slot(ctx):  # the caller's slot, taken when queued, until it ends
        return await _run(ctx, job, store, runs, stored)


async def _run(
    ctx: RequestContext, job: TurnJob, store: ConversationStore, runs: RunRecords, stored: StoredResponse
) -> JSONObject:
    """The claimed job run to its end: ``{"ran": true, "status": …}``."""
    runtime, owner, rid = ctx.runtime, job.owner, job.response_id
    try:
        opened = await open_secrets(runtime, owner, rid, job.body)  # sealed when it was queued
        body = body_of({**opened, "stream": True}, ResponsesBody)
        response = await run_door(ctx, ResponsesDoor(), body)  # run now: a job is never queued again
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
