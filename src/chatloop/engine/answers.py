"""Whether what a model wrote is an answer a user can be shown: every answer, with tools offered, withdrawn or none.

Small models do not always answer: they write a call as text that cannot run, paste a tool's error JSON as their
answer (``{"error": "UnknownTool: ..."}``), echo the tool definitions back (``<tools>{"type": "function", ...}``,
or a tool's JSON schema), or echo the tool results under a ``RAW TOOL RESULTS:`` header. None of that is an answer.
``judge_answer`` keeps the words before such a block (what the model said alongside it, as text-call recovery
does), or nothing, and says why; the loop then recovers (a reminder, a tool-less call) or answers with the fallback
text, and logs the decision. Pure: a table test covers it.

Usage::

    judged = judge_answer('{"error": "ReferenceError: x is not defined"}', tool_schemas)
    judged.content == "" and judged.reason == "tool_error_json"
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import NamedTuple

from chatloop.engine.request import function_name
from chatloop.engine.textcalls import without_copies
from chatloop.jsontypes import JSONObject
from chatloop.providers.textcall_formats import bare_json, fenced_json, find_text_calls, tool_keys

TOOL_RESULT_KEYS = frozenset({"error", "output", "result", "duplicate_of"})
"""The keys of the tool messages this engine writes (``{"error": ..., "output": ...}``)."""


class Judged(NamedTuple):  # a tuple, not a frozen dataclass: no methods generated at import (cold start)
    content: str
    """What may be shown: the whole text, the words before a non-answer, or "" (the fallback text is due)."""
    reason: str | None = None
    """Why the text was cut: ``call_shaped``, ``tool_error_json``, ``tool_definitions``, ``tool_results_echo``,
    ``unknown_tool_call``; None when it is an answer."""


ECHO_MARKERS = ("RAW TOOL RESULTS:", "<tools>")
"""Blocks that only ever echo what the model was given: the tool results' header some templates use, and the tag
Qwen's chat template puts the tool definitions in. The stream filter holds text from them too."""
_ECHO_REASONS = {"RAW TOOL RESULTS:": "tool_results_echo", "<tools>": "tool_definitions"}
REASON_WORDS = {
    "call_shaped": "a tool call written as text",
    "tool_error_json": "a tool's error message",
    "tool_definitions": "the tool definitions",
    "tool_results_echo": "the raw tool results",
    "unknown_tool_call": "a call to a tool that does not exist",
}
"""What each kind of non-answer is, in the words the reminder uses."""


def judge_answer(
    content: str | None,
    tools: Sequence[JSONObject],
    structured: bool = False,
    calls_read: bool = False,
    refused: AbstractSet[str] = frozenset(),
) -> Judged:
    """Judge ``content`` against the turn's ``tools`` (OpenAI tool definitions, offered or withdrawn; none in a turn
    without tools, where only the echo blocks are judged). ``structured``: the client asked for JSON
    (``response_format``), so a JSON object is the answer, not a tool error; a call or an echo still is not.
    ``calls_read``: text-call recovery already looked for calls to these tools and found none. ``refused``: tools
    the turn's ``UnknownTool`` errors named: JSON naming one (``{"name": "calculateCompoundInterest", "principal":
    ...}``, in any shape) is that failed call written again, not an answer."""
    text = content or ""
    if not text.strip():
        return Judged(text)
    for marker in ECHO_MARKERS:
        at = echo_at(text, marker)
        if at >= 0:
            return Judged(text[:at].strip(), _ECHO_REASONS[marker])
    if not tools:
        return Judged(text)
    keys = tool_keys(tools)
    found = None if calls_read else find_text_calls(text, keys)
    if found is not None:  # the words before it, without the copies a small model writes of it
        return Judged(without_copies(found.prefix, found.calls, keys), "call_shaped")
    trailing = fenced_json(text, {}) or bare_json(text, {})
    if trailing is None:
        return Judged(text)
    values, prefix = trailing
    if refused and all(_names_one_of(v, refused) for v in values):
        return Judged(prefix.strip(), "unknown_tool_call")
    names = {str(function_name(t)) for t in tools}
    if all(_is_tool_definition(v, names) or _is_tool_schema(v, keys) for v in values):
        return Judged(prefix.strip(), "tool_definitions")
    if not structured and all(_is_tool_error(v) for v in values):
        return Judged(prefix.strip(), "tool_error_json")
    return Judged(text)


def echo_at(text: str, marker: str, start: int = 0) -> int:
    """Where an echo block starts in ``text`` (-1: none). Prose that quotes the marker (in backticks or quotes) is
    no echo, nor is ``<tools>`` that no JSON follows."""
    at = text.find(marker, start)
    while at >= 0:
        quoted = at > 0 and text[at - 1] in "`'\""
        if not quoted and (marker != "<tools>" or _JSON_NEXT.match(text, at + len(marker))):
            return at
        at = text.find(marker, at + 1)
    return -1


_JSON_NEXT = re.compile(r"\s*(?:[\[{]|$)")

judge_final = judge_answer
"""The earlier name, when only the final call was judged."""


def _names_one_of(value: object, names: AbstractSet[str]) -> bool:
    """A call-shaped object (``name``, ``function``, ``tool`` or ``tool_name``) whose name is one of ``names``."""
    if not isinstance(value, dict):
        return False
    named = [value.get(key) for key in ("name", "function", "tool", "tool_name")]
    return any(isinstance(name, str) and name in names for name in named)


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


def _is_tool_schema(value: object, keys: Mapping[str, AbstractSet[str]]) -> bool:
    """A tool's JSON schema (``{"type": "object", "properties": {"code": ...}}``) for one of the turn's tools."""
    if not isinstance(value, dict) or not isinstance(value.get("properties"), dict):
        return False
    properties = set(value["properties"])
    return bool(properties) and any(properties == set(args) for args in keys.values() if args)


def describe(judged: Judged) -> str:
    """The log line's words for a cut answer."""
    return f"Answer check: reason={judged.reason} keptChars={len(judged.content)}" + (
        " (nothing is left to show)" if not judged.content else ""
    )
