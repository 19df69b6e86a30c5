"""The chat page's conversations (issue 26), in Debian's Chromium through Playwright as in tests/browser/test_page.py: each
chat is a conversation kept by the server for the page's API key, listed beside the chat, reopened, deleted, and
brought back by a reload, also one made in the middle of an answer. Against the app under uvicorn with a real
embedded store, the real sandbox and a scripted model that answers slowly when asked to."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.browser import ask, expect, needs_chromium
from tests.support.models import SLOW, Conversational
from tests.support.repo import ROOT
from tests.support.server import Server, app_server

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def model() -> Conversational:
    return Conversational()


@pytest.fixture(scope="module")
def server(tmp_path_factory, model, sandbox) -> Iterator[Server]:
    settings = Settings(conversation_store_path=str(tmp_path_factory.mktemp("store") / "page.sqlite3"))
    with app_server(
        settings, model=model, registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)])
    ) as running:
        yield running


def stored(server: Server, key: str, path: str = "/v1/conversations") -> Any:
    response = httpx.get(server.root + path, headers={"x-api-key": key}, timeout=10)
    return response.status_code, response.json()


def test_a_reload_after_a_turn_brings_back_the_conversation_its_tool_run_and_answer(open_page, server, model):
    page = open_page(server, "reload-key")
    ask(page, "compute six times seven")
    expect(page.locator(".stop-reason")).to_have_count(1)
    ask(page, "and hello again")
    expect(page.locator(".stop-reason")).to_have_count(2)
    users = [m["content"] for m in model.seen[-1] if m["role"] == "user"]
    assert users == ["compute six times seven", "and hello again"]  # the server gave the model the whole chat
    conversation_id = page.evaluate("location.hash").removeprefix("#")
    assert conversation_id.startswith("conv_")
    expect(page.locator("#conversation-list .open")).to_have_text(["compute six times seven"])

    page.reload()
    expect(page.locator(".turn.user")).to_have_text(["compute six times seven", "and hello again"])
    answers = page.locator(".turn.assistant .answer")
    expect(answers).to_have_count(2)
    expect(answers.nth(0)).to_contain_text("Turn 1: compute six times seven = 42")
    expect(answers.nth(1)).to_contain_text("Turn 2: and hello again")
    tool = page.locator("details.tool")
    assert tool.count() == 1 and tool.locator("strong").inner_text() == "execute_javascript"
    tool.locator("summary").click()
    assert (
        tool.locator("pre.code").inner_text() == "6 * 7" and "42" in tool.locator("pre.result").inner_text()
    )
    assert "ok" in tool.locator(".status").inner_text()
    assert (
        page.locator("#conversation-list li[aria-current=true] .open").inner_text()
        == "compute six times seven"
    )

    ask(page, "one more")  # the reopened conversation goes on
    expect(page.locator(".turn.assistant .answer").nth(2)).to_contain_text("Turn 3: one more")
    assert page.errors == []


@pytest.mark.slow
def test_a_reload_in_the_middle_of_an_answer_shows_that_answer(open_page, server):
    page = open_page(server, "midway-key")
    ask(page, SLOW)
    page.locator(".answer", has_text="Turn 1").wait_for()  # the answer is being written
    page.reload()
    pending = page.locator(".turn.pending .note")
    expect(pending).to_contain_text("being answered")
    expect(page.locator(".turn.user")).to_have_text([SLOW])
    assert page.locator("#send").is_disabled()  # no new question before this one's answer is in
    page.screenshot(
        path=str(ROOT / "build" / "page-reloaded-mid-answer.png")
    )  # a CI artefact, as build/page.png
    answer = page.locator(".turn.assistant .answer")
    expect(answer).to_contain_text("word39", timeout=20_000)  # followed to its end, from the store
    expect(pending).to_have_count(0)
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator(".turn.user")).to_have_count(1)
    assert answer.inner_text().startswith("Turn 1: answer slowly please")
    expect(page.locator("#conversation-list .open")).to_have_text([SLOW[:59].rstrip() + "…"])  # its start
    ask(page, "and then")
    expect(page.locator(".turn.assistant .answer").nth(1)).to_contain_text("Turn 2: and then")
    assert page.errors == []


def test_a_connection_lost_mid_answer_is_followed_to_the_stored_answer(open_page, server):
    page = open_page(server, "cut-key")

    def cut(route: Any) -> None:
        answer = (
            route.fetch()
        )  # the server answers (and stores) the whole turn; the page gets its first part only
        text = answer.text()
        route.fulfill(
            status=200, content_type="text/event-stream", body=text[: text.index("event: delta") + 60]
        )

    page.route("**/chat", cut)
    ask(page, "cut me off")
    expect(page.locator("#notice")).to_contain_text("whole answer appears here")
    expect(page.locator(".answer")).to_have_text("Turn 1: cut me off")  # the whole of it, from the store
    expect(page.locator(".turn.user")).to_have_count(1)
    expect(page.locator("#notice")).to_be_hidden()
    assert page.errors == []


def test_conversations_are_listed_newest_first_reopened_and_deleted(open_page, server):
    page = open_page(server, "list-key")
    ask(page, "the first chat")
    expect(page.locator(".stop-reason")).to_have_count(1)
    first = page.evaluate("location.hash")
    page.click("#new-chat")
    assert page.evaluate("location.hash") == "" and page.locator(".turn").count() == 0
    ask(page, "the second chat")
    expect(page.locator(".stop-reason")).to_have_count(1)
    expect(page.locator("#conversation-list .open")).to_have_text(["the second chat", "the first chat"])

    page.locator("#conversation-list .open", has_text="the first chat").click()
    expect(page.locator(".turn.user")).to_have_text(["the first chat"])
    expect(page.locator(".answer")).to_contain_text("Turn 1: the first chat")
    assert page.evaluate("location.hash") == first

    row = page.locator("#conversation-list li", has_text="the first chat")
    row.locator(".delete").click()
    row = page.locator("#conversation-list li", has_text="Delete this conversation?")
    row.locator(".no").click()  # kept
    expect(page.locator("#conversation-list .open")).to_have_count(2)
    page.locator("#conversation-list li", has_text="the first chat").locator(".delete").click()
    page.locator("#conversation-list .yes").click()
    expect(page.locator("#conversation-list li")).to_have_count(1)
    expect(page.locator("#conversation-list .open")).to_have_text(["the second chat"])
    assert page.locator(".turn").count() == 0 and page.evaluate("location.hash") == ""  # it was the open one
    status, listed = stored(server, "list-key")
    assert status == 200 and [c["metadata"]["title"] for c in listed["data"]] == ["the second chat"]
    page.reload()
    expect(page.locator("#conversation-list .open")).to_have_text(["the second chat"])
    assert page.errors == []


def test_another_browser_sees_the_same_keys_list_and_another_key_sees_nothing(open_page, server):
    alice = open_page(server, "alice-page-key")
    ask(alice, "alice's question")
    expect(alice.locator(".stop-reason")).to_have_count(1)
    address = alice.url

    again = open_page(server, "alice-page-key")  # the same key in another browser
    expect(again.locator("#conversation-list .open")).to_have_text(["alice's question"])
    again.locator("#conversation-list .open").click()
    expect(again.locator(".answer")).to_contain_text("Turn 1: alice's question")

    bob = open_page(server, "bob-page-key")
    expect(bob.locator("#conversations-note")).to_contain_text("No conversations yet")
    assert bob.locator("#conversation-list li").count() == 0
    bob.goto(address)  # alice's conversation by its address
    expect(bob.locator("#notice")).to_contain_text("no longer kept")
    assert bob.locator(".turn").count() == 0 and bob.evaluate("location.hash") == ""
    assert alice.errors == again.errors == bob.errors == []


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (503, {"error": {"message": "store down"}}, "conversation store is not answering"),
        (429, {"message": "Too Many Requests"}, "Too many requests"),
        (403, {"message": "Forbidden"}, "The API key is missing or wrong"),
    ],
)
def test_store_refusals_are_explained_and_the_question_is_kept(
    open_page, server, model, status, body, message
):
    page = open_page(server, "refused-key")
    page.route(
        re.compile(r"/v1/conversations(\?.*)?$"),
        lambda route: route.fulfill(status=status, content_type="application/json", body=json.dumps(body)),
    )
    page.reload()
    expect(page.locator("#conversations-note")).to_contain_text(message)  # the list says why it is empty
    calls = len(model.seen)
    ask(page, "will be refused")
    expect(page.locator("#notice")).to_contain_text(message)
    assert page.input_value("#question") == "will be refused" and page.locator(".turn").count() == 0
    assert len(model.seen) == calls and page.locator("#send").is_visible()


def test_a_store_down_for_chat_is_explained_and_the_conversation_stays(open_page, server):
    page = open_page(server, "chat-503-key")
    ask(page, "first, stored")
    expect(page.locator(".stop-reason")).to_have_count(1)
    down = {
        "error": {"type": "server_error", "code": "store_unavailable", "message": "the store is unavailable"}
    }
    page.route(
        "**/chat",
        lambda route: route.fulfill(status=503, content_type="application/json", body=json.dumps(down)),
    )
    ask(page, "second, refused")
    expect(page.locator("#notice")).to_contain_text("conversation store is not answering")
    assert page.input_value("#question") == "second, refused"
    expect(page.locator(".turn.user")).to_have_text(["first, stored"])
    expect(page.locator("#conversation-list .open")).to_have_text(["first, stored"])
    assert page.evaluate("location.hash").startswith("#conv_")


def test_a_first_question_no_model_answered_leaves_no_empty_conversation(open_page, server):
    page = open_page(server, "failed-key")
    failed = {
        "message": {"role": "assistant", "content": ""},
        "stop_reason": "all_models_failed",
        "model": None,
        "iterations": 1,
    }
    body = f"event: done\ndata: {json.dumps(failed)}\n\n"
    page.route(
        "**/chat", lambda route: route.fulfill(status=200, content_type="text/event-stream", body=body)
    )
    ask(page, "nobody answers")
    expect(page.locator(".stop-reason")).to_contain_text("all_models_failed")
    expect(page.locator("#conversations-note")).to_contain_text("No conversations yet")
    page.wait_for_function(
        "location.hash === ''"
    )  # the deleted conversation's address is let go (after the list)
    assert stored(server, "failed-key")[1]["data"] == []  # the conversation made for it was deleted


def test_on_a_phone_the_list_is_behind_a_toggle(open_page, server):
    page = open_page(server, "phone-key", viewport=(375, 740))
    ask(page, "from the phone")
    expect(page.locator(".stop-reason")).to_have_count(1)
    assert not page.locator("#conversations").is_visible()
    page.click("#show-conversations")
    expect(page.locator("#conversation-list .open")).to_have_text(["from the phone"])
    assert page.evaluate("document.documentElement.scrollWidth") <= 375  # no sideways scrolling
    page.click("#new-chat")
    page.click("#show-conversations")
    page.locator("#conversation-list .open").click()
    expect(page.locator(".answer")).to_contain_text("Turn 1: from the phone")
    assert not page.locator("#conversations").is_visible()  # reopening one shows the chat
