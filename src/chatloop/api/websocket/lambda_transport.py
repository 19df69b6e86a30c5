"""WebSocket mode on Lambda: an API Gateway WebSocket API's three routes answered by the buffered handler, and each
``response.create`` answered by posting the stream's events to the connection (``PostToConnection``).

- ``$connect``: the caller check. API Gateway has checked the key (the route's ``ApiKeyRequired``); the caller is
  read from the event as the HTTP API reads it (``apigw.caller_from``); none: refused (401), nothing recorded.
  Accepted: the connection is recorded with its caller (``connections.open``, kept for API Gateway's 2-hour
  connection maximum), since the next messages carry no identity of their own and may reach another container.
- ``$disconnect``: the record closed (``connections.close``).
- ``$default``: answered within API Gateway's 29 s integration limit, whatever the turn takes: a message that is
  not a ``response.create`` object is answered at once (``session.answer`` sends its ``error`` event); a
  ``response.create`` is handed to an asynchronous invocation of this same function, as a background response
  is (``lambda.invoke``, ``InvocationType=Event``, the same version), its MCP servers' credentials sealed
  (``sealed_request``: nothing secret in clear in the invoke payload). Without ``AWS_LAMBDA_FUNCTION_NAME``
  (tests, ``make invoke``) the turn runs here, in this invocation.
- the worker (the asynchronous invocation): claims the job once (Lambda may deliver an event twice), opens its
  secrets and calls ``session.answer`` with a ``ConnectionPoster`` as its ``Send``; its answer is Lambda's, never
  the client's. A connection the client closed stops the posting; the turn still ends, and is kept if stored.

Between messages nothing runs: an idle connection is API Gateway's alone, and costs no invocation.

Usage::

    if websocket.handles(event):                   # src/app.py asks it of every event
        return handle_event(app, event, context.get_remaining_time_in_millis())
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chatloop.api.http.errors import RequestError
from chatloop.api.openai.responses.sealed_request import open_secrets, seal_secrets
from chatloop.api.openai.responses.worker import invoke_self
from chatloop.api.runs.record import call_deadline
from chatloop.api.turns.sealing import seal, unseal
from chatloop.api.turns.statekey import state_key
from chatloop.api.websocket import WORKER_KEY, is_worker_event, session
from chatloop.api.websocket.apigw import (
    EventError,
    WebSocketEvent,
    caller_from,
    status,
    turn_id,
    websocket_event,
)
from chatloop.api.websocket.apigw_post import ConnectionPoster, management_client
from chatloop.api.websocket.messages import error_event, lane_of
from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.observability import logger
from chatloop.store.model import StoreUnavailable

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from chatloop.api.runtime import Runtime

INVOKE_SECONDS = 5.0
CALLER_KEY = "websocket-caller"
"""The STATE_KEY purpose that seals a connection's caller in its record at ``$connect``: a connection's next events
carry no identity, so ``$default`` reads it back from there, and the store never holds a caller in clear
(``store.core.owner_key`` hashes owners)."""


def handle_event(app: Starlette, event: Mapping[str, Any], remaining_ms: float) -> dict[str, Any]:
    """The handler's answer to a WebSocket API event or a worker invocation (run on the handler's event loop)."""
    loop = asyncio.get_event_loop()
    if is_worker_event(event):
        return loop.run_until_complete(run_worker(app, event, remaining_ms / 1000))
    return loop.run_until_complete(route(app, event, remaining_ms / 1000))


async def route(app: Starlette, raw: Mapping[str, Any], seconds_left: float) -> dict[str, Any]:
    """One route's event answered: see the module docstring."""
    try:
        event = websocket_event(raw)
    except EventError as error:
        logger.warning(f"websocket event refused: {error}")
        return status(400, str(error))
    runtime: Runtime = app.state.runtime
    if event.kind == "connect":
        return await _connect(runtime, event)
    if event.kind == "disconnect":
        await _disconnect(runtime, event)
        return status(200)
    return await _message(app, event, seconds_left)


