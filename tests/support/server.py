"""An app served by uvicorn on a free loopback port, in a thread of the test process, for real HTTP clients.

Usage::

    with Server(create_app(settings, chain=chain)) as server:
        openai.OpenAI(base_url=server.base_url, api_key="unused")

    with app_server(settings, model=model, registry=registry) as server:   # the runtime built as tests build it
        server.runtime.models.chain()

    alice = client(server)   # the openai SDK as a caller with its own x-api-key
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest
import uvicorn

from chatloop.config import Settings

if TYPE_CHECKING:
    import openai


class Server:
    def __init__(self, app: Any):
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)
        self.root = ""
        self.base_url = ""
        self.runtime: Any = None
        """The runtime the app serves, when ``app_server`` built it."""

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


@contextlib.contextmanager
def app_server(settings: Settings, *, env: Mapping[str, str] | None = None, **parts: Any) -> Iterator[Server]:
    """The app, with a runtime built from ``settings`` and ``parts`` as ``tests.support.handler.build_runtime``
    builds one (``model`` or ``chain``, ``registry``, ``keys`` or ``keys_loader``), served on loopback while
    ``env`` (the providers' base URLs, say) is set."""
    from chatloop.api import create_app
    from tests.support.handler import build_runtime

    runtime = build_runtime(settings, **parts)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        with Server(create_app(settings, runtime=runtime)) as server:
            server.runtime = runtime
            yield server


def client(server: Server, key: str = "alice-key") -> openai.OpenAI:
    """The SDK as a client of ``make run`` uses it: the local caller is the hashed ``x-api-key`` header. (The SDK is
    imported here: the bench's servers and the page tests need none of it.)"""
    import openai

    return openai.OpenAI(
        base_url=server.base_url,
        api_key="unused",
        max_retries=0,
        timeout=30,
        default_headers={"x-api-key": key},
    )
