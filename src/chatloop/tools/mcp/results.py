"""An MCP ``tools/call`` result as the tool message the model gets: text as it is, other blocks described in
words, ``isError`` results as errors, cleaned of secrets and fitted to 16 KiB."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from chatloop.textsafe import text_safe
from chatloop.tools.base import fit_tool_message

if TYPE_CHECKING:
    from mcp_types import CallToolResult, ContentBlock

TOOL_ERROR_PREFIX = "the tool reported an error"
"""How a result the server marked ``isError`` begins (the Responses API reports it as a tool execution error)."""


def describe_result(result: CallToolResult, clean: Callable[[str], str]) -> tuple[str, bool, str | None]:
    """``(tool message, ok, error)`` from a ``CallToolResult``: text blocks as they are, other blocks (images,
    audio, resources) described in words, ``isError`` results as errors, everything cleaned of secrets and fitted
    to 16 KiB."""
    try:
        blocks = list(result.content)
        is_error = bool(result.is_error)
        structured = result.structured_content
    except AttributeError:
        message = "the MCP server's result was malformed (no content)"
        return fit_tool_message({"error": message}), False, message
    parts = [_describe_block(b) for b in blocks]
    text = "\n".join(p for p in parts if p)
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False, default=str)
    text = clean(text_safe(text))
    if is_error:
        message = f"{TOOL_ERROR_PREFIX}: {text or 'no details given'}"
        return fit_tool_message({"error": message}), False, message[:500]
    return fit_tool_message({"result": text}), True, None


def _describe_block(block: ContentBlock) -> str:
    if block.type == "text":
        return str(block.text)
    if block.type in {"image", "audio"}:
        size = len(getattr(block, "data", "") or "") * 3 // 4
        return f"[{block.type} returned by the tool: {getattr(block, 'mime_type', '?')}, about {size} bytes, not shown]"
    if block.type == "resource_link":
        return f"[resource link: {block.uri}{f' ({block.name})' if getattr(block, 'name', None) else ''}]"
    if block.type == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f"[resource {resource.uri}]\n{text}"
        size = len(getattr(resource, "blob", "") or "") * 3 // 4
        mime = getattr(resource, "mime_type", None) or "binary"
        return f"[resource {resource.uri}: {mime}, about {size} bytes, not shown]"
    kind = getattr(block, "type", None)  # none the SDK validates: a block of a kind newer than this code
    return f"[a {kind or 'malformed'} block the tool returned, not shown]"
