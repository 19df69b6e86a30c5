"""The chat page behind two copies of the app (issue 31), in Chromium: the page reloaded in the middle of an answer
is served by the copy that is not running the turn, follows the turn there (``GET /chat/follow``, from the journal)
and shows the answer. Two app servers (each its own runtime and store client) over one SQLite file; after the
reload every request of the page is routed to the second copy (Playwright's routing stands in for the load balancer;
it hands the page each answer whole, so the follow stream arrives at once rather than as it is written)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry
from tests.support.browser import ask, expect, needs_chromium
from tests.support.models import SLOW, Conversational
from tests.support.server import Server, app_server

pytestmark = [needs_chromium, pytest.mark.slow]


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> Iterator[tuple[Server, Server]]:
    settings = Settings(conversation_store_path=str(tmp_path_factory.mktemp("store") / "page-fleet.sqlite3"))
    with (
        app_server(settings, model=Conversational(), registry=ToolRegistry()) as first,
        app_server(settings, model=Conversational(), registry=ToolRegistry()) as second,
    ):
        yield first, second


def test_a_reload_mid_answer_served_by_the_other_copy_shows_the_answer(open_page, copies):
    first, second = copies
    page = open_page(first, "fleet-page-key")
    ask(page, SLOW)
    page.locator(".answer", has_text="Turn 1").wait_for()  # the first copy is writing the answer
    served: list[str] = []

    def to_the_other_copy(route: Any) -> None:
        from playwright.sync_api import Error

        url = route.request.url.replace(first.root, second.root)
        served.append(url)
        # a request the page gave up on (the follow stream when the page closes) cannot be fulfilled; Playwright
        # raises that later, into whichever test is running then
        with contextlib.suppress(Error):
            route.fulfill(response=route.fetch(url=url))

    page.route(f"{first.root}/**", to_the_other_copy)
    page.reload()
    expect(page.locator(".turn.pending .note")).to_contain_text("being answered")
    answer = page.locator(".turn.assistant .answer")
    expect(answer).to_contain_text("word39", timeout=30_000)
    assert answer.inner_text().startswith("Turn 1: answer slowly please")
    assert any("/v1/conversations/conv_" in url for url in served)  # read from the other copy
    assert any("/chat/follow?conversation=conv_" in url for url in served)  # followed there, from the journal
    assert all(url.startswith(second.root) for url in served)
    assert page.errors == []


def test_stop_after_a_reload_ends_the_turn_on_the_copy_that_runs_it(open_page, copies):
    first, second = copies
    page = open_page(first, "fleet-stop-key")
    ask(page, SLOW)
    page.locator(".answer", has_text="Turn 1").wait_for()
    conversation_id = page.evaluate("location.hash").removeprefix("#")

    def to_the_other_copy(route: Any) -> None:
        from playwright.sync_api import Error

        with contextlib.suppress(Error):  # the follow stream's request, aborted by Stop, cannot be fulfilled
            route.fulfill(response=route.fetch(url=route.request.url.replace(first.root, second.root)))

    page.route(f"{first.root}/**", to_the_other_copy)
    page.reload()
    expect(page.locator(".turn.pending .note")).to_contain_text("being answered")
    page.click("#stop")  # served by the second copy; the turn runs on the first
    expect(page.locator(".turn.assistant .note").last).to_contain_text("Stopped")
    deadline = time.monotonic() + 20
    while True:  # the first copy's turn ended, stopped: nothing of it is stored, it runs no more
        stopped = httpx.post(
            f"{second.root}/chat/stop",
            json={"conversation": conversation_id},
            headers={"x-api-key": "fleet-stop-key"},
        ).json()["stopped"]
        if not stopped:
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    items = httpx.get(
        f"{first.root}/v1/conversations/{conversation_id}/items", headers={"x-api-key": "fleet-stop-key"}
    ).json()["data"]
    assert items == []
    assert page.errors == []
