"""What a sandbox run returns: the runner's result line checked, capped and made text-safe, as a ``SandboxResult``.

The line is the only thing that crosses from the sandbox, and it is read as hostile: anything but one of the two
documented shapes is a ``SandboxError``.

Usage::

    checked_frame(b'{"result": 120, "output": ""}')     # {"result": 120, "output": ""}
    checked_frame(b"not json")["error"]                # "SandboxError: the sandbox returned an unreadable result"
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from chatloop.jsontypes import JSONObject
from chatloop.textsafe import text_safe, text_safe_value
from chatloop.tools.base import fit_tool_message

MAX_RESULT_CHARS = 16 * 1024
"""A result longer than this (as JSON) is truncated, and says so."""
MAX_OUTPUT_CHARS = 16 * 1024
"""Console output longer than this is truncated, and says so (the runner itself stops at 64 KiB)."""
MAX_ERROR_CHARS = 2 * 1024
"""An error message longer than this is cut."""


@dataclass
class SandboxResult:
    payload: JSONObject
    """``{"result": ..., "output": ...}`` or ``{"error": "Type: message", "output": ...}``."""
    duration_ms: float
    prespawned: bool = False
    cpu_ms: float | None = None
    """The CPU time the run used (None when it could not be read)."""

    @property
    def ok(self) -> bool:
        return "error" not in self.payload

    def content(self) -> str:
        """The tool message: the payload as JSON, at most ``MAX_TOOL_MESSAGE_BYTES``."""
        return fit_tool_message(self.payload)


def checked_frame(line: bytes) -> JSONObject:
    """The runner's result line as one of the two documented shapes, capped after serialisation, text-safe.

    The line is untrusted data (the runner's realm is trusted, but this side assumes nothing): anything but an
    object with a ``result`` or a string ``error`` is a ``SandboxError``, never an exception."""
    unreadable: JSONObject = {
        "error": "SandboxError: the sandbox returned an unreadable result",
        "output": "",
    }
    try:
        frame = json.loads(line.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return unreadable
    if not isinstance(frame, dict) or ("result" in frame) == isinstance(frame.get("error"), str):
        return unreadable
    payload: JSONObject = {}
    already_cut = isinstance(frame.get("result_truncated"), str) and isinstance(frame.get("result"), str)
    if already_cut and len(frame["result"]) <= MAX_RESULT_CHARS + 1:  # the runner cut the result's JSON text
        payload["result"] = text_safe(frame["result"])
        payload["result_truncated"] = text_safe(frame["result_truncated"][:200])
    elif "result" in frame:
        encoded = json.dumps(frame["result"], ensure_ascii=False)
        if len(encoded) > MAX_RESULT_CHARS:
            payload["result"] = text_safe(encoded[:MAX_RESULT_CHARS] + "…")
            payload["result_truncated"] = (
                f"the result was {len(encoded)} characters; only the first {MAX_RESULT_CHARS} are shown"
            )
        else:
            payload["result"] = text_safe_value(frame["result"])
    else:
        payload["error"] = text_safe(frame["error"][:MAX_ERROR_CHARS])
    output = frame.get("output")
    payload["output"] = text = text_safe(output if isinstance(output, str) else "")
    if len(text) > MAX_OUTPUT_CHARS:
        payload["output"] = text[:MAX_OUTPUT_CHARS] + "…"
        payload["output_truncated"] = True
    elif frame.get("output_truncated") is True:
        payload["output_truncated"] = True
    return payload
