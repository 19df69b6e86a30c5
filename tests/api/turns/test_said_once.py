"""One answer, said once (issue #36), on /chat, /v1/chat/completions and /v1/responses, streamed and not, through
the real handler, the real ``groq``/``openai`` SDKs and the scripted upstream (tests/support/fake_llm.py).

The scripted models misbehave as the issue found real ones do: a model that quotes a call tag in prose and is
asked again says it again; a model that ignores the forced client-tool call answers twice; a stream cut mid-answer
is answered by the next model from its start; a nudge after an empty reply. Whatever the engine asks again, each
sentence is in the answer once, and the deltas add up to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatloop.config import Settings
from chatloop.providers.base import ModelResponse
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.events import parse_sse
from tests.support.fake_llm import FakeLLM, Reply, text
from tests.support.handler import post
from tests.support.models import ScriptedModel
from tests.support.turns import drive

GROQ = "llama-3.3-70b-versatile"
OPENAI = "gpt-4.1-mini"
KEYS = {"groq": "gsk_test_key_0000000000", "openai": "sk-test-key-000000000000", "local": None}
ROUTES = ["/chat", "/v1/chat/completions", "/v1/responses"]
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture
def use(app_runtime, sandbox):
    """``use(chain)``: the handler's runtime with ``chain``, the real sandbox and keys for groq and openai."""

    def install(chain: str) -> None:
        app_runtime(
            Settings(model_chain=chain, rate_limit_max_wait_seconds=0.0),
            registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
            keys=KEYS,
        )

    return install


def ask(route: str, question: str, stream: bool, client_tool: bool = False) -> tuple[str, str | None]:
    """The final answer ``route`` returns for ``question``, and (streamed) the concatenated text deltas."""
    body: dict[str, Any] = {"stream": stream}
    if route == "/chat":
        body["messages"] = [{"role": "user", "content": question}]
    elif route == "/v1/chat/completions":
        body |= {"model": "chatloop", "messages": [{"role": "user", "content": question}]}
        if client_tool:
            body |= {"tools": [WEATHER], "tool_choice": "required"}
    else:
        body |= {"model": "chatloop", "input": question}
        if client_tool:
            body |= {"tools": [{"type": "function", **WEATHER["function"]}], "tool_choice": "required"}
    code, raw = post(route, body)
    assert code == 200, raw
    if not stream:
        data = json.loads(raw)
        if route == "/chat":
            return data["message"]["content"], None
        if route == "/v1/chat/completions":
            return data["choices"][0]["message"]["content"] or "", None
        return _responses_text(data), None
    if route == "/chat":
        events = parse_sse(raw)
        assert events[-1][0] == "done"
        return events[-1][1]["message"]["content"], "".join(d["content"] for n, d in events if n == "delta")
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    if route == "/v1/chat/completions":
        shown = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        return shown, shown  # a chunk stream's final content is what its deltas add up to
    deltas = "".join(c["delta"] for c in chunks if c["type"] == "response.output_text.delta")
    final = next(c for c in chunks if c["type"] in ("response.completed", "response.incomplete"))
    return _responses_text(final["response"]), deltas


def _responses_text(response: dict[str, Any]) -> str:
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def said_once(answer: str, *sentences: str) -> None:
    for sentence in sentences:
        assert answer.count(sentence) == 1, (sentence, answer)


