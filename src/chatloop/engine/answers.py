"""Whether what a model wrote on the final call (tools withdrawn) is an answer a user can be shown.

Small models keep "calling" after tools are withdrawn: they write a call as text, paste a tool's error JSON as their
answer, or echo the tool definitions back. None of that is an answer. ``judge_final`` keeps the words before such a
trailing block (what the model said alongside it, as text-call recovery does), or nothing, and says why; the loop
then answers with those words, or with the fallback text when none are left. Pure: a table test covers it.

Usage::

    judged = judge_final('{"error": "ReferenceError: x is not defined"}', tool_schemas)
    judged.content == "" and judged.reason == "tool_error_json"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chatloop.engine.request import function_name
from chatloop.jsontypes import JSONObject
from chatloop.providers.textcalls import bare_json, fenced_json, find_text_calls, tool_keys

TOOL_RESULT_KEYS = frozenset({"error", "output", "result", "duplicate_of"})
"""The keys of the tool messages this engine writes (``{"error": ..., "output": ...}``)."""


@dataclass(frozen=True)
class Judged:
    content: str
    """What may be shown: the whole text, the words before a non-answer, or "" (the fallback text is due)."""
    reason: str | None = None
    """Why the text was cut: ``call_shaped``, ``tool_error_json``, ``tool_definitions``; None when it is an answer."""


def judge_final(content: str | None, tools: Sequence[JSONObject], structured: bool = False) -> Judged:
    """Judge the final call's ``content`` against the ``tools`` that were withdrawn (OpenAI tool definitions).
    ``structured``: the client asked for JSON (``response_format``), so a JSON object is the answer, not a tool
    error; a call or an echo of the tools still is not."""
    text = content or ""
    if not text.strip() or not tools:
        return Judged(text)
    found = find_text_calls(text, tool_keys(tools))
    if found is not None:
        return Judged(found.prefix, "call_shaped")
    trailing = fenced_json(text, {}) or bare_json(text, {})
    if trailing is None:
        return Judged(text)
    values, prefix = trailing
    names = {str(function_name(t)) for t in tools}
    if all(_is_tool_definition(v, names) for v in values):
        return Judged(prefix.strip(), "tool_definitions")
    if not structured and all(_is_tool_error(v) for v in values):
        return Judged(prefix.strip(), "tool_error_json")
    return Judged(text)


def _is_tool_error(value: object) -> bool:
    """``{"error": "..."}`` as a tool message carries it (with ``output`` beside it, perhaps)."""
    return isinstance(value, dict) and "error" in value and set(value) <= TOOL_RESULT_KEYS


def _is_tool_definition(value: object, names: set[str]) -> bool:
    """An OpenAI tool definition (``{"type": "function", "function": {...}}``), its inner function object, or a
    list of them, for one of the withdrawn tools."""
    if isinstance(value, list):
        return bool(value) and all(_is_tool_definition(v, names) for v in value)
    if not isinstance(value, dict):
        return False
    inner = value.get("function")
    function = inner if isinstance(inner, dict) else value
    return function.get("name") in names and ("parameters" in function or "description" in function)


def describe(judged: Judged) -> str:
    """The log line's words for a cut answer."""
    return f"Final answer check: reason={judged.reason} keptChars={len(judged.content)}" + (
        " (the fallback text answers)" if not judged.content else ""
    )
