"""Never junk as an answer (issue #36): the three answers a real small model (Qwen2.5-Coder 0.5B on llama.cpp, the
kind people run with ``local:``) gave, reproduced with their exact texts; the tool ran in 0 of 3 turns. Now each turn
recovers and the tool runs; a model that never recovers gets the fallback text, never the junk. And a property: no
final answer parses as a tool-error object, a tool schema or a runnable call.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.engine import EventType
from chatloop.engine.answers import judge_answer
from chatloop.engine.textcalls import read_text_calls
from chatloop.engine.textfilter import TextCallFilter
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.providers.textcall_formats import find_text_calls, tool_keys
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support import small_models as corpus
from tests.support.events import parse_sse
from tests.support.fake_llm import FakeLLM
from tests.support.handler import post
from tests.support.models import ScriptedModel
from tests.support.small_models import (
    FENCED_NEAR_MISS,
    QUESTIONS,
    TOOL_ERROR,
    TOOLS_ECHOED,
    fake_llm_reply,
)
from tests.support.turns import drive

MODEL = "qwen2.5-coder-0.5b-instruct"
JS = "execute_javascript"


@pytest.fixture
def local(app_runtime, sandbox, fake_llm: FakeLLM) -> FakeLLM:
    """The handler's runtime with a ``local:`` model (an OpenAI-compatible server, no key) and the real sandbox."""
    app_runtime(
        Settings(model_chain=f"local:{MODEL}"),
        registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
        keys={"groq": None, "openai": None, "local": None},
    )
    return fake_llm


def chat(question: str, stream: bool = False) -> dict[str, Any]:
    code, raw = post("/chat", {"messages": [{"role": "user", "content": question}], "stream": stream})
    assert code == 200, raw
    if not stream:
        result: dict[str, Any] = json.loads(raw)
        return result
    events = parse_sse(raw)
    done: dict[str, Any] = events[-1][1]
    assert events[-1][0] == "done"
    assert "".join(d["content"] for n, d in events if n == "delta") == done["message"]["content"]
    return done


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("case", list(QUESTIONS))
def test_each_small_model_answer_now_recovers_and_the_tool_runs(local: FakeLLM, case, stream):
    local.default = fake_llm_reply()
    done = chat(QUESTIONS[case], stream)
    answer = done["message"]["content"]
    assert done["tool_counts"].get(JS) == 1, done
    assert answer == "The balance after 15 years is $20,789.28.", answer
    for junk in (TOOL_ERROR, TOOLS_ECHOED, FENCED_NEAR_MISS, '"error"', "<tools>", "```"):
        assert junk not in answer


def test_the_decisions_say_why_a_reply_was_no_answer(local: FakeLLM, caplog):
    local.default = fake_llm_reply()
    chat(QUESTIONS["tools_echoed"])
    assert "Answer check: reason=tool_definitions" in caplog.text
    assert "reason=not_an_answer" in caplog.text


@pytest.mark.parametrize("junk", [TOOL_ERROR, TOOLS_ECHOED], ids=["tool error", "tools echoed"])
@pytest.mark.parametrize("route", ["/chat", "/v1/chat/completions", "/v1/responses"])
def test_a_model_that_never_recovers_gets_the_fallback_text_not_the_junk(local: FakeLLM, junk, route):
    from tests.support.fake_llm import text

    local.default = lambda body: text(body["model"], junk, pieces=7)
    if route == "/chat":
        body: dict[str, Any] = {"messages": [{"role": "user", "content": "6*7?"}], "stream": False}
    elif route == "/v1/chat/completions":
        body = {"model": "chatloop", "messages": [{"role": "user", "content": "6*7?"}]}
    else:
        body = {"model": "chatloop", "input": "6*7?"}
    code, raw = post(route, body)
    assert code == 200, raw
    assert junk not in raw and "<tools>" not in raw and "UnknownTool" not in raw
    assert "Here's what I tried" in raw  # the fallback text: what happened, and what to do


# --- the property: no final answer is junk ------------------------------------------------------------------------
SCHEMAS = ToolRegistry([ExecuteJavaScriptTool(None)]).schemas([JS])  # type: ignore[arg-type]
SCHEMA: Any = SCHEMAS[0]
_words = st.text(st.characters(codec="utf-8"), max_size=40)
_tool_errors = st.builds(lambda m: json.dumps({"error": m}), _words)
_schemas = st.sampled_from(
    [
        json.dumps(SCHEMA),
        json.dumps(SCHEMA["function"]),
        json.dumps(SCHEMA["function"]["parameters"]),
        json.dumps(SCHEMAS),
        TOOLS_ECHOED,
    ]
)
_calls = st.builds(
    lambda code, fmt: fmt.format(json.dumps({"name": JS, "arguments": {"code": code}})),
    _words,
    st.sampled_from(["{}", "<tool_call>{}</tool_call>", "```json\n{}\n```", "<|python_tag|>{}"]),
)
_echoes = st.builds(lambda r: "RAW TOOL RESULTS: " + json.dumps({"result": r}), _words)
JUNK = st.one_of(_tool_errors, _schemas, _calls, _echoes)


def is_junk(answer: str) -> bool:
    """Whether ``answer`` parses as a tool-error object, a tool schema or a runnable call (or echoes results)."""
    if find_text_calls(answer, tool_keys(SCHEMAS), offered_only=True) is not None:
        return True
    return judge_answer(answer, SCHEMAS).reason is not None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.sampled_from(["", "Here you go.\n", "The result: "]), junk=JUNK, then_run=st.booleans())
async def test_no_final_answer_is_junk(sandbox, before, junk, then_run):
    """A model that answers with junk (after words or not), every time it is asked or until it is reminded."""

    def script(request, n):
        reminded = (
            request.messages[-1]["role"] == "system"
            and "instead of answering" in request.messages[-1]["content"]
        )
        if then_run and reminded:
            return ModelResponse("", content=FENCED_NEAR_MISS)
        if request.messages[-1]["role"] == "tool":
            return ModelResponse("", content="It is done.")
        return ModelResponse("", content=before + junk)

    turn = await drive(ScriptedModel(script, chunk=7), ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "6*7?")
    assert not is_junk(turn.answer), turn.answer
    assert turn.streamed == turn.answer
    assert turn.of(EventType.DONE)[0]["message"]["content"] == turn.answer


async def test_an_echo_is_no_answer_in_a_turn_without_tools_either(sandbox):
    """``tools: []`` (plan mode): the echo blocks are judged too; JSON is not (nothing was offered to be a call)."""
    echoed = "Sure.\nRAW TOOL RESULTS: " + json.dumps({"result": 42})
    model = ScriptedModel(lambda request, n: ModelResponse("", content=echoed), chunk=5)
    turn = await drive(model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "6*7?", tool_names=[])
    assert turn.answer.strip() == "Sure." and turn.answer == turn.streamed
    json_answer = ScriptedModel(lambda request, n: ModelResponse("", content='{"error": "none"}'))
    turn = await drive(json_answer, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "JSON?", tool_names=[])
    assert turn.answer == '{"error": "none"}' and json_answer.calls == 1


# --- issue #41: a call written three times, a call to a tool called unknown, quoted and relayed tags -----------------
ANSWERS_41 = {
    "triple_fenced": "The sum of all prime numbers below 1000 is 76127.",
    "unknown_after_error": "The balance after 15 years is $20,789.28.",
}
CALLS_41 = {"triple_fenced": 2, "unknown_after_error": 4}
"""Model calls per turn: the call and the answer; the unknown call, its repeat (reminded), the near miss, the answer."""


def corpus_model(chunk: int = 7) -> ScriptedModel:
    return ScriptedModel(
        lambda request, n: ModelResponse("", content=corpus.reply_to(request.messages)), chunk=chunk
    )


