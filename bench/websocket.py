"""WebSocket mode (issue 44): a client loop of ``TOOL_CALLS`` function calls continued by ``previous_response_id``,
over one socket (``store: false``: the connection's memory) and over HTTP SSE (``store: true``: the stored chain),
with plain clients (the ``websockets`` and ``httpx`` packages, one event loop: the server's and the transport's
times, not an SDK's); and what an idle socket costs the server.

The app runs under uvicorn on loopback with a scripted model that answers at once (a call to the client's
``lookup`` until it has ``TOOL_CALLS`` results, then text), so the times are the server's and the transport's own:
time to the first event of each response (send -> ``response.created``) and the whole loop, medians per response
and per loop. The idle cost: ``IDLE_SOCKETS`` sockets held open and silent, counted in the server's event loop
(tasks and timers per socket, against a bare Starlette route that only waits on ``receive`` - the server's own),
with the process's CPU time while they idle and its resident memory per socket (both ends are in this process).

Runnable alone: ``python -m bench.websocket [REPS]`` prints the result as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.common import median

TOOL_CALLS = 20
IDLE_SOCKETS = 200
IDLE_SECONDS = 3.0
HEADERS = {"x-api-key": "bench"}
TOOLS = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]


class Looping:
    """Calls ``lookup`` until the conversation holds ``TOOL_CALLS`` results, then answers: at once, every time."""

    name = "scripted:looping"

    async def stream(self, request: Any) -> Any:
        from chatloop.providers.base import ModelResponse, ToolCall

        done = sum(1 for m in request.messages if m["role"] == "tool")
        if done >= TOOL_CALLS:
            yield ModelResponse(self.name, content="done", finish_reason="stop")
            return
        call = ToolCall(f"call_{done}", "lookup", "{}")
        yield ModelResponse(self.name, tool_calls=[call], finish_reason="tool_calls")


Create = Callable[[dict[str, Any]], Awaitable[tuple[float, dict[str, Any]]]]
"""Sends one request; returns the ms to its first event and the finished response."""


async def _loop_over(create: Create) -> tuple[list[float], float]:
    """One client loop: each response's time to its first event (ms), and the whole loop's (ms)."""
    first: list[float] = []
    body: dict[str, Any] = {"model": "chatloop", "input": "look it up", "tools": TOOLS}
    start = time.perf_counter()
    for _ in range(TOOL_CALLS + 1):
        took, response = await create(body)
        first.append(took)
        calls = [o for o in response["output"] if o["type"] == "function_call"]
        if not calls:
            break
        outputs = [{"type": "function_call_output", "call_id": c["call_id"], "output": "42"} for c in calls]
        body = {**body, "input": outputs, "previous_response_id": response["id"]}
    return first, (time.perf_counter() - start) * 1000


async def _socket_loop(server: Any) -> tuple[list[float], float]:
    from websockets.asyncio.client import connect

    url = server.root.replace("http", "ws", 1) + "/v1/responses"
    async with connect(url, additional_headers=HEADERS) as socket:

        async def create(body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
            sent = time.perf_counter()
            await socket.send(json.dumps({"type": "response.create", **body, "store": False}))
            took = None
            while True:
                event = json.loads(await socket.recv())
                took = took if took is not None else (time.perf_counter() - sent) * 1000
                if event["type"] == "response.completed":
                    return took, event["response"]
                if event["type"] == "error":
                    raise RuntimeError(event["error"]["message"])

        return await _loop_over(create)


async def _http_loop(server: Any) -> tuple[list[float], float]:
    import httpx

    async with httpx.AsyncClient(base_url=server.base_url, headers=HEADERS, timeout=30) as client:

        async def create(body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
            sent = time.perf_counter()
            took = None
            request = {**body, "stream": True, "store": True}
            async with client.stream("POST", "/responses", json=request) as response:
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    took = took if took is not None else (time.perf_counter() - sent) * 1000
                    event = json.loads(line.removeprefix("data: "))
                    if event["type"] == "response.completed":
                        return took, event["response"]
            raise RuntimeError("the stream ended early")

        return await _loop_over(create)


def _loops(server: Any, reps: int) -> dict[str, Any]:
    first: dict[str, list[float]] = {"socket": [], "http": []}
    whole: dict[str, list[float]] = {"socket": [], "http": []}
    for _ in range(reps):  # alternated: both see the same machine state
        for name, loop in (("socket", _socket_loop), ("http", _http_loop)):
            times, total = asyncio.run(loop(server))
            first[name] += times
            whole[name].append(total)
    return {
        "first_event_ms": {name: median(values) for name, values in first.items()},
        "loop_ms": {name: median(values) for name, values in whole.items()},
        "responses_per_loop": TOOL_CALLS + 1,
    }


async def _bare(websocket: Any) -> None:
    """The baseline: a WebSocket route that accepts and waits, the server's own cost of a socket."""
    await websocket.accept()
    while (await websocket.receive())["type"] != "websocket.disconnect":
        pass


