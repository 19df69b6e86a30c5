"""The README's examples, run: each ``<!-- readme-example: NAME -->`` block is sent to the app under uvicorn with the
offline demo model (what `make run` serves with no key), and its output must be the ``<!-- readme-output: NAME -->``
block that follows, exactly (a request id, which differs each time, aside)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from collections.abc import Iterator

import httpx
import pytest

from chatloop.api import create_app
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.repo import ROOT
from tests.support.server import Server

README = (ROOT / "README.md").read_text()
BLOCK = r"<!-- readme-{kind}: {name} -->\n```(\w+)\n(.*?)```"
NAMES = re.findall(r"<!-- readme-example: ([\w-]+) -->", README)


def block(kind: str, name: str) -> tuple[str, str]:
    found = re.search(BLOCK.format(kind=kind, name=re.escape(name)), README, re.DOTALL)
    assert found, f"README has no readme-{kind} block named {name}"
    return found.group(1), found.group(2)


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


def run_python(code: str, root: str) -> str:
    out = io.StringIO()
    program = compile(code.replace("http://127.0.0.1:8000", root), "README.md", "exec")
    with contextlib.redirect_stdout(out):
        exec(program, {"__name__": "readme"})  # noqa: S102 - the README's own example, as a reader would run it
    return out.getvalue()


def test_the_readme_has_runnable_examples():
    assert {"quick-start", "openai-python"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_readme_example_gives_the_output_it_shows(served, name):
    language, code = block("example", name)
    output_language, shown = block("output", name)
    got = run_curl(code, served.root) if language == "bash" else run_python(code, served.root)
    if output_language == "json":
        actual, expected = json.loads(got), json.loads(shown)
        actual["request_id"] = expected["request_id"]
        assert actual == expected
    else:
        assert got == shown
