"""Streamed model text, held back where it may start a tool call written as text.

A model that writes ``<tool_call>{...}`` (or a leading ``{"name": ...}``, or a ```` ```json ```` block) must not
show that to the user while it streams. ``TextCallFilter`` passes text through at once unless it may be the start
of such a call; from there it holds everything until the response is judged, and ``finish()`` then releases
what the content turned out to be. Text that cannot start a call (no ``<``, backtick, ``{`` or ``[``) is never
delayed.

Usage::

    visible = TextCallFilter(hold_json=bool(tools_offered))
    for piece in deltas:
        send(visible.feed(piece))
    send(visible.finish(final_content))   # final_content: the content with any recovered call taken out
"""

from __future__ import annotations

import re

from chatloop.providers.textcalls import TAG_START

_TAG_PARTIAL = re.compile(
    r"<(?:t(?:o(?:o(?:l(?:_(?:c(?:a(?:l(?:l)?)?)?)?)?)?)?)?"
    r"|\|(?:p(?:y(?:t(?:h(?:o(?:n(?:_(?:t(?:a(?:g(?:\|)?)?)?)?)?)?)?)?)?)?)?"
    r"|\s*(?:f(?:u(?:n(?:c(?:t(?:i(?:o(?:n\s*)?)?)?)?)?)?)?)?)",
    re.IGNORECASE,
)
_JSON_CALL = re.compile(r'\{\s*"(?:name|function)"')
_JSON_CALL_PARTIAL = re.compile(
    r'\{\s*(?:"(?:n(?:a(?:m(?:e)?)?)?|f(?:u(?:n(?:c(?:t(?:i(?:o(?:n)?)?)?)?)?)?)?)?)?'
)
_FENCE_FOR_CALLS = {"", "json", "tool_call", "tool_code"}


class TextCallFilter:
    def __init__(self, hold_json: bool) -> None:
        self.hold_json = hold_json
        """Also hold leading JSON, ``{"name"``-shaped objects and JSON fences (only while tools are offered)."""
        self.fed = ""
        self.released = ""
        self.holding = False

    def feed(self, text: str) -> str:
        """The part of ``text`` (and of what was held before) that can be shown now."""
        self.fed += text
        if self.holding:
            return ""
        pending = self.fed[len(self.released) :]
        cut, hold = self._scan(pending)
        self.holding = hold
        out = pending[:cut]
        self.released += out
        return out

    def finish(self, content: str) -> str:
        """Once the response is judged: the rest of ``content`` that was streamed but not yet shown. Nothing
        comes out that the model did not stream, and nothing the client saw is contradicted."""
        if not content.startswith(self.released):
            return ""
        rest = content[len(self.released) :]
        return rest if self.fed.startswith(self.released + rest) else ""

    def _scan(self, pending: str) -> tuple[int, bool]:
        """``(how much of pending may be shown, whether to hold everything after it)``."""
        i = 0
        while True:
            j = _next_candidate(pending, i, self.hold_json)
            if j < 0:
                return len(pending), False
            verdict, skip = self._at(pending, j)
            if verdict == "call":
                return j, True
            if verdict == "maybe":
                return j, False
            i = j + skip

    def _at(self, pending: str, j: int) -> tuple[str, int]:
        """Whether a call starts at ``pending[j]`` (``call``), may start there once more text comes (``maybe``),
        or does not (``no``, with how far to skip)."""
        rest = pending[j:]
        char = rest[0]
        if char == "<":
            if TAG_START.match(rest):
                return "call", 1
            return ("maybe", 1) if _TAG_PARTIAL.fullmatch(rest) else ("no", 1)
        if char in "{[" and not (self.released + pending[:j]).strip():
            return "call", 1  # the content starts with JSON: it may be a call in any of the JSON shapes
        if char == "{":
            if _JSON_CALL.match(rest):
                return "call", 1
            return ("maybe", 1) if _JSON_CALL_PARTIAL.fullmatch(rest) else ("no", 1)
        if char == "`":
            if not rest.startswith("```"):
                return ("maybe", 1) if rest in ("`", "``") else ("no", 1)
            newline = rest.find("\n")
            if newline < 0:
                return "maybe", 1
            info = rest[3:newline].strip().lower()
            return ("call", 1) if info in _FENCE_FOR_CALLS else ("no", newline)
        return "no", 1


def _next_candidate(text: str, start: int, hold_json: bool) -> int:
    """The next place a call could start: ``<`` always; ``{``, ``[`` and backticks when JSON calls are held."""
    chars = "<{[`" if hold_json else "<"
    found = [at for at in (text.find(c, start) for c in chars) if at >= 0]
    return min(found) if found else -1
