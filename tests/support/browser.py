"""The chat page in Debian's Chromium through Playwright (its own browser download cannot be reached here, so it is
launched with ``executable_path``): the skip for a machine without Chromium (CI installs it, so CI never skips), and
what a person does on the page. The ``browser`` and ``open_page`` fixtures are in tests/conftest.py.

Usage::

    pytestmark = needs_chromium

    def test_x(open_page, server):
        page = open_page(server, "alice-key")
        ask(page, "compute six times seven")
        expect(page.locator(".stop-reason")).to_have_count(1)
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="Chromium is not installed (apt-get install chromium); .ci/run installs it, so CI runs these",
)
"""The browser tests' mark: skipped where Chromium is missing, except on CI, where the ``browser`` fixture fails."""


def expect(locator: Any) -> Any:
    """Playwright's ``expect`` (imported on first use: the browser tests alone need Playwright)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def ask(page: Any, question: str) -> None:
    """Types ``question`` into the page's box and sends it, as a person does."""
    page.fill("#question", question)
    page.press("#question", "Enter")
