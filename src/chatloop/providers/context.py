"""Fitting a conversation to a model's context window, before the model is called.

No tokenizer can be downloaded at run time, so tokens are estimated from the kinds of characters a text holds:
letters and spaces pack ~4 to a token, while digits, punctuation and non-Latin letters cost far more (JSON and code
run 2-3 characters a token, twice English prose). The weights were fitted against OpenAI's o200k_base encoding and
set a little high. Once a model has reported ``usage.prompt_tokens``, its estimates are scaled by what it reported,
learned per model for the life of the warm container and kept 10 % on the safe side. ``make bench`` states the error.

When no model of the chain can hold a conversation, ``trim`` makes it fit the largest window: every system message,
the latest user message and the whole current turn stay; old tool results are cut to a head-and-tail excerpt first;
then whole older turns are dropped, oldest first, so no tool exchange is ever left half there.

Usage::

    estimator = TokenEstimator()
    estimator.tokens(request, "groq:llama-3.3-70b-versatile")       # messages + tools + the answer's reserve
    estimator.observe("groq:llama-3.3-70b-versatile", request, usage.prompt_tokens)
    trimmed = trim(messages, fits=lambda m: estimate(m) <= window)
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chatloop.providers.base import ModelRequest

LETTER_TOKENS, DIGIT_TOKENS, PUNCTUATION_TOKENS, NON_ASCII_TOKENS = 0.26, 0.7, 0.6, 0.4
"""Tokens per character of each kind (o200k_base, fitted on prose, code, JSON and Cyrillic, rounded up)."""
MESSAGE_TOKENS = 4
"""Role and framing a provider adds to each message."""
SAFETY = 1.1
"""Estimates are kept 10 % on the safe side: requests differ, and a rejected call costs more than a trim."""
ANSWER_RESERVE_TOKENS = 1024
"""Room kept for the answer when the request sets no max_tokens."""
EXCERPT_CHARS = 400
"""An old tool result longer than twice this keeps this much of its head and of its tail."""
_PUNCTUATION = string.punctuation.encode()
_DIGITS = string.digits.encode()


def text_tokens(text: str) -> float:
    """Estimated tokens of ``text``, from its kinds of characters. Counted on its UTF-8 bytes, where deleting a
    set of bytes is one tight pass in C (~2 ns a byte): the bytes beyond one per character stand for non-ASCII
    letters (one each in Cyrillic or Greek, two in CJK, which costs about twice as many tokens)."""
    data = text.encode("utf-8", "surrogatepass")
    punctuation = len(data) - len(data.translate(None, _PUNCTUATION))
    digits = len(data) - len(data.translate(None, _DIGITS))
    non_ascii = len(data) - len(text)
    letters = max(0, len(text) - punctuation - digits - non_ascii)
    return (
        letters * LETTER_TOKENS
        + digits * DIGIT_TOKENS
        + punctuation * PUNCTUATION_TOKENS
        + non_ascii * NON_ASCII_TOKENS
    )


def message_tokens(message: dict[str, Any]) -> float:
    content = message.get("content")
    if isinstance(content, str):
        tokens = text_tokens(content)
    elif isinstance(content, list):
        tokens = sum(text_tokens(str(p.get("text", ""))) for p in content if isinstance(p, dict))
    else:
        tokens = 0.0
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        tokens += (
            text_tokens(str(function.get("name", ""))) + text_tokens(str(function.get("arguments", ""))) + 8
        )
    return tokens + MESSAGE_TOKENS


def message_chars(message: dict[str, Any]) -> int:
    """The characters of a message's text and tool calls."""
    content = message.get("content")
    size = len(content) if isinstance(content, str) else 0
    for call in message.get("tool_calls") or []:
        size += len(str((call.get("function") or {}).get("arguments", "")))
    return size


def raw_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> float:
    """The estimate before any model's calibration."""
    return sum(message_tokens(m) for m in messages) + (text_tokens(json.dumps(tools)) if tools else 0.0) + 3


