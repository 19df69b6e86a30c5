"""Fixtures the page tests share: Chromium (tests/support/browser.py), and a page per test."""

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium through Playwright, one per test module. Used by tests/browser/test_page.py, tests/browser/test_conversations.py,
    tests/browser/test_approvals.py and tests/browser/test_fleet.py."""
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
    Used by tests/browser/test_conversations.py, tests/browser/test_approvals.py and tests/browser/test_fleet.py."""
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
