"""The chat page in a real browser: Debian's Chromium driven by Playwright (its own browser download cannot be
reached here, so it is launched with ``executable_path``), against the app under uvicorn on a loopback port with a
slow scripted model and with the demo model. `make test` runs these; `.ci/run` installs Chromium when it is missing,
so CI always does. A screenshot of a finished turn is saved under build/."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from chatloop.api import create_app
from chatloop.api.page.endpoints import ASSETS, PAGE_DIR
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse, StreamItem, TextDelta
from chatloop.providers.chain import FallbackChain
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.browser import ask, expect, needs_chromium
from tests.support.repo import ROOT
from tests.support.server import Server

QUESTION = "calculate compound interest: $10,000 at 5% annually for 15 years"

pytestmark = needs_chromium


class SlowModel:
    """Writes its answer a word at a time, 0.15 s apart (or says what it is told to, at once)."""

    name = "scripted:slow"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.reply = "The answer arrives one word at a time, as a real model writes it, **in markdown**."
        self.pause = 0.15

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        self.requests.append(request)
        for word in self.reply.split(" "):
            yield TextDelta(word + " ")
            await asyncio.sleep(self.pause)
        yield ModelResponse(self.name, content=self.reply + " ", finish_reason="stop")


class Gateway:
    """API Gateway in front of the app, as the page meets it: every route but the page and its files wants the key
    (``/chat``, ``/v1/...``): no x-api-key is a 403, and the key ``throttled`` is over its usage plan (429);
    ``expired`` is refused by an authorizer (401). Bodies are API Gateway's own."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] != "/" and not scope["path"].startswith("/static/"):
            key = dict(scope["headers"]).get(b"x-api-key")
            status = {None: 403, b"throttled": 429, b"expired": 401}.get(key)
            if status is not None:
                reason = {401: "Unauthorized", 403: "Forbidden", 429: "Too Many Requests"}[status]
                body = json.dumps({"message": reason}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": status,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


@pytest.fixture
def page(browser) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 900, "height": 900})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("dialog", lambda dialog: (page.errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    yield page
    context.close()


@pytest.fixture(scope="module")
def slow() -> Iterator[tuple[Server, SlowModel]]:
    model = SlowModel()
    app = create_app(Settings(), chain=FallbackChain([model]), registry=ToolRegistry())
    with Server(app) as server:
        yield server, model


@pytest.fixture(scope="module")
def demo(sandbox) -> Iterator[Server]:
    settings = Settings()
    runtime = Runtime(
        settings, registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]), keys_loader=lambda s: {}
    )
    with Server(Gateway(create_app(settings, runtime=runtime))) as server:
        yield server


def use_key(page: Any, key: str) -> None:
    page.click("#settings summary")  # the key lives behind "API key", as a person would find it
    page.fill("#api-key", key)


def test_a_calculation_shows_its_tool_block_result_and_stop_reason(page, demo):
    page.goto(demo.root + "/")
    use_key(page, "a-key")
    ask(page, QUESTION)
    page.wait_for_selector(".turn.assistant .stop-reason")
    tools = page.locator("details.tool")
    assert tools.count() == 1
    tools.first.locator("summary").click()
    assert "Math.pow(1 + rate, years)" in tools.first.locator("pre.code").inner_text()
    assert "20789.28" in tools.first.locator("pre.result").inner_text()
    assert "ok in" in tools.first.locator(".status").inner_text()
    assert "$20,789.28" in page.locator(".answer").inner_text()
    assert page.locator(".stop-reason").inner_text() == "stop: The model answered."
    assert page.locator("#model option").all_inner_texts() == [
        "the configured chain",
        "demo:offline",
    ]  # /v1/models
    assert (
        "demo:offline" in page.locator(".meta").inner_text()
        and "2 model calls" in page.locator(".meta").inner_text()
    )
    (ROOT / "build").mkdir(exist_ok=True)
    page.screenshot(path=str(ROOT / "build" / "page.png"), full_page=True)  # the CI artefact
    assert page.errors == []


def test_text_streams_in_before_the_turn_ends_and_the_conversation_continues(page, slow):
    server, model = slow
    page.goto(server.root + "/")
    ask(page, "first question")
    page.locator(".answer", has_text="arrives").wait_for()
    assert page.locator("#stop").is_visible()  # the turn is still running: the text streamed in
    assert not page.locator(".stop-reason").count()
    page.wait_for_selector(".stop-reason")
    assert "in markdown" in page.locator(".answer strong").inner_text()
    ask(page, "second question")
    expect(page.locator(".stop-reason")).to_have_count(2)
    sent = model.requests[-1].messages
    assert [m["role"] for m in sent if m["role"] != "system"] == ["user", "assistant", "user"]
    assert sent[-1]["content"] == "second question" and "one word at a time" in sent[-2]["content"]


