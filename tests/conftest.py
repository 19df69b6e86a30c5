"""Fixtures the test modules share (each says which modules use it; a module's own fixture of the same name wins).
Shared helpers that are not fixtures live in tests/support/; no test module imports another (tests/test_layout.py)."""

import os
import tempfile
from collections.abc import Iterator
from typing import Any

# Responses are stored by default (OpenAI's store: true) in the embedded store under $XDG_DATA_HOME: tests keep
# theirs in a folder of their own, never the developer's.
os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="chatloop-test-data-")

# Set before any chatloop import: Powertools reads these at import time.
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "chatloop-test")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "ChatLoopTest")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_REGION", "us-east-1")
for _var in (
    "GROQ_API_KEY",
    "OPENAI_API_KEY",
    "GROQ_BASE_URL",
    "OPENAI_BASE_URL",
    "MODEL_CHAIN",
    "PROVIDER_KEYS_SECRET_ARN",
    "AWS_PROFILE",
):
    os.environ.pop(_var, None)

import pytest  # noqa: E402

pytest_plugins = ["tests.support.schedule"]  # the order files reach pytest-xdist's workers in: longest first

from chatloop.tools.javascript import JavaScriptSandbox  # noqa: E402


@pytest.fixture(scope="session")
def sandbox():
    box = JavaScriptSandbox()
    box.warm()
    yield box
    box.close()


@pytest.fixture
def app_runtime():
    """Installs runtimes on the Lambda handler's app (``src/app.py``) for one test, and puts the app's own back after
    it: ``app_runtime(Settings(...), model=..., registry=..., keys={...})`` builds, installs and returns one
    (tests/support/handler.py ``build_runtime``); ``app_runtime.install(runtime)`` installs one already built."""
    from tests.support.handler import AppRuntime

    swap = AppRuntime()
    yield swap
    swap.restore()


@pytest.fixture
def fake_llm(monkeypatch):
    """A scripted OpenAI-compatible server (tests/support/fake_llm.py) that every provider's base URL points at
    (GROQ_BASE_URL, OPENAI_BASE_URL, LOCAL_BASE_URL) for one test; the real SDKs talk to it over 127.0.0.1."""
    from tests.support.fake_llm import FakeLLM

    with FakeLLM() as llm:
        monkeypatch.setenv("GROQ_BASE_URL", llm.groq_base_url)
        monkeypatch.setenv("OPENAI_BASE_URL", llm.openai_base_url)
        monkeypatch.setenv("LOCAL_BASE_URL", llm.openai_base_url)
        yield llm


@pytest.fixture
def fake_bedrock(monkeypatch):
    """A scripted Bedrock Runtime (tests/support/fake_bedrock.py) that botocore's endpoint and credentials point at
    for one test (the bedrock clients built before are dropped, and after)."""
    from chatloop.providers import bedrock
    from tests.support.fake_bedrock import FakeBedrock

    with FakeBedrock() as fake:
        for name in ("AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        for name, value in fake.environment().items():
            monkeypatch.setenv(name, value)
        bedrock.drop_clients()
        yield fake
        bedrock.drop_clients()


@pytest.fixture(scope="module")
def docs() -> Iterator[Any]:
    """The "docs" MCP server (tests/support/mcp_servers.py ``docs_server``), one per module. Used by tests/tools/test_mcp.py and
    tests/api/turns/test_approvals.py."""
    from tests.support.mcp_servers import docs_server

    with docs_server() as server:
        yield server
