"""What the engine makes of a model response that wrote its tool calls as text.

While tools are offered, a response with no native tool calls whose content is (or ends with) a call in a known
format (``chatloop.providers.textcall_formats``) gets those calls, fresh ids and JSON-string arguments; its content keeps
only the words before them. A tagged pseudo-call that cannot be read (truncated, malformed, or written while no
tool was offered) is cut out of the content and reported, so the model is reminded instead of the user seeing it.

Two call-shaped texts are not calls (issue #41):

- a call the model *relays*: its text is in a tool result of the conversation (a page the model quotes holds a
  ``<tool_call>`` tag): the content is the answer, whole;
- a call to a tool the server already answered with ``UnknownTool``: running it again only gets the same error, so
  it is no answer (``not_an_answer="unknown_tool_call"``): the words before it are kept, and the model is reminded.

Usage::

    reply = read_text_calls(response, request.tools, request.messages)
    reply.text_calls          # TextCalls(format="hermes", calls=[...], prefix="...") or None
    reply.unrunnable_text_call
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from chatloop.jsontypes import JSONObject, JSONValue
from chatloop.providers.base import ModelResponse, ToolCall
from chatloop.providers.tagcalls import has_tag_call, strip_tag_calls, tag_call_at
from chatloop.providers.textcall_formats import (
    MAX_JSON_STARTS,
    TextCalls,
    ToolKeys,
    find_text_calls,
    tool_keys,
)

_BRACE = re.compile(r"[{\[]")
_OPENS_A_CALL = re.compile(
    r"(?:```[ \t]*(?:json|tool_call|tool_code)?[ \t]*\n?|<tool_call>|<\|python_tag\|>)\s*$", re.IGNORECASE
)
"""What opens a copy of a call just before its JSON (a fence, a tag): cut with it."""
_UNKNOWN_TOOL = re.compile(r"UnknownTool: '([^'\\]+)'")
"""The error a call to a tool that does not exist is answered with (``engine.prompts.not_run``)."""


@dataclass(frozen=True)
class Reply:
    """A model response as the engine reads it."""

    response: ModelResponse
    text_calls: TextCalls | None = None
    """Calls recovered from the content (now also in ``response.tool_calls``)."""
    unrunnable_text_call: bool = False
    """A tagged call was written as text but could not be read: it was cut from the content."""
    not_an_answer: str | None = None
    """Why the text was no answer (``engine.answers``: a tool's error, the tools echoed, ...): it was cut."""
    relayed: bool = False
    """The content ends with a call a tool result holds: the model quotes it, and the content is the answer."""


def read_text_calls(
    response: ModelResponse,
    tools: Sequence[JSONObject] | None,
    history: Sequence[JSONObject] = (),
    withdrawn: Sequence[JSONObject] = (),
) -> Reply:
    """Recover calls written as text (only while ``tools`` are offered), and never leave a pseudo-call in the
    content. ``history``: the conversation the model was given (its tool results); ``withdrawn``: the turn's tools
    when none is offered to this call (a call to one is still looked for, to tell a relayed one). Mutates
    ``response``: its content and tool calls are what the rest of the turn sees."""
    content = response.content or ""
    if response.tool_calls:
        if has_tag_call(content):  # native calls beside a pseudo one: the native ones are the calls
            response.content = strip_tag_calls(content)
        return Reply(response)
    found = find_text_calls(content, tool_keys(tools or withdrawn))
    if found is not None and relayed(content.lstrip()[len(found.prefix) :], history):
        return Reply(response, relayed=True)
    if found is not None and tools:
        if {call.name for call in found.calls} <= refused_tools(history, [*tools, *withdrawn]):
            response.content = found.prefix
            return Reply(response, not_an_answer="unknown_tool_call")
        response.tool_calls = found.calls
        response.content = without_copies(found.prefix, found.calls, tool_keys(tools))
        return Reply(response, text_calls=found)
    at = tag_call_at(content)
    if at >= 0 and relayed(content[at:], history):
        return Reply(response, relayed=True)
    if at >= 0:
        response.content = strip_tag_calls(content)
        return Reply(response, unrunnable_text_call=True)
    return Reply(response)


def without_copies(prefix: str, calls: Sequence[ToolCall], keys: ToolKeys) -> str:
    """``prefix`` (the words before the calls a reply ends with) cut before the first copy of one of ``calls``: a small
    model writes its call two or three times (bare, fenced, with a line between), and meant it once. A copy is a
    JSON value that reads as the same calls (name and arguments), with the fence or tag that opens it; the words
    between copies go with them (they are about the call). What is left is a prefix of the reply, as streamed."""
    if "{" not in prefix:
        return prefix
    ran = {_call_key(call) for call in calls}
    names = {call.name for call in calls}
    decoder = json.JSONDecoder()
    for match in itertools.islice(_BRACE.finditer(prefix), MAX_JSON_STARTS):
        try:
            _, end = decoder.raw_decode(prefix, match.start())
        except ValueError:
            continue
        value = prefix[match.start() : end]
        if not any(name in value for name in names):
            continue  # JSON that names none of the calls (an answer's example) is no copy of them
        copy = find_text_calls(value, keys)
        if copy is not None and {_call_key(call) for call in copy.calls} <= ran:
            return _OPENS_A_CALL.sub("", prefix[: match.start()]).rstrip()
    return prefix


def _call_key(call: ToolCall) -> tuple[str, str]:
    try:
        arguments = json.dumps(json.loads(call.arguments), sort_keys=True)
    except ValueError:
        arguments = call.arguments
    return call.name, arguments


def relayed(call_text: str, history: Sequence[JSONObject]) -> bool:
    """Whether ``call_text`` (a call as the model wrote it) is in a tool result of ``history``: the model quotes
    what a tool returned (whitespace runs compared as one space)."""
    wanted = " ".join(call_text.split())
    return bool(wanted) and any(wanted in " ".join(text.split()) for text in _tool_texts(history))


def refused_tools(history: Sequence[JSONObject], tools: Sequence[JSONObject] = ()) -> AbstractSet[str]:
    """The tools this conversation's tool results said do not exist (``UnknownTool: 'name' ...``), less the turn's
    ``tools`` (a tool's output that prints such a line cannot make a real tool look refused). Read from the
    messages as they are (the error's JSON keeps the name as it is): no JSON is parsed for every reply judged."""
    found = {
        m.group(1)
        for message in history
        if message.get("role") == "tool" and isinstance(content := message.get("content"), str)
        for m in _UNKNOWN_TOOL.finditer(content)
    }
    return found - set(tool_keys(tools)) if found else found


def _tool_texts(history: Sequence[JSONObject]) -> Iterator[str]:
    """Each tool message's content, and the strings its JSON holds (a result's text, unescaped)."""
    for message in history:
        content = message.get("content")
        if message.get("role") != "tool" or not isinstance(content, str):
            continue
        yield content
        try:
            value: JSONValue = json.loads(content)
        except ValueError:
            continue
        yield from _strings(value)


def _strings(value: JSONValue) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
