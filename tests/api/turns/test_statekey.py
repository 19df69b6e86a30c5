"""The key approvals and compaction items are sealed with: the same in every copy of a deployment (from STATE_KEY,
else from the provider keys), one per purpose, and a container's own only when there is no secret at all."""

from __future__ import annotations

import asyncio

import pytest

from chatloop.api.http.errors import RequestError
from chatloop.api.runtime import Runtime
from chatloop.api.turns.statekey import state_key
from chatloop.config import Settings
from chatloop.secrets import KeysUnavailable


def key(keys: dict[str, str | None], purpose: str = "approvals") -> bytes:
    return asyncio.run(state_key(Runtime(Settings(), keys_loader=lambda s: dict(keys)), purpose))


def test_copies_with_the_same_secret_share_the_key_and_each_purpose_has_its_own(monkeypatch):
    monkeypatch.delenv("STATE_KEY", raising=False)
    groq = {"groq": "gsk_one", "openai": None}
    assert key(groq) == key(groq) and len(key(groq)) == 32
    assert key(groq, "compaction") != key(groq, "approvals")
    assert key({"groq": "gsk_two", "openai": None}) != key(groq)
    monkeypatch.setenv("STATE_KEY", "an operator's own state key")
    assert key(groq) == key({"groq": "gsk_two", "openai": None}) != key({}, "compaction")


def test_with_no_secret_at_all_each_container_has_its_own_key(monkeypatch):
    monkeypatch.delenv("STATE_KEY", raising=False)
    assert key({"groq": None}) != key({"groq": None})


def test_a_secret_that_cannot_be_read_is_a_503(monkeypatch):
    monkeypatch.delenv("STATE_KEY", raising=False)

    def unreadable(settings: Settings) -> dict[str, str | None]:
        raise KeysUnavailable("the provider keys secret could not be read")

    with pytest.raises(RequestError) as refused:
        asyncio.run(state_key(Runtime(Settings(), keys_loader=unreadable), "approvals"))
    assert refused.value.status == 503
