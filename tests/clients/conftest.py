"""Fixtures the clients' contract tests share (tests/support/contract.py): the scripted upstream, the store and the
app under uvicorn, one each per module."""

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    """The scripted upstream (tests/support/contract.py's ``wire_model``) behind the real groq / openai SDKs. Used by
    tests/clients/test_openai_contract.py and tests/clients/test_responses_stream_items.py, with ``store_path`` and ``server``."""
    from tests.support.contract import wire_model
    from tests.support.fake_llm import FakeLLM

    with FakeLLM() as llm:
        llm.default = wire_model
        yield llm


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> str:
    """Where the contract's servers keep stored responses and conversations (never the developer's data dir), one
    per module. Used by tests/clients/test_openai_contract.py and tests/clients/test_responses_stream_items.py."""
    return str(tmp_path_factory.mktemp("store") / "contract.sqlite3")


@pytest.fixture(scope="module")
def server(upstream, sandbox, store_path) -> Iterator[Any]:
    """The app under uvicorn with the contract's chain (tests/support/contract.py) over ``upstream``, the real
    sandbox and its own store. Modules that define their own ``server`` fixture use theirs."""
    from chatloop.config import Settings
    from chatloop.tools.base import ToolRegistry
    from chatloop.tools.javascript import ExecuteJavaScriptTool
    from tests.support.contract import CHAIN, KEYS
    from tests.support.server import app_server

    settings = Settings(
        model_chain=CHAIN, rate_limit_max_wait_seconds=0.0, conversation_store_path=store_path
    )
    env = {"GROQ_BASE_URL": upstream.groq_base_url, "OPENAI_BASE_URL": upstream.openai_base_url}
    with app_server(
        settings, env=env, registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]), keys=KEYS
    ) as served:
        yield served
