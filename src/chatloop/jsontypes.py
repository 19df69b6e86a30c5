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

from typing import TypeAlias

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
"""A JSON value of any kind."""
JSONObject: TypeAlias = "dict[str, JSONValue]"
"""A JSON object: an OpenAI-shaped chat message, a tool definition, a JSON schema, a tool's arguments."""
JSONArray: TypeAlias = "list[JSONValue]"
