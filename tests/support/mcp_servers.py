"""Real MCP servers for tests, written with the ``mcp`` SDK's MCPServer (FastMCP in the 1.x SDK), served over
streamable HTTP by uvicorn on a free 127.0.0.1 port, in a thread the test owns; they stop when the test does.

Every request a server receives is recorded (method, path, and whether its Authorization header was right), so a
test can assert that a server saw nothing.

Usage::

    with MCPTestServer(tools_server()) as server:
        settings = Settings(mcp_servers=(MCPServerConfig("docs", server.url),))
        server.requests        # [("POST", "/mcp", True), ...]
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.types import Image

PNG_1PX = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def tools_server(name: str = "docs", calls: list[str] | None = None) -> MCPServer:
    """A server with one tool for each behaviour the tests need; ``calls`` records each ``search`` query run."""
    server = MCPServer(name)
    ran = calls if calls is not None else []

    @server.tool()
    def search(query: str) -> str:
        """Search the documentation for a phrase."""
        ran.append(query)
        return f"3 pages mention {query!r}: intro, setup, limits"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def explode(reason: str = "database offline") -> str:
        """Always fails."""
        raise ValueError(reason)

    @server.tool()
    async def nap(seconds: float) -> str:
        """Sleeps, then answers."""
        await asyncio.sleep(seconds)
        return "rested"

    @server.tool()
    def huge() -> str:
        """Returns one megabyte of text."""
        return "x" * 1_000_000

    @server.tool()
    def picture() -> Image:
        """Returns a PNG image."""
        return Image(data=PNG_1PX, format="png")

    return server


class MCPTestServer:
    def __init__(
        self,
        server: MCPServer | Any,
        token: str | None = None,
        path: str = "/mcp",
        redirect_from: str | None = None,
        stall: float = 0.0,
        bind: str = "127.0.0.1",
        port: int = 0,
        public_host: str | None = None,
    ):
        """``redirect_from``: a path answered with a 307 to ``path`` (a server that redirects its clients);
        ``stall``: seconds every request waits before it is served (a server that hangs); ``bind`` and ``port``:
        where it listens (a loopback address; port 0: a free one); ``public_host``: the one name its ``Host``
        header may carry (the SDK's own Host check), for a server reached by a name rather than 127.0.0.1."""
        self.requests: list[tuple[str, str, bool]] = []
        self.hosts: list[str] = []
        """The ``Host`` header of every request, in order."""
        self.token = token
        security = None
        if public_host is not None:
            from mcp.server.transport_security import TransportSecuritySettings

            security = TransportSecuritySettings(allowed_hosts=[f"{public_host}:*"])
        inner = (
            server.streamable_http_app(
                streamable_http_path=path,
                stateless_http=True,
                json_response=True,
                transport_security=security,
            )
            if isinstance(server, MCPServer)
            else server  # an ASGI app of its own
        )

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = dict(scope.get("headers") or [])
                authorized = token is None or headers.get(b"authorization") == f"Bearer {token}".encode()
                self.requests.append((scope["method"], scope["path"], authorized))
                self.hosts.append(headers.get(b"host", b"").decode("latin-1"))
                if stall:
                    await asyncio.sleep(stall)
                if redirect_from is not None and scope["path"] == redirect_from:
                    location = [(b"location", path.encode())]
                    await send({"type": "http.response.start", "status": 307, "headers": location})
                    await send({"type": "http.response.body", "body": b""})
                    return
                if not authorized:
                    await send({"type": "http.response.start", "status": 401, "headers": []})
                    await send({"type": "http.response.body", "body": b'{"error": "unauthorized"}'})
                    return
            await inner(scope, receive, send)

        config = uvicorn.Config(app, host=bind, port=port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)
        self.path = path
        self.url = ""
        self.root = ""

    def __enter__(self) -> MCPTestServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.port = port
        self.root = f"http://{self.server.config.host}:{port}"
        self.url = f"{self.root}{self.path}"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(5)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released): a server that is down."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def malformed_server() -> Any:
    """A hand-written MCP server (the pre-2026 handshake, JSON responses) whose ``tools/call`` result is not a valid
    MCP result: what a broken or hostile server sends."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    tool = {"name": "broken", "description": "Answers nonsense.", "inputSchema": {"type": "object"}}
    results: dict[str, Any] = {
        "initialize": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "broken", "version": "1"},
        },
        "tools/list": {"tools": [tool]},
        "tools/call": {"content": "this should be a list of blocks", "isError": "maybe"},
    }

    async def endpoint(request: Request) -> Response:
        if request.method != "POST":
            return Response(status_code=405)
        message = await request.json()
        if "id" not in message:  # a notification
            return Response(status_code=202)
        method = message.get("method")
        if method not in results:
            error = {"code": -32601, "message": f"method {method} not found"}
            return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "error": error})
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": results[method]})

    return Starlette(routes=[Route("/mcp", endpoint, methods=["POST", "GET", "DELETE"])])
