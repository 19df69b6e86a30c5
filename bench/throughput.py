"""Local throughput: the app under uvicorn, an instant model, concurrent clients on loopback."""

from __future__ import annotations

import asyncio
import threading
import time

from bench.common import AnswerAtOnce
from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry


def measure(seconds: float) -> dict:
    import httpx
    import uvicorn

    from chatloop.api import create_app
    from chatloop.providers.chain import FallbackChain

    app = create_app(Settings(), chain=FallbackChain([AnswerAtOnce()]), registry=ToolRegistry())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="off"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": False, "tools": []}

    async def client(http, stop_at, counts):
        while time.perf_counter() < stop_at:
            response = await http.post(f"http://127.0.0.1:{port}/chat", json=body)
            counts["ok" if response.status_code == 200 else "errors"] += 1

    async def load():
        counts = {"ok": 0, "errors": 0}
        async with httpx.AsyncClient(timeout=10) as http:
            start = time.perf_counter()
            await asyncio.gather(*(client(http, start + seconds, counts) for _ in range(8)))
            return counts, time.perf_counter() - start

    try:
        counts, elapsed = asyncio.run(load())
    finally:
        server.should_exit = True
        thread.join(5)
    return {"rps": counts["ok"] / elapsed, "errors": counts["errors"], "requests": counts["ok"]}
