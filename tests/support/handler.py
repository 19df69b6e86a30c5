"""The real Lambda handler (``src/app.py``) as tests drive it: the app's runtime swapped for one a test builds, and
put back afterwards; the handler invoked with a real-shaped event and a fake Lambda context.

``app.app.state.runtime`` is process-wide: a runtime left installed serves every later test, so each swap here is
undone. Tests use the ``app_runtime`` fixture (tests/conftest.py) for one test; a module-scoped fixture uses
``serving``.

Usage::

    def test_x(app_runtime):
        runtime = app_runtime(Settings(), model=ScriptedModel(script), registry=ToolRegistry())
        status, body = post("/chat", {"messages": [{"role": "user", "content": "hi"}]})

    with serving(build_runtime(Settings(), model=EchoModel())):
        status, body, headers = invoke(rest_event("GET", "/health"))
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import app as lambda_app
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.providers.base import ChatModel
from chatloop.providers.chain import FallbackChain
from chatloop.store.service import StateStore
from chatloop.tools.base import ToolRegistry
from tests.support.events import FakeContext, response_body, rest_event

KeysLoader = Callable[[Settings], dict[str, str | None]]


def build_runtime(
    settings: Settings | None = None,
    *,
    model: ChatModel | None = None,
    chain: FallbackChain | None = None,
    registry: ToolRegistry | None = None,
    keys: Mapping[str, str | None] | None = None,
    keys_loader: KeysLoader | None = None,
    state: StateStore | None = None,
) -> Runtime:
    """A ``Runtime`` as the app builds one, from ``settings`` (default: ``Settings()``) and the parts a test fixes:
    ``model`` (a chain of that one model) or ``chain``; ``registry`` (default: the real sandbox, built on first use);
    ``keys`` (the provider keys it reads) or ``keys_loader`` (default: the real loader, environment or secret)."""
    if model is not None:
        assert chain is None, "give a model or a chain, not both"
        chain = FallbackChain([model])
    if keys is not None:
        assert keys_loader is None, "give keys or a keys_loader, not both"
        fixed = dict(keys)
        keys_loader = lambda settings: dict(fixed)  # noqa: E731
    parts: dict[str, Any] = {"chain": chain, "registry": registry, "state": state}
    if keys_loader is not None:
        parts["keys_loader"] = keys_loader
    return Runtime(settings if settings is not None else Settings(), **parts)


class AppRuntime:
    """Installs runtimes on the Lambda handler's app; ``restore()`` puts back the one it found there.

    Called like ``build_runtime`` (it builds, installs and returns the runtime); ``install(runtime)`` takes one
    already built."""

    def __init__(self) -> None:
        self._saved: Runtime = lambda_app.app.state.runtime

    def __call__(self, settings: Settings | None = None, **parts: Any) -> Runtime:
        return self.install(build_runtime(settings, **parts))

    def install(self, runtime: Runtime) -> Runtime:
        lambda_app.app.state.runtime = runtime
        return runtime

    def restore(self) -> None:
        lambda_app.app.state.runtime = self._saved


@contextlib.contextmanager
def serving(runtime: Runtime) -> Iterator[Runtime]:
    """The handler's app serves ``runtime`` inside the block, and what it served before afterwards."""
    swap = AppRuntime()
    try:
        yield swap.install(runtime)
    finally:
        swap.restore()


def handle(event: dict[str, Any], remaining_ms: float | None = None) -> dict[str, Any]:
    """The handler's response to ``event``, with ``remaining_ms`` of Lambda time left (default: FakeContext's)."""
    context = FakeContext() if remaining_ms is None else FakeContext(remaining_ms=remaining_ms)
    response: dict[str, Any] = lambda_app.handler(event, context)
    return response


def invoke(event: dict[str, Any], remaining_ms: float = 28_000) -> tuple[int, str, dict[str, str]]:
    """Status, body text and headers (names lower-cased) of the handler's response to ``event``."""
    response = handle(event, remaining_ms)
    headers = {k.lower(): v for k, v in (response.get("headers") or {}).items()}
    return response["statusCode"], response_body(response), headers


def post(path: str, body: Any, remaining_ms: float = 28_000) -> tuple[int, str]:
    """Status and body text of a REST API ``POST path`` carrying ``body`` (an object, JSON text or bytes)."""
    response = handle(rest_event("POST", path, body), remaining_ms)
    return response["statusCode"], response_body(response)
