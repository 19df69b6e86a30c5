"""An app served by uvicorn on a free loopback port, in a thread of the test process, for real HTTP clients.

Usage::

    with Server(create_app(settings, chain=chain)) as server:
        openai.OpenAI(base_url=server.base_url, api_key="unused")
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import uvicorn


class Server:
    def __init__(self, app: Any):
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)
        self.root = ""
        self.base_url = ""

    def __enter__(self) -> Server:
        self.thread.start()
        while not self.server.started:
            threading.Event().wait(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.root = f"http://127.0.0.1:{port}"
        self.base_url = f"{self.root}/v1"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(5)