@dataclass
class TokenEstimator:
    """Estimated tokens, per model, calibrated from the usage each model reports. Shared by every turn in the
    container (it lives in the chain's health)."""

    scale: dict[str, float] = field(default_factory=dict)
    """Per model: its reported prompt tokens over the raw estimate (a moving average)."""

    def prompt_tokens(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, model: str
    ) -> int:
        return math.ceil(raw_tokens(messages, tools) * self.scale.get(model, 1.0) * SAFETY)

    def tokens(self, request: ModelRequest, model: str) -> int:
        """What ``request`` needs of ``model``'s window: the prompt and the answer's reserve."""
        return self.needs(request, [model])[model]

    def needs(self, request: ModelRequest, models: list[str]) -> dict[str, int]:
        """``tokens`` for several models, the conversation read once."""
        raw = raw_tokens(request.messages, request.tools)
        reserve = request.max_tokens or ANSWER_RESERVE_TOKENS
        return {m: math.ceil(raw * self.scale.get(m, 1.0) * SAFETY) + reserve for m in models}

    def fits_in(
        self, request: ModelRequest, model: str, window: int
    ) -> Callable[[list[dict[str, Any]]], bool]:
        """A test of whether a version of ``request``'s conversation fits ``window`` (for ``trim``). Each message is
        estimated once, however many versions are tried: a 2,000-message history is not read 700 times."""
        scale = self.scale.get(model, 1.0) * SAFETY
        fixed = (text_tokens(json.dumps(request.tools)) if request.tools else 0.0) + 3
        reserve = request.max_tokens or ANSWER_RESERVE_TOKENS
        known: dict[int, float] = {}

        def cost(message: dict[str, Any]) -> float:
            key = id(message)  # the versions share their message objects; an excerpt is a new one
            if key not in known:
                known[key] = message_tokens(message)
            return known[key]

        def fits(messages: list[dict[str, Any]]) -> bool:
            return math.ceil((sum(cost(m) for m in messages) + fixed) * scale) + reserve <= window

        return fits

    def observe(self, model: str, request: ModelRequest, prompt_tokens: int | None) -> None:
        """Learn from a model's reported ``prompt_tokens`` for ``request``."""
        raw = raw_tokens(request.messages, request.tools)
        if not prompt_tokens or prompt_tokens <= 0 or raw <= 0:
            return
        seen = min(
            4.0, max(0.25, prompt_tokens / raw)
        )  # a provider that counts oddly must not make it reckless
        known = self.scale.get(model)
        self.scale[model] = seen if known is None else 0.5 * known + 0.5 * seen


@dataclass(frozen=True)
class Trimmed:
    messages: list[dict[str, Any]]
    dropped: int
    """Messages left out (whole older turns)."""
    shortened: int
    """Old tool results cut to an excerpt."""


def trim(messages: list[dict[str, Any]], fits: Callable[[list[dict[str, Any]]], bool]) -> Trimmed:
    """The longest version of ``messages`` that ``fits``, by the policy in the module docstring. When even the
    system messages and the current turn do not fit, that is what is returned: the model's own error follows."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=len(messages))
    older, current = messages[:last_user], messages[last_user:]
    if fits(messages):
        return Trimmed(messages, 0, 0)
    shortened = 0
    excerpted = []
    for message in older:
        content = message.get("content")
        if message["role"] == "tool" and isinstance(content, str) and len(content) > 2 * EXCERPT_CHARS:
            cut = len(content) - 2 * EXCERPT_CHARS
            note = f"\n[... {cut} characters of this old tool result cut to fit the context window ...]\n"
            message = {**message, "content": content[:EXCERPT_CHARS] + note + content[-EXCERPT_CHARS:]}
            shortened += 1
        excerpted.append(message)
    if fits(excerpted + current):
        return Trimmed(excerpted + current, 0, shortened)
    turns = _turns(excerpted)

    def without(count: int) -> list[dict[str, Any]]:
        """The conversation with its ``count`` oldest turns dropped, their system messages kept in order."""
        systems = [m for turn in turns[:count] for m in turn if m["role"] == "system"]
        return systems + [m for turn in turns[count:] for m in turn] + current

    # Fewer turns always fit better: the fewest to drop is found by bisection, not one turn at a time.
    low, high = 1, len(turns)
    while low < high:
        middle = (low + high) // 2
        if fits(without(middle)):
            high = middle
        else:
            low = middle + 1
    kept = without(low)
    dropped = sum(1 for turn in turns[:low] for m in turn if m["role"] != "system")
    return Trimmed(kept, dropped, shortened)


def _turns(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Older messages as whole turns: each starts at a user message and holds everything up to the next one (the
    assistant's tool calls with every result), so dropping a turn never leaves an orphan."""
    turns: list[list[dict[str, Any]]] = []
    for message in messages:
        if message["role"] == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns
