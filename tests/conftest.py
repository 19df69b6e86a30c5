"""Fixtures the test modules share (each says which modules use it; a module's own fixture of the same name wins).
Shared helpers that are not fixtures live in tests/support/; no test module imports another (tests/test_layout.py)."""

import json
import os
import sys
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
def registry(sandbox):
    """The real sandbox's execute_javascript as a turn's only tool. Used by test_engine.py and test_turn_contract.py
    (modules with a ``registry`` of their own use theirs)."""
    from chatloop.tools.base import ToolRegistry
    from chatloop.tools.javascript import ExecuteJavaScriptTool

    return ToolRegistry([ExecuteJavaScriptTool(sandbox)])


@pytest.fixture(scope="module")
def docs() -> Iterator[Any]:
    """The "docs" MCP server (tests/support/mcp_servers.py ``docs_server``), one per module. Used by test_mcp.py and
    test_approvals.py."""
    from tests.support.mcp_servers import docs_server

    with docs_server() as server:
        yield server


# --- the SAM template ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def translated(tmp_path_factory) -> dict:
    """template.yaml as SAM translates it (scripts/translate_template.py), as JSON. Used by test_ops.py and
    test_template_snapstart.py."""
    from tests.support.repo import run

    target = tmp_path_factory.mktemp("cfn") / "template.json"
    run(sys.executable, "scripts/translate_template.py", "template.yaml", str(target))
    return json.loads(target.read_text())


# --- the chat page in Chromium (tests/support/browser.py) ---------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium through Playwright, one per test module. Used by test_page.py, test_page_conversations.py,
    test_page_approvals.py and test_page_fleet.py."""
    from playwright.sync_api import sync_playwright

    from tests.support.browser import CHROMIUM

    if CHROMIUM is None:
        pytest.fail("CI must run the browser tests: install Chromium (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def open_page(browser) -> Iterator[Any]:
    """A new browser (context) for an API key, remembered on the device, at the page: ``open_page(server, "alice")``.
    Used by test_page_conversations.py, test_page_approvals.py and test_page_fleet.py."""
    contexts: list[Any] = []

    def opening(server: Any, key: str, viewport: tuple[int, int] = (1200, 800)) -> Any:
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        contexts.append(context)
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        page.on("dialog", lambda dialog: (page.errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
        page.goto(server.root + "/")
        page.click("#settings summary")
        page.fill("#api-key", key)
        page.check("#remember")
        page.click("#settings summary")
        return page

    yield opening
    for context in contexts:
        context.close()


# --- renderers on their own ---------------------------------------------------------------------------------------
@pytest.fixture
def no_registered_secrets(monkeypatch):
    """Secrets other tests registered (``register_secret`` is process-wide) would hold back pieces of the renderer
    tests' deltas; key-shaped strings are still redacted. Not autouse: test_render_chat.py, test_render_openai_chat.py
    and test_render_responses.py apply it to every test of theirs with ``pytestmark``."""
    monkeypatch.setattr("chatloop.observability._SECRETS", [])


# --- OpenAI's contract through real clients (tests/support/contract.py) -------------------------------------------
@pytest.fixture(scope="module")
def upstream() -> Iterator[Any]:
    """The scripted upstream (tests/support/contract.py's ``wire_model``) behind the real groq / openai SDKs. Used by
    test_clients_contract.py and test_responses_stream_items.py, with ``store_path`` and ``server``."""
    from tests.support.contract import wire_model
    from tests.support.fake_llm import FakeLLM

    with FakeLLM() as llm:
        llm.default = wire_model
        yield llm


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> str:
    """Where the contract's servers keep stored responses and conversations (never the developer's data dir), one
    per module. Used by test_clients_contract.py and test_responses_stream_items.py."""
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


# --- the conversation store and idempotency on DynamoDB (tests/support/store.py, idempotency.py, aws.py) ----------
@pytest.fixture(params=["sqlite", "dynamodb"])
def backends(request, tmp_path, monkeypatch) -> Iterator[Any]:
    """A store's backend under test, SQLite then DynamoDB through moto (tests/support/store.py ``Backends``). Used by
    test_store.py and test_runs.py."""
    import boto3
    from moto import mock_aws

    from chatloop.store.dynamodb import create_table
    from tests.support.aws import FAKE_CREDENTIALS, one_request_at_a_time
    from tests.support.store import TABLE, Backends

    if request.param == "sqlite":
        yield Backends("sqlite", tmp_path)
        return
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    one_request_at_a_time(monkeypatch)
    with mock_aws():
        create_table(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
        yield Backends("dynamodb", tmp_path)


@pytest.fixture
def aws(monkeypatch) -> Iterator[None]:
    """Fake credentials, moto in-process and the template's idempotency table (tests/support/idempotency.py) for one
    test. Used by test_idempotency.py and test_hardening_api.py."""
    from moto import mock_aws

    from tests.support.aws import FAKE_CREDENTIALS
    from tests.support.idempotency import create_table

    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        create_table()
        yield


@pytest.fixture
def serve(app_runtime):
    """``serve(table=TABLE)``: the handler answers with a fresh counting model, idempotent on ``table``
    (tests/support/idempotency.py). Used by test_idempotency.py and test_hardening_api.py."""
    from chatloop.config import Settings
    from chatloop.tools.base import ToolRegistry
    from tests.support.idempotency import TABLE, counting_model

    def install(table: str = TABLE) -> Any:
        model = counting_model()
        app_runtime(Settings(idempotency_table_name=table), model=model, registry=ToolRegistry())
        return model

    return install
