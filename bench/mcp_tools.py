"""MCP tools: the loop's own cost per MCP call (the call's time excluded), and the first-use cost of listing a
server's tools, cold and cached, against a local MCP server (the SDK's MCPServer on 127.0.0.1, streamable HTTP)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

from bench.common import median
from chatloop.api.runtime import engine_limits
from chatloop.config import MCPServerConfig, Settings
from chatloop.deadline import Deadline
from chatloop.engine import TurnRequest, run_turn
from chatloop.engine.events import ToolCallResult
from chatloop.providers.base import ModelRequest, ModelResponse, ToolCall
from chatloop.tools.base import ToolRegistry, ToolResult

CALLS_PER_TURN = 4


class Caller:
    """Calls ``tool`` ``rounds`` times (new arguments each time), then answers: no model time at all."""

    name = "scripted:instant"

    def __init__(self, tool: str, rounds: int):
        self.tool, self.rounds = tool, rounds

    async def stream(self, request: ModelRequest) -> Any:
        done = sum(1 for m in request.messages if m["role"] == "tool")
        if request.tools and done < self.rounds:
            yield ModelResponse(
                self.name, tool_calls=[ToolCall(f"c{done}", self.tool, json.dumps({"a": done, "b": 1}))]
            )
        else:
            yield ModelResponse(self.name, content="done", finish_reason="stop")


class LocalAdd:
    """The same tool, in process: the baseline of what the loop costs per call of any tool."""

    name, description = "add", "Add two integers."
    parameters = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}

    async def run(self, arguments: dict[str, Any], deadline: Deadline) -> ToolResult:
        return ToolResult(json.dumps({"result": str(arguments["a"] + arguments["b"])}), ok=True)


async def _turn(registry: ToolRegistry, tool: str, settings: Settings) -> tuple[float, float]:
    """(turn ms, the calls' own ms)."""
    start = time.perf_counter()
    calls_ms = 0.0
    async for event in run_turn(
        TurnRequest(messages=[{"role": "user", "content": "go"}]),
        Caller(tool, CALLS_PER_TURN),
        registry,
        Deadline.after(60),
        engine_limits(settings),
    ):
        if isinstance(event, ToolCallResult) and event.duration_ms is not None:
            calls_ms += round(event.duration_ms, 1)
    return (time.perf_counter() - start) * 1000, calls_ms


def _sdk_import_ms() -> float:
    """Importing the ``mcp`` SDK in a fresh interpreter: what the first turn that lists a server pays once."""
    code = "import time; t = time.perf_counter(); import mcp.client.streamable_http, mcp; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return float(out.stdout.strip()) * 1000


def measure(reps: int) -> dict[str, Any]:
    from tests.support.mcp_servers import MCPTestServer, tools_server

    from chatloop.tools.mcp import MCPServers

    settings = Settings(tool_caps={}, system_prompt_guidance=False, mcp_tool_limit=100)
    with MCPTestServer(tools_server()) as server:
        config = MCPServerConfig("bench", server.url)
        mcp_settings = Settings(
            tool_caps={}, system_prompt_guidance=False, mcp_tool_limit=100, mcp_servers=(config,)
        )

        async def listings() -> tuple[list[float], list[float], ToolRegistry]:
            cold, cached = [], []
            servers = MCPServers(mcp_settings)
            for _ in range(reps):
                servers = MCPServers(mcp_settings)  # a fresh container's view: nothing listed yet
                start = time.perf_counter()
                turn = await servers.tools_for_turn(Deadline.after(30))
                cold.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                turn = await servers.tools_for_turn(Deadline.after(30))
                cached.append((time.perf_counter() - start) * 1000)
            return cold, cached, ToolRegistry(turn.tools)

        cold, cached, registry = asyncio.run(listings())

        mcp_overhead, mcp_call, local_overhead = [], [], []
        for _ in range(reps):
            total, calls = asyncio.run(_turn(registry, "bench__add", mcp_settings))
            mcp_overhead.append((total - calls) / CALLS_PER_TURN)
            mcp_call.append(calls / CALLS_PER_TURN)
            total, calls = asyncio.run(_turn(ToolRegistry([LocalAdd()]), "add", settings))
            local_overhead.append((total - calls) / CALLS_PER_TURN)
    return {
        "list_cold_ms": median(cold),
        "list_cached_ms": median(cached),
        "sdk_import_ms": _sdk_import_ms(),
        "loop_per_mcp_call_ms": median(mcp_overhead),
        "loop_per_local_call_ms": median(local_overhead),
        "mcp_call_ms": median(mcp_call),
        "reps": reps,
    }
