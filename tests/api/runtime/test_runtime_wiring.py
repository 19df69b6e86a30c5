"""``Runtime`` as explicit wiring (issue 42): a handful of parts (``models``, ``tools``, ``stores``, the engine's
``limits``, ``budgets``), each built on first use, and settings swapped on a running app reaching every part."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.tools.base import ToolRegistry


def test_no_key_is_read_and_no_store_file_made_before_a_request_needs_them(tmp_path):
    reads: list[Settings] = []
    settings = Settings(conversation_store_path=str(tmp_path / "c.sqlite3"))
    runtime = Runtime(settings, keys_loader=lambda s: reads.append(s) or {})
    assert runtime.tools.names() == ["execute_javascript"]  # named without building the sandbox
    assert reads == [] and not (tmp_path / "c.sqlite3").exists()
    assert runtime.models.chain().entries()  # the first turn reads the keys, once
    runtime.models.chain()
    assert reads == [settings]
    store = runtime.stores.state()
    asyncio.run(store.conversations.create("alice", {}, [], Deadline.after(10)))
    assert (tmp_path / "c.sqlite3").exists() and runtime.stores.state() is store


def test_settings_swapped_on_a_running_app_reach_every_part(tmp_path):
    runtime = Runtime(Settings(conversation_store_path=str(tmp_path / "a.sqlite3")), registry=ToolRegistry())
    swapped = replace(runtime.settings, conversation_store_path=str(tmp_path / "b.sqlite3"), max_iterations=3)
    runtime.settings = swapped
    assert runtime.models.settings is runtime.tools.settings is runtime.stores.settings is swapped
    assert runtime.limits.max_iterations == 3
    asyncio.run(runtime.stores.state().conversations.create("alice", {}, [], Deadline.after(10)))
    assert (tmp_path / "b.sqlite3").exists() and not (tmp_path / "a.sqlite3").exists()
