"""``execute_javascript``: the model's calculator, backed by ``JavaScriptSandbox``.

Usage::

    tool = ExecuteJavaScriptTool(JavaScriptSandbox())
    result = await tool.run({"code": "5 * 4 * 3 * 2 * 1"}, Deadline.after(10))
    result.content     # '{"result": 120, "output": ""}'
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from typing import ClassVar

from chatloop.deadline import Deadline
from chatloop.jsontypes import JSONObject, JSONValue
from chatloop.redaction import redact
from chatloop.tools.base import ToolResult
from chatloop.tools.javascript.sandbox import JavaScriptSandbox

GUIDANCE = (
    "When a question needs a calculation, call execute_javascript once with the whole calculation in one "
    "snippet that ends with the value to report. IMPORTANT: after execute_javascript returns a result, give "
    "the final answer to the user immediately. Do not call tools again unless the result shows an error or "
    "the user asks something new."
)
"""Added to the system prompt while the tool is offered (SYSTEM_PROMPT_GUIDANCE)."""

DEFAULT_TIMEOUT = 5.0
MIN_TIMEOUT, MAX_TIMEOUT = 1.0, 10.0


TOOL_NAME = "execute_javascript"
"""The name the model calls the sandbox by (and the Responses API shows its runs as ``code_interpreter_call``)."""


class ExecuteJavaScriptTool:
    name = TOOL_NAME
    description = (
        "Run JavaScript in an isolated sandbox (no network, files or environment) and get its value back. "
        "Use it for any calculation. Put the whole calculation in ONE snippet and end it with the value to "
        "report (the last expression is the result), or `return` it; console.log output is captured too. "
        "Top-level await works. Call it once per question, then answer from its result."
    )
    parameters: ClassVar[JSONObject] = {
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": "JavaScript to run; its last expression is the result.",
            },
            "timeout_seconds": {
                "type": "number",
                "description": f"Time limit in seconds ({MIN_TIMEOUT:g}-{MAX_TIMEOUT:g}, default {DEFAULT_TIMEOUT:g}).",
            },
        },
        "required": ["code"],
    }
    answered_once_succeeded = True
    """A calculation's result answers the question: once it succeeded, the tool is withdrawn for the turn."""
    guidance = GUIDANCE

    def __init__(self, sandbox: JavaScriptSandbox):
        self.sandbox = sandbox

    async def run(self, arguments: JSONObject, deadline: Deadline) -> ToolResult:
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return _failure("InvalidArguments: 'code' must be a non-empty string")
        timeout = clamp_timeout(arguments.get("timeout_seconds"))
        timeout = deadline.cap(timeout)
        if timeout <= 0.05:
            return _failure("TimeoutError: no time left in this request to run code")
        stop = threading.Event()
        try:
            result = await asyncio.to_thread(
                self.sandbox.run, code, timeout, not_after=deadline.at, stop=stop
            )
        except asyncio.CancelledError:  # the turn was cancelled (the client went away): end the run now
            stop.set()
            raise
        error = _error_text(result.payload.get("error"))
        return ToolResult(
            content=redact(result.content()),
            ok=is_success(result.payload),
            error=error,
            duration_ms=result.duration_ms,
            details=run_details(result.cpu_ms, error, result.prespawned),
        )


def run_details(
    cpu_ms: float | None, error: str | None, prespawned: bool
) -> dict[str, str | int | float | bool]:
    """How a run went, for its trace span: its CPU time, and how it exited (``result``, or its error's kind).

    >>> run_details(8.0, "CPULimitError: the code used more than 2 s of CPU time", True)["chatloop.sandbox.exit"]
    'CPULimitError'
    """
    details: dict[str, str | int | float | bool] = {
        "chatloop.sandbox.exit": "result" if error is None else error.split(":", 1)[0][:64],
        "chatloop.sandbox.prespawned": prespawned,
    }
    if cpu_ms is not None:
        details["chatloop.sandbox.cpu_ms"] = round(cpu_ms, 1)
    return details


def clamp_timeout(value: object) -> float:
    """The run's time limit from the model's ``timeout_seconds``: anything that is no number is the default."""
    try:
        seconds = float(value) if isinstance(value, (int, float, str)) else DEFAULT_TIMEOUT
    except ValueError:
        seconds = DEFAULT_TIMEOUT
    if math.isnan(seconds):
        seconds = DEFAULT_TIMEOUT
    return min(MAX_TIMEOUT, max(MIN_TIMEOUT, seconds))


def is_success(payload: JSONObject) -> bool:
    """A usable result: no error, and either a value or some console output (a snippet that printed
    nothing and returned nothing told the model nothing, so it may try again)."""
    if "error" in payload:
        return False
    output = payload.get("output")
    return payload.get("result") is not None or (isinstance(output, str) and bool(output.strip()))


def _error_text(error: JSONValue) -> str | None:
    """The payload's ``error`` (always a string from ``checked_frame``) as ``ToolResult.error``."""
    return None if error is None else str(error)


def _failure(message: str) -> ToolResult:
    return ToolResult(content=json.dumps({"error": message, "output": ""}), ok=False, error=message)
