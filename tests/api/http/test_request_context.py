"""``RequestContext``: behind the Web Adapter, the invocation's request id is the log correlation id from the moment
the request's context is made (an explicit step, ``correlate_logs``), not from whenever something first reads
``request_id``; elsewhere the context leaves the correlation id alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.requests import Request

from chatloop.api import create_app
from chatloop.api.http.context import RequestContext
from chatloop.config import Settings
from chatloop.observability import logger
from chatloop.providers.base import ModelResponse
from chatloop.providers.chain import FallbackChain
from tests.support.adapter import adapter_headers
from tests.support.models import ScriptedModel


@pytest.fixture(autouse=True)
def no_correlation_id() -> Iterator[None]:
    logger.set_correlation_id(None)
    yield
    logger.set_correlation_id(None)


def request_to(headers: dict[str, str], peer: str = "127.0.0.1") -> Request:
    """A request as uvicorn hands it to the app (``run.sh``: the adapter on the loopback, trusted)."""
    app = create_app(
        Settings(trust_adapter_headers=True),
        chain=FallbackChain([ScriptedModel(lambda request, n: ModelResponse("", content="ok"))]),
    )
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/chat",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "client": (peer, 50000),
        "app": app,
    }
    return Request(scope)


def test_the_adapters_request_id_correlates_the_logs_once_the_context_is_made() -> None:
    ctx = RequestContext.of(request_to(adapter_headers(30, request_id="gw-req-1")))
    assert logger.get_correlation_id() == "gw-req-1"  # before anything read ctx.request_id
    assert ctx.request_id == "gw-req-1"


def test_the_context_is_made_once_per_request() -> None:
    request = request_to(adapter_headers(30, request_id="gw-req-2"))
    assert RequestContext.of(request) is RequestContext.of(request)


@pytest.mark.parametrize("peer", ["127.0.0.1", "203.0.113.9"])
def test_no_correlation_id_is_set_without_the_adapters_invocation(peer: str) -> None:
    """No adapter headers (``make run``), or headers from a peer that is not the adapter: untrusted, ignored."""
    headers = {} if peer == "127.0.0.1" else adapter_headers(30, request_id="forged")
    ctx = RequestContext.of(request_to(headers, peer))
    assert logger.get_correlation_id() is None
    assert ctx.request_id != "forged"