@pytest.mark.parametrize("case", list(corpus.QUESTIONS_41))
async def test_issue_41_turns_run_the_tool_once_and_answer(sandbox, case):
    model = corpus_model()
    turn = await drive(model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), corpus.QUESTIONS_41[case])
    assert turn.answer == ANSWERS_41[case] == turn.streamed
    assert turn.done["tool_counts"] == {JS: 1}
    assert model.calls == CALLS_41[case]
    assert corpus.CAMEL not in turn.answer and "```" not in turn.answer


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("case", list(corpus.QUESTIONS_41))
def test_issue_41_turns_through_a_local_model(local: FakeLLM, case, stream):
    local.default = fake_llm_reply()
    done = chat(corpus.QUESTIONS_41[case], stream)
    assert done["message"]["content"] == ANSWERS_41[case]
    assert done["tool_counts"] == {JS: 1}
    assert len(local.requests) == CALLS_41[case]


async def test_a_model_that_keeps_calling_the_unknown_tool_gets_the_fallback_text(sandbox, caplog):
    """After the ``UnknownTool`` error, the same call (flat, fenced) whatever it is told: never the answer."""

    def script(request, n):
        last = request.messages[-1]
        refused = any(m["role"] == "tool" for m in request.messages)
        return ModelResponse(
            "", content=corpus.UNKNOWN_FENCED if refused or last["role"] != "user" else corpus.CALL_CAMEL
        )

    model = ScriptedModel(script, chunk=7)
    turn = await drive(
        model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), corpus.QUESTIONS_41["unknown_after_error"]
    )
    assert "Here's what I tried" in turn.answer and turn.answer == turn.streamed
    assert corpus.CAMEL not in turn.answer.split("Here's what I tried")[0]
    assert "```" not in turn.answer and not turn.done["tool_counts"].get(JS)
    assert model.calls <= 5
    assert "Answer check: reason=unknown_tool_call" in caplog.text


async def test_a_tool_output_that_names_a_real_tool_unknown_does_not_stop_its_calls(sandbox):
    """Only the server says a tool is unknown: a result that prints the words does not refuse an offered tool."""

    def fenced(code: str) -> str:
        return "```json\n" + json.dumps({"name": JS, "arguments": {"code": code}}) + "\n```"

    def script(request, n):
        runs = sum(m["role"] == "tool" for m in request.messages)
        if runs == 0:
            return ModelResponse(
                "", content=fenced("throw new Error(\"UnknownTool: 'execute_javascript' is gone\")")
            )
        return ModelResponse("", content=fenced("6 * 7") if runs == 1 else "It is 42.")

    model = ScriptedModel(script, chunk=7)
    turn = await drive(model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "6*7?")
    assert turn.done["tool_counts"] == {JS: 2} and turn.answer == "It is 42." == turn.streamed


@pytest.mark.parametrize("case", list(corpus.QUOTED_TAGS))
async def test_prose_that_quotes_a_call_tag_is_the_answer_in_one_call(sandbox, case):
    text = corpus.QUOTED_TAGS[case]
    model = ScriptedModel(lambda request, n: ModelResponse("", content=text), chunk=5)
    turn = await drive(
        model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "How do models write tool calls?"
    )
    assert turn.answer == text == turn.streamed
    assert model.calls == 1 and not turn.done["tool_counts"]


def relaying_model() -> ScriptedModel:
    """Runs the page's code, then answers with what it printed: a ``<tool_call>`` tag, relayed."""
    run = "```json\n" + json.dumps({"name": JS, "arguments": {"code": corpus.RELAY_CODE}}) + "\n```"

    def script(request, n):
        if request.messages[-1]["role"] == "tool":
            return ModelResponse("", content="The page prints:\n" + corpus.RELAYED_TAG)
        return ModelResponse("", content=run)

    return ScriptedModel(script, chunk=6)


