"""Secret redaction: no registered secret and nothing shaped like a key in a log line, a response, a span or a tool
result. A leaf: it imports nothing of the package, so every layer may use it.

Usage::

    from chatloop.redaction import redact, register_secret
    register_secret(key)                                  # a provider key, an MCP server's token, ...
    redact("Incorrect API key provided: gsk_abc...")      # -> "Incorrect API key provided: [REDACTED]"
"""

from __future__ import annotations

import json
import re

# Key-shaped strings: OpenAI (sk-...), Groq (gsk_...), AWS access key ids. Known secret values are added
# at run time with register_secret().
_KEY_PATTERNS = re.compile(r"\b(?:sk-[A-Za-z0-9_\-*]{8,}|gsk_[A-Za-z0-9*]{8,}|(?:AKIA|ASIA)[0-9A-Z]{16})")
_SECRETS: list[str] = []
"""Longest first, so a secret that contains another is replaced whole."""


def register_secret(value: str | None) -> None:
    """Never let ``value`` appear in a log line, a response or a tool result (API keys, AWS credentials),
    whatever its length: a 4-character test key echoed by a provider error is still a key."""
    if value and value not in _SECRETS:
        _SECRETS.append(value)
        _SECRETS.sort(key=len, reverse=True)


_KEY_PREFIXES = ("sk-", "gsk_", "AKIA", "ASIA")
"""Every key pattern starts with one of these: text holding none of them (most of it) skips the regex, and a stream
holds back a word that could begin one (``SecretHold``)."""


def redact(text: str) -> str:
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, "[REDACTED]")
    if not any(prefix in text for prefix in _KEY_PREFIXES):
        return text
    return _KEY_PATTERNS.sub("[REDACTED]", text)


_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-*")


class SecretHold:
    """Redaction that holds across a stream of text pieces: a secret split over several deltas (``gsk_ab`` then
    ``cdef…``) is redacted whole, as ``redact`` would redact the concatenation.

    Like the text-call filter holds a tag, it holds back the few characters at the end of what came so far that
    could begin a secret (a prefix of a registered secret, or a word that starts like a key); everything before them
    leaves at once, redacted. Text that cannot begin a secret is never delayed.

    Usage::

        hold = SecretHold()
        for piece in pieces:
            send(hold.feed(piece))
        send(hold.flush())
    """

    def __init__(self) -> None:
        self.pending = ""

    def feed(self, text: str) -> str:
        self.pending += text
        cut = _whole_secrets_before(self.pending, len(self.pending) - self._held(self.pending))
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return redact(out) if out else ""

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return redact(out) if out else ""

    @staticmethod
    def _held(text: str) -> int:
        """How many characters at the end of ``text`` could begin a secret (linear in the trailing word)."""
        held = 0
        for secret in _SECRETS:  # the longest end of text that a secret starts with
            for k in range(min(len(secret) - 1, len(text)), held, -1):
                if text.endswith(secret[:k]):
                    held = k
                    break
        start = len(text)
        while start > 0 and text[start - 1] in _KEY_CHARS:
            start -= 1
        tail = text[start:]
        for i in range(len(tail)):  # the earliest start in the trailing word of something shaped like a key
            rest = tail[i:]
            if any(rest.startswith(p) or p.startswith(rest) for p in _KEY_PREFIXES):
                return max(held, len(rest))
        return held


def _whole_secrets_before(text: str, cut: int) -> int:
    """``cut``, moved back to the start of any registered secret that would straddle it."""
    for secret in _SECRETS:
        at = text.find(secret, max(0, cut - len(secret) + 1))
        if 0 <= at < cut:
            cut = at
    return cut


def redact_value(value: object) -> object:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict | list):
        dumped = json.dumps(value, default=str)
        cleaned = redact(dumped)
        return value if cleaned == dumped else json.loads(cleaned)
    return value
