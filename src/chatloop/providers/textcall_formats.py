"""Tool calls that models write as text instead of native ``tool_calls``: recovered into ``ToolCall``s.

Open-weight models (Qwen, Hermes fine-tunes, Llama 3.1) and busy hosted ones often write their call into the
content. One function per format, each pure:

==============  ======================================================================================
format          what the model wrote
==============  ======================================================================================
hermes          ``<tool_call>{"name": "f", "arguments": {...}}</tool_call>`` (Qwen, Hermes)
python_tag      ``<|python_tag|>{"name": "f", "parameters": {...}}`` (Llama 3.1)
function_tag    ``<function=f>{...}</function>`` or ``<function=f{...}>`` (Groq's legacy Llama dialect)
fenced_json     a ```` ```json ```` block holding a call-shaped object (or a flat one)
json            a bare ``{"name": "f", "arguments"|"parameters": {...}}`` object, or a list of them
flat_json       ``{"name": "f", "code": "..."}``: an offered tool's name beside that tool's own argument keys
name_json       ``f{...}`` (Groq's ``failed_generation``)
==============  ======================================================================================

Only text that *is*, or *ends with*, a call counts (the text before it is kept as the assistant's words), and only
an object shaped like a call: a ``name`` with ``arguments``/``parameters``, or an offered tool's name with only
that tool's argument keys. A JSON answer (``{"name": "Alice", "age": 30}``) is not a call.

Near misses run (``chatloop.providers.nearjson``): JSON with raw newlines in the code, a trailing comma, single
quotes or a missing closing brace is repaired; so are the shapes small models use for an offered tool (``function``
or ``tool`` for the name, ``args``/``input`` for the arguments, the code given as a bare string where the tool has one
required argument). A tag that prose quotes is neither a call nor cut out (``chatloop.providers.tagcalls``).

Usage::

    found = find_text_calls(content, {"execute_javascript": {"code", "timeout_seconds"}})
    if found:
        found.format, found.calls, found.prefix     # "hermes", [ToolCall(...)], "Let me compute that."
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Set
from typing import NamedTuple

from chatloop.jsontypes import JSONObject, JSONValue
from chatloop.providers import nearjson
from chatloop.providers.base import ToolCall

ToolKeys = Mapping[str, Set[str]]
"""Offered tool name -> the argument names its schema declares (``ArgNames`` also knows the required ones)."""


class ArgNames(frozenset[str]):
    """A tool's argument names, and the one argument a bare value stands for (its only required one), if any."""

    sole_required: str | None = None

    @classmethod
    def of(cls, names: Iterable[str], required: Iterable[str] = ()) -> ArgNames:
        made = cls(names)
        needed = [r for r in required if r in made]
        made.sole_required = needed[0] if len(needed) == 1 else None
        return made


_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_PYTHON_TAG = re.compile(r"<\|python_tag\|>")
PYTHON_TAG_END = re.compile(r"<\|(?:eom_id|eot_id|eom|end)\|>\s*$")
FUNCTION_TAG = re.compile(r"<\s*function\s*=\s*([A-Za-z_][\w.\-]*)\s*>?\s*", re.IGNORECASE)
FUNCTION_TAG_WHOLE = re.compile(
    r"<\s*function\s*=\s*[^>]*>.*?(?:</\s*function\s*>|$)", re.IGNORECASE | re.DOTALL
)
"""The tags' patterns ``chatloop.providers.tagcalls`` reads a reply's tags with, too."""
_FENCED = re.compile(
    r"```[ \t]*(?:json|tool_call|tool_code)?[ \t]*\n((?:(?!```).)*?)\n?[ \t]*```\s*$",
    re.DOTALL | re.IGNORECASE,
)
_FUNCTION_END = re.compile(r"</\s*function\s*>|<\s*function\s*=", re.IGNORECASE)
_NAME_THEN_JSON = re.compile(r"^\s*([A-Za-z_][\w.\-]*)\s*(?=\{)")
_NAME_KEYS = ("name", "function", "tool", "tool_name")
_ARGUMENT_KEYS = ("arguments", "parameters", "args", "input", "tool_input")
_MAY_HOLD_A_CALL = re.compile(r"[<{\[]")
_NON_SPACE = re.compile(r"\S")
_BRACKET = re.compile(r"[{\[]")
"""Every format needs one of these: prose without them is not parsed at all."""
MAX_FENCED_BLOCKS = 8
"""Fenced blocks read back from the end of a reply (a small model repeats its call two or three times)."""
MAX_JSON_STARTS = 64
"""Candidate starts tried for a trailing JSON value: bounds the work on a long answer full of braces (and the stream
filter holds from these only)."""


class TextCalls(NamedTuple):  # a tuple, not a frozen dataclass: no methods generated at import (cold start)
    format: str
    calls: list[ToolCall]
    prefix: str
    """The content before the first call: what the model said alongside it."""


def find_text_calls(text: str, tools: ToolKeys, *, offered_only: bool = False) -> TextCalls | None:
    """The calls ``text`` is (or ends with), in the first format that finds any, or None.

    ``tools`` are the offered tools and their argument names. A call-shaped object that names another tool is
    still a call (the engine then tells the model which tools exist), unless ``offered_only``."""
    if not text or not tools or not _MAY_HOLD_A_CALL.search(text):
        return None
    for fmt in FORMATS:
        name = fmt.name
        found = fmt.parse(text, tools)
        if found is None:
            continue
        raw, prefix = found
        calls, flat = _tool_calls(raw, tools, offered_only)
        if calls:
            return TextCalls("flat_json" if name == "json" and flat else name, calls, prefix.strip())
        if name in _TAGGED:
            return None  # a tag that starts a call, but no usable call in it: not an answer either
    return None


def tool_keys(schemas: Iterable[Mapping[str, JSONValue]]) -> dict[str, Set[str]]:
    """``ToolKeys`` from OpenAI tool definitions."""
    keys: dict[str, Set[str]] = {}
    for schema in schemas:
        function = _object(schema.get("function"))
        parameters = _object(function.get("parameters"))
        required = parameters.get("required")
        names = required if isinstance(required, list) else []
        keys[str(function.get("name"))] = ArgNames.of(
            _object(parameters.get("properties")), (n for n in names if isinstance(n, str))
        )
    return keys


def _object(value: JSONValue) -> JSONObject:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


# --- one function per format: (raw call objects, the text before them), or None ------------------------
Found = tuple[list[JSONValue], str]


def hermes(text: str, tools: ToolKeys) -> Found | None:
    matches = list(_HERMES.finditer(text))
    if not matches or text[matches[-1].end() :].strip():
        return None
    raw = [_json_or_none(m.group(1)) for m in matches]
    return raw, text[: matches[0].start()]


def python_tag(text: str, tools: ToolKeys) -> Found | None:
    match = _PYTHON_TAG.search(text)
    if match is None:
        return None
    body = PYTHON_TAG_END.sub("", text[match.end() :]).strip()
    parts = filter(None, (p.strip() for p in re.split(r";\s*(?=\{)", body)))  # Llama separates calls with ';'
    return [_json_or_none(part) for part in parts], text[: match.start()]


def function_tag(text: str, tools: ToolKeys) -> Found | None:
    starts = list(FUNCTION_TAG.finditer(text))
    if not starts:
        return None
    decoder = json.JSONDecoder()
    raw: list[JSONValue] = []
    end = starts[0].start()
    for match in starts:
        try:
            arguments, end = decoder.raw_decode(text, match.end())
        except ValueError:
            segment = _FUNCTION_END.search(text, match.end())
            stop = segment.start() if segment else len(text)
            fixed = nearjson.repaired(text[match.end() : stop].rstrip().removesuffix(">"))
            raw.append({"name": match.group(1), "arguments": fixed} if fixed is not None else None)
            end = stop
            continue
        raw.append({"name": match.group(1), "arguments": arguments})
    rest = re.sub(r"^\s*>?\s*(?:</\s*function\s*>)?", "", text[end:], flags=re.IGNORECASE)
    if rest.strip() and not FUNCTION_TAG.match(rest.strip()):
        return None
    return raw, text[: starts[0].start()]


