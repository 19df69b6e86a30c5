"""A queued background request as it is kept until its worker runs it: every secret it carries sealed, so nothing
secret is at rest (the SQLite file and its WAL, the DynamoDB table, a backup of either).

The secrets a ``/v1/responses`` body carries are its client MCP servers' ``authorization`` and ``headers``
(``ResponsesMcpTool``: never echoed, never logged). ``seal_secrets`` takes them out of the body and keeps them as one
field, ``chatloop_sealed``: AES-256-GCM (``api.turns.sealing``) under the state key's ``background`` subkey, bound to
the caller and the response id, so a row copied under another response or caller does not open. The worker that
runs the turn opens them (``open_secrets``) and runs the request as it was sent. A key that changed between the two
(STATE_KEY rotated) fails the turn with that reason; it never runs without the secrets.

Usage::

    kept = await seal_secrets(ctx.runtime, owner, rid, raw)        # what runs.begin keeps
    body = await open_secrets(runtime, owner, rid, kept)           # what the worker runs
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatloop.api.http.errors import RequestError
from chatloop.api.turns.sealing import Unsealable, seal, unseal
from chatloop.api.turns.statekey import state_key
from chatloop.jsontypes import JSONObject, JSONValue

if TYPE_CHECKING:
    from chatloop.api.runtime import Runtime

PURPOSE = "background"
SEALED_FIELD = "chatloop_sealed"
SECRET_FIELDS = ("authorization", "headers")
"""The fields of an ``mcp`` tool that are secret (the server's credentials and whatever its headers carry)."""


def _aad(owner: str, rid: str) -> bytes:
    return b"chatloop-background\x00" + owner.encode("utf-8", "surrogatepass") + b"\x00" + rid.encode()


def sealed_body(key: bytes, owner: str, rid: str, body: JSONObject) -> JSONObject:
    """``body`` with its MCP tools' secrets sealed into ``chatloop_sealed`` (``body`` itself when it has none)."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return body
    taken: JSONObject = {}
    kept: list[JSONValue] = []
    for index, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type") == "mcp" and any(f in tool for f in SECRET_FIELDS):
            taken[str(index)] = {f: tool[f] for f in SECRET_FIELDS if f in tool}
            tool = {k: v for k, v in tool.items() if k not in SECRET_FIELDS}
        kept.append(tool)
    if not taken:
        return body
    return {**body, "tools": kept, SEALED_FIELD: seal(key, _aad(owner, rid), {"tools": taken})}


def opened_body(key: bytes, owner: str, rid: str, kept: JSONObject) -> JSONObject:
    """The body ``sealed_body`` kept, with its secrets back where they were; ``Unsealable`` when they do not open."""
    sealed = kept.get(SEALED_FIELD)
    if sealed is None:
        return kept
    if not isinstance(sealed, str):
        raise Unsealable("the sealed field is not a sealed text")
    taken = unseal(key, _aad(owner, rid), sealed).get("tools")
    tools = kept.get("tools")
    if not isinstance(taken, dict) or not isinstance(tools, list):
        raise Unsealable("the sealed field does not match the request's tools")
    restored: list[JSONValue] = list(tools)
    for index, secrets in taken.items():
        at = int(index)
        tool = restored[at] if at < len(restored) else None
        if not isinstance(tool, dict) or not isinstance(secrets, dict):
            raise Unsealable("the sealed field does not match the request's tools")
        restored[at] = {**tool, **secrets}
    body = {k: v for k, v in kept.items() if k != SEALED_FIELD}
    return {**body, "tools": restored}


def has_secrets(body: JSONObject) -> bool:
    """Whether ``body`` carries a secret to seal (most requests do not, and need no key)."""
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(t, dict) and t.get("type") == "mcp" and any(f in t for f in SECRET_FIELDS) for t in tools
    )


async def seal_secrets(runtime: Runtime, owner: str, rid: str, body: JSONObject) -> JSONObject:
    """``sealed_body`` under this deployment's key for queued requests (the key is read only when needed)."""
    if not has_secrets(body):
        return body
    return sealed_body(await state_key(runtime, PURPOSE), owner, rid, body)


async def open_secrets(runtime: Runtime, owner: str, rid: str, kept: JSONObject) -> JSONObject:
    """``opened_body`` under the same key; a ``RequestError`` (the turn fails with it) when it does not open."""
    if SEALED_FIELD not in kept:
        return kept
    try:
        return opened_body(await state_key(runtime, PURPOSE), owner, rid, kept)
    except Unsealable as exc:
        raise RequestError(
            500,
            "server_error",
            f"the queued request's sealed secrets cannot be opened: {exc} (STATE_KEY changed?)",
        ) from None
