"""Sealed state: what this server hands out or keeps and must read back unchanged (compaction items, the secrets
of a queued background request), sealed with AES-256-GCM under a key from ``statekey`` and written in one
canonical spelling.

- **Sealing.** A random 96-bit nonce; ``aad`` (associated data: whose it is and what it is for) is bound to the
  ciphertext, so an item made for another caller or another purpose does not open. The text is ``FORMAT`` byte,
  nonce, ciphertext and tag, in URL-safe base64 with its padding.
- **One spelling.** Python's base64 decoder is lenient: it skips characters outside the alphabet (newlines,
  stray bytes), takes either alphabet, and ignores what follows the padding. A sealed text is taken only when it
  is exactly what ``seal`` writes for its bytes (the bytes encoded again give the same text), so a genuine item
  has one spelling and any other is refused (a 400 at the edge, never a second accepted form).

Usage::

    text = seal(key, b"chatloop-compaction\\x00apikey:k1", {"summary": "…"})
    unseal(key, b"chatloop-compaction\\x00apikey:k1", text)          # {"summary": "…"}; ValueError otherwise
"""

from __future__ import annotations

import base64
import binascii
import json
import os

from chatloop.jsontypes import JSONObject

FORMAT = 1
_NONCE = 12
_TAG = 16


class Unsealable(ValueError):
    """A sealed text that does not open: changed, re-spelled, foreign (another caller or purpose) or malformed."""


def seal(key: bytes, aad: bytes, payload: JSONObject) -> str:
    """``payload`` sealed to ``aad`` under ``key``, in its one spelling."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # on first use (cold start)

    nonce = os.urandom(_NONCE)
    sealed = AESGCM(key).encrypt(nonce, json.dumps(payload, separators=(",", ":")).encode(), aad)
    return base64.urlsafe_b64encode(bytes([FORMAT]) + nonce + sealed).decode("ascii")


def unseal(key: bytes, aad: bytes, text: str) -> JSONObject:
    """What ``seal`` sealed to ``aad``; ``Unsealable`` for anything else (another spelling included)."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    raw = canonical_bytes(text)
    if len(raw) < 1 + _NONCE + _TAG or raw[0] != FORMAT:
        raise Unsealable("not an item of this server")
    try:
        opened = json.loads(AESGCM(key).decrypt(raw[1 : 1 + _NONCE], raw[1 + _NONCE :], aad))
    except (InvalidTag, ValueError) as exc:
        raise Unsealable("the item cannot be read: changed, or not made for this caller") from exc
    if not isinstance(opened, dict):
        raise Unsealable("the item holds no object")
    return opened


def canonical_bytes(text: str) -> bytes:
    """The bytes ``text`` spells, when it is their one spelling (URL-safe base64, padded, nothing else).

    >>> canonical_bytes("AQID")
    b'\\x01\\x02\\x03'
    >>> canonical_bytes("AQID\\n")
    Traceback (most recent call last):
    ...
    chatloop.api.turns.sealing.Unsealable: the item is not in its one encoding (URL-safe base64, padded)
    """
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii"))
    except (UnicodeEncodeError, binascii.Error, ValueError):
        raw = None
    if raw is None or base64.urlsafe_b64encode(raw).decode("ascii") != text:
        raise Unsealable("the item is not in its one encoding (URL-safe base64, padded)")
    return raw