async def test_a_tag_relayed_from_a_tool_result_is_the_answer_not_a_call(sandbox):
    model = relaying_model()
    turn = await drive(model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), corpus.RELAY_QUESTION)
    assert turn.answer == "The page prints:\n" + corpus.RELAYED_TAG == turn.streamed
    assert turn.done["tool_counts"] == {JS: 1} and model.calls == 2


@pytest.mark.parametrize("case", list(corpus.QUOTED_TAGS))
def test_prose_that_quotes_a_call_tag_through_a_local_model(local: FakeLLM, case):
    from tests.support.fake_llm import text

    content = corpus.QUOTED_TAGS[case]
    local.default = lambda body: text(body["model"], content, pieces=6)
    done = chat("How do models write tool calls?", stream=True)
    assert done["message"]["content"] == content
    assert len(local.requests) == 1 and not done["tool_counts"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_relayed_tag_through_a_local_model(local: FakeLLM, stream):
    from tests.support.fake_llm import text

    model = relaying_model()

    def reply(body: dict[str, Any]) -> Any:
        request = ModelRequest(messages=body["messages"], deadline=Deadline.after(5))
        return text(body["model"], model.script(request, 0).content, pieces=6)

    local.default = reply
    done = chat(corpus.RELAY_QUESTION, stream)
    assert done["message"]["content"] == "The page prints:\n" + corpus.RELAYED_TAG
    assert done["tool_counts"] == {JS: 1} and len(local.requests) == 2


# --- issue #41: the 503 after 10 s ----------------------------------------------------------------------------------
@pytest.fixture
def slow_local(app_runtime, sandbox, fake_llm: FakeLLM) -> FakeLLM:
    """A ``local:`` model alone in its chain, with a 1 s first-chunk timeout (10 s by default)."""
    app_runtime(
        Settings(model_chain=f"local:{MODEL}", model_first_chunk_timeout_seconds=1.0),
        registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
        keys={"groq": None, "openai": None, "local": None},
    )
    return fake_llm


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_lone_model_slow_to_start_is_waited_for_not_a_503(slow_local: FakeLLM, stream):
    """Its first chunk comes after the first-chunk timeout: with no next model to skip to, it is the answer."""
    from tests.support.fake_llm import text

    slow_local.default = lambda body: replace(text(body["model"], "It is 76127.", pieces=2), delay=1.6)
    done = chat("What is the sum of all prime numbers below 1000?", stream)
    assert done["message"]["content"] == "It is 76127." and done["stop_reason"] == "stop"
    assert len(slow_local.requests) == 1


def test_a_503_says_what_the_model_did(slow_local: FakeLLM):
    from tests.support.fake_llm import error

    slow_local.default = lambda body: error(503, None, "Loading model", kind="unavailable_error")
    code, raw = post(
        "/v1/chat/completions", {"model": "chatloop", "messages": [{"role": "user", "content": "?"}]}
    )
    assert code == 503
    message = json.loads(raw)["error"]["message"]
    assert f"local:{MODEL}" in message and "Loading model" in message, message


# --- the property: prose that quotes a tag is never a call and never loses a word ------------------------------------
_prose = st.text(st.characters(codec="ascii", categories=["L", "Nd", "Zs"]), min_size=1, max_size=30).filter(
    str.strip
)
_bodies = st.sampled_from(["", "…", "{...}", '{"name": "f"}', corpus.TAG_CALL, '{"code": "1"}'])
_tags = st.sampled_from(
    [
        "<tool_call>{}</tool_call>",
        "`<tool_call>{}</tool_call>`",
        "<|python_tag|>{}",
        "`<|python_tag|>{}`",
        "<function=execute_javascript>{}</function>",
        "<function=name>{}</function>",
        "`<function=...>`",
        "\n```\n<tool_call>{}</tool_call>\n```\n",
    ]
)


@settings(max_examples=150, deadline=None)
@given(before=_prose, tag=_tags, body=_bodies, after=_prose, piece=st.integers(1, 9))
def test_prose_quoting_a_tag_is_never_a_call_and_loses_no_words(before, tag, body, after, piece):
    text = f"{before} {tag.replace('{}', body)} {after.strip()}."
    assert find_text_calls(text, tool_keys(SCHEMAS)) is None
    reply = read_text_calls(ModelResponse("", content=text), SCHEMAS)
    assert reply.response.content == text and not reply.unrunnable_text_call and not reply.response.tool_calls
    assert judge_answer(text, SCHEMAS, calls_read=True).reason is None
    visible = TextCallFilter(hold_json=True, tools=tool_keys(SCHEMAS))
    shown = "".join(visible.feed(text[i : i + piece]) for i in range(0, len(text), piece))
    assert shown + visible.finish(text) == text


REPEATED_CALL = json.dumps({"name": JS, "arguments": {"code": "6 * 7"}})
REPEATED_FENCE = "```json\n" + REPEATED_CALL + "\n```"
REPEATS = {
    "bare, three times": "\n".join([REPEATED_CALL] * 3),
    "bare, on one line": " ".join([REPEATED_CALL] * 2),
    "words, then bare three times": "Let me compute it.\n" + "\n".join([REPEATED_CALL] * 3),
    "fenced, then bare": REPEATED_FENCE + "\n" + REPEATED_CALL,
    "fenced, words between": "Let me compute it.\n" + REPEATED_FENCE + "\nRunning it now:\n" + REPEATED_FENCE,
}
"""The same call written more than once in other shapes than adjacent fences (issue #41's review): each copy but
the last was left before the call as the model's words, and shown with the answer."""


def repeating_model(content: str) -> ScriptedModel:
    def script(request, n):
        if request.messages[-1]["role"] == "tool":
            return ModelResponse("", content="It is 42.")
        return ModelResponse("", content=content)

    return ScriptedModel(script, chunk=7)


@pytest.mark.parametrize("case", list(REPEATS))
async def test_a_call_repeated_in_any_shape_runs_once_and_no_copy_is_shown(sandbox, case):
    model = repeating_model(REPEATS[case])
    turn = await drive(model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "6*7?")
    assert turn.done["tool_counts"] == {JS: 1} and model.calls == 2
    assert turn.answer == turn.streamed
    assert '"name"' not in turn.answer and "```" not in turn.answer, turn.answer
    assert turn.answer.endswith("It is 42.")
    if case in ("fenced, words between", "words, then bare three times"):
        assert turn.answer.startswith("Let me compute it.")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_bare_call_repeated_through_a_local_model_is_shown_once_never(local: FakeLLM, stream):
    from tests.support.fake_llm import text

    def reply(body: dict[str, Any]) -> Any:
        answered = body["messages"][-1]["role"] == "tool"
        return text(body["model"], "It is 42." if answered else REPEATS["bare, three times"], pieces=6)

    local.default = reply
    done = chat("6*7?", stream)
    assert done["message"]["content"] == "It is 42." and done["tool_counts"] == {JS: 1}


async def test_a_call_repeated_when_tools_are_withheld_leaves_no_copy_in_the_answer(sandbox):
    """The last iteration has no tools (MAX_ITERATIONS): a reply that repeats a call there is no answer, and the
    words before it are cut before its first copy, not before its last."""
    other = json.dumps({"name": JS, "arguments": {"code": "6 * 8"}})

    def script(request, n):
        if n == 1:
            return ModelResponse("", content=REPEATED_CALL)
        return ModelResponse("", content="Checking again:\n" + "\n".join([other] * 3))

    model = ScriptedModel(script, chunk=7)
    turn = await drive(
        model, ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "6*7?", settings=Settings(max_iterations=2)
    )
    assert not model.requests[-1].tools  # withheld on the last iteration
    assert turn.answer == turn.streamed
    assert '"name"' not in turn.answer, turn.answer
