"""A value valid for a JSON schema, filled from hints: how the offline demo model answers a client's function tool
or a ``json_schema`` response format without being a language model.

Covers what clients send (OpenAI function parameters, Pydantic's ``model_json_schema()``, Zod's JSON schema):
``type`` (one or a list), ``properties``/``required``, ``items``/``minItems``, ``enum``, ``const``, ``default``,
``anyOf``/``oneOf``/``allOf`` (the first option), ``$ref`` into ``$defs``/``definitions``, numeric bounds and string
lengths. Every property is filled, required or not (strict schemas require all of them).

The work is bounded whatever the schema says (it is client-sent, so hostile until checked): at most ``MAX_NODES``
schema nodes are visited (a ``$ref`` cycle with fan-out included), ``MAX_DEPTH`` levels, ``MAX_ITEMS`` items an
array, and ``MAX_OUTPUT_CHARS`` characters of output in all; a bound that is not a finite number is ignored, never
a traceback. Past a cap the value is cut short (it may then not validate: the demo is not a language model).

Usage::

    value_for({"type": "object", "properties": {"city": {"type": "string"}}}, Hints(words=["Oslo"]))
    # {"city": "Oslo"}
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from chatloop.jsontypes import JSONObject, JSONValue

MAX_DEPTH = 8
"""Levels of nesting filled (a ``$ref`` counts as one); deeper values are ``None``."""
MAX_NODES = 2_000
"""Schema nodes visited for one value: a ``$ref`` cycle that fans out stops here, not at 100 % CPU."""
MAX_ITEMS = 32
"""Items in one array, whatever ``minItems`` asks."""
MAX_OUTPUT_CHARS = 64 * 1024
"""Characters of the whole value (its strings, constants and defaults), whatever ``minLength`` asks."""
MAX_HINT_CHARS = 2_000
"""Of the question's text, at most this much is read for hints (and used as a string's value)."""
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
        text = text[:MAX_HINT_CHARS]
        tokens = re.findall(r"[A-Za-z][\w'-]*", text)
        words = [w for w in tokens if w[0].isupper() and w not in SENTENCE_WORDS]
        numbers = [float(n.replace(",", "")) for n in re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)]
        return cls(words=words, numbers=[n for n in numbers if math.isfinite(n)], text=text.strip())


def value_for(schema: JSONValue, hints: Hints | None = None) -> JSONValue:
    """A value that validates against ``schema`` (a dict; ``True``/``{}`` accept anything), within the caps above."""
    return _Filler(schema if isinstance(schema, dict) else {}, hints or Hints()).value(schema, "", 0)


def finite(value: object) -> float | None:
    """``value`` as a finite float, or None for anything else (a string, a bool, NaN, an infinity, 10**400)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def count(value: object, default: int, cap: int) -> int:
    """A size bound (``minItems``, ``maxLength``...) as an int in ``[0, cap]``; ``default`` when it is not a number."""
    number = finite(value)
    if number is None:
        return default
    return int(min(max(number, 0), cap))


