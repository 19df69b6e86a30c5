"""The local transport of WebSocket mode: ``responses_socket``, the Starlette WebSocket route at ``/v1/responses``
(the same path as the POST: Starlette routes a ``websocket`` scope apart from ``http`` ones), under uvicorn
(``make run``) and behind the Lambda Web Adapter alike.

The handshake establishes the caller as the HTTP API does (``caller_of`` on the upgrade request; another site's
page is refused: ``same_origin``); the connection is
then opened in the store (its memory is keyed to it and that caller) and each text message is answered by
``session.answer``: concurrently when their ``stream_id``s differ, in order on one named lane, and a second
``response.create`` without one while a response runs is an ``error`` (the session's lane claim). API Gateway's
limits are mirrored (``WEBSOCKET_*``): a message over 128 KB closes the socket with 1009, and a connection is closed
with 1001 after 2 hours or 10 idle minutes.

An idle socket costs nothing beyond the server's own connection: no task and no timer of its own. One
``Watch`` per app keeps every open socket's clock and wakes only when the earliest of them is due.

Usage (the route, in api/app.py)::

    WebSocketRoute("/v1/responses", lazy_socket("websocket.route", "responses_socket"))
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import anyio
from starlette.websockets import WebSocket, WebSocketState

from chatloop.api.http.caller import caller_of
from chatloop.api.http.errors import RequestError
from chatloop.api.websocket.messages import error_event, lane_of
from chatloop.api.websocket.session import Socket, answer
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject
from chatloop.observability import logger
from chatloop.store.model import StoreUnavailable, new_id

if TYPE_CHECKING:
    from chatloop.api.runtime import Runtime

POLICY_VIOLATION = 1008
MESSAGE_TOO_BIG = 1009
GOING_AWAY = 1001
INTERNAL_ERROR = 1011
MAX_PENDING = 32
"""Messages one socket holds at once, running or waiting on their lane: past it a message is an ``error`` event at
once (``too_many_pending``), never a task holding its text, so no client grows a socket's memory without end."""


@dataclass(eq=False)
class Clock:
    """One open socket's times (monotonic seconds): since when it is open, its last message, its running turns."""

    websocket: WebSocket
    opened: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)
    running: int = 0

    def due(self, settings: Settings) -> float:
        """When it must close: at its longest life, or idle (no message and no response running) that long."""
        ends = self.opened + settings.websocket_max_connection_seconds
        return ends if self.running else min(ends, self.last + settings.websocket_idle_seconds)


class Watch:
    """Every open socket of one app, and the one task that closes those past their limits (started with the first
    socket, gone with the last)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.clocks: set[Clock] = set()
        self.task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()
        """Set when a socket's due time moved earlier (its last response ended: its idle time starts)."""

    def add(self, websocket: WebSocket) -> Clock:
        clock = Clock(websocket)
        self.clocks.add(clock)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._watch())
        return clock

    def remove(self, clock: Clock) -> None:
        self.clocks.discard(clock)

    def started(self, clock: Clock) -> None:
        """A response of ``clock``'s socket runs: no idle time until it ends."""
        clock.running += 1

    def ended(self, clock: Clock) -> None:
        """A response ended: its socket's idle time starts now (the watch wakes if that is its earliest due)."""
        clock.running -= 1
        clock.last = time.monotonic()
        if not clock.running:
            self.changed.set()

    async def _watch(self) -> None:
        # A message only moves a due time later; a response's end may move it earlier, and wakes the watch.
        while self.clocks:
            now = time.monotonic()
            for clock in [c for c in self.clocks if c.due(self.settings) <= now]:
                self.clocks.discard(clock)
                logger.info("WebSocket connection closed at its limit (idle or its longest life)")
                with contextlib.suppress(Exception):  # already closing: nothing to do
                    await clock.websocket.close(GOING_AWAY, "connection limit reached")
            if self.clocks:
                wait = min(c.due(self.settings) for c in self.clocks) - time.monotonic()
                self.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), max(0.0, wait))


def watch_of(websocket: WebSocket) -> Watch:
    """The app's ``Watch``, made with its first socket."""
    state = websocket.app.state
    watch = getattr(state, "websocket_watch", None)
    if not isinstance(watch, Watch):
        watch = state.websocket_watch = Watch(state.runtime.settings)
    return watch


