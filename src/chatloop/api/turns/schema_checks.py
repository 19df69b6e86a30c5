"""Client JSON schemas checked at the edge: a ``response_format`` / ``text.format`` schema or a function tool's
``parameters`` whose bounds are not numbers, or are absurd, is a 400 naming the field, before any model is called.

A schema is client-sent, so hostile until checked: ``minItems: "10"``, ``minLength: 1e9``, ``maximum: NaN`` (Python's
JSON reader takes ``NaN`` and ``Infinity``), a ``$ref`` that is not a string. Only the schema keywords are read, where
a schema can hold them (``properties`` values, ``items``, ``anyOf`` options, ``$defs`` ...): a property *named*
``minimum`` is not a bound, and ``const``/``default``/``enum`` values are data. Legal recursion (a ``$ref`` cycle) is
fine here; what it costs to fill one is the demo model's to bound.

Usage::

    check_schema({"type": "array", "minItems": "10"})
    # raises SchemaError("minItems: must be a non-negative integer, got '10'")
"""

from __future__ import annotations

from collections.abc import Iterator

from chatloop.providers.schema_values import finite

MAX_LOWER_COUNT = 10_000
"""The largest ``minItems`` / ``minProperties`` / ``minContains`` taken: more items than any answer can hold."""
MAX_LOWER_LENGTH = 100_000
"""The largest ``minLength`` taken (characters): more than any model writes in one string."""
MAX_UPPER = 2**53
"""Upper size bounds (``maxItems``, ``maxLength`` ...) up to JSON's safe integers; larger is meaningless."""
MAX_NODES = 10_000
"""Schema nodes checked; a schema with more is refused (the body's size and depth limits apply first)."""

COUNTS = {
    "minItems": MAX_LOWER_COUNT,
    "minProperties": MAX_LOWER_COUNT,
    "minContains": MAX_LOWER_COUNT,
    "minLength": MAX_LOWER_LENGTH,
    "maxItems": MAX_UPPER,
    "maxProperties": MAX_UPPER,
    "maxContains": MAX_UPPER,
    "maxLength": MAX_UPPER,
}
"""Size bounds: non-negative integers (``3.0`` is an integer in JSON Schema), each up to its limit."""
NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
"""Numeric bounds: finite numbers (draft 4's boolean ``exclusiveMinimum``/``exclusiveMaximum`` too)."""
PAIRS = (("minItems", "maxItems"), ("minLength", "maxLength"), ("minProperties", "maxProperties"))
TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})

_ONE_SCHEMA = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")


class SchemaError(ValueError):
    """A client schema that cannot be taken; the message names the keyword's path inside the schema."""


def check_schema(schema: object) -> None:
    """Raise ``SchemaError`` naming the first keyword whose value is not a usable bound (see the module docstring).
    Iterative, and bounded by ``MAX_NODES``: no schema makes it recurse or run long."""
    for seen, (path, node) in enumerate(_nodes(schema), start=1):
        if seen > MAX_NODES:
            raise SchemaError(f"the schema has more than {MAX_NODES} subschemas")
        _check_node(path, node)


def _check_node(path: str, node: dict[str, object]) -> None:
    for key, limit in COUNTS.items():
        if key in node and not _count_ok(node[key], limit):
            raise SchemaError(
                f"{_at(path, key)}: must be an integer from 0 to {limit:,}, got {_shown(node[key])}"
            )
    for key in NUMBERS:
        if key not in node:
            continue
        value = node[key]
        if key.startswith("exclusive") and isinstance(value, bool):
            continue
        number = finite(value)
        if number is None or (key == "multipleOf" and number <= 0):
            wanted = "a positive finite number" if key == "multipleOf" else "a finite number"
            raise SchemaError(f"{_at(path, key)}: must be {wanted}, got {_shown(value)}")
    for low, high in PAIRS:
        low_count, high_count = finite(node.get(low)), finite(node.get(high))  # both checked counts by now
        if low_count is not None and high_count is not None and low_count > high_count:
            raise SchemaError(f"{_at(path, low)}: {node[low]} is larger than {high} {node[high]}")
    low_number, high_number = finite(node.get("minimum")), finite(node.get("maximum"))
    if low_number is not None and high_number is not None and low_number > high_number:
        raise SchemaError(
            f"{_at(path, 'minimum')}: {node['minimum']} is larger than maximum {node['maximum']}"
        )
    if "$ref" in node and not isinstance(node["$ref"], str):
        raise SchemaError(f"{_at(path, '$ref')}: must be a string, got {_shown(node['$ref'])}")
    if "type" in node:
        kinds = node["type"] if isinstance(node["type"], list) else [node["type"]]
        if not kinds or not all(isinstance(k, str) and k in TYPES for k in kinds):
            raise SchemaError(
                f"{_at(path, 'type')}: must be one of {sorted(TYPES)}, got {_shown(node['type'])}"
            )
    for key in ("properties", "required", "enum"):
        wanted_type: type = dict if key == "properties" else list
        if key in node and not isinstance(node[key], wanted_type):
            raise SchemaError(f"{_at(path, key)}: must be {'an object' if key == 'properties' else 'a list'}")


def _nodes(schema: object) -> Iterator[tuple[str, dict[str, object]]]:
    """Every subschema that is an object, with its path (``properties.tags.items``)."""
    queue: list[tuple[str, object]] = [("", schema)]
    while queue:
        path, node = queue.pop()
        if not isinstance(node, dict):
            continue  # ``true``/``false`` are schemas too; other values were named by the keyword checks
        yield path, node
        queue.extend((_at(path, key), node[key]) for key in _ONE_SCHEMA if isinstance(node.get(key), dict))
        for key in _SCHEMA_MAPS:
            if isinstance(node.get(key), dict):
                queue.extend((_at(path, f"{key}.{name}"), sub) for name, sub in node[key].items())
        for key in _SCHEMA_LISTS:
            if isinstance(node.get(key), list):
                queue.extend((_at(path, f"{key}[{i}]"), sub) for i, sub in enumerate(node[key]))


def _count_ok(value: object, limit: int) -> bool:
    number = finite(value)
    return number is not None and number.is_integer() and 0 <= number <= limit


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"
