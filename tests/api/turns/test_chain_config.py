"""A MODEL_CHAIN that cannot be built as written fails loudly (issue #41): /health is unhealthy and every turn, on
every door, is a 503 naming MODEL_CHAIN, with no model call; the offline demo answers only when nothing at all is
configured. Through the real Lambda handler with API-Gateway-shaped events; the real SDKs would talk to the scripted
server on 127.0.0.1, which must hear nothing."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatloop.config import Settings
from chatloop.observability import logger
from chatloop.providers.catalog import Catalog
from chatloop.providers.factory import ChainMisconfigured, build_chain, chain_problem
from chatloop.tools.base import ToolRegistry
from tests.support.events import parse_sse, rest_event
from tests.support.handler import invoke
from tests.support.repo import ROOT

GROQ = "groq:llama-3.3-70b-versatile"
KEYS = {"groq": "gsk_chainConfig0123456789abcdef", "openai": None}
QUESTION = [{"role": "user", "content": "What is 2+2?"}]
CATALOG = Catalog.load()

MISCONFIGURED = {
    # a provider no version will ever have, beside a member that is fine: the whole chain is refused
    "unknown provider": (f"nosuch:model,{GROQ}", "unknown provider 'nosuch'"),
    "provider typo": ("grok:llama-3.3-70b-versatile", "unknown provider 'grok'"),
    "malformed entry": (f"{GROQ},gpt-4o", "'gpt-4o' is not of the form provider:model"),
    # every member's provider lacks its key (OPENAI_API_KEY), or is decommissioned: nothing usable is left
    "no usable member": ("openai:gpt-4.1-mini,groq:llama-3.1-70b-versatile", "no usable model"),
}

TURNS = {
    "/chat json": ("/chat", {"messages": QUESTION, "stream": False}),
    "/chat sse": ("/chat", {"messages": QUESTION, "stream": True}),
    "chat.completions": ("/v1/chat/completions", {"model": "chatloop", "messages": QUESTION}),
    "chat.completions stream": (
        "/v1/chat/completions",
        {"model": "chatloop", "messages": QUESTION, "stream": True},
    ),
    "responses": ("/v1/responses", {"input": "What is 2+2?"}),
    "responses stream": ("/v1/responses", {"input": "What is 2+2?", "stream": True}),
}


def install(app_runtime, chain: str, keys=KEYS):
    """The handler's app with MODEL_CHAIN as an operator sets it (read as at start: it must not stop the start)."""
    return app_runtime(Settings.from_env({"MODEL_CHAIN": chain}), registry=ToolRegistry(), keys=keys)


@pytest.mark.parametrize("case", MISCONFIGURED)
def test_a_misconfigured_chain_makes_health_unhealthy_naming_the_setting(case, app_runtime, fake_llm):
    chain, why = MISCONFIGURED[case]
    install(app_runtime, chain)
    status, body, _ = invoke(rest_event("GET", "/health"))
    data = json.loads(body)
    assert status == 503, body
    assert data["status"] == "unhealthy" and data["error"]["setting"] == "MODEL_CHAIN"
    assert why in data["error"]["message"] and "MODEL_CHAIN" in data["error"]["message"]
    assert fake_llm.requests == []


@pytest.mark.parametrize("door", TURNS)
@pytest.mark.parametrize("case", MISCONFIGURED)
def test_every_turn_on_every_door_is_a_503_naming_the_setting_and_no_model_call(
    case, door, app_runtime, fake_llm
):
    chain, why = MISCONFIGURED[case]
    install(app_runtime, chain)
    path, body = TURNS[door]
    status, text, headers = invoke(rest_event("POST", path, body))
    assert status == 503, text
    assert headers["content-type"].startswith("application/json")  # refused before any stream began
    error = json.loads(text)["error"]
    assert error["code"] == "model_chain_misconfigured"
    assert "MODEL_CHAIN" in error["message"] and why in error["message"]
    assert "demo:offline" not in text  # never the offline demo in its place
    assert fake_llm.requests == []


