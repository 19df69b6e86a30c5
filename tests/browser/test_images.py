"""Images on the chat page (issue 44), in Debian's Chromium through Playwright as in tests/browser/test_page.py: a
person attaches an image with the button, pastes one (Ctrl/Cmd+V) and drops one on the composer, sees each as a
removable thumbnail, and sends them with the question as ``image_url`` parts; the transcript shows them, also when
the conversation is reopened; an image over the server's limits (the page is served with them) is refused on the
page. Against the app under uvicorn with a real embedded store and a scripted vision model that names the images it
was given (their size, read from the PNG bytes it received)."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.tools.base import ToolRegistry
from tests.support.browser import expect, needs_chromium
from tests.support.images import gif, padded_png, png
from tests.support.server import Server, app_server

pytestmark = needs_chromium


def named(url: str) -> str:
    """How the vision model names an image: ``a 3x2 PNG``, read from the bytes of its ``data:`` URL."""
    head, _, data = url.partition(",")
    assert head == "data:image/png;base64", head
    width, height = struct.unpack(">II", base64.b64decode(data)[16:24])
    return f"a {width}x{height} PNG"


class Vision:
    """Answers with what it sees: each image of the last user message named by its size."""

    name = "scripted:vision"

    def __init__(self) -> None:
        self.seen: list[list[dict[str, Any]]] = []

    async def stream(self, request: ModelRequest):
        self.seen.append(request.messages)
        content = request.messages[-1]["content"]
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        text = " ".join(p["text"] for p in parts if p["type"] == "text")
        images = [named(p["image_url"]["url"]) for p in parts if p["type"] == "image_url"]
        yield ModelResponse(
            self.name, content=f"{text}: I see {' and '.join(images) or 'no image'}.", finish_reason="stop"
        )


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    settings = Settings(
        conversation_store_path=str(tmp_path_factory.mktemp("store") / "page.sqlite3"),
        image_max_count=2,
        image_max_bytes=4000,
        max_body_bytes=9000,
    )
    with app_server(settings, model=Vision(), registry=ToolRegistry()) as running:
        yield running


def attach(page: Any, name: str, data: bytes, mime: str = "image/png") -> None:
    """Chooses a file with the page's "Attach image" button, as a person does."""
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach image").click()
    chooser.value.set_files(files=[{"name": name, "mimeType": mime, "buffer": data}])


def paste(page: Any, data: bytes) -> None:
    """Ctrl/Cmd+V in the question box with a PNG on the clipboard (put there as a screenshot tool would)."""
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=page.url)
    page.evaluate(
        """async (bytes) => {
            const png = new Blob([new Uint8Array(bytes)], { type: "image/png" });
            await navigator.clipboard.write([new ClipboardItem({ "image/png": png })]);
        }""",
        list(data),
    )
    page.focus("#question")
    page.keyboard.press("ControlOrMeta+V")


def drop(page: Any, name: str, data: bytes) -> None:
    """A PNG file dragged from the desktop and dropped on the composer."""
    moved = page.evaluate_handle(
        """([name, bytes]) => {
            const moved = new DataTransfer();
            moved.items.add(new File([new Uint8Array(bytes)], name, { type: "image/png" }));
            return moved;
        }""",
        [name, list(data)],
    )
    page.locator("#ask").dispatch_event("dragover", {"dataTransfer": moved})
    page.locator("#ask").dispatch_event("drop", {"dataTransfer": moved})


