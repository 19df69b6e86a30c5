"""Query parameters, parsed once and bounded: every route reads its query string through ``Query`` and nothing else.

A value is accepted only when it is plain: an integer is ASCII digits (an optional ``-`` where the range allows a
negative) within a documented range, an enum one of its allowed spellings, an id a match of its pattern, a boolean
``true`` or ``false`` as the OpenAI SDKs send it. Anything else, a value given twice included, is a 400 naming the
parameter before any store or model call; ``int()`` never sees a value that is not plain ASCII digits of bounded
length (``str.isdigit`` accepts ``²`` and ``٣``, which ``int()`` refuses or reads as a digit; a 5,000-digit number
is past Python's conversion limit; ``10**23`` is past SQLite's and DynamoDB's integers).

A parameter a route does not know is ignored, as it always was here (a cache-buster or an SDK's ``extra_query``
does no harm); its name is logged, never its value, so that a misspelt one shows up.

Usage::

    query = Query(request, known=("limit", "order", "after", "include"))
    limit = query.integer("limit", default=20, low=1, high=100)        # RequestError(400, param="limit") otherwise
    order = query.choice("order", ("asc", "desc"), default="desc")
    after = query.identifier("after", ITEM_ID, "an item id")          # None when absent
    stream = query.boolean("stream", default=False)                   # "true" / "false"
    include = query.values("include")                                  # include=a&include[]=b -> ["a", "b"]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from starlette.requests import HTTPConnection

from chatloop.api.http.errors import RequestError
from chatloop.observability import logger
from chatloop.redaction import redact
from chatloop.textsafe import text_safe_value

INTEGER = re.compile(r"-?[0-9]{1,20}")
"""A plain integer: ASCII digits only (``[0-9]``, not ``\\d``, which matches every script's digits), an optional
leading minus, at most 20 digits (past any range a route allows, far below ``int()``'s 4,300-digit limit)."""

SHOWN_UNKNOWN = 8
"""At most this many unknown parameter names are logged per request, each cut to 64 characters."""

Choice = TypeVar("Choice", bound=str)


class Query:
    """A request's query parameters, read by name, each checked (a 400 naming it otherwise).

    ``known`` lists every parameter the route reads (a list one written ``name[]`` as the OpenAI SDKs send it counts
    as ``name``); the others are ignored and their names logged once, here."""

    def __init__(self, request: HTTPConnection, known: Iterable[str] = ()) -> None:
        self._pairs: list[tuple[str, str]] = [
            (name[:-2] if name.endswith("[]") else name, value)
            for name, value in request.query_params.multi_items()
        ]
        names = set(known)
        unknown = sorted({name for name, _ in self._pairs if name not in names})
        if unknown:
            shown = [name[:64] for name in unknown[:SHOWN_UNKNOWN]]
            logger.info(redact(f"query: ignoring parameters this route does not take: {shown}"))

    def values(self, name: str) -> list[str]:
        """Every value of ``name`` (``name=a&name=b`` or ``name[]=a&name[]=b``), in order: a list parameter."""
        return [value for key, value in self._pairs if key == name]

    def one(self, name: str) -> str | None:
        """The one value of ``name``, or None when absent; a 400 when it is given more than once."""
        found = self.values(name)
        if len(found) > 1:
            raise invalid(name, "given more than once; give it once")
        return found[0] if found else None

    def integer(self, name: str, *, default: int, low: int, high: int) -> int:
        """``name`` as an integer from ``low`` to ``high`` (``default`` when absent)."""
        raw = self.one(name)
        if raw is None:
            return default
        if not INTEGER.fullmatch(raw) or (raw.startswith("-") and low >= 0):
            raise invalid(name, f"must be an integer from {low} to {high}, in ASCII digits")
        value = int(raw)
        if not low <= value <= high:
            raise invalid(name, f"must be an integer from {low} to {high}")
        return value

    def choice(self, name: str, allowed: Sequence[Choice], *, default: Choice) -> Choice:
        """``name`` as one of ``allowed`` (``default`` when absent)."""
        raw = self.one(name)
        if raw is None:
            return default
        for option in allowed:
            if raw == option:
                return option
        raise invalid(name, "must be one of " + ", ".join(f"'{option}'" for option in allowed))

    def boolean(self, name: str, *, default: bool) -> bool:
        """``name`` as ``true`` or ``false``, as the OpenAI SDKs write a boolean (``default`` when absent)."""
        return {"true": True, "false": False}[
            self.choice(name, ("true", "false"), default=str(default).lower())
        ]

    def identifier(self, name: str, pattern: re.Pattern[str], what: str) -> str | None:
        """``name`` when it is an id matching ``pattern`` whole (None when absent); ``what`` names the kind."""
        raw = self.one(name)
        if raw is None:
            return None
        if not pattern.fullmatch(raw):
            raise invalid(name, f"not {what}")
        return raw


def invalid(name: str, problem: str) -> RequestError:
    """The 400 for a query parameter: ``param`` names it, and so does the message (``/chat``'s errors have no
    ``param``)."""
    return RequestError(400, "invalid_request", f"{name}: {problem}", param=name)


EVENT_QUERY_KEYS = ("queryStringParameters", "multiValueQueryStringParameters", "rawQueryString")
"""Where an API Gateway / Function URL event carries its query string."""


def text_safe_query(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` with its query string text-safe (a lone surrogate becomes U+FFFD): Mangum encodes a REST event's
    decoded parameters as UTF-8 before the app sees them, and a lone surrogate there (JSON can hold ``"\\ud800"``)
    would fail the invocation instead of reaching ``Query``, which answers a 400. The same event when nothing changes.
    """
    changed = {key: text_safe_value(event[key]) for key in EVENT_QUERY_KEYS if event.get(key)}
    return {**event, **changed} if changed else event
