"""Types for values that are JSON: what a client sent, what a model wrote, what goes on the wire as it is.

A value typed ``JSONValue`` is one ``json.loads`` could have returned, so code that reads it narrows it first
(``isinstance(value, dict)``) instead of trusting its shape: everything from outside is hostile until checked.

Usage::

    from chatloop.jsontypes import JSONObject, JSONValue

    def arguments(text: str) -> JSONObject | None:
        value: JSONValue = json.loads(text)
        return value if isinstance(value, dict) else None
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
"""A JSON value of any kind."""
JSONObject: TypeAlias = "dict[str, JSONValue]"
"""A JSON object: an OpenAI-shaped chat message, a tool definition, a JSON schema, a tool's arguments."""
JSONArray: TypeAlias = "list[JSONValue]"


def json_value(value: object) -> JSONValue:
    """``value`` as a ``JSONValue``, for code that built it with a stricter type (a TypedDict is a ``Mapping``, not a
    ``JSONObject``, to the checker): a copy of every dict, list and tuple (a tuple becomes a list, as ``json.dumps``
    writes it), the scalars as they are. Anything ``json.dumps`` would refuse is a ``TypeError`` here too.

    Usage::

        body: JSONObject = json_object(response)   # a ``ResponseObject`` TypedDict, for the store
    """
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    if isinstance(value, Mapping):
        return json_object(value)
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def json_object(value: Mapping[str, object]) -> JSONObject:
    """A mapping with string keys as a ``JSONObject`` (a copy: see ``json_value``), its keys in their order."""
    out: JSONObject = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"not a JSON object key: {type(key).__name__}")
        out[key] = json_value(item)
    return out
