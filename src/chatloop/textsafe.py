"""Text that can always be encoded: lone surrogates (valid in JavaScript and JSON ``\\ud800`` escapes, invalid in
UTF-8) become U+FFFD wherever text enters from outside (client bodies, model output, tool results).

Usage::

    text_safe("a\\ud800b")                  # "a\\ufffdb"
    text_safe_value({"k": ["\\udfff"]})     # {"k": ["\\ufffd"]}
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def text_safe(text: str) -> str:
    if text.isascii():  # no surrogate can hide in ASCII, and checking that is far cheaper than the regex
        return text
    return _SURROGATE.sub("\ufffd", text)


def text_safe_value(value: Any) -> Any:
    """``value`` (parsed JSON) with every string, keys included, made text-safe."""
    if isinstance(value, str):
        return text_safe(value)
    if isinstance(value, list):
        return [text_safe_value(v) for v in value]
    if isinstance(value, dict):
        return {text_safe(k) if isinstance(k, str) else k: text_safe_value(v) for k, v in value.items()}
    return value