def test_the_models_list_is_refused_too(app_runtime, fake_llm):
    install(app_runtime, "nosuch:model")
    status, text, _ = invoke(rest_event("GET", "/v1/models"))
    assert status == 503 and "MODEL_CHAIN" in json.loads(text)["error"]["message"]


def test_the_log_says_exactly_what_to_fix_once(app_runtime, fake_llm):
    stream = io.StringIO()
    old = logger.registered_handler.setStream(stream)
    try:
        install(app_runtime, f"grok:llama-3.3-70b-versatile,{GROQ}")  # the start: the line is written here
        for _ in range(3):
            invoke(rest_event("POST", "/chat", {"messages": QUESTION, "stream": False}))
    finally:
        logger.registered_handler.setStream(old)
    errors = [json.loads(line) for line in stream.getvalue().splitlines() if '"ERROR"' in line]
    refused = [e for e in errors if "MODEL_CHAIN" in e["message"]]
    assert len(refused) == 1, errors  # the build is refused once, not again on every request
    message = refused[0]["message"]
    assert "'grok'" in message and "known providers:" in message and "groq" in message


def test_a_key_pasted_into_the_chain_is_never_echoed(app_runtime, fake_llm):
    pasted = "gsk_PastedIntoTheChain0123456789"
    install(app_runtime, f"{GROQ},{pasted}")  # a malformed entry: the whole chain refused
    stream = io.StringIO()
    old = logger.registered_handler.setStream(stream)
    try:
        answers = [
            invoke(rest_event("GET", "/health")),
            invoke(rest_event("POST", "/chat", {"messages": QUESTION, "stream": False})),
        ]
    finally:
        logger.registered_handler.setStream(old)
    assert [status for status, _, _ in answers] == [503, 503]
    assert all("MODEL_CHAIN" in body and pasted not in body for _, body, _ in answers)
    assert pasted not in stream.getvalue()


def test_a_decommissioned_member_is_skipped_while_another_remains(app_runtime, fake_llm):
    install(app_runtime, f"groq:llama-3.1-70b-versatile,{GROQ}")
    status, body, _ = invoke(rest_event("GET", "/health"))
    assert status == 200 and json.loads(body)["model_chain"] == [GROQ]


def test_a_keyless_member_is_skipped_while_another_remains(app_runtime, fake_llm):
    install(app_runtime, f"openai:gpt-4.1-mini,{GROQ}")
    status, body, _ = invoke(rest_event("GET", "/health"))
    assert status == 200 and json.loads(body)["model_chain"] == [GROQ]


def test_with_no_chain_and_no_key_the_demo_answers_as_before(app_runtime, fake_llm):
    app_runtime(Settings.from_env({}), registry=ToolRegistry(), keys={"groq": None, "openai": None})
    status, body, _ = invoke(rest_event("GET", "/health"))
    assert status == 200 and json.loads(body)["model_chain"] == ["demo:offline"]
    status, text, _ = invoke(rest_event("POST", "/chat", {"messages": QUESTION, "stream": False}))
    assert status == 200 and json.loads(text)["model"] == "demo:offline"
    status, text, _ = invoke(rest_event("POST", "/chat", {"messages": QUESTION, "stream": True}))
    assert status == 200 and parse_sse(text)[-1][0] == "done"


def test_a_key_without_a_chain_that_can_use_it_is_refused_not_the_demo(app_runtime, fake_llm):
    # LOCAL_API_KEY alone: the default chain (groq, openai) has nothing to call, and the operator meant a model
    app_runtime(Settings.from_env({}), registry=ToolRegistry(), keys={"local": "sk-local", "groq": None})
    status, body, _ = invoke(rest_event("GET", "/health"))
    assert status == 503 and "MODEL_CHAIN" in json.loads(body)["error"]["message"]


