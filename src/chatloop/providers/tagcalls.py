"""Call tags in a reply's text: which start a call written as text, and which prose only quotes.

A tagged call (``<tool_call>``, ``<|python_tag|>``, ``<function=...>``; ``chatloop.providers.textcall_formats``) that
cannot be read is cut from the text and the model reminded; a tag that prose quotes is left alone, and the whole text
is the answer. Prose quotes a tag when it is in inline code or quotes (``In Hermes format a call looks like
`<tool_call>…</tool_call>```), in a fenced example that more words follow, named with no call after it (``Groq's
<function=name> syntax``), or followed by words after its call (``Llama starts a call with <|python_tag|>{...} and a
stop token.``): a call is only ever at the end of a reply (issue #41).

Usage::

    has_tag_call("Sure.\n<tool_call>{\"name\": \"f\", \"arguments\": {")     # True: a call, cut short
    has_tag_call("Llama writes <|python_tag|>{...} first, then the call.")     # False: prose
    strip_tag_calls("Working on it. <tool_call>oops</tool_call>")             # "Working on it."
"""

from __future__ import annotations

import json
import re

from chatloop.providers.textcall_formats import FORMATS, FUNCTION_TAG, FUNCTION_TAG_WHOLE, PYTHON_TAG_END

_ANY_TAG = re.compile(
    r"<tool_call>.*?(?:</tool_call>|$)|<\|python_tag\|>.*$|" + FUNCTION_TAG_WHOLE.pattern,
    re.IGNORECASE | re.DOTALL,
)
_QUOTED_BEFORE = frozenset("`'\"\u201c\u2018")
_FENCE_MARK = re.compile(r"^[ \t]*```", re.MULTILINE)
_CLOSING_TAG = re.compile(r"</tool_call>|</\s*function\s*>", re.IGNORECASE)
_OPENER = re.compile(
    r"^(?:<tool_call>|<\|python_tag\|>|<\s*function\s*=\s*[A-Za-z_][\w.\-]*\s*>?)", re.IGNORECASE
)
"""A tag's opener: what is left after it is the call's body."""
_CALL_PAYLOAD = re.compile(r"\s*(?:$|[{\[]|[A-Za-z_][\w.\-]*\s*[({])")
"""What follows a tag that starts a real call: JSON, ``name(``/``name{``, or nothing yet (the reply was cut)."""


def has_tag_call(text: str) -> bool:
    """Whether ``text`` holds a tag that starts a call written as text (even a malformed one), not one prose quotes."""
    return tag_call_at(text) >= 0


def tag_call_at(text: str) -> int:
    """Where the first tag that starts a call written as text is (not one prose quotes), or -1."""
    for m in _ANY_TAG.finditer(text) if text else ():
        if not quoted_tag(text, m.start()):
            return m.start()
    return -1


def strip_tag_calls(text: str) -> str:
    """``text`` without any tagged pseudo-call (and whatever follows an unclosed one); quoted tags stay."""
    return _ANY_TAG.sub(lambda m: m.group() if quoted_tag(text, m.start()) else "", text).strip()


def quoted_tag(text: str, at: int) -> bool:
    """Whether the tag at ``text[at]`` is prose quoting it: in inline code or quotes (``In Hermes format a call
    looks like `<tool_call>…```), in a fenced block that prose follows, named without a call after it (``Groq's
    <function=name> syntax``), or followed by more words (``Llama starts a call with <|python_tag|>{...} and a stop
    token.``): a call is only ever at the end of a reply."""
    line_start = text.rfind("\n", 0, at) + 1
    if at > 0 and text[at - 1] in _QUOTED_BEFORE:
        return True
    if text.count("`", line_start, at) % 2 == 1 and "```" not in text[line_start:at]:
        return True  # inside an inline code span
    if _in_fence_prose_follows(text, at):
        return True
    function = FUNCTION_TAG.match(text, at)
    after = function.end() if function else text.find(">", at) + 1
    if after > 0 and _CALL_PAYLOAD.match(text, after) is None:
        return True
    return _words_after(text, at)


def _in_fence_prose_follows(text: str, at: int) -> bool:
    """Whether ``text[at]`` is inside a ```` ``` ```` block (an odd number of fences before it) that closes and is
    followed by words: an example the reply explains, not its call."""
    fences = [m.end() for m in _FENCE_MARK.finditer(text)]
    before = sum(1 for end in fences if end <= at)
    if before % 2 == 0:
        return False
    closing = next((end for end in fences if end > at), None)
    return closing is not None and bool(text[closing:].strip())


def _words_after(text: str, at: int) -> bool:
    """Whether the tag at ``text[at]`` is part of a sentence: words follow its call (after its closing tag, or with
    none, after its last closing bracket; another tag, a stop token or nothing is no words) and either the tag is
    inline (words before it on its line) or what it holds is no JSON object. A call on its own line that chatter
    follows is still a call (cut, and the model reminded); a call cut short (no bracket closes) is a call."""
    whole = _ANY_TAG.match(text, at)
    span = whole.group() if whole else text[at:]
    closing = _CLOSING_TAG.search(span)
    last = closing.start() if closing else max(span.rfind("}"), span.rfind("]")) + 1
    if last <= 0:
        return False
    end = at + (closing.end() if closing else last)
    rest = PYTHON_TAG_END.sub("", text[end:]).strip().removeprefix(">").strip()  # ``<function=f{...}>``
    if not rest or any(f.opener.pattern.match(rest) for f in FORMATS if f.opener.pattern):
        return False
    inline = bool(text[text.rfind("\n", 0, at) + 1 : at].strip())
    return inline or not _holds_an_object(span[:last])


def _holds_an_object(tagged: str) -> bool:
    """Whether the tag's body (``tagged``: the tag and its body, without a closing tag) is a JSON object."""
    body = _OPENER.sub("", tagged, count=1).strip()
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False