class _Filler:
    def __init__(self, root: JSONObject, hints: Hints):
        self.root = root
        self.hints = hints
        self.nodes = MAX_NODES
        self.chars = MAX_OUTPUT_CHARS

    def value(self, schema: JSONValue, name: str, depth: int) -> JSONValue:
        self.nodes -= 1
        if depth > MAX_DEPTH or self.nodes < 0 or self.chars <= 0:
            return None
        if not isinstance(schema, dict):
            return self._text(name)
        if "$ref" in schema:
            return self.value(self._resolve(schema["$ref"]), name, depth + 1)
        for key in ("const", "default"):
            if key in schema:
                return self._given(schema[key])
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return self._given(enum[0])
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            options = [
                o
                for o in (options if isinstance(options, list) else [])
                if not (isinstance(o, dict) and o.get("type") == "null")
            ]
            if options:
                return self.value(options[0], name, depth + 1)
        parts = schema.get("allOf")
        if isinstance(parts, list) and parts:
            merged: JSONObject = {}
            for part in parts[:MAX_ITEMS]:
                if isinstance(part, dict):
                    merged.update(self._resolve(part["$ref"]) if "$ref" in part else part)
            return self.value(merged, name, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
        filler = _KINDS.get(kind if isinstance(kind, str) else "string", _KINDS["string"])
        return filler(self, schema, name, depth)

    def _given(self, value: JSONValue) -> JSONValue:
        """A ``const``, ``default`` or ``enum`` value from the schema, charged to the output budget."""
        try:
            size = len(json.dumps(value))
        except (TypeError, ValueError):
            return None
        self.chars -= size
        return value if self.chars >= 0 else None

    def _text(self, name: str) -> str:
        text = self.hints.words[0] if self.hints.words and len(self.hints.words[0]) < 40 else self.hints.text
        return (text or name or "value")[:MAX_HINT_CHARS]

    def _resolve(self, ref: JSONValue) -> JSONObject:
        if not isinstance(ref, str):
            return {}
        node: JSONValue = self.root
        for part in ref.removeprefix("#/").split("/")[: MAX_DEPTH * 4]:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return node if isinstance(node, dict) else {}

    def _object(self, schema: JSONObject, name: str, depth: int) -> JSONObject:
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return {}
        out: JSONObject = {}
        for key, sub in properties.items():
            if self.nodes <= 0 or self.chars <= 0:
                break
            self.chars -= len(key) + 4
            out[key] = self.value(sub, key, depth + 1)
        return out

    def _array(self, schema: JSONObject, name: str, depth: int) -> list[JSONValue]:
        wanted = max(1, count(schema.get("minItems"), 1, MAX_ITEMS))
        wanted = min(wanted, count(schema.get("maxItems"), MAX_ITEMS, MAX_ITEMS))
        items = schema.get("items", {})
        out: list[JSONValue] = []
        for _ in range(wanted):
            if self.nodes <= 0 or self.chars <= 0:
                break
            self.chars -= 2
            out.append(self.value(items, name, depth + 1))
        return out

    def _string(self, schema: JSONObject, name: str, depth: int) -> str:
        text = self._text(name)
        low = count(schema.get("minLength"), 0, max(self.chars, 0))
        high = count(schema.get("maxLength"), MAX_OUTPUT_CHARS, MAX_OUTPUT_CHARS)
        text = text.ljust(low, ".")[: max(high, 0)]
        text = text[: max(self.chars, 0)]
        self.chars -= len(text) + 2
        return text

    def _number(self, schema: JSONObject, name: str, depth: int) -> float:
        number = self.hints.numbers[0] if self.hints.numbers else 0.0
        low, high = _bounds(schema)
        if low is not None and number < low:
            number = low
        if high is not None and number > high:
            number = high
        self.chars -= 24
        return number

    def _integer(self, schema: JSONObject, name: str, depth: int) -> int:
        number = self._number(schema, name, depth)
        low, _ = _bounds(schema)
        whole = math.ceil(number) if low is not None and number <= low else math.floor(number)
        return whole if abs(whole) < 2**63 else 0

    def _boolean(self, schema: JSONObject, name: str, depth: int) -> bool:
        self.chars -= 5
        return True

    def _null(self, schema: JSONObject, name: str, depth: int) -> None:
        self.chars -= 4
        return None


def _bounds(schema: JSONObject) -> tuple[float | None, float | None]:
    """The lowest and highest number a schema allows (exclusive bounds, numeric or draft-4 booleans, stepped past by
    one); None where it sets none, or sets one that is not a finite number."""
    low, high = finite(schema.get("minimum")), finite(schema.get("maximum"))
    low_exclusive, high_exclusive = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if low_exclusive is True and low is not None:
        low += 1
    elif (bound := finite(low_exclusive)) is not None:
        low = max(low, bound + 1) if low is not None else bound + 1
    if high_exclusive is True and high is not None:
        high -= 1
    elif (bound := finite(high_exclusive)) is not None:
        high = min(high, bound - 1) if high is not None else bound - 1
    return low, high


_KINDS: dict[str, Callable[[_Filler, JSONObject, str, int], JSONValue]] = {
    "object": _Filler._object,
    "array": _Filler._array,
    "string": _Filler._string,
    "number": _Filler._number,
    "integer": _Filler._integer,
    "boolean": _Filler._boolean,
    "null": _Filler._null,
}
