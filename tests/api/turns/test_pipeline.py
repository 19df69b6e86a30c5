"""The turn pipeline is written once (issue 42): each step every wire API shares is called from one place in
``src/chatloop/api`` (``api/turns/pipeline.py`` and the admission it runs), not once per endpoint as the three copies
that drifted did (tool_choice mapped inline in one, the registry built two ways, approval answers given back on four
error paths). Read with ``ast`` (nothing is imported): a call is a call expression naming the function (``f(...)``
or ``x.f(...)``); its definition, docstrings and comments are not calls.

The admission is one transaction: an approval answer claimed by a turn that then fails before it runs (here a fault
listing its tools, through the real handler) is given back, and the same answer sent again runs the call.
"""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse, ToolCall
from chatloop.tools.base import ToolRegistry
from tests.support.approvals import KEYS
from tests.support.events import response_body, rest_event
from tests.support.handler import handle
from tests.support.models import ScriptedModel
from tests.support.repo import ROOT
from tests.support.tools import FakeSearch

API = ROOT / "src" / "chatloop" / "api"

STEPS = (
    "refuse_unsupported",  # the OpenAI parameters this server cannot honour: a 400 naming the first
    "answers_of",  # approval answers read and claimed: by the admission only
    "checked_turn",  # the shared checks, in their order
    "named_choice",  # tool_choice, chat-completions-shaped
    "checked_client_tools",
    "check_context",
    "structured_output",
    "model_params",
    "turn_request",  # the TurnRequest built
    "turn_tools",  # the registry, built one way
    "offered_approvals",  # approvals under the door's policy
    "ask_for",
    "admitted_to_queue",  # a background turn's slot
    "give_back",  # approval answers given back: by the admission only
    "turn_events",  # the engine's events
)
"""Step functions, each with exactly one caller (``model_for`` is not one: compaction's summary and
``/v1/responses/compact`` choose a model too)."""


def calls_by_name(root: Path) -> dict[str, list[str]]:
    """Where each function name is called under ``root``: ``{name: ["module.py:line", ...]}``."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else None
            )
            if name is not None:
                found[name].append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def steps_called_twice(root: Path) -> dict[str, list[str]]:
    calls, defined = calls_by_name(root), _defined(root)
    return {step: calls[step] for step in STEPS if len(calls[step]) != 1 and step in defined}


def _defined(root: Path) -> set[str]:
    names: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
    return names


def test_each_pipeline_step_is_called_from_one_place():
    assert steps_called_twice(API) == {}


def test_every_step_named_exists():
    """A step renamed away would pass the test above unseen: each one named is defined."""
    defined = _defined(API)  # once: parsing the API package per step cost ~20 s of a loaded run
    missing = [s for s in STEPS if s not in defined]
    assert missing == []


def test_the_counter_sees_a_second_caller(tmp_path):
    """The check above fails for a step called from two places, however it is called."""
    (tmp_path / "a.py").write_text("def turn_request():\n    pass\n\nturn_request()\n")
    (tmp_path / "b.py").write_text("import a\n\na.turn_request()\n# turn_request() in a comment\n")
    assert steps_called_twice(tmp_path) == {"turn_request": ["a.py:4", "b.py:3"]}


def searcher(request: ModelRequest, n: int) -> ModelResponse:
    """Calls search_web while it is offered and unanswered since the last user message; then answers."""
    last_user = max(i for i, m in enumerate(request.messages) if m["role"] == "user")
    answered = any(m["role"] == "tool" for m in request.messages[last_user:])
    if "search_web" in request.tool_names() and not answered:
        return ModelResponse("", "", [ToolCall(f"call_{n}", "search_web", '{"query": "q"}')], "tool_calls")
    return ModelResponse("", "Found it.", finish_reason="stop")


def post(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    event = rest_event("POST", "/v1/responses", json.dumps(body))
    event["requestContext"]["identity"]["apiKeyId"] = "key-a"
    response = handle(event)
    return response["statusCode"], json.loads(response_body(response))


def test_an_answer_claimed_by_a_turn_that_fails_before_it_runs_is_given_back(tmp_path, app_runtime):
    search = FakeSearch()
    settings = Settings(
        conversation_store_path=str(tmp_path / "s.sqlite3"), approval_required_tools="search_web"
    )
    runtime = app_runtime(settings, model=ScriptedModel(searcher), registry=ToolRegistry([search]), keys=KEYS)
    status, asked = post({"input": "search for it"})
    request = next(item for item in asked["output"] if item["type"] == "mcp_approval_request")
    answer = {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}
    body = {"input": [answer], "previous_response_id": asked["id"]}

    listing = runtime.tools.mcp_for_turn

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("listing failed")

    runtime.tools.mcp_for_turn = broken
    failed, _ = post(body)
    assert (
        failed == 500 and search.queries == []
    )  # the answer was claimed, then the turn failed before it ran
    runtime.tools.mcp_for_turn = listing
    status, ran = post(body)
    assert status == 200, ran
    assert search.queries == ["q"]  # the answer was given back: sent again, it runs the call, once
    replayed, refused = post(body)
    assert replayed == 400 and refused["error"]["param"] == "input" and search.queries == ["q"]
