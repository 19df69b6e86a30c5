"""Test tools beside the real execute_javascript: a second tool (seed 000's search_web) and a slow one."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from chatloop.deadline import Deadline
from chatloop.tools.base import ToolResult


class FakeSearch:
    name = "search_web"
    description = "Search the web."
    parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}

    def __init__(self, same_result: bool = False):
        self.queries: list[str] = []
        self.same_result = same_result

    async def run(self, arguments: dict[str, Any], deadline: Deadline) -> ToolResult:
        self.queries.append(arguments.get("query", ""))
        hits = ["no results"] if self.same_result else [f"result for {arguments.get('query')}"]
        return ToolResult(content=json.dumps({"results": hits}), ok=True)


class SlowTool:
    name = "slow_tool"
    description = "Takes a while."
    parameters = {"type": "object", "properties": {}}

    def __init__(self, seconds: float):
        self.seconds = seconds

    async def run(self, arguments: dict[str, Any], deadline: Deadline) -> ToolResult:
        await asyncio.sleep(min(self.seconds, deadline.remaining()))
        return ToolResult(content=json.dumps({"result": "slow"}), ok=True)