def fenced_json(text: str, tools: ToolKeys) -> Found | None:
    """The fenced blocks the text ends with, each holding JSON: one, or the same call written two or three times
    over (Qwen2.5-Coder 0.5B does; ``_tool_calls`` runs a repeated call once)."""
    values: list[JSONValue] = []
    end = len(text)
    start = -1
    for _ in range(MAX_FENCED_BLOCKS):
        block = _last_fence(text, end)
        if block is None:
            break
        value = _json_or_none(block[1].strip())
        if value is None:
            break
        values[:0] = value if isinstance(value, list) else [value]
        start = end = block[0]
    return (values, text[:start]) if values else None


def _last_fence(text: str, end: int) -> tuple[int, str] | None:
    """``(where it starts, its body)`` of the fenced block for calls that ``text[:end]`` ends with, or None."""
    head = text[:end].rstrip()
    if not head.endswith("```"):
        return None
    opening = head.rfind("```", 0, len(head) - 3)  # in a longer run of backticks, its last three open it
    match = _FENCED.match(head, opening) if opening >= 0 else None
    return (opening, match.group(1)) if match else None


def bare_json(text: str, tools: ToolKeys) -> Found | None:
    """A JSON object or list the text ends with (the whole text, or after some words); a near miss is repaired when
    it starts the text or a line."""
    decoder = json.JSONDecoder()
    starts = [m.start() for m in itertools.islice(_BRACKET.finditer(text), MAX_JSON_STARTS)]
    for start in starts:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            if start == 0 or text[start - 1] == "\n" or not text[:start].strip():
                fixed = nearjson.repaired(text[start:])
                if fixed is not None:
                    return (fixed if isinstance(fixed, list) else [fixed]), text[:start]
            continue
        if not _NON_SPACE.search(text, end):  # (no copy of the rest: a long answer has many candidates)
            return (value if isinstance(value, list) else [value]), text[:start]
    return None


def name_json(text: str, tools: ToolKeys) -> Found | None:
    """``f{...}``: only for an offered tool's name (a word before a JSON object is otherwise ordinary text)."""
    stripped = re.sub(r"</\s*function\s*>\s*$", "", text.strip(), flags=re.IGNORECASE)
    match = _NAME_THEN_JSON.match(stripped)
    if match is None or match.group(1) not in tools:
        return None
    try:
        arguments, end = json.JSONDecoder().raw_decode(stripped, match.end())
    except ValueError:
        fixed = nearjson.repaired(stripped[match.end() :])
        return None if fixed is None else ([{"name": match.group(1), "arguments": fixed}], "")
    if stripped[end:].strip():
        return None
    return [{"name": match.group(1), "arguments": arguments}], ""


class Opener(NamedTuple):  # a tuple, not a frozen dataclass: no methods generated at import (cold start)
    """How a call in one format starts, for the stream filter (engine/textfilter.py), which holds text back from
    there: ``tag`` (``pattern`` matches the whole opener, ``literal`` is its canonical spelling, for partial tags),
    ``fence`` (a ```` ``` ```` fence whose language is json, tool_call, tool_code or none), ``json`` (any ``{`` or
    ``[`` among the first ``MAX_JSON_STARTS`` of the text, while tools are offered), ``name`` (an offered tool's name
    at the start of the text, while tools are offered)."""

    kind: str
    pattern: re.Pattern[str] | None = None
    literal: str = ""


class TextCallFormat(
    NamedTuple
):  # a tuple, not a frozen dataclass: no methods generated at import (cold start)
    """One row of the table that drives both the parser (``parse``) and the stream filter (``opener``)."""

    name: str
    parse: Callable[[str, ToolKeys], Found | None]
    opener: Opener


