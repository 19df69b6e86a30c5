"""Check and normalise the conversations clients send.

Accepts OpenAI-format histories with earlier turns' tool traffic, tool calls in the nested
(``function: {name, arguments}``) and the flat (``name``, ``arguments``) form, ``content`` as null,
a string or a list of text parts. Returns a conversation every provider accepts: each tool message
answers exactly one earlier tool call, every call is answered before the next message, no duplicates.
Anything else raises ``ConversationError`` naming the message index.

Usage::

    messages = normalize_conversation(body["messages"])     # raises ConversationError -> HTTP 400
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from chatloop.jsontypes import JSONObject, JSONValue
from chatloop.providers.tagcalls import strip_tag_calls

Message = JSONObject
"""One OpenAI-format conversation message: ``{"role": ..., "content": ...}``, with ``tool_calls`` (assistant),
``tool_call_id`` and ``name`` (tool). The engine only ever adds system, assistant and tool messages."""

ROLES = {"system", "developer", "user", "assistant", "tool"}


class ConversationError(ValueError):
    """A client conversation the engine cannot send to a model."""

    def __init__(self, index: int | None, message: str, part: int | None = None):
        self.index = index
        self.param = "messages" if index is None else f"messages[{index}]"
        if part is not None:
            self.param += f".content[{part}]"
        super().__init__(f"{self.param}: {message}")


def normalize_conversation(raw: object) -> list[Message]:
    if not isinstance(raw, list) or not raw:
        raise ConversationError(None, "must be a non-empty list of messages")
    conversation = _Conversation()
    for index, message in enumerate(raw):
        if not isinstance(message, dict):
            raise ConversationError(index, "must be an object")
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise ConversationError(index, f"unknown role {role!r} (expected one of {sorted(ROLES)})")
        if role == "tool":
            conversation.tool(index, message)
        elif role == "assistant":
            conversation.assistant(index, message)
        else:
            conversation.other(index, role, message)
    return conversation.finish()


class _Conversation:
    """The normalised conversation so far, and the tool calls still waiting for their tool messages."""

    def __init__(self) -> None:
        self.out: list[Message] = []
        self.pending: dict[str, str] = {}  # tool_call_id -> tool name, for the latest assistant message
        self.pending_from: int | None = None
        self.answered: dict[str, str] = {}  # tool_call_id -> content, for dropping exact duplicates

    def tool(self, index: int, message: Mapping[str, object]) -> None:
        tool_call_id = message.get("tool_call_id")
        if not isinstance(tool_call_id, str) or not tool_call_id:
            raise ConversationError(index, "a tool message needs a tool_call_id")
        content = _text(index, message.get("content"), allow_null=False)
        if tool_call_id in self.answered:
            if self.answered[tool_call_id] == content:
                return  # an exact duplicate (seed 004): dropped
            raise ConversationError(
                index, f"tool_call_id {tool_call_id!r} is answered twice with different content"
            )
        if tool_call_id not in self.pending:
            raise ConversationError(
                index, f"orphan tool message: no earlier assistant tool call has id {tool_call_id!r}"
            )
        name = self.pending.pop(tool_call_id)
        self.answered[tool_call_id] = content
        self.out.append({"role": "tool", "tool_call_id": tool_call_id, "name": name, "content": content})

    def assistant(self, index: int, message: Mapping[str, object]) -> None:
        self._no_pending_before(index)
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise ConversationError(index, "tool_calls must be a list")
        calls = [_tool_call(index, n, c) for n, c in enumerate(raw_calls)]
        content = _text(index, message.get("content"), allow_null=True)
        content = strip_tag_calls(content) if content else content
        if not calls and not content:
            raise ConversationError(index, "an assistant message needs content or tool_calls")
        entry: Message = {"role": "assistant", "content": content or ""}
        if calls:
            ids = [call_id for call_id, _, _ in calls]
            if len(set(ids)) != len(ids) or any(i in self.answered for i in ids):
                raise ConversationError(index, "tool call ids must be unique")
            entry["tool_calls"] = [_call_message(*c) for c in calls]
            self.pending = {call_id: name for call_id, name, _ in calls}
            self.pending_from = index
        self.out.append(entry)

    def other(self, index: int, role: str, message: Mapping[str, object]) -> None:
        """A system, developer or user message."""
        self._no_pending_before(index)
        raw = message.get("content")
        content: JSONValue = (
            _with_images(index, raw)
            if role == "user" and isinstance(raw, list) and _has_images(raw)
            else _text(index, raw, allow_null=False)
        )
        entry: Message = {"role": "system" if role == "developer" else role, "content": content}
        name = message.get("name")
        if role == "user" and isinstance(name, str):
            entry["name"] = name
        self.out.append(entry)

    def finish(self) -> list[Message]:
        if self.pending:
            raise ConversationError(
                self.pending_from, f"tool calls {sorted(self.pending)} are not answered by tool messages"
            )
        return self.out

    def _no_pending_before(self, index: int) -> None:
        if self.pending:
            raise ConversationError(
                self.pending_from,
                f"tool calls {sorted(self.pending)} are not answered by tool messages before messages[{index}]",
            )


def _text(index: int, content: object, allow_null: bool) -> str:
    if content is None:
        if allow_null:
            return ""
        raise ConversationError(index, "content must not be null")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for n, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and part.get("type") == "image_url":
                raise ConversationError(index, "an image is taken in a user message only", part=n)
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ConversationError(
                    index, f"content[{n}] of type {kind!r} is not supported (only text parts)"
                )
        return "".join(parts)
    raise ConversationError(
        index, f"content must be a string, a list of text parts or null, not {type(content).__name__}"
    )


def _has_images(content: object) -> bool:
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "image_url" for p in content
    )


def _with_images(index: int, content: list[object]) -> list[JSONValue]:
    """A user message's content list that holds images, kept as a list: text parts and ``image_url`` parts (``url``
    and ``detail`` only). Their URLs were checked at the door (``api.turns.images``); here only their shape."""
    parts: list[JSONValue] = []
    for n, part in enumerate(content):
        if isinstance(part, str):
            parts.append({"type": "text", "text": part})
            continue
        if not isinstance(part, dict) or part.get("type") not in ("text", "image_url"):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ConversationError(index, f"content part of type {kind!r} is not supported", part=n)
        if part["type"] == "text":
            if not isinstance(part.get("text"), str):
                raise ConversationError(index, "a text part needs a text string", part=n)
            parts.append({"type": "text", "text": part["text"]})
            continue
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else None
        detail = image.get("detail", "auto") if isinstance(image, dict) else None
        if not isinstance(url, str) or not isinstance(detail, str):
            raise ConversationError(
                index, "an image_url part needs image_url.url (and a detail string)", part=n
            )
        parts.append({"type": "image_url", "image_url": {"url": url, "detail": detail}})
    return parts


def _tool_call(index: int, n: int, call: object) -> tuple[str, str, str]:
    """``(id, name, arguments)`` of a call in the nested or the flat form."""
    if not isinstance(call, dict):
        raise ConversationError(index, f"tool_calls[{n}] must be an object")
    nested = call.get("function")
    function: Mapping[str, object] = nested if isinstance(nested, dict) else call
    name = function.get("name")
    arguments = function.get("arguments", "{}")
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise ConversationError(index, f"tool_calls[{n}] needs an id")
    if not isinstance(name, str) or not name:
        raise ConversationError(index, f"tool_calls[{n}] needs a function name")
    if isinstance(arguments, dict):
        arguments = json.dumps(arguments)
    if not isinstance(arguments, str):
        raise ConversationError(index, f"tool_calls[{n}].arguments must be a JSON string or object")
    return call_id, name, arguments


def _call_message(call_id: str, name: str, arguments: str) -> JSONValue:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_call_ids(messages: Iterable[Message]) -> set[str]:
    """Every tool call id the assistant messages of ``messages`` hold."""
    ids: set[str] = set()
    for message in messages:
        calls = message.get("tool_calls")
        if not calls or not isinstance(calls, list):  # most messages hold none
            continue
        for call in calls:
            call_id = call.get("id") if isinstance(call, dict) else None
            if isinstance(call_id, str):
                ids.add(call_id)
    return ids