async def responses_socket(websocket: WebSocket) -> None:
    """WebSocket mode on ``/v1/responses``: the handshake, then every message answered until the socket closes."""
    runtime: Runtime = websocket.app.state.runtime
    settings: Settings = runtime.settings
    if not same_origin(websocket):
        logger.info(
            "WebSocket handshake refused: another site's page", extra={"origin": websocket.headers["origin"]}
        )
        await websocket.close(POLICY_VIOLATION)  # before accept: the handshake's answer is a 403
        return
    socket = Socket(new_id("ws"), caller_of(websocket))
    connections = runtime.stores.state().connections
    await websocket.accept()
    try:
        await connections.open(
            socket.connection_id,
            socket.caller,
            settings.websocket_max_connection_seconds,
            Deadline.after(settings.conversation_store_timeout_seconds),
        )
    except StoreUnavailable as error:
        logger.warning(f"WebSocket connection refused: the store is unavailable ({error})")
        await websocket.close(INTERNAL_ERROR, "the conversation store is unavailable")
        return
    logger.info("WebSocket connection opened", extra={"connection_id": socket.connection_id})
    watch = watch_of(websocket)
    clock = watch.add(websocket)
    try:
        await _serve(websocket, socket, watch, clock)
    finally:
        watch.remove(clock)
        with contextlib.suppress(StoreUnavailable):
            await connections.close(
                socket.connection_id, Deadline.after(settings.conversation_store_timeout_seconds)
            )
        logger.info("WebSocket connection closed", extra={"connection_id": socket.connection_id})


def same_origin(websocket: WebSocket) -> bool:
    """No ``Origin`` (an SDK, a server), or the page's own host. A browser lets any site's page open a WebSocket to
    any address with no CORS check, and a socket acts as the caller its handshake names (``local`` under ``make
    run``): another site's page is refused, as its cross-origin ``fetch`` of the same route would be."""
    origin = websocket.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == websocket.headers.get("host", "").lower()


class Lanes:
    """One socket's named lanes, each running its responses in order (OpenAI: "requests with the same ``stream_id``
    are processed FIFO"); a lane is forgotten once nothing waits on it, so a client naming ever new ``stream_id``s
    leaves nothing behind."""

    def __init__(self) -> None:
        self.locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, lane: str | None) -> AsyncIterator[None]:
        if lane is None:  # no stream_id: the session's claim refuses a second one while one runs
            yield
            return
        lock, users = self.locks.get(lane, (asyncio.Lock(), 0))
        self.locks[lane] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self.locks[lane]
            if users == 1:
                del self.locks[lane]
            else:
                self.locks[lane] = (lock, users - 1)


async def _serve(websocket: WebSocket, socket: Socket, watch: Watch, clock: Clock) -> None:
    """Reads messages until the socket closes; each one answered in a task of its own (lanes kept in order)."""
    runtime: Runtime = websocket.app.state.runtime
    settings = watch.settings
    sending = asyncio.Lock()
    lanes = Lanes()
    claiming = asyncio.Lock()
    pending = 0

    async def send(event: JSONObject) -> None:
        async with sending:  # one message at a time on the socket
            if websocket.application_state is WebSocketState.CONNECTED:
                # the client went away: the turn still ends (and a stored one is kept)
                with contextlib.suppress(Exception):
                    await websocket.send_text(json.dumps(event))

    async def one(text: str | bytes) -> None:
        nonlocal pending
        watch.started(clock)
        lane = lane_of(text)
        try:
            async with in_arrival_order(claiming, lane is None) as claimed, lanes.turn(lane):
                deadline = Deadline.after(settings.request_timeout_seconds)
                request_id = str(uuid.uuid4())
                await answer(
                    runtime, socket, text, send, deadline=deadline, request_id=request_id, claimed=claimed
                )
        finally:
            pending -= 1
            watch.ended(clock)

    async with anyio.create_task_group() as tasks:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            clock.last = time.monotonic()
            text = message.get("text")
            data: str | bytes = text if text is not None else message.get("bytes") or b""
            size = len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else len(data)
            if size > settings.websocket_max_message_bytes:
                logger.info("WebSocket message over the limit: closed", extra={"bytes": size})
                await websocket.close(MESSAGE_TOO_BIG, "message too big")
                break
            if pending >= MAX_PENDING:
                logger.info("WebSocket message refused: too many pending", extra={"pending": pending})
                await send(error_event(_too_many(), lane_of(data)))
                continue
            pending += 1
            tasks.start_soon(one, data)
        tasks.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def in_arrival_order(claiming: asyncio.Lock, ordered: bool) -> AsyncIterator[Callable[[], None]]:
    """Messages without a stream_id try their claim in the order they came (a second one while the first runs is
    the one refused): each waits for the one before it to have claimed or been refused, not for its turn. Yields
    what ``session.answer`` calls once the message's claim is decided; called again on the way out, harmlessly.
    The lock is the task's first await, so tasks reach it in the order they were started."""
    if ordered:
        await claiming.acquire()
    held = ordered

    def claimed() -> None:
        nonlocal held
        if held:
            held = False
            claiming.release()

    try:
        yield claimed
    finally:
        claimed()  # refused or failed before its claim: the next message may try its own


def _too_many() -> RequestError:
    return RequestError(
        429,
        "too_many_pending",
        f"this socket already holds {MAX_PENDING} messages (running or waiting on their stream_id): wait for "
        "a terminal event before sending more",
    )
