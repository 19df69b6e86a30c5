"""Estimating the tokens a conversation needs of a model's context window, with no tokenizer.

No tokenizer can be downloaded at run time, so tokens are estimated from the kinds of characters a text holds:
letters and spaces pack ~4 to a token, while digits, punctuation and non-Latin letters cost far more (JSON and code
run 2-3 characters a token, twice English prose). The weights were fitted against OpenAI's o200k_base encoding and
set a little high. Once a model has reported ``usage.prompt_tokens``, its estimates are scaled by what it reported,
learned per model for the life of the warm container and kept 10 % on the safe side. ``make bench`` states the error.

Usage::

    estimator = TokenEstimator()
    estimator.tokens(request, "groq:llama-3.3-70b-versatile")       # messages + tools + the answer's reserve
    estimator.observe("groq:llama-3.3-70b-versatile", request, usage.prompt_tokens)
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from chatloop.jsontypes import JSONObject
from chatloop.providers.base import ModelRequest
from chatloop.providers.images import image_tokens, part_detail, part_url

CLASS_TOKENS = {
    "l": 0.26,  # ASCII lowercase letters: English packs ~4.5 characters a token
    "s": 0.26,  # spaces, tabs and line breaks
    "u": 0.55,  # ASCII capitals (more where they follow a lowercase letter: see TRANSITION_TOKENS)
    "d": 0.8,  # digits: 3 a token in a run
    "p": 0.6,  # ASCII punctuation
    "c": 1.0,  # control characters: one token each
    "2": 1.0,  # U+0080-02FF (Latin-1, Latin Extended, IPA), by their lead byte
    "m": 2.0,  # U+0300-037F: combining diacritical marks (zalgo text costs ~1.9 tokens a mark)
    "g": 0.4,  # U+0380-07FF: Greek, Cyrillic, Hebrew, Arabic (~0.3 a letter in prose)
    "k": 1.9,  # U+3000-9FFF: CJK and kana; rare ideographs cost ~1.9 tokens each
    "3": 1.0,  # the rest of the BMP below U+E000 (Indic, Thai, Hangul, symbols)
    "f": 1.6,  # U+E000-FFFF: private use, compatibility forms, variation selectors, fullwidth forms
    "4": 4.0,  # beyond the BMP (emoji, tag characters U+E00xx, mathematical letters): at most one token a byte
}
"""Tokens per character of each class (o200k_base), each set at or above the worst text of its class measured
(random characters of the class; ``make bench`` states the error), so no text is under-counted: an ordinary prose
estimate stays within ~40 % over. Classes are read from UTF-8 bytes (a lead byte names its character's block)."""
CASE_CHANGE_TOKENS = 0.8
"""On top of the classes, per capital after a lowercase letter: where the tokenizer must split a word."""
LETTER_DIGIT_TOKENS = 0.3
"""On top of the classes, per letter beside a digit (either order): another forced split. Prose has few of either;
base64, hex and identifiers are made of them (base64: ~0.68 tokens a character, against ~0.22 for English)."""
FORMAT_EXTRA_TOKENS = 1.0
"""Zero-width and direction characters (U+200B-200F, 2028-202E, 2060-206F) and variation selectors (U+FE00-FE0F), on
top of their class: each is a token of its own, and ZWJ sequences are made of them."""
SPACED_DIGIT_EXTRA_TOKENS = 1.0
"""A digit after whitespace, on top of its class: ``1 2 3`` is a token per digit and per space."""
MESSAGE_TOKENS = 4
"""Role and framing a provider adds to each message."""
SAFETY = 1.1
"""Estimates are kept 10 % on the safe side: requests differ, and a rejected call costs more than a trim."""
ANSWER_RESERVE_TOKENS = 1024
"""Room kept for the answer when the request sets no max_tokens."""


def _byte_classes() -> bytes:
    table = bytearray(b"x" * 256)  # continuation bytes (0x80-0xBF) count for nothing: their lead byte counts
    for byte in range(128):
        char = chr(byte)
        if char.islower():
            table[byte] = ord("l")
        elif char in " \t\n\r":
            table[byte] = ord("s")
        elif char.isupper():
            table[byte] = ord("u")
        elif char.isdigit():
            table[byte] = ord("d")
        elif char in string.punctuation:
            table[byte] = ord("p")
        else:
            table[byte] = ord("c")
    for lead, kind in [((0xC2, 0xCC), "2"), ((0xCC, 0xCE), "m"), ((0xCE, 0xE0), "g"), ((0xE0, 0xE3), "3")]:
        table[lead[0] : lead[1]] = kind.encode() * (lead[1] - lead[0])
    table[0xE3:0xEA] = b"k" * 7
    table[0xEA:0xEE] = b"3" * 4
    table[0xEE:0xF0] = b"f" * 2
    table[0xF0:0xF8] = b"4" * 8
    return bytes(table)


_CLASS_OF_BYTE = _byte_classes()
_LETTER_OR_DIGIT = bytes(
    ord("a") if chr(c) in "lu" else ord("d") if chr(c) == "d" else ord("-") for c in range(256)
)
_ASCII_CLASSES = [(kind.encode(), rate) for kind, rate in CLASS_TOKENS.items() if kind in "lsudpc"]
_ALL_CLASSES = [(kind.encode(), rate) for kind, rate in CLASS_TOKENS.items()]
_FORMAT_CHARS = re.compile(rb"\xe2(?:\x80[\x8b-\x8f\xa8-\xae]|\x81[\xa0-\xaf])|\xef\xb8[\x80-\x8f]")


def text_tokens(text: str) -> float:
    """Estimated tokens of ``text``: each character costs its class's rate (``CLASS_TOKENS``), plus the forced
    splits. Counted on the UTF-8 bytes, mapped to their classes in one ``translate`` and counted with
    ``bytes.count`` (C loops: ~8 ms for 4 MB of ASCII, ~25 ms with other scripts)."""
    data = text.encode("utf-8", "surrogatepass")
    classes = data.translate(_CLASS_OF_BYTE)
    ascii_only = data.isascii()
    tokens = sum(
        rate * classes.count(kind) for kind, rate in (_ASCII_CLASSES if ascii_only else _ALL_CLASSES)
    )
    tokens += CASE_CHANGE_TOKENS * classes.count(b"lu")
    tokens += SPACED_DIGIT_EXTRA_TOKENS * classes.count(b"sd")
    if b"d" in classes:
        kinds = classes.translate(_LETTER_OR_DIGIT)
        tokens += LETTER_DIGIT_TOKENS * (kinds.count(b"ad") + kinds.count(b"da"))
    if not ascii_only and (b"\xe2\x80" in data or b"\xe2\x81" in data or b"\xef\xb8" in data):
        tokens += FORMAT_EXTRA_TOKENS * len(_FORMAT_CHARS.findall(data))
    return tokens


def message_tokens(message: JSONObject) -> float:
    content = message.get("content")
    if isinstance(content, str):
        tokens = text_tokens(content)
    elif isinstance(content, list):
        tokens = sum(_part_tokens(p) for p in content if isinstance(p, dict))
    else:
        tokens = 0.0
    for function in _called_functions(message):
        tokens += (
            text_tokens(str(function.get("name", ""))) + text_tokens(str(function.get("arguments", ""))) + 8
        )
    return tokens + MESSAGE_TOKENS


def _part_tokens(part: JSONObject) -> float:
    """A content part's tokens: its text, or an image as the providers count it (``images.image_tokens``; the
    characters of a ``data:`` URL are not text the model reads)."""
    if part.get("type") == "image_url":
        return float(image_tokens(part_url(part), part_detail(part)))
    return text_tokens(str(part.get("text", "")))


def message_chars(message: JSONObject) -> int:
    """The characters of a message's text and tool calls."""
    content = message.get("content")
    size = len(content) if isinstance(content, str) else 0
    for function in _called_functions(message):
        size += len(str(function.get("arguments", "")))
    return size


def _called_functions(message: JSONObject) -> list[JSONObject]:
    """The ``function`` of each of an assistant message's tool calls (``{}`` for a call without one)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    functions = (call.get("function") for call in calls if isinstance(call, dict))
    return [function if isinstance(function, dict) else {} for function in functions]


def raw_tokens(messages: list[JSONObject], tools: list[JSONObject] | None) -> float:
    """The estimate before any model's calibration."""
    return sum(message_tokens(m) for m in messages) + (text_tokens(json.dumps(tools)) if tools else 0.0) + 3


@dataclass
class TokenEstimator:
    """Estimated tokens, per model, calibrated from the usage each model reports. Shared by every turn in the
    container (it lives in the chain's health)."""

    scale: dict[str, float] = field(default_factory=dict)
    """Per model: its reported prompt tokens over the raw estimate (a moving average)."""

    def prompt_tokens(self, messages: list[JSONObject], tools: list[JSONObject] | None, model: str) -> int:
        return math.ceil(raw_tokens(messages, tools) * self.scale.get(model, 1.0) * SAFETY)

    def tokens(self, request: ModelRequest, model: str) -> int:
        """What ``request`` needs of ``model``'s window: the prompt and the answer's reserve."""
        return self.needs(request, [model])[model]

    def needs(self, request: ModelRequest, models: Iterable[str]) -> dict[str, int]:
        """``tokens`` for several models, the conversation read once."""
        return self.needs_of(request.messages, request.tools, request.max_tokens, models)

    def needs_of(
        self,
        messages: list[JSONObject],
        tools: list[JSONObject] | None,
        max_tokens: int | None,
        models: Iterable[str],
    ) -> dict[str, int]:
        """``needs`` for a conversation not (yet) made a request: the prompt and the answer's reserve, per model."""
        raw = raw_tokens(messages, tools)
        reserve = max_tokens or ANSWER_RESERVE_TOKENS
        return {m: math.ceil(raw * self.scale.get(m, 1.0) * SAFETY) + reserve for m in models}

    def fits_in(self, request: ModelRequest, model: str, window: int) -> Callable[[list[JSONObject]], bool]:
        """A test of whether a version of ``request``'s conversation fits ``window`` (for ``trim``). Each message is
        estimated once, however many versions are tried: a 2,000-message history is not read 700 times."""
        scale = self.scale.get(model, 1.0) * SAFETY
        fixed = (text_tokens(json.dumps(request.tools)) if request.tools else 0.0) + 3
        reserve = request.max_tokens or ANSWER_RESERVE_TOKENS
        known: dict[int, float] = {}

        def cost(message: JSONObject) -> float:
            key = id(message)  # the versions share their message objects; an excerpt is a new one
            if key not in known:
                known[key] = message_tokens(message)
            return known[key]

        def fits(messages: list[JSONObject]) -> bool:
            return math.ceil((sum(cost(m) for m in messages) + fixed) * scale) + reserve <= window

        return fits

    def observe(self, model: str, request: ModelRequest, prompt_tokens: int | None) -> None:
        """Learn from a model's reported ``prompt_tokens`` for ``request``."""
        raw = raw_tokens(request.messages, request.tools)
        if not prompt_tokens or prompt_tokens <= 0 or raw <= 0:
            return
        # Only ever upwards: the class rates are set over o200k's worst case, and a run of text that tokenises well
        # (or a provider that counts oddly) must not make the next, adversarial text under-counted.
        seen = min(4.0, max(1.0, prompt_tokens / raw))
        known = self.scale.get(model)
        self.scale[model] = seen if known is None else 0.5 * known + 0.5 * seen
