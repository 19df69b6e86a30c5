"""Streamed model text, held back where it may start a tool call written as text.

A model that writes ``<tool_call>{...}`` (or ``{"name": ...}``, ``execute_javascript{...}``, a ```` ```json ````
block) must not show that to the user while it streams. ``TextCallFilter`` passes text through at once unless it may
be the start of such a call, in any format the parser recovers: the openers come from the parser's own table
(``chatloop.providers.textcall_formats.FORMATS``), so a format added there is held here too. From a call's start it holds
everything until the response is judged; ``finish()`` then releases what the content turned out to be.

- tags (``<tool_call>``, ``<|python_tag|>``, ``<function=``): always held, a partial tag waits for the next piece;
- echo blocks (``<tools>`` before JSON, ``RAW TOOL RESULTS:``; ``engine.answers.ECHO_MARKERS``): always held, as
  they are never an answer; a marker's first characters at the end of the text wait for the next piece;
- a ```` ``` ```` fence for json (or no language): held; another language is released after its first line;
- while tools are offered (or were, on the final call): a reply that starts with ``{``/``[`` or with an offered
  tool's name is held; a ``{``/``[`` later on (among the first ``MAX_JSON_STARTS``, as the parser reads them) waits
  until its JSON value closes, and is released once text follows it (a call is only ever at the end).

Every character is scanned a bounded number of times (a JSON value's end is found incrementally, once per start):
the filter is linear in the text.

Usage::

    visible = TextCallFilter(hold_json=bool(tools_offered), tools=offered_names)
    for piece in deltas:
        send(visible.feed(piece))
    send(visible.finish(final_content))   # final_content: the content with any recovered call taken out
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from chatloop.engine.answers import ECHO_MARKERS, echo_at
from chatloop.providers.textcall_formats import FORMATS, MAX_JSON_STARTS

_FENCE_FOR_CALLS = {"", "json", "tool_call", "tool_code"}
_JSON_MARK = re.compile(r'["\\{}\[\]]')
_JSON_OPENING = re.compile(r'\{\s*(?:["}]|$)|\[\s*(?:[\[{"\-0-9tfnNI\]]|$)')
"""How a JSON object or array can begin (strict JSON, and Python's NaN/Infinity); ``$``: not decided yet."""
_NON_SPACE = re.compile(r"\S")
_LT_AND_SPACES = re.compile(r"<\s*")
_ANY_OPENER = re.compile(r"[<`{\[]")
_TAG_OR_FENCE = re.compile(r"[<`]")
_LOOKAHEAD = 256
MAX_REPEATS = 8
"""JSON values one after another that are held together at most (a call written again and again)."""
"""Characters read at a candidate for a tag, a fence's language line or a tool's name: all are short."""
_IDENTIFIER = re.compile(r"[A-Za-z_][\w.\-]*")
_NAME_THEN_BRACE = re.compile(r"\s*\{")
_TAGS = [f.opener for f in FORMATS if f.opener.kind == "tag"]
_KINDS = {f.opener.kind for f in FORMATS}


class _JsonEnd:
    """Where a JSON value that starts at a brace ends, found incrementally (strings and escapes respected)."""

    def __init__(self, start: int) -> None:
        self.pos = start
        self.depth = 0
        self.in_string = False
        self.end: int | None = None

    def advance(self, text: str) -> int | None:
        i = self.pos
        while self.end is None:
            m = _JSON_MARK.search(text, i)
            if m is None:
                i = max(i, len(text))  # nothing significant up to the end: the next piece resumes there
                break
            char, i = m.group(), m.end()
            if self.in_string:
                if char == "\\":
                    i += 1  # the escaped character (maybe in the next piece) is skipped
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
                if self.depth <= 0:
                    self.end = i
        self.pos = i
        return self.end


class TextCallFilter:
    def __init__(self, hold_json: bool, tools: Iterable[str] = ()) -> None:
        self.hold_json = hold_json
        """Also hold the JSON forms and ``name{...}`` (only while tools are offered, or on the final call)."""
        self.tools = frozenset(tools)
        """The offered (or just withdrawn) tools' names, for the ``name{...}`` form."""
        self.fed = ""
        self.shown = 0
        """How much of ``fed`` was released (it is always a prefix)."""
        self.holding = False
        self.spoke = False  # non-whitespace was released: the text no longer starts here
        self.braces_released = 0
        self.spans: dict[int, _JsonEnd] = {}
        self.waiting: int | None = None
        """Where a JSON value after some text began, while it is open: the next piece only advances its end."""

    @property
    def released(self) -> str:
        return self.fed[: self.shown]

    def feed(self, text: str) -> str:
        """The part of ``text`` (and of what was held before) that can be shown now."""
        fed, self.fed = self.fed, ""
        fed += text  # in place (the only reference): appending stays linear however long the reply
        self.fed = fed
        if self.holding:
            return ""
        if self.waiting is not None and self._json(self.waiting) == "maybe":
            return ""
        self.waiting = None
        pending = self.fed[self.shown :]
        cut, hold = self._scan(pending)
        self.holding = hold
        out = pending[:cut]
        self.shown += len(out)
        self.spoke = self.spoke or bool(out.strip())
        self.braces_released += out.count("{") + out.count("[")
        return out

    def finish(self, content: str) -> str:
        """Once the response is judged: the rest of ``content`` that was streamed but not yet shown. Nothing
        comes out that the model did not stream, and nothing the client saw is contradicted."""
        released = self.released
        if not content.startswith(released):
            return ""
        rest = content[len(released) :]
        return rest if self.fed.startswith(rest, self.shown) else ""

    def _scan(self, pending: str) -> tuple[int, bool]:
        """``(how much of pending may be shown, whether to hold everything after it)``: the first place a call or
        an echo block (``engine.answers.ECHO_MARKERS``) may start."""
        cut, hold = self._scan_calls(pending)
        echo, sure = _echo(pending[:cut], partial=cut == len(pending))
        return (echo, sure) if echo is not None else (cut, hold)

    def _scan_calls(self, pending: str) -> tuple[int, bool]:
        first = len(pending) - len(pending.lstrip())  # where the text starts, if nothing was shown yet
        starting = self.hold_json and not self.spoke and first < len(pending)
        if starting and pending[first] not in "<`{[":
            verdict, _ = self._name(pending[first : first + _LOOKAHEAD])
            if verdict != "no":
                return first, verdict == "call"
        i = 0
        braces = self.braces_released
        while True:
            j = self._next_candidate(pending, i)
            if j < 0:
                return len(pending), False
            verdict, skip = self._at(pending, j, braces, at_start=starting and j == first)
            if verdict == "call":
                return j, True
            if verdict == "maybe":
                return j, False
            braces += pending[j] in "{["
            i = j + skip

    def _next_candidate(self, text: str, start: int) -> int:
        """The next place a call could start: ``<`` and backticks always; ``{`` and ``[`` when the JSON forms are
        held."""
        found = (_ANY_OPENER if self.hold_json else _TAG_OR_FENCE).search(text, start)
        return found.start() if found else -1

    def _at(self, pending: str, j: int, braces: int, at_start: bool) -> tuple[str, int]:
        """Whether a call starts at ``pending[j]`` (``call``), may start there once more text comes (``maybe``),
        or does not (``no``, with how far to skip)."""
        char = pending[j]
        if char == "<":
            return self._tag(pending, j)
        if char == "`":
            return self._fence(pending, j)
        if not self.hold_json:
            return "no", 1
        if at_start:
            return "call", 1  # the content starts with JSON: it may be a call in any of the JSON shapes
        if braces >= MAX_JSON_STARTS:
            return "no", 1  # the parser never reads a JSON call from here
        verdict = self._json(self.shown + j)
        if verdict == "maybe":
            self.waiting = self.shown + j  # released up to here; the next pieces only advance this value
        return verdict, 1

    @staticmethod
    def _tag(pending: str, j: int) -> tuple[str, int]:
        for opener in _TAGS:
            if opener.pattern is not None and opener.pattern.match(pending, j):
                return "call", 1
        spaced = _LT_AND_SPACES.match(pending, j)  # ``<   function=`` is a tag too, however many spaces
        after = spaced.end() if spaced else j + 1
        if len(pending) - after <= 24:  # the rest may still grow into a tag
            squeezed = "<" + re.sub(r"\s+", "", pending[after:]).lower()
            if any(opener.literal.lower().startswith(squeezed) for opener in _TAGS):
                return "maybe", 1
        return "no", 1

    @staticmethod
    def _fence(pending: str, j: int) -> tuple[str, int]:
        rest = pending[j : j + 4]
        if not rest.startswith("```"):
            return ("maybe", 1) if rest in ("`", "``") else ("no", 1)
        if rest == "````":
            return "no", 1  # a longer run: a fence may open at any of its last three backticks
        newline = pending.find("\n", j, j + _LOOKAHEAD)
        if newline < 0:
            if len(pending) - j < _LOOKAHEAD or not pending[j + 3 : j + _LOOKAHEAD].strip(" \t"):
                return "maybe", 1  # the language line is not over (a long run of spaces may still end it)
            return "no", 3
        info = pending[j + 3 : newline].strip().lower()
        # Another language: released, though its line is still read (a fence for calls may open later on it).
        return ("call", 1) if info in _FENCE_FOR_CALLS else ("no", 3)

    def _json(self, at: int) -> str:
        """A ``{``/``[`` after some text: a call only if its JSON value ends the text. Released at once when what
        follows the bracket cannot be JSON (``[see below]``, ``{x}``); else held until the value closes, and released
        once anything but whitespace follows it, unless that is another JSON value which may end the text: a small
        model writes its call two or three times over, and every copy is held with the last."""
        for _ in range(MAX_REPEATS):
            opening = _JSON_OPENING.match(self.fed, at)
            if opening is None:
                return "no"
            if opening.end() == len(self.fed):
                return "maybe"  # the next character decides
            span = self.spans.get(at)
            if span is None:
                span = self.spans[at] = _JsonEnd(at)
            end = span.advance(self.fed)
            if end is None:
                return "maybe"
            follows = _NON_SPACE.search(self.fed, end)
            if follows is None:
                return "maybe"
            if self.fed[follows.start()] not in "{[":
                return "no"
            at = follows.start()  # another value: this one is held while that one may end the text
        return "no"

    def _name(self, rest: str) -> tuple[str, int]:
        """``name{...}`` at the start of the text, for an offered tool's name."""
        match = _IDENTIFIER.match(rest)
        if match is None:
            return "no", 1
        name = match.group()
        after = rest[match.end() :]
        if not after:  # the name may still be growing
            return ("maybe", 1) if any(t.startswith(name) for t in self.tools) else ("no", len(name))
        if name in self.tools:
            if _NAME_THEN_BRACE.match(after):
                return "call", 1
            if not after.strip():
                return "maybe", 1
        return "no", len(name)


def _echo(text: str, partial: bool) -> tuple[int | None, bool]:
    """Where an echo block starts in ``text`` (held from there: ``True``), or may start once more text comes (with
    ``partial``, a marker's beginning at the end: ``False``), or None."""
    found = [at for at in (echo_at(text, m) for m in ECHO_MARKERS) if at >= 0]
    if found:
        return min(found), True
    for marker in ECHO_MARKERS if partial else ():
        for size in range(min(len(marker), len(text)), 0, -1):
            if text.endswith(marker[:size]):
                return len(text) - size, False
    return None, False


_KNOWN_KINDS = frozenset({"tag", "fence", "json", "name"})
if _KINDS - _KNOWN_KINDS:  # a format added to the parser's table must be held here too
    raise ImportError(f"a text-call opener the stream filter does not know: {sorted(_KINDS)}")