def test_attached_pasted_and_dropped_images_go_with_the_question(open_page, server):
    page = open_page(server, "images-key")
    sent: list[Any] = []
    page.route("**/chat", lambda route: (sent.append(json.loads(route.request.post_data)), route.continue_()))
    attach(page, "chart.png", png(3, 2))
    paste(page, png(5, 4))
    thumbnails = page.locator("#attachments img")
    expect(thumbnails).to_have_count(2)
    drop(page, "dropped.png", png(7, 6))  # one more than the server takes with a message (IMAGE_MAX_COUNT=2)
    expect(page.locator("#notice")).to_contain_text(
        "“dropped.png” was not attached: the server takes at most 2 images with one message."
    )
    page.get_by_role("button", name="Remove “image.png”").click()  # the pasted one
    drop(page, "dropped.png", png(7, 6))
    expect(thumbnails).to_have_count(2)
    assert thumbnails.evaluate_all("all => all.map(i => i.alt)") == ["chart.png", "dropped.png"]
    page.fill("#question", "what is this")
    page.press("#question", "Enter")
    expect(page.locator(".turn.assistant .answer")).to_have_text(
        "what is this: I see a 3x2 PNG and a 7x6 PNG."
    )
    content = sent[0]["messages"][0]["content"]  # as the page sent it
    assert content[0] == {"type": "text", "text": "what is this"}
    assert [(part["type"], named(part["image_url"]["url"])) for part in content[1:]] == [
        ("image_url", "a 3x2 PNG"),
        ("image_url", "a 7x6 PNG"),
    ]
    expect(page.locator("#attachments")).to_be_hidden()  # sent: the composer is empty again
    widths = "all => all.map(i => i.complete && i.naturalWidth)"
    expect(page.locator(".turn.user img")).to_have_count(2)
    assert page.locator(".turn.user img").evaluate_all(widths) == [3, 7]  # the images themselves
    page.reload()  # reopened from the store: the question's images come back with it
    expect(page.locator(".turn.user img")).to_have_count(2)
    expect(page.locator(".turn.user")).to_contain_text("what is this")
    page.wait_for_function("[...document.querySelectorAll('.turn.user img')].every(i => i.complete)")
    assert page.locator(".turn.user img").evaluate_all(widths) == [3, 7]
    assert page.errors == []


def test_images_the_server_would_refuse_are_refused_on_the_page_and_a_name_stays_text(open_page, server):
    page = open_page(server, "refused-key")
    big = padded_png(5000)
    attach(page, "big.png", big)  # over IMAGE_MAX_BYTES=4000: refused here, nothing is sent
    expect(page.locator("#notice")).to_contain_text(
        f"“big.png” was not attached: it is {len(big) / 1000:.1f} KB, and the server takes images of at most 4 KB."
    )
    attach(page, "a.png", padded_png(3300))
    attach(
        page, "b.png", padded_png(3300)
    )  # each within IMAGE_MAX_BYTES, both as data: URLs over MAX_BODY_BYTES
    expect(page.locator("#notice")).to_contain_text("“b.png” was not attached: with it the message would be")
    expect(page.locator("#notice")).to_contain_text("over the server's 9 KB.")
    page.get_by_role("button", name="Remove “a.png”").click()
    attach(page, "notes.txt", b"not an image", mime="text/plain")
    expect(page.locator("#notice")).to_contain_text(
        "“notes.txt” was not attached: the server takes PNG, JPEG"
    )
    expect(page.locator("#attachments img")).to_have_count(0)
    hostile = '<img src=x onerror="window.pwned=1">.png'
    attach(page, hostile, png(1, 1))
    expect(page.locator("#attachments img")).to_have_count(1)
    assert page.locator("#attachments img").get_attribute("alt") == hostile  # the name is text, not markup
    assert page.locator("#attachments img[onerror]").count() == 0 and page.evaluate("window.pwned") is None
    page.get_by_role("button", name=f"Remove “{hostile}”").press("Enter")  # by keyboard
    expect(page.locator("#attachments")).to_be_hidden()
    expect(page.get_by_role("button", name="Attach image")).to_be_focused()

    attach(page, "odd.png", gif(2, 2))  # a GIF labelled PNG: only the server reads the bytes, and refuses it
    page.fill("#question", "and this?")
    page.press("#question", "Enter")
    expect(page.locator("#notice")).to_contain_text("The server answered 400.")
    expect(page.locator("#attachments img")).to_have_count(1)  # nothing lost: the image and question stay
    assert page.input_value("#question") == "and this?" and page.locator(".turn").count() == 0
    assert page.errors == []