FORMATS: list[TextCallFormat] = [
    TextCallFormat("hermes", hermes, Opener("tag", re.compile(r"<tool_call>", re.IGNORECASE), "<tool_call>")),
    TextCallFormat(
        "python_tag", python_tag, Opener("tag", re.compile(r"<\|python_tag\|>"), "<|python_tag|>")
    ),
    TextCallFormat(
        "function_tag",
        function_tag,
        Opener("tag", re.compile(r"<\s*function\s*=", re.IGNORECASE), "<function="),
    ),
    TextCallFormat("fenced_json", fenced_json, Opener("fence")),
    TextCallFormat("json", bare_json, Opener("json")),
    TextCallFormat("name_json", name_json, Opener("name")),
]
"""Tried in order; the first format that finds calls wins. ``flat_json`` is what ``json`` reports for a flat object."""
_TAGGED = {"hermes", "python_tag", "function_tag"}


# --- from raw objects to calls ---------------------------------------------------------------------------
def _tool_calls(raw: list[JSONValue], tools: ToolKeys, offered_only: bool) -> tuple[list[ToolCall], bool]:
    """The calls, and whether any was flat. Every object must be a call, else none is: a half-recovered batch
    would run something other than what the model meant. The same call written again in one reply is one call:
    a small model repeats its block, and meant it once."""
    calls: list[ToolCall] = []
    seen: set[tuple[str, str]] = set()
    flat = False
    for item in raw:
        call = _as_call(item, tools)
        if call is None or (offered_only and call[0] not in tools):
            return [], False
        name, arguments, was_flat = call
        flat = flat or was_flat
        key = (name, json.dumps(arguments, sort_keys=True))
        if key not in seen:
            seen.add(key)
            calls.append(ToolCall(f"call_text_{uuid.uuid4().hex[:12]}", name, json.dumps(arguments)))
    return calls, flat


def _as_call(item: JSONValue, tools: ToolKeys) -> tuple[str, JSONObject, bool] | None:
    """``(name, arguments, flat)`` for an object shaped like a call, else None."""
    if not isinstance(item, dict):
        return None
    function = item.get("function")
    if isinstance(function, dict) and set(item) <= {"function", "type", "id"}:
        item = function  # OpenAI's own tool_calls entry, written out as text
    name = item.get("name")
    if not isinstance(name, str) or not name:
        return _as_aliased_call(item, tools)
    for key in ("arguments", "parameters"):
        if key in item and set(item) <= {"name", key, "id", "type"}:
            arguments = _arguments(item[key], tools.get(name))
            return (name, arguments, False) if arguments is not None else None
    rest = {k: v for k, v in item.items() if k != "name"}
    if name in tools and rest and set(rest) <= tools[name]:
        return name, rest, True  # flat: the tool's own argument keys beside its name
    return None


def _as_aliased_call(item: JSONObject, tools: ToolKeys) -> tuple[str, JSONObject, bool] | None:
    """``{"function"|"tool"|"tool_name": f, "args"|"input"|...: {...}}`` for an offered tool ``f`` only: other
    JSON with such keys is an answer."""
    names = [item[k] for k in _NAME_KEYS if isinstance(item.get(k), str)]
    keys = [k for k in _ARGUMENT_KEYS if k in item]
    if len(names) != 1 or len(keys) != 1 or names[0] not in tools or len(item) != 2:
        return None
    name = str(names[0])
    arguments = _arguments(item[keys[0]], tools[name])
    return (name, arguments, False) if arguments is not None else None


def _arguments(value: JSONValue, keys: Set[str] | None) -> JSONObject | None:
    """A call's arguments as an object: given as one, as a JSON string (repaired when it is a near miss), or as
    the bare value of a tool's one required argument (``"arguments": "console.log(1)"``)."""
    if isinstance(value, str):
        parsed = _json_or_none(value)
        if parsed is None and value.strip() and not value.lstrip().startswith(("{", "[")):
            sole = getattr(keys, "sole_required", None)
            return {sole: value} if sole else None
        value = parsed
    return value if isinstance(value, dict) else None


def _json_or_none(text: str) -> JSONValue:
    """Strict JSON, or a near miss repaired (``nearjson``); None otherwise."""
    return nearjson.loads(text)
