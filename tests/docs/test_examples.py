"""The documentation's examples, run: each ``<!-- readme-example: NAME -->`` block of README.md or of a page in docs/
is sent to the app under uvicorn with the offline demo model (what `make run` serves with no key), and its output must
be the ``<!-- readme-output: NAME -->`` block that follows on the same page, exactly (a request id, which differs each
time, aside). Names are unique across the pages. The links between the pages are checked too: every relative link names
a file that exists and every ``#anchor`` a heading of the page it points into."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from chatloop.api import create_app
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.repo import ROOT
from tests.support.server import Server

PAGES = {
    path.relative_to(ROOT).as_posix(): path.read_text()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
}
BLOCK = r"<!-- readme-{kind}: {name} -->\n```(\w+)\n(.*?)```"
MARKER = r"<!-- readme-{kind}: ([\w-]+) -->"
EXAMPLES = [
    (page, name) for page, text in PAGES.items() for name in re.findall(MARKER.format(kind="example"), text)
]
FENCE = re.compile(r"^```\w*\s*$")  # a code block's own fence line, not ```` ``` ```` quoted inline in prose
LINK = re.compile(r"\]\(([^)\s]+)\)")


def block(page: str, kind: str, name: str) -> tuple[str, str]:
    found = re.search(BLOCK.format(kind=kind, name=re.escape(name)), PAGES[page], re.DOTALL)
    assert found, f"{page} has no readme-{kind} block named {name}"
    return found.group(1), found.group(2)


def anchors(text: str) -> set[str]:
    """The ids GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens, a repeat numbered."""
    seen: Counter[str] = Counter()
    found, fenced = set(), False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else re.match(r"#{1,6} (.+)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            found.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return found


@pytest.fixture(scope="module")
def served(sandbox) -> Iterator[Server]:
    settings = Settings()  # `make run` with no key: every default, the demo model
    runtime = Runtime(
        settings, registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]), keys_loader=lambda s: {}
    )
    with Server(create_app(settings, runtime=runtime)) as server:
        yield server


def run_curl(command: str, root: str) -> str:
    words = shlex.split(command.replace("\\\n", " "))
    url = next(w for w in words if "localhost:8000" in w or "127.0.0.1:8000" in w)
    path = url.split(":8000", 1)[1]
    body = words[words.index("-d") + 1]
    return httpx.post(
        root + path, content=body, headers={"content-type": "application/json"}, timeout=30
    ).text


def run_python(code: str, root: str, page: str) -> str:
    out = io.StringIO()
    program = compile(code.replace("http://127.0.0.1:8000", root), page, "exec")
    with contextlib.redirect_stdout(out):
        exec(program, {"__name__": "readme"})  # noqa: S102 - the documentation's own example, as a reader would run it
    return out.getvalue()


def test_the_readme_has_runnable_examples():
    names = [name for _, name in EXAMPLES]
    assert {"quick-start", "openai-python"} <= set(names)
    assert (
        "README.md",
        "quick-start",
    ) in EXAMPLES  # the README keeps its one example; the rest live in docs/


def test_example_names_are_unique_across_the_pages():
    counts = Counter(name for _, name in EXAMPLES)
    assert not [name for name, n in counts.items() if n > 1]


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_output_block_follows_an_example_on_its_page(page):
    text = PAGES[page]
    outputs = re.findall(MARKER.format(kind="output"), text)
    assert sorted(outputs) == sorted(re.findall(MARKER.format(kind="example"), text))


@pytest.mark.parametrize(("page", "name"), EXAMPLES, ids=[f"{page}:{name}" for page, name in EXAMPLES])
def test_a_readme_example_gives_the_output_it_shows(served, page, name):
    language, code = block(page, "example", name)
    output_language, shown = block(page, "output", name)
    got = run_curl(code, served.root) if language == "bash" else run_python(code, served.root, page)
    if output_language == "json":
        actual, expected = json.loads(got), json.loads(shown)
        actual["request_id"] = expected["request_id"]
        assert actual == expected
    else:
        assert got == shown


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_link_between_the_pages_leads_somewhere(page):
    broken = []
    for target in LINK.findall(PAGES[page]):
        if re.match(r"[a-z]+:", target):  # https:, mailto: - outside the repository
            continue
        path, _, anchor = target.partition("#")
        file = (ROOT / page).parent / path if path else ROOT / page
        if not file.is_file() or (anchor and anchor not in anchors(file.read_text())):
            broken.append(target)
    assert not broken


def test_the_docs_site_builds_strict_with_every_page(tmp_path):
    """`make docs`: mkdocs-material builds docs/ with --strict, so a page missing from mkdocs.yml's nav, a link to a
    page or anchor that does not exist, or a bad setting fails the build. It needs no network (no web fonts)."""
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    pages = [Path(page).stem for page in PAGES if page.startswith("docs/")]
    assert "index" in pages
    assert not [
        p for p in pages if not (site / ("index.html" if p == "index" else f"{p}/index.html")).is_file()
    ]
    # the architecture page renders its sections as sections, not as the code of a fence left open
    built = (site / "architecture" / "index.html").read_text()
    for section in ("a-requests-path", "the-engine", "the-http-app", "layout", "layers"):
        assert f'<h2 id="{section}">' in built, section


def test_the_readme_and_the_index_link_every_docs_page():
    pages = {Path(page).name for page in PAGES if page.startswith("docs/")}
    from_readme = {
        Path(t.partition("#")[0]).name for t in LINK.findall(PAGES["README.md"]) if t.startswith("docs/")
    }
    from_index = {t.partition("#")[0] for t in LINK.findall(PAGES["docs/index.md"]) if t.endswith(".md")}
    assert pages - from_readme == set()
    assert pages - {"index.md"} - from_index == set()
