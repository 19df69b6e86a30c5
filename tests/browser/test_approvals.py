"""The chat page's approval prompt (issue 37), in Debian's Chromium through Playwright as in tests/browser/test_page.py: a
sandbox run the operator requires approval for (APPROVAL_REQUIRED_TOOLS) is shown with its code and two buttons;
Approve runs it in the next turn of the conversation, Deny tells the model. Against the app under uvicorn with a real
embedded store, the real sandbox and a scripted model that keeps asking for its calculation until it has a result."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.approvals import KEYS, calculator
from tests.support.browser import ask, expect, needs_chromium
from tests.support.server import Server, app_server

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def server(tmp_path_factory, sandbox) -> Iterator[Server]:
    settings = Settings(
        conversation_store_path=str(tmp_path_factory.mktemp("store") / "page.sqlite3"),
        approval_required_tools="execute_javascript",
    )
    with app_server(
        settings, model=calculator(), registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]), keys=KEYS
    ) as running:
        yield running


@pytest.mark.slow
def test_the_page_asks_before_the_sandbox_runs_and_runs_it_once_approved(open_page, server):
    page = open_page(server, "approver-key")
    ask(page, "six times seven?")
    prompt = page.locator(".approval")
    expect(prompt).to_have_count(1)
    expect(prompt.locator("pre.code")).to_have_text("return 6 * 7")
    expect(page.locator(".stop-reason")).to_contain_text("approval_required")
    assert page.locator("details.tool").count() == 0  # nothing ran
    prompt.locator("button.approve").click()
    tool = page.locator("details.tool")
    expect(tool).to_have_count(1)
    expect(tool.locator(".status")).to_contain_text("ok")
    expect(page.locator(".turn.assistant .answer").last).to_contain_text("42")
    expect(prompt.locator("button.approve")).to_be_disabled()

    ask(page, "and once more?")
    expect(page.locator(".approval")).to_have_count(2)
    page.locator(".approval").nth(1).locator("button.deny").click()
    expect(page.locator(".turn.assistant .answer").last).to_contain_text("did not approve")
    assert page.locator("details.tool").count() == 1  # the denied run never happened

    page.reload()  # the conversation reopened: both requests shown, answered, their buttons off
    expect(page.locator(".approval")).to_have_count(2)
    expect(page.locator(".approval button.approve").nth(1)).to_be_disabled()
    expect(page.locator(".approval pre.code").first).to_have_text("return 6 * 7")
    assert page.errors == []