async def _connect(runtime: Runtime, event: WebSocketEvent) -> dict[str, Any]:
    caller = caller_from(event.context)
    if caller is None:
        logger.warning(
            f"websocket {event.connection_id}: refused at $connect, no caller identity (no API key id)"
        )
        return status(401, "this connection names no caller (no API key id or IAM identity)")
    connections = runtime.stores.state().connections
    ttl = runtime.settings.websocket_max_connection_seconds
    cid = event.connection_id
    try:
        sealed = seal(await state_key(runtime, CALLER_KEY), cid.encode(), {"caller": caller})
        await connections.open(cid, caller, ttl, store_deadline(runtime), sealed_caller=sealed)
    except StoreUnavailable as error:  # refused: a connection nobody can continue on is no use
        logger.warning(f"websocket {cid}: refused at $connect, the store is unavailable: {error}")
        return status(503, "the conversation store is unavailable; try again")
    logger.info(f"websocket {cid}: connected")
    return status(200)


async def caller_of(runtime: Runtime, connection_id: str) -> str | None:
    """The caller ``$connect`` established for ``connection_id``; None for a connection not (or no longer) open."""
    connections = runtime.stores.state().connections
    sealed = await connections.sealed_caller_of(connection_id, store_deadline(runtime))
    if sealed is None:
        return None
    try:  # bound to its connection: a record copied to another connection id does not open
        caller = unseal(await state_key(runtime, CALLER_KEY), connection_id.encode(), sealed).get("caller")
    except ValueError:
        logger.warning(f"websocket {connection_id}: its caller record does not open (STATE_KEY changed?)")
        return None
    return caller if isinstance(caller, str) else None


async def _disconnect(runtime: Runtime, event: WebSocketEvent) -> None:
    connections = runtime.stores.state().connections
    cid = event.connection_id
    try:
        await connections.close(cid, store_deadline(runtime))
    except StoreUnavailable as error:  # its records expire with the connection's longest life anyway
        logger.warning(f"websocket {cid}: not closed in the store ({error}); its records expire on their own")
    logger.info(f"websocket {cid}: disconnected")


def store_deadline(runtime: Runtime) -> Deadline:
    return Deadline.after(runtime.settings.conversation_store_timeout_seconds)


async def _message(app: Starlette, event: WebSocketEvent, seconds_left: float) -> dict[str, Any]:
    runtime: Runtime = app.state.runtime
    settings = runtime.settings
    endpoint = settings.websocket_management_endpoint or event.endpoint
    # what API Gateway waits for $default (REQUEST_TIMEOUT_SECONDS, under its 29 s), within the invocation's time
    deadline = Deadline.after(
        min(settings.request_timeout_seconds, seconds_left - settings.lambda_safety_margin_seconds)
    )
    try:
        caller = await caller_of(runtime, event.connection_id)
    except StoreUnavailable as error:
        logger.warning(f"websocket {event.connection_id}: the store is unavailable: {error}")
        refused = RequestError(503, "store_unavailable", "the conversation store is unavailable; try again")
        await _post_one(endpoint, event.connection_id, deadline, error_event(refused))
        return status(200)
    if caller is None:  # not open (closed, expired, or never accepted): nothing runs for nobody
        logger.warning(f"websocket {event.connection_id}: a message on a connection not open; refused")
        refused = RequestError(401, "unauthenticated", "this connection is not open (reconnect)")
        await _post_one(endpoint, event.connection_id, deadline, error_event(refused))
        return status(200)
    socket = session.Socket(event.connection_id, caller)
    body = _create_body(event.message)
    if body is None or not settings.lambda_function_name:
        # refused at once (session.answer names what is wrong), or no function to hand it to: answered here
        await _answer(runtime, socket, event.message or "", endpoint, deadline, turn_id(event.request_id))
        return status(200)
    job = f"wsjob_{uuid.uuid4().hex}"
    try:
        task: JSONObject = {
            "connection_id": event.connection_id,
            "caller": caller,
            "endpoint": endpoint,
            "request_id": event.request_id,
            "job": job,
            "message": await seal_secrets(runtime, caller, job, body),  # its MCP credentials never in clear
        }
        payload = json.dumps({WORKER_KEY: task}).encode()
        await asyncio.wait_for(
            asyncio.to_thread(invoke_self, settings, payload, INVOKE_SECONDS), INVOKE_SECONDS + 1
        )
    except Exception:  # the turn never starts: the client is told so, on its socket
        logger.exception(f"websocket {event.connection_id}: the asynchronous invocation of a turn failed")
        failure = RequestError(503, "server_error", "the turn could not be started; try again")
        await _post_one(endpoint, event.connection_id, deadline, error_event(failure, _stream_id(body)))
        return status(200)
    logger.info(f"websocket {event.connection_id}: turn {job} handed to an asynchronous invocation")
    return status(200)


