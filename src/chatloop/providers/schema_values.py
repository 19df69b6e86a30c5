"""A value valid for a JSON schema, filled from hints: how the offline demo model answers a client's function tool
or a ``json_schema`` response format without being a language model.

Covers what clients send (OpenAI function parameters, Pydantic's ``model_json_schema()``, Zod's JSON schema):
``type`` (one or a list), ``properties``/``required``, ``items``/``minItems``, ``enum``, ``const``, ``default``,
``anyOf``/``oneOf``/``allOf`` (the first option), ``$ref`` into ``$defs``/``definitions``, numeric bounds and string
lengths. Every property is filled, required or not (strict schemas require all of them).

Usage::

    value_for({"type": "object", "properties": {"city": {"type": "string"}}}, Hints(words=["Oslo"]))
    # {"city": "Oslo"}
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 8
SENTENCE_WORDS = frozenset(
    [
        "A",
        "An",
        "And",
        "Are",
        "Can",
        "Calculate",
        "Could",
        "Do",
        "Does",
        "Find",
        "Get",
        "Give",
        "How",
        "I",
        "If",
        "In",
        "Is",
        "It",
        "Let",
        "Me",
        "My",
        "Please",
        "Show",
        "Tell",
        "The",
        "This",
        "To",
        "Us",
        "We",
        "What",
        "When",
        "Where",
        "Which",
        "Who",
        "Why",
        "Will",
        "With",
        "Would",
        "You",
    ]
)
"""Capitalised only because they start a sentence: never taken for a name."""


@dataclass
class Hints:
    """What a value may be drawn from: words (e.g. names in the question), numbers, and free text."""

    words: list[str] = field(default_factory=list)
    numbers: list[float] = field(default_factory=list)
    text: str = ""

    @classmethod
    def from_text(cls, text: str) -> Hints:
        """Capitalised words (names, places) and the numbers in ``text``."""
        tokens = re.findall(r"[A-Za-z][\w'-]*", text)
        words = [w for w in tokens if w[0].isupper() and w not in SENTENCE_WORDS]
        numbers = [float(n.replace(",", "")) for n in re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)]
        return cls(words=words, numbers=numbers, text=text.strip())


def value_for(schema: Any, hints: Hints | None = None) -> Any:
    """A value that validates against ``schema`` (a dict; ``True``/``{}`` accept anything)."""
    return _Filler(schema if isinstance(schema, dict) else {}, hints or Hints()).value(schema, "", 0)


class _Filler:
    def __init__(self, root: dict[str, Any], hints: Hints):
        self.root = root
        self.hints = hints

    def value(self, schema: Any, name: str, depth: int) -> Any:
        if not isinstance(schema, dict) or depth > MAX_DEPTH:
            return None if depth > MAX_DEPTH else self.hints.text
        if "$ref" in schema:
            return self.value(self._resolve(schema["$ref"]), name, depth + 1)
        if "const" in schema:
            return schema["const"]
        if "default" in schema:
            return schema["default"]
        if schema.get("enum"):
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            options = [
                o for o in schema.get(key) or [] if not (isinstance(o, dict) and o.get("type") == "null")
            ]
            if options:
                return self.value(options[0], name, depth + 1)
        if schema.get("allOf"):
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                merged.update(
                    self._resolve(part["$ref"]) if isinstance(part, dict) and "$ref" in part else part
                )
            return self.value(merged, name, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
        return getattr(self, f"_{kind}", self._string)(schema, name, depth)

    def _resolve(self, ref: str) -> dict[str, Any]:
        node: Any = self.root
        for part in ref.removeprefix("#/").split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return node if isinstance(node, dict) else {}

    def _object(self, schema: dict[str, Any], name: str, depth: int) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        return {key: self.value(sub, key, depth + 1) for key, sub in properties.items()}

    def _array(self, schema: dict[str, Any], name: str, depth: int) -> list[Any]:
        count = max(1, int(schema.get("minItems", 1)))
        if "maxItems" in schema:
            count = min(count, int(schema["maxItems"]))
        return [self.value(schema.get("items", {}), name, depth + 1) for _ in range(count)]

    def _string(self, schema: dict[str, Any], name: str, depth: int) -> str:
        text = self.hints.words[0] if self.hints.words and len(self.hints.words[0]) < 40 else self.hints.text
        text = text or name or "value"
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        text = text.ljust(low, ".")
        return text[: int(high)] if high is not None else text

    def _number(self, schema: dict[str, Any], name: str, depth: int) -> float:
        number = self.hints.numbers[0] if self.hints.numbers else 0.0
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        high = schema.get("maximum", schema.get("exclusiveMaximum"))
        if low is not None and number <= low:
            number = low + (1 if "exclusiveMinimum" in schema else 0)
        if high is not None and number >= high:
            number = high - (1 if "exclusiveMaximum" in schema else 0)
        return number

    def _integer(self, schema: dict[str, Any], name: str, depth: int) -> int:
        return math.floor(self._number(schema, name, depth))

    def _boolean(self, schema: dict[str, Any], name: str, depth: int) -> bool:
        return True

    def _null(self, schema: dict[str, Any], name: str, depth: int) -> None:
        return None
