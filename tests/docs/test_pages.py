"""The pages render as written and point at what exists (issue #42): every code fence closes before the next
section, so no heading is shown as code; a file a page cites is in the repository; and a request-path diagram names
only real files and real routes."""

from __future__ import annotations

import re

from chatloop.api.app import route_paths, routes
from chatloop.config import Settings
from tests.support.repo import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})([^`]*)$")
"""A fence line, as CommonMark has it: three or more backticks (or tildes) and an info string with no backtick."""
HEADING = re.compile(r"^#{2,6} [A-Z`]")
CITED = re.compile(r"`([A-Za-z0-9_./-]+\.(?:md|py|sh|yaml|yml|json|toml|txt|js))`")
WHERE = ("", "src", "src/chatloop", "src/chatloop/api", "docs", "tests")
"""Where a cited path is looked for: the root, the source, the package, api/, the docs and the tests."""


def fenced(text: str) -> list[tuple[int, str]]:
    """The lines inside code fences, numbered from 1; an unclosed fence's lines run to the end of the page."""
    opened, lines = "", []
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if fence and not opened:
            opened = fence.group(1)
        elif fence and fence.group(1).startswith(opened) and not fence.group(2).strip():
            opened = ""  # closed by the same character, at least as many, nothing after
        elif opened:
            lines.append((number, line))
    return lines


def headings_shown_as_code(text: str) -> list[int]:
    """Lines that read as section headings but sit inside a fence: a fence left open above them."""
    return [number for number, line in fenced(text) if HEADING.match(line)]


def diagram(text: str) -> str:
    """The first fenced block of a page: its request-path diagram (README.md, docs/architecture.md)."""
    found = re.search(r"^```[a-z]*\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert found, "no diagram"
    return found.group(1)


def test_no_page_shows_a_heading_as_code():
    found = {page.name: headings_shown_as_code(page.read_text()) for page in PAGES}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_the_check_finds_a_fence_left_open():
    page = "# T\n\n```\ndiagram\n\n## The engine\n\ntext\n```text\ntree\n```\n"
    assert headings_shown_as_code(page) == [6]
    assert headings_shown_as_code(page.replace("diagram\n", "diagram\n```\n")) == []


def test_the_pages_cite_only_files_in_the_repository():
    missing = []
    for page in PAGES:
        for cited in CITED.findall(page.read_text()):
            anywhere = "/" not in cited and any((ROOT / "src").rglob(cited))
            if not anywhere and not any((ROOT / base / cited).exists() for base in WHERE):
                missing.append(f"{page.name}: {cited}")
    assert missing == []


def test_the_request_diagrams_name_real_files_and_routes():
    served = set(route_paths(routes(Settings())))
    for page in (ROOT / "README.md", ROOT / "docs" / "architecture.md"):
        text = diagram(page.read_text())
        paths = re.findall(r"\b((?:src|api|store|engine|providers)/[\w/]*(?:\.\w+)?)", text)
        assert paths, page
        for path in paths:
            assert any((ROOT / base / path).exists() for base in WHERE), f"{page.name}: {path}"
        named = re.findall(r"(?<![\w.])(/(?:v1/)?[a-z][a-z/]*)(?=[ ,)]|$)", text, re.MULTILINE)
        assert "/chat" in named, page
        for route in named:
            assert route in served, f"{page.name}: {route} is no route of the app"