def _stream_id(body: JSONObject) -> str | None:
    stream_id = body.get("stream_id")
    return stream_id if isinstance(stream_id, str) else None


async def _post_one(endpoint: str, connection_id: str, deadline: Deadline, event: JSONObject) -> None:
    poster = ConnectionPoster(management_client(endpoint), connection_id, deadline)
    await poster(event)
    await poster.drain()


def _create_body(message: bytes | str | None) -> JSONObject | None:
    """The message as a ``response.create`` object, or None for anything else (answered at once with its error)."""
    if message is None:
        return None
    try:
        value = json.loads(message)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("type") != "response.create":
        return None
    return value


async def _answer(
    runtime: Runtime,
    socket: session.Socket,
    message: bytes | str,
    endpoint: str,
    deadline: Deadline,
    rid: str,
) -> ConnectionPoster:
    """``session.answer`` posting to the connection; returns the poster once everything it sent was posted. A fault
    (never a refusal: ``answer`` sends those itself) is logged and the client gets a ``server_error`` event, never
    the fault's text: a socket left waiting for a terminal event that never comes would hang its client."""
    poster = ConnectionPoster(management_client(endpoint), socket.connection_id, deadline)
    try:
        await session.answer(runtime, socket, message, poster, deadline=deadline, request_id=rid)
    except Exception:
        logger.exception(f"websocket {socket.connection_id}: the turn failed")
        fault = RequestError(500, "server_error", "the response failed on the server")
        await poster(error_event(fault, lane_of(message)))
    finally:
        await poster.drain()
    logger.info(
        f"websocket {socket.connection_id}: {poster.events} events in {poster.posts} posts"
        + (f", posting stopped ({poster.stopped})" if poster.stopped else "")
    )
    return poster


# --- the worker -------------------------------------------------------------------------------------------
async def run_worker(app: Starlette, event: Mapping[str, Any], seconds_left: float) -> dict[str, Any]:
    """Run the turn ``event`` carries, once: ``{"ran": true, "posts": …}``, or ``{"ran": false, "reason": …}``."""
    task = event.get(WORKER_KEY)
    fields = ("connection_id", "caller", "endpoint", "request_id", "job")
    if not isinstance(task, Mapping) or not all(isinstance(task.get(f), str) for f in fields):
        return {"ran": False, "reason": "malformed event"}
    message = task.get("message")
    if not isinstance(message, dict):
        return {"ran": False, "reason": "malformed event"}
    runtime: Runtime = app.state.runtime
    caller, job = str(task["caller"]), str(task["job"])
    if not await runtime.stores.state().claims.claim(caller, job, call_deadline()):
        logger.info(f"websocket turn {job}: not run here (delivered before)")
        return {"ran": False, "reason": "already claimed"}
    settings = runtime.settings
    seconds = min(settings.background_timeout_seconds, seconds_left - settings.lambda_safety_margin_seconds)
    deadline = Deadline.after(seconds)
    socket = session.Socket(str(task["connection_id"]), caller)
    endpoint = str(task["endpoint"])
    try:
        opened = await open_secrets(runtime, caller, job, message)
    except RequestError as error:  # sealed under a key that changed: the client is told, nothing runs
        await _post_one(endpoint, socket.connection_id, deadline, error_event(error, _stream_id(message)))
        return {"ran": False, "reason": "sealed secrets did not open"}
    logger.info(f"websocket turn {job}: running ({seconds:.0f} s at most)")
    rid = turn_id(str(task["request_id"]))
    poster = await _answer(runtime, socket, json.dumps(opened), endpoint, deadline, rid)
    return {"ran": True, "events": poster.events, "posts": poster.posts, "stopped": poster.stopped}
