"""Assemble tool calls from streamed deltas.

OpenAI streams a call in pieces keyed by ``index`` (index 0 included: always append); Groq often sends a
whole call in one chunk; some OpenAI-compatible servers omit ``index`` (match by ``id``, else continue the
last call) or the ``id`` (one is generated).

Usage::

    acc = ToolCallAccumulator()
    for chunk in chunks:
        acc.add(chunk.choices[0].delta.tool_calls or [])
    calls = acc.calls()          # [ToolCall(id=..., name=..., arguments='{"code": "1+1"}')]
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

from chatloop.providers.base import ToolCall
from chatloop.textsafe import text_safe


def field_of(obj: object, name: str) -> Any:
    """``obj.name`` or ``obj[name]``: SDK objects and plain dicts alike. Typed ``Any`` on purpose: the SDK's chunk
    classes are imported lazily (never named here), and a server may send any shape, so each caller reads the field as
    the shape it expects and copes with another (``or []``, ``isinstance``)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None) or {}
        value = extra.get(name)
    return value


class ToolCallAccumulator:
    def __init__(self) -> None:
        self._slots: list[dict[str, str]] = []
        self._by_index: dict[int, dict[str, str]] = {}

    def add(self, deltas: Iterable[object] | None) -> None:
        for delta in deltas or []:
            index = field_of(delta, "index")
            call_id = field_of(delta, "id") or ""
            function = field_of(delta, "function") or {}
            name = field_of(function, "name") or ""
            arguments = field_of(function, "arguments")
            if isinstance(arguments, dict):  # some servers send an object, not a string
                arguments = json.dumps(arguments)
            arguments = arguments or ""
            slot = self._slot(index, call_id, bool(name))
            if call_id and not slot["id"]:
                slot["id"] = call_id
            if name and not slot["name"]:
                slot["name"] = name
            if arguments and not (slot["arguments"] == arguments and _is_json(arguments)):
                slot["arguments"] += arguments  # a repeated complete call is not doubled

    def _slot(self, index: int | None, call_id: str, has_name: bool) -> dict[str, str]:
        if index is not None:
            slot = self._by_index.get(index)
            if slot is None:
                slot = self._new()
                self._by_index[index] = slot
            return slot
        if call_id:
            for slot in self._slots:
                if slot["id"] == call_id:
                    return slot
            return self._new()
        if self._slots and not has_name:
            return self._slots[-1]  # a continuation chunk with neither index nor id
        return self._new()

    def _new(self) -> dict[str, str]:
        slot = {"id": "", "name": "", "arguments": ""}
        self._slots.append(slot)
        return slot

    def calls(self) -> list[ToolCall]:
        out = []
        for slot in self._slots:
            if not slot["name"] and not slot["arguments"]:
                continue
            call_id = text_safe(slot["id"]) or f"call_{uuid.uuid4().hex[:24]}"
            arguments = text_safe(slot["arguments"]) or "{}"
            out.append(ToolCall(id=call_id, name=text_safe(slot["name"]), arguments=arguments))
        return out


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