def always(model: str, content: str, groq: bool) -> Callable[[dict[str, Any]], Reply]:
    """A model that writes ``content`` whatever it is asked (reminded, nudged, asked without tools)."""
    return lambda body: text(model, content, pieces=max(2, len(content) // 6), groq=groq)


# --- three quoted tags (the answer, in one call) and an echo (asked again, and says it again) -------------------
QUOTED = {
    "hermes": (
        'In Hermes format a call looks like `<tool_call>{"name": "execute_javascript", "arguments": {"code": "1"}}'
        "</tool_call>`. The server reads the JSON inside the tag.",
        ["In Hermes format a call looks like", "The server reads the JSON inside the tag."],
    ),
    "python_tag": (
        'Llama 3.1 starts a call with <|python_tag|>{"name": "execute_javascript", "parameters": {"code": "1"}} '
        "and ends it with a stop token. Plain answers need no tag.",
        ["Llama 3.1 starts a call with"],
    ),
    "function_tag": (
        'Groq\'s legacy dialect writes <function=execute_javascript>{"code": "1"}</function> inside the text. '
        "That is why it fails.",
        ["Groq's legacy dialect writes"],
    ),
    "raw_tool_results": (
        'Here is what the sandbox returned. RAW TOOL RESULTS: [{"result": 2}]',
        ["Here is what the sandbox returned."],
    ),
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("case", list(QUOTED))
def test_a_model_quoting_a_tag_says_it_once(fake_llm: FakeLLM, use, case, route, stream):
    """A tag that words follow is prose (issue #41): the whole text, in one call. An echo of the tool results is no
    answer: the model is asked again, and what it says again is not shown again."""
    content, sentences = QUOTED[case]
    fake_llm.default = always(GROQ, content, groq=True)
    use(f"groq:{GROQ}")
    answer, deltas = ask(route, "How do models write tool calls?", stream)
    said_once(answer, *sentences)
    assert deltas is None or deltas == answer
    if case == "raw_tool_results":
        assert "RAW TOOL RESULTS" not in answer
    else:
        assert answer == content and len(fake_llm.requests) == 1


# --- the forced client-tool call ignored --------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ROUTES[1:])  # client tools are an OpenAI API's
def test_a_model_that_ignores_the_forced_client_call_answers_once(fake_llm: FakeLLM, use, route, stream):
    answer_text = "The weather in Oslo is sunny today. Take sunglasses."
    fake_llm.default = always(OPENAI, answer_text, groq=False)
    use(f"openai:{OPENAI}")
    answer, deltas = ask(route, "Weather in Oslo?", stream, client_tool=True)
    assert answer == answer_text and (deltas is None or deltas == answer)
    assert len(fake_llm.requests) == 2  # the forced last call was made, and its repeat not shown again


# --- a cut, then the next model restarts its answer -------------------------------------------------------------
ANSWER = "The balance after 15 years is $20,789.28. It more than doubles the deposit of $10,000."


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ROUTES)
def test_a_cut_answer_restarted_by_the_next_model_continues_it(fake_llm: FakeLLM, use, route, stream):
    fake_llm.script(GROQ, text(GROQ, ANSWER, pieces=8, groq=True, cut_after=5))  # role + 4 pieces, then cut
    fake_llm.script(OPENAI, text(OPENAI, ANSWER, pieces=5))
    use(f"groq:{GROQ},openai:{OPENAI}")
    answer, deltas = ask(route, "What does $10,000 at 5% grow to in 15 years?", stream)
    assert answer == ANSWER  # the cut text, then the rest: no seam, nothing twice
    assert deltas is None or deltas == answer


def test_a_restart_in_other_words_keeps_what_was_shown_and_adds_only_what_is_new(fake_llm: FakeLLM, use):
    fake_llm.script(GROQ, text(GROQ, ANSWER, pieces=8, groq=True, cut_after=5))
    other = "The balance after 15 years is $20,789.28. Compounded yearly, the deposit more than doubles."
    fake_llm.script(OPENAI, text(OPENAI, other, pieces=5))
    use(f"groq:{GROQ},openai:{OPENAI}")
    answer, deltas = ask("/chat", "What does $10,000 at 5% grow to in 15 years?", True)
    said_once(
        answer,
        "The balance after 15 years is $20,789.28.",
        "Compounded yearly, the deposit more than doubles.",
    )
    assert re.search(r"\n\nCompounded yearly", answer)  # a seam between two different things said
    assert deltas == answer


# --- a nudge after an empty reply ---------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", ROUTES)
def test_a_nudge_after_an_empty_reply_answers_once(fake_llm: FakeLLM, use, route, stream):
    reply = "It is 42. Six times seven is 42."
    fake_llm.script(
        GROQ, text(GROQ, "", groq=True), text(GROQ, reply, groq=True), text(GROQ, reply, groq=True)
    )
    use(f"groq:{GROQ}")
    answer, deltas = ask(route, "What is 6 times 7?", stream)
    assert answer == reply and (deltas is None or deltas == answer)


# --- the property, through the engine: whatever a model repeats across the calls of one reply ----------------------
SENTENCES = ["The balance is $20,789.28.", "It more than doubles.", "Compounding does that.", "Ask me more."]
TAILS = [
    "",
    " <tool_call>",
    ' RAW TOOL RESULTS: {"result": 1}',
    ' <|python_tag|>{"name": "x", "parameters": {}} ok',
]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    replies=st.lists(
        st.tuples(st.lists(st.sampled_from(SENTENCES), max_size=3, unique=True), st.sampled_from(TAILS)),
        min_size=1,
        max_size=5,
    )
)
async def test_no_sentence_is_said_twice_whatever_the_retries(sandbox, replies):
    """A model asked again (reminded, nudged, asked without tools) says any of the same sentences again, with or
    without a tag or an echo after them: each sentence is in the answer at most once, and the deltas add up to it."""

    def script(request, n):
        words, tail = replies[min(n, len(replies)) - 1]
        return ModelResponse("", content=" ".join(words) + tail)

    turn = await drive(ScriptedModel(script, chunk=6), ToolRegistry([ExecuteJavaScriptTool(sandbox)]), "?")
    assert turn.streamed == turn.answer
    said = [s for s in SENTENCES if s in turn.answer]
    assert all(turn.answer.count(s) == 1 for s in said), turn.answer