@pytest.mark.slow
def test_the_stop_button_stops_the_turn_on_the_server_too(page, slow, caplog):
    """The page's chats are stored conversations, whose turns outlive their page (a reload must find the answer):
    Stop asks the server to end the turn (POST /chat/stop) as well as stopping the reading, and a stopped turn is not
    stored, so a reload does not wait for it."""
    server, model = slow
    model.pause = 0.6  # about nine seconds: time enough to press Stop in the middle on a busy machine
    try:
        page.goto(server.root + "/")
        ask(page, "a long one")
        page.locator(".answer", has_text="answer").wait_for()
        page.click("#stop")
        page.wait_for_selector(".note:has-text('Stopped.')")
        assert "not kept" in page.locator(".note").inner_text() and page.locator("#send").is_visible()
        for _ in range(50):
            if "client_disconnected" in caplog.text:
                break
            page.wait_for_timeout(100)
        assert "turn stopped by its client" in caplog.text and "client_disconnected" in caplog.text
        page.reload()  # nothing to follow: the stopped question was not stored
        page.wait_for_timeout(500)
        assert page.locator(".note:has-text('being answered')").count() == 0
    finally:
        model.pause = 0.15


def test_html_in_a_model_reply_is_inert(page, slow):
    server, model = slow
    model.reply = 'Look: <img src=x onerror="window.pwned=1"> and [a link](javascript:window.pwned=2) <script>window.pwned=3</script>'
    try:
        page.goto(server.root + "/")
        ask(page, "hostile")
        page.wait_for_selector(".stop-reason")
        answer = page.locator(".answer")
        assert answer.locator("img[onerror]").count() == 0 and answer.locator("script").count() == 0
        hrefs = answer.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
        assert not any((h or "").lower().startswith("javascript:") for h in hrefs)
        page.wait_for_timeout(300)
        assert page.evaluate("window.pwned") is None and page.errors == []
        page.reload()  # reopened from the store, it is rendered the same way
        answer.wait_for()
        assert answer.locator("img[onerror]").count() == 0 and answer.locator("script").count() == 0
        assert "Look:" in answer.inner_text()
        page.wait_for_timeout(300)
        assert page.evaluate("window.pwned") is None and page.errors == []
    finally:
        model.reply = SlowModel().reply


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("", "The API key is missing or wrong"),
        ("expired", "did not accept"),
        ("throttled", "Too many requests"),
    ],
)
def test_gateway_refusals_are_explained_and_the_question_is_kept(page, demo, key, message):
    page.goto(demo.root + "/")
    use_key(page, key)
    ask(page, "hello")
    page.wait_for_selector("#notice:not([hidden])")
    assert message in page.locator("#notice").inner_text()
    assert page.input_value("#question") == "hello"  # nothing lost: send it again when ready


def test_the_page_fits_a_phone_and_serves_only_its_own_files(browser, demo):
    context = browser.new_context(viewport={"width": 375, "height": 740}, color_scheme="dark")
    page = context.new_page()
    response = page.goto(demo.root + "/")
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert page.evaluate("document.documentElement.scrollWidth") <= 375  # no sideways scrolling
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(20, 20, 22)"  # the dark palette
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.reload()
    page.wait_for_load_state("networkidle")
    assert requested and all(url.startswith(demo.root) for url in requested)
    context.close()
    assert sum((PAGE_DIR / name).stat().st_size for name in ["index.html", *ASSETS]) <= 150_000


def test_a_stream_cut_mid_answer_keeps_what_arrived_and_says_so(page, slow):
    server, _ = slow
    cut = 'event: status\ndata: {"status": "started"}\n\nevent: delta\ndata: {"content": "The first half of"}\n\n'
    page.route("**/chat", lambda route: route.fulfill(status=200, content_type="text/event-stream", body=cut))
    page.goto(server.root + "/")
    ask(page, "will be cut")
    page.wait_for_selector("#notice:not([hidden])")
    assert "before the answer finished" in page.locator("#notice").inner_text()
    assert "The first half of" in page.locator(".answer").inner_text()  # what arrived is kept
    assert page.locator("#send").is_visible()