def _server_loop_counts(server: Any) -> tuple[int, int]:
    """Tasks and live timers in the server's event loop now (a cancelled timer waits in the heap until it would
    have fired: a store call's deadline, say; it is not counted)."""
    loop = server.server.servers[0].get_loop()

    async def count() -> tuple[int, int]:
        live = [timer for timer in loop._scheduled if not timer.cancelled()]
        return len(asyncio.all_tasks()), len(live)

    return asyncio.run_coroutine_threadsafe(count(), loop).result(10)


def _rss_kb() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _idle(server: Any, path: str, sockets: int, seconds: float) -> dict[str, float]:
    from websockets.asyncio.client import connect

    url = server.root.replace("http", "ws", 1) + path
    before_tasks, before_timers = _server_loop_counts(server)
    rss = _rss_kb()

    async def hold() -> dict[str, float]:
        opened = [
            await connect(url, additional_headers={"x-api-key": "bench"}, ping_interval=None)
            for _ in range(sockets)
        ]
        await asyncio.sleep(0.2)
        tasks, timers = await asyncio.to_thread(_server_loop_counts, server)
        cpu = time.process_time()
        await asyncio.sleep(seconds)
        cpu_ms = (time.process_time() - cpu) * 1000
        grown = _rss_kb() - rss
        for socket in opened:
            await socket.close()
        return {
            "tasks_per_socket": (tasks - before_tasks) / sockets,
            "timers_per_socket": (timers - before_timers) / sockets,
            "cpu_ms_per_s": cpu_ms / seconds,
            "rss_kb_per_socket": grown / sockets,
        }

    return asyncio.run(hold())


def measure(reps: int) -> dict[str, Any]:
    from starlette.routing import WebSocketRoute
    from tests.support.server import Server

    from chatloop.api import create_app
    from chatloop.api.runtime import Runtime
    from chatloop.config import Settings
    from chatloop.providers.chain import FallbackChain
    from chatloop.tools.base import ToolRegistry

    with tempfile.TemporaryDirectory() as data:
        settings = Settings(conversation_store_path=os.path.join(data, "bench.sqlite3"))
        runtime = Runtime(settings, chain=FallbackChain([Looping()]), registry=ToolRegistry())
        app = create_app(settings, runtime=runtime)
        app.router.routes.append(WebSocketRoute("/bare", _bare))
        with Server(app) as server:
            result = _loops(server, reps)
            sockets = IDLE_SOCKETS if reps > 2 else 20
            seconds = IDLE_SECONDS if reps > 2 else 0.5
            result["idle"] = {
                "sockets": sockets,
                "seconds": seconds,
                "route": _idle(server, "/v1/responses", sockets, seconds),
                "bare": _idle(server, "/bare", sockets, seconds),
            }
    return result


def section(w: dict[str, Any]) -> list[str]:
    first, loop, idle = w["first_event_ms"], w["loop_ms"], w["idle"]
    route, bare = idle["route"], idle["bare"]
    saving = 1 - loop["socket"] / loop["http"]
    return [
        "## WebSocket mode vs HTTP SSE",
        "",
        f"A client loop of {TOOL_CALLS} function calls continued by `previous_response_id` (plain `websockets` and "
        "`httpx` clients; a scripted model answering at once, so the times are the server's and the transport's), "
        "medians:",
        "",
        "| transport | first event of a response (ms) | whole loop (ms) |",
        "|---|---|---|",
        f"| WebSocket (`store: false`, the connection's memory) | {first['socket']:.1f} | {loop['socket']:.0f} |",
        f"| HTTP SSE (`store: true`, the stored chain) | {first['http']:.1f} | {loop['http']:.0f} |",
        "",
        f"The socket's loop takes {saving:.0%} less time than HTTP's.",
        "",
        f"{idle['sockets']} idle sockets for {idle['seconds']:g} s: per socket, against a bare route that only waits "
        "(the server's own cost):",
        "",
        "| route | server tasks / socket | server timers / socket | CPU ms per idle second (all) | RSS KB / socket |",
        "|---|---|---|---|---|",
        f"| `/v1/responses` | {route['tasks_per_socket']:.2f} | {route['timers_per_socket']:.2f} | "
        f"{route['cpu_ms_per_s']:.1f} | {route['rss_kb_per_socket']:.0f} |",
        f"| bare | {bare['tasks_per_socket']:.2f} | {bare['timers_per_socket']:.2f} | {bare['cpu_ms_per_s']:.1f} | "
        f"{bare['rss_kb_per_socket']:.0f} |",
        "",
    ]


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5), indent=2))
