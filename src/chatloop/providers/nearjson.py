"""JSON that a small model almost wrote right, read anyway: the near misses of a tool call written as text.

Qwen2.5-Coder 0.5B and its kind write calls whose JSON is nearly valid: raw newlines inside the code string, a
trailing comma, single quotes, Python's ``True``/``None``, a ``//`` comment, one closing brace missing. ``loads``
reads strict JSON first and, only when that fails, asks ``json-repair`` (a maintained library: no hand-written
fixes here) for what the text meant, within bounds:

- the text must look like JSON that was meant as such: it starts with ``{`` or ``[``, has a quoted key, and ends
  with a closing bracket or quote; a value that *closes* and is followed by prose is prose (``{...} is a call
  shape``), never repaired;
- a text that ends inside a string was cut off (``"code": "1 +``): running half a program is worse than asking
  again, so it is not repaired;
- bounded in size, so in time: raw control characters in strings (the commonest near miss) are read by the
  standard library's own lenient mode at C speed, up to ``MAX_LENIENT_CHARS``; ``json-repair`` is pure Python (about
  1.4 ms per KB here), so it is asked only up to ``MAX_REPAIR_CHARS``. The bench holds the cost.

Usage::

    loads('{"name": "f", "arguments": {"code": "a\\nb",},}')   # {"name": "f", "arguments": {"code": "a\\nb"}}
    loads('{"name": "f", "arguments": {"code": "1 +')           # None: cut off
"""

from __future__ import annotations

import json
import re

from chatloop.jsontypes import JSONValue

MAX_LENIENT_CHARS = 65_536
"""Longer candidates are read strictly only."""
MAX_REPAIR_CHARS = 8_192
"""Longer candidates are not given to ``json-repair`` (at most ~12 ms of work); a call's code is rarely longer."""
_QUOTED_KEY = re.compile(r"""["']\w+["']\s*:""")
_LENIENT = json.JSONDecoder(strict=False)
_CLOSERS = frozenset("}]\"'")
_STRINGS = re.compile(r""""[^"\\]*(?:\\.[^"\\]*)*"|'[^'\\]*(?:\\.[^'\\]*)*'|(["'])""", re.DOTALL)


def loads(text: str) -> JSONValue | None:
    """The JSON value ``text`` is, strictly, or as repaired within the bounds above; None otherwise."""
    try:
        value: JSONValue = json.loads(text)
        return value
    except ValueError:
        pass
    return repaired(text)


def repaired(text: str) -> JSONValue | None:
    """What ``json-repair`` makes of ``text`` (an object or a list), when ``text`` is a near miss worth repairing."""
    candidate = text.strip()
    if not _worth_repairing(candidate):
        return None
    try:  # raw newlines and tabs inside strings: the standard library reads them in its lenient mode
        value, end = _LENIENT.raw_decode(candidate)
        if end == len(candidate) and isinstance(value, dict | list):
            return value
    except ValueError:
        pass
    if len(candidate) > MAX_REPAIR_CHARS:
        return None
    import json_repair  # lazily: only a reply that needs it pays for the import

    try:
        value = json_repair.loads(candidate, skip_json_loads=True)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict | list) else None


def _worth_repairing(text: str) -> bool:
    if not text or len(text) > MAX_LENIENT_CHARS or text[0] not in "{[" or text[-1] not in _CLOSERS:
        return False
    if not _QUOTED_KEY.search(text, 0, 200):
        return False
    if _ends_inside_a_string(text):
        return False
    try:  # a value that closes, then more text: prose quoting JSON, not a broken call
        _, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return True
    return not text[end:].strip()


def _ends_inside_a_string(text: str) -> bool:
    """Whether ``text`` was cut inside a string (double- or single-quoted, escapes respected): a quote that opens
    no closed string runs to the end."""
    return any(m.group(1) for m in _STRINGS.finditer(text))