COLD_START = """
import json, sys
sys.path[:0] = [sys.argv[1] + "/src", sys.argv[1]]
import app
from chatloop import snapstart
from tests.support.events import FakeContext, rest_event
snapstart.before_snapshot(app.app.state.runtime)   # SnapStart priming must not stop on the chain either
snapstart.after_restore(app.app.state.runtime)
for event in (rest_event("GET", "/health"), rest_event("POST", "/chat", {"messages": [{"role": "user", "content": "hi"}]})):
    answer = app.handler(event, FakeContext())
    print("RESULT " + json.dumps([answer["statusCode"], answer["body"]]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("chain", ["groq:llama-3.3-70b-versatile,gpt-4o", "nosuch:model"])
def test_the_function_starts_and_answers_503s_rather_than_fail_its_init(chain, tmp_path, fake_llm):
    env = {
        "PATH": os.environ["PATH"],
        "TMPDIR": str(tmp_path),
        "HOME": str(tmp_path),
        "AWS_LAMBDA_INITIALIZATION_TYPE": "snap-start",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "GROQ_API_KEY": KEYS["groq"],
        "GROQ_BASE_URL": fake_llm.groq_base_url,
        "MODEL_CHAIN": chain,
    }
    done = subprocess.run(
        [sys.executable, "-c", COLD_START, str(ROOT)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert [status for status, _ in results] == [503, 503]
    assert all("MODEL_CHAIN" in body for _, body in results)
    assert KEYS["groq"] not in done.stdout + done.stderr
    assert fake_llm.requests == []


@pytest.mark.slow
def test_stream_mode_becomes_ready_and_answers_503s(tmp_path, fake_llm):
    """The Web Adapter waits for /health before it forwards anything (template.yaml's readiness statuses): an
    unhealthy copy must still be ready, or its init never ends and no one is told why."""
    import httpx

    from tests.support.adapter import adapter_headers, run_sh

    with run_sh(fake_llm, tmp_path, MODEL_CHAIN="grok:llama-3.3-70b-versatile") as served:
        health = httpx.get(f"{served.url}/health", timeout=10)
        turn = httpx.post(
            f"{served.url}/chat", json={"messages": QUESTION}, headers=adapter_headers(30), timeout=30
        )
        log = served.log.read_text()
    assert health.status_code == 503 and "unknown provider 'grok'" in health.json()["error"]["message"]
    assert turn.status_code == 503 and turn.json()["error"]["code"] == "model_chain_misconfigured"
    assert "unknown provider 'grok'" in log  # the line at start says what to fix
    assert fake_llm.requests == []


ENTRY = st.one_of(
    st.sampled_from([GROQ, "openai:gpt-4.1-mini", "demo:offline", "groq:llama-3.1-70b-versatile", "local:m"]),
    st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()), max_size=20),
)


@settings(max_examples=150, deadline=None)
@given(entries=st.lists(ENTRY, max_size=4), groq_key=st.booleans())
def test_any_model_chain_is_built_or_refused_naming_it_never_anything_else(entries, groq_key):
    """Whatever MODEL_CHAIN holds, the start goes on and the chain is built, or refused with the setting named."""
    spec = ",".join(entries)
    settings_ = Settings.from_env({"MODEL_CHAIN": spec})  # never stops the start
    keys = {"groq": KEYS["groq"] if groq_key else None, "openai": None}
    problem = chain_problem(settings_.model_chain, CATALOG)
    try:
        chain = build_chain(settings_, keys, CATALOG)
    except ChainMisconfigured as refused:
        assert str(refused).startswith("MODEL_CHAIN")
        assert problem is None or str(refused) == problem
        return
    assert problem is None and chain.entries()
    assert (
        "demo:offline" not in chain.entries()
        or not settings_.model_chain.strip(", ")
        or any(e.strip().lower().startswith("demo:") for e in spec.split(","))
    )
