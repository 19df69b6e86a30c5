"""``/v1/responses`` stream items exactly as OpenAI sends them (issue #36), checked by the clients that depend on it.

OpenAI adds a ``code_interpreter_call`` with empty ``code`` and fills it through
``response.code_interpreter_call_code.delta``; an ``mcp_call`` with empty ``arguments``, then
``response.mcp_call.in_progress`` and the arguments' deltas (a recorded OpenAI stream: pydantic-ai's cassette
``test_openai_responses_model_mcp_server_tool_stream.yaml``). pydantic-ai 1.x asserts on exactly that and failed
``run_stream`` and ``run_stream_events`` whenever the server ran code; 2.x must pass too, and the openai SDK's
``responses.stream`` must build the code from its deltas.

pydantic-ai 1.x cannot share the dev environment with 2.x: the test installs it (pinned, with the two packages whose
1.x pins differ) into a folder of pytest's cache with pip, once, and runs the client script
(tests/clients/pydantic_ai_stream.py) in a subprocess with that folder first on its path. CI reaches PyPI as a
developer does, so the project's own files install it.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chatloop.config import MCPServerConfig, Settings
from chatloop.tools.base import ToolRegistry
from tests.support.contract import ANSWER, CODE, QUESTION, client_of
from tests.support.fake_llm import FakeLLM, Reply, text, tool_calls
from tests.support.mcp_servers import MCPTestServer, tools_server
from tests.support.repo import ROOT
from tests.support.server import Server, app_server

PYDANTIC_AI_1 = ["pydantic-ai-slim==1.107.10", "pydantic-graph==1.107.10", "genai-prices==0.0.62"]
"""pydantic-ai 1.x (its newest), and the two packages whose 1.x pins differ from the dev environment's 2.x."""
SCRIPT = ROOT / "tests" / "clients" / "pydantic_ai_stream.py"


def test_the_openai_sdk_builds_the_code_from_its_deltas(server: Server):
    with client_of(server).responses.stream(model="chatloop", input=QUESTION) as stream:
        events = list(stream)
        final = stream.get_final_response()
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "code_interpreter_call" and added.item.code == ""  # as OpenAI adds it
    assert added.item.status == "in_progress" and added.item.outputs is None
    code = "".join(e.delta for e in events if e.type == "response.code_interpreter_call_code.delta")
    done = next(e for e in events if e.type == "response.output_item.done")
    assert code == CODE == done.item.code == final.output[0].code  # type: ignore[union-attr]
    part = next(e for e in events if e.type == "response.content_part.added")
    assert part.part.type == "output_text" and part.part.logprobs == []


def run_client(server: Server, path: str | None = None, question: str = QUESTION) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GROQ_"))}
    if path:
        env["PYTHONPATH"] = os.pathsep.join([path, *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [sys.executable, str(SCRIPT), server.base_url, question],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def assert_streams_passed(found: dict[str, Any], major: str) -> None:
    assert found["version"].startswith(major), found["version"]
    assert found["run_stream"] == ANSWER and found["run_stream_events"] == ANSWER
    assert found["run_stream_codes"] == [CODE] and found["run_stream_events_codes"] == [CODE]
    assert found["events"][-1] == "AgentRunResultEvent"


@pytest.mark.slow  # pydantic-ai in a process of its own
def test_pydantic_ai_2_streams_a_server_code_run(server: Server):
    assert_streams_passed(run_client(server), "2.")


@pytest.fixture(scope="session")
def pydantic_ai_1(request: pytest.FixtureRequest) -> Iterator[str]:
    """A folder holding pydantic-ai 1.x, installed from PyPI with pip on first use and kept in pytest's cache."""
    folder = Path(request.config.cache.mkdir("pydantic-ai-1.107.10"))
    # Under pytest-xdist every worker may ask at once (and two runs may share a checkout): the first to take the
    # lock installs, the others wait for it and find the package there.
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(folder)]
    with (folder.parent / f"{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "pydantic_ai" / "__init__.py").exists():
            done = subprocess.run(
                [*install, *PYDANTIC_AI_1], capture_output=True, text=True, timeout=300, check=False
            )
            if done.returncode != 0:
                pytest.fail(f"could not install pydantic-ai 1.x: {done.stderr[-2000:]}")
    yield str(folder)


@pytest.mark.slow
def test_pydantic_ai_1_streams_a_server_code_run(server: Server, pydantic_ai_1: str):
    """Failed with ``AssertionError: Expected '...' to end in `"code":"``` while the item came with its code."""
    assert_streams_passed(run_client(server, pydantic_ai_1), "1.")


# --- an MCP call (a tool on a server the operator configured), streamed as an mcp_call item ---------------------
MCP_QUESTION = "What do the docs say about limits?"
MCP_ANSWER = "The docs say: 3 pages mention 'limits'."


def mcp_model(body: dict[str, Any]) -> Reply:
    """Calls the docs server's search once, then answers from its result."""
    model, messages = body["model"], body["messages"]
    if not any(m["role"] == "tool" for m in messages):
        return tool_calls(
            model, [("call_docs_1", "docs__search", json.dumps({"query": "limits"}))], groq=True
        )
    return text(model, MCP_ANSWER, groq=True)


@pytest.fixture(scope="module")
def mcp_server(tmp_path_factory) -> Iterator[Server]:
    with FakeLLM() as llm, MCPTestServer(tools_server()) as docs:
        llm.default = mcp_model
        settings = Settings(
            model_chain="groq:llama-3.3-70b-versatile",
            mcp_servers=(MCPServerConfig("docs", docs.url),),
            conversation_store_path=str(tmp_path_factory.mktemp("mcp") / "store.sqlite3"),
        )
        env = {"GROQ_BASE_URL": llm.groq_base_url}
        with app_server(
            settings, env=env, registry=ToolRegistry([]), keys={"groq": "gsk_mcp_stream_0000000000"}
        ) as s:
            yield s


def test_the_openai_sdk_sees_an_mcp_call_added_empty_then_its_arguments(mcp_server: Server):
    with client_of(mcp_server).responses.stream(model="chatloop", input=MCP_QUESTION) as stream:
        events = list(stream)
    kinds = [e.type for e in events]
    added: Any = next(
        e for e in events if e.type == "response.output_item.added" and e.item.type == "mcp_call"
    )
    assert added.item.arguments == ""  # as OpenAI adds it
    start = kinds.index("response.mcp_call.in_progress")
    assert kinds[start + 1 : start + 5] == [
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.output_item.done",
    ]
    arguments = "".join(str(e.delta) for e in events if e.type == "response.mcp_call_arguments.delta")
    assert json.loads(arguments) == {"query": "limits"}


@pytest.mark.slow
def test_pydantic_ai_1_and_2_stream_an_mcp_call(mcp_server: Server, pydantic_ai_1: str):
    for path, major in ((None, "2."), (pydantic_ai_1, "1.")):
        found = run_client(mcp_server, path, MCP_QUESTION)
        assert found["version"].startswith(major)
        assert found["run_stream"] == MCP_ANSWER == found["run_stream_events"], found
        meant = [{"tool_name": "search", "tool_args": {"query": "limits"}}]
        assert found["run_stream_codes"] == meant == found["run_stream_events_codes"], found
