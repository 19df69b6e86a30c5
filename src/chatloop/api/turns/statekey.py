"""The key this server seals the state it hands to clients with (approval request ids; compaction items): the same
in every container and process of a deployment, never sent anywhere, one subkey per purpose.

Where it comes from, first found: ``STATE_KEY`` (the environment, else the provider-keys secret, as any named
secret: ``secrets.load_named_secrets``); else derived from the provider keys themselves (what every container of
the deployment shares; rotating a key then invalidates pending approvals and compaction items, which is a 400 for
the client, never a wrong answer); else, with no key at all (the offline demo), a random key for this container
(logged: its state does not survive the container).

Usage::

    key = await state_key(runtime, "approvals")        # 32 bytes, HKDF-SHA256 of the material for this purpose
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import weakref
from typing import TYPE_CHECKING

from chatloop.api.http.errors import RequestError
from chatloop.observability import logger
from chatloop.secrets import KeysUnavailable, load_named_secrets

if TYPE_CHECKING:
    from chatloop.api.runtime import Runtime

STATE_KEY_NAME = "STATE_KEY"
_material: weakref.WeakKeyDictionary[Runtime, bytes] = weakref.WeakKeyDictionary()


async def state_key(runtime: Runtime, purpose: str) -> bytes:
    """The 32-byte key for ``purpose`` (read once per runtime; reading may ask Secrets Manager: off the loop)."""
    material = _material.get(runtime)
    if material is None:
        try:
            material = await asyncio.to_thread(_read_material, runtime)
        except KeysUnavailable as exc:  # the secret could not be read: as for the provider keys, a 503
            raise RequestError(503, "keys_unavailable", str(exc)) from None
        _material[runtime] = material
    # HKDF (RFC 5869) with SHA-256: extract with a fixed salt, expand one block for the purpose.
    prk = hmac.new(b"chatloop-state-v1", material, hashlib.sha256).digest()
    return hmac.new(prk, purpose.encode() + b"\x01", hashlib.sha256).digest()


def _read_material(runtime: Runtime) -> bytes:
    named = load_named_secrets(runtime.settings, [STATE_KEY_NAME]).get(STATE_KEY_NAME)
    if named:
        return b"state-key\x00" + named.encode()
    keys = sorted(f"{provider}={key}" for provider, key in runtime.models.keys().items() if key)
    if keys:
        return b"provider-keys\x00" + "\x00".join(keys).encode()
    logger.warning(
        f"no {STATE_KEY_NAME} and no provider key: approvals and compaction items are sealed with a key of this "
        "container only"
    )
    return b"random\x00" + secrets.token_bytes(32)
