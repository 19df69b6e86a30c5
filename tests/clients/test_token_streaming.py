"""Tokens stream as they come, on every route (issue #23): a scripted upstream writes ~20 tokens over ~2 s and real
clients (the openai SDK, httpx for /chat's SSE) note when each delta arrives.

The contract: the role chunk and ``response.created`` go out at once; each content delta goes out as the model writes
it, also for the answer that follows a server tool run; text a model writes before calling a server tool is part of
the answer, separated from the next model call's text by a ``"\\n\\n"`` seam; the concatenated deltas equal the final
content the same stream reports and a non-streamed request's content; a model failing mid-stream keeps what was sent,
then the seam, then the fallback's answer.

"As it comes" is proved by the order things happen in, not by wall-clock bounds (which a loaded machine breaks): the
scripted model writes in lockstep with the client (``paced``), waiting before each piece until the client has seen
the pieces before the last two. A server that held the turn's opening for the model's first byte, or held the deltas
until the end, never lets the model go on: the wait runs out and the test fails, however fast or slow the machine.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from chatloop.api import create_app
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from tests.support.fake_llm import FakeLLM, Reply, text, tool_calls
from tests.support.server import Server

pytestmark = pytest.mark.slow  # ~30 turns of the app under uvicorn with the sandbox, each with its own server

GROQ_MODEL = "llama-3.3-70b-versatile"
OPENAI_MODEL = "gpt-4.1-mini"
CHAIN = f"groq:{GROQ_MODEL},openai:{OPENAI_MODEL}"  # the groq SDK first, the openai SDK as the fallback
# Shaped as real keys are (gsk_ and 52 letters and digits): what the redaction patterns know.
KEYS = {"groq": "gsk_" + "StReAm0CoNtRaCt1" * 3 + "0000", "openai": "sk-stream-contract-0000000000"}

PACE_WAIT = 30.0
"""Seconds the paced model waits for the client to catch up before it gives up and the test fails (a server that
streams lets it go on within milliseconds; this only bounds how long a broken one takes to fail)."""
LAG = 2
"""Pieces a paced model may be ahead of its client: room for a delta held back until the next piece."""
ANSWER = (
    "One thousand at five percent compounded yearly for fifteen years grows to 2078.93, "
    "which is a little more than double the principal."
)
PROSE = "Let me compute that."
CODE = "Math.round(1000 * 1.05 ** 15 * 100) / 100"
SEAM = "\n\n"


def paced(model: str, timed: Timed, content: str = ANSWER, groq: bool = True, seen_first: str = "") -> Reply:
    """``content`` in 20 pieces, written in lockstep with the client ``timed`` follows: the model's first byte only
    once the client has seen the turn open (and ``seen_first`` in the text so far); content piece n only once the
    client has seen the pieces before n - ``LAG`` (chunk 0 is the role chunk, 1 the first piece). Each wait is noted in ``timed.written`` (when the model wrote
    what) and one that runs out in ``timed.missed``."""
    chunks = text(model, content, pieces=20, groq=groq).chunks
    sizes = [
        len(chunk["choices"][0]["delta"].get("content") or "") if chunk["choices"] else 0 for chunk in chunks
    ]
    base = [0]

    def before(n: int) -> None:
        if n == 0:
            timed.wait_for(
                lambda: timed.opened_at is not None and seen_first in timed.text, "the turn to open"
            )
            base[0] = len(timed.text)
        else:
            owed = sum(sizes[: max(0, n - LAG)])
            timed.wait_for(lambda: len(timed.text) - base[0] >= owed, f"{owed} characters before chunk {n}")
        if n == 0 or sizes[n]:  # its first byte and its content pieces (not the finish chunk after them)
            timed.written.append((n, timed.now()))

    return Reply(chunks=chunks, before=before)


def narrated_call(model: str, prose: str = PROSE, code: str = CODE) -> Reply:
    """A model that writes a sentence, then calls execute_javascript in the same reply (Groq's shape)."""
    said = text(model, prose, pieces=2, groq=True).chunks[:-1]  # without its finish chunk
    call = tool_calls(model, [("call_js_1", "execute_javascript", json.dumps({"code": code}))], groq=True)
    return Reply(chunks=said + call.chunks[1:])  # without the tool call reply's role chunk


@pytest.fixture
def upstream(fake_llm: FakeLLM) -> FakeLLM:
    return fake_llm


@pytest.fixture
def server(upstream, sandbox, tmp_path) -> Iterator[Server]:
    from chatloop.tools.base import ToolRegistry
    from chatloop.tools.javascript import ExecuteJavaScriptTool

    settings = Settings(
        model_chain=CHAIN,
        rate_limit_max_wait_seconds=0.0,
        conversation_store_path=str(tmp_path / "store.sqlite3"),
    )
    runtime = Runtime(
        settings, registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]), keys_loader=lambda s: dict(KEYS)
    )
    with Server(create_app(settings, runtime=runtime)) as served:
        yield served


def client_of(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=60)


# --- the three routes, timed ----------------------------------------------------------------------
class Timed:
    """What a client saw of one streamed turn: when the first byte of the turn (role chunk / response.created /
    the first SSE event) arrived, each content delta with its arrival time, and the final content the stream
    itself reports."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.opened_at: float | None = None
        self.deltas: list[tuple[float, str]] = []
        self.final: str | None = None
        self.raw: list[Any] = []
        self.written: list[tuple[int, float]] = []
        """When a paced model wrote each chunk (its index, on this clock)."""
        self.missed: list[str] = []
        """What a paced model waited for in vain."""
        self._changed = threading.Condition()

    def now(self) -> float:
        return time.monotonic() - self.start

    def opened(self) -> None:
        with self._changed:
            if self.opened_at is None:
                self.opened_at = self.now()
            self._changed.notify_all()

    def delta(self, piece: str) -> None:
        with self._changed:
            self.deltas.append((self.now(), piece))
            self._changed.notify_all()

    def wait_for(self, seen: Any, what: str) -> None:
        """Block the paced model until ``seen()`` holds; after one wait ran out, never again (fail fast)."""
        with self._changed:
            if not self.missed and not self._changed.wait_for(seen, PACE_WAIT):
                self.missed.append(what)

    def written_at(self, n: int) -> float:
        """When the paced model wrote its n-th chunk (0: its first byte), on this clock (the last such chunk, when
        two models were paced)."""
        return [at for index, at in self.written if index == n][-1]

    @property
    def text(self) -> str:
        return "".join(d for _, d in self.deltas)

    def first_delta_after(self, chars: int) -> float:
        """When the delta that takes the text past ``chars`` characters arrived (0: the first delta)."""
        seen = 0
        for at, delta in self.deltas:
            seen += len(delta)
            if seen > chars:
                return at
        raise AssertionError(f"no delta past {chars} characters: {self.text!r}")


def stream_chat_completions(server: Server, question: str, timed: Timed | None = None, **extra: Any) -> Timed:
    client = client_of(server)
    timed = timed or Timed()
    stream = client.chat.completions.create(
        model="chatloop", messages=[{"role": "user", "content": question}], stream=True, **extra
    )
    content: list[str] = []
    for chunk in stream:
        timed.raw.append(chunk)
        if chunk.choices and chunk.choices[0].delta.role == "assistant":
            timed.opened()
        piece = chunk.choices[0].delta.content if chunk.choices else None
        if piece:
            timed.delta(piece)
            content.append(piece)
    timed.final = "".join(content)  # chat completions' final content is the client's accumulation
    return timed


def stream_responses(server: Server, question: str, timed: Timed | None = None, **extra: Any) -> Timed:
    client = client_of(server)
    timed = timed or Timed()
    stream = client.responses.create(model="chatloop", input=question, stream=True, **extra)
    for event in stream:
        timed.raw.append(event)
        if event.type == "response.created":
            timed.opened()
        elif event.type == "response.output_text.delta":
            timed.delta(event.delta)
        elif event.type in ("response.completed", "response.incomplete", "response.failed"):
            timed.final = message_text(event.response.output)
    return timed


def stream_chat(server: Server, question: str, timed: Timed | None = None) -> Timed:
    """/chat's own SSE, read line by line as a browser's EventSource would."""
    timed = timed or Timed()
    body = {"messages": [{"role": "user", "content": question}], "stream": True}
    with httpx.stream("POST", f"{server.root}/chat", json=body, timeout=60) as response:
        kind = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
                timed.opened()
            elif line.startswith("data: ") and kind is not None:
                data = json.loads(line.removeprefix("data: "))
                timed.raw.append((kind, data))
                if kind == "delta":
                    timed.delta(data["content"] if isinstance(data, dict) else data)
                elif kind == "done":
                    timed.final = data["message"]["content"]
    return timed


def message_text(output: list[Any]) -> str:
    """The text of a response's message items, in order (what ``output_text`` is in the SDKs)."""
    return "".join(
        part.text
        for item in output
        if item.type == "message"
        for part in item.content
        if part.type == "output_text"
    )


def non_streamed(server: Server, route: str, question: str) -> str:
    """The same question without streaming: the content the invariant compares with."""
    if route == "chat_completions":
        completion = client_of(server).chat.completions.create(
            model="chatloop", messages=[{"role": "user", "content": question}]
        )
        return completion.choices[0].message.content or ""
    if route == "responses":
        return client_of(server).responses.create(model="chatloop", input=question).output_text
    body = {"messages": [{"role": "user", "content": question}], "stream": False}
    return str(httpx.post(f"{server.root}/chat", json=body, timeout=60).json()["message"]["content"])


STREAMS = {"chat_completions": stream_chat_completions, "responses": stream_responses, "chat": stream_chat}


def assert_streamed_as_written(timed: Timed, answer_from: int = 0) -> None:
    """The answer's deltas reached the client while the paced model was still writing, not together at the end."""
    assert not timed.missed, f"the model waited in vain for {timed.missed[0]}: {timed.deltas}"
    first = timed.first_delta_after(answer_from)
    answer_deltas = [at for at, _ in timed.deltas if at >= first]
    assert len(answer_deltas) >= 5, timed.deltas  # more than one lump
    last_piece = max(n for n, _ in timed.written)
    # The first answer delta came before the model wrote its last content piece, and the last delta after it.
    assert first < timed.written_at(last_piece) <= timed.deltas[-1][0], (timed.written, timed.deltas)


# --- plain answers --------------------------------------------------------------------------------
@pytest.mark.parametrize("route", ["chat_completions", "responses", "chat"])
def test_the_first_byte_goes_out_at_once_and_tokens_as_the_model_writes_them(server, upstream, route):
    timed = Timed()
    upstream.script(GROQ_MODEL, paced(GROQ_MODEL, timed))
    STREAMS[route](server, "How much is 1000 at 5% for 15 years?", timed)
    # The role chunk / response.created does not wait for the model's first byte: the model only writes it once
    # the client has seen the turn open.
    assert not timed.missed, f"the model waited in vain for {timed.missed[0]}"
    assert timed.opened_at is not None and timed.opened_at <= timed.written_at(0), (
        timed.opened_at,
        timed.written,
    )
    first = timed.first_delta_after(0)
    # The first token, passed on at once: after the model wrote it, before it wrote the piece LAG + 1 after it.
    assert timed.written_at(1) <= first < timed.written_at(1 + LAG + 1), (first, timed.written)
    assert_streamed_as_written(timed)
    assert timed.text == ANSWER == timed.final


@pytest.mark.parametrize("route", ["chat_completions", "responses", "chat"])
def test_concatenated_deltas_equal_the_final_and_the_non_streamed_content(server, upstream, route):
    fast = text(GROQ_MODEL, ANSWER, pieces=20, groq=True)
    upstream.script(GROQ_MODEL, fast, fast)
    timed = STREAMS[route](server, "interest?")
    assert timed.text == timed.final == ANSWER
    assert non_streamed(server, route, "interest?") == ANSWER


# --- after a server tool run ----------------------------------------------------------------------
@pytest.mark.parametrize("route", ["chat_completions", "responses", "chat"])
def test_the_answer_after_a_server_tool_run_streams_as_it_comes(server, upstream, route):
    timed = Timed()
    # The answering model writes its first byte only once the client has seen the prose of the call before it.
    upstream.script(GROQ_MODEL, narrated_call(GROQ_MODEL), paced(GROQ_MODEL, timed, seen_first=PROSE))
    STREAMS[route](server, "What is 1000 at 5% compounded yearly for 15 years?", timed)
    prefix = PROSE + SEAM
    assert timed.text == prefix + ANSWER == timed.final
    assert_streamed_as_written(timed, answer_from=len(prefix))
    # The prose came first: before the answering model wrote its first byte.
    assert timed.first_delta_after(0) <= timed.written_at(0) < timed.first_delta_after(len(prefix))
    bodies = upstream.requests_for(GROQ_MODEL)
    assert len(bodies) == 2 and any(m["role"] == "tool" for m in bodies[1]["body"]["messages"])


def test_the_responses_output_keeps_the_order_things_happened_in(server, upstream):
    """The narration, the server's run (a code_interpreter_call item), then the answer's message after it."""
    upstream.script(
        GROQ_MODEL, narrated_call(GROQ_MODEL), text(GROQ_MODEL, "It grows to 2078.93.", groq=True)
    )
    timed = stream_responses(server, "What is 1000 at 5% compounded yearly for 15 years?")
    output = timed.raw[-1].response.output
    kinds = [item.type for item in output]
    run = kinds.index("code_interpreter_call")
    assert kinds[-1] == "message" and run < len(kinds) - 1, kinds
    assert "2078.93" in message_text(output[run + 1 :]) and PROSE in message_text(output[:run]), kinds
    added = [e.item.type for e in timed.raw if e.type == "response.output_item.added"]
    assert added == kinds  # streamed in the same order


@pytest.mark.parametrize("route", ["chat_completions", "responses", "chat"])
def test_text_before_a_server_tool_call_is_part_of_the_answer(server, upstream, route):
    """ "Let me compute that." then the answer, joined by the seam: in the deltas, the final content and the
    non-streamed answer alike (on /chat too: done.message.content)."""
    answer = text(GROQ_MODEL, "It grows to 2078.93.", groq=True)
    upstream.script(GROQ_MODEL, narrated_call(GROQ_MODEL), answer, narrated_call(GROQ_MODEL), answer)
    timed = STREAMS[route](server, "What is 1000 at 5% compounded yearly for 15 years?")
    expected = PROSE + SEAM + "It grows to 2078.93."
    assert timed.text == timed.final == expected
    assert non_streamed(server, route, "What is 1000 at 5% compounded yearly for 15 years?") == expected


# --- a model failing mid-stream -------------------------------------------------------------------
def cut_mid_answer(model: str) -> tuple[Reply, str]:
    """A Groq reply cut after its role chunk and 6 of 20 content pieces, and the text those pieces carried."""
    reply = Reply(chunks=text(model, ANSWER, pieces=20, groq=True).chunks, chunk_delay=0.05, cut_after=7)
    sent = "".join(c["choices"][0]["delta"].get("content") or "" for c in reply.chunks[1:7])
    return reply, sent


@pytest.mark.parametrize("route", ["chat_completions", "responses", "chat"])
def test_a_mid_stream_failure_keeps_what_was_sent_then_the_fallback_answers(server, upstream, route):
    fallback = "The fallback model's answer: 2078.93."
    reply, sent = cut_mid_answer(GROQ_MODEL)
    upstream.script(GROQ_MODEL, reply)
    upstream.script(OPENAI_MODEL, text(OPENAI_MODEL, fallback))
    timed = STREAMS[route](server, "interest?")
    assert sent and timed.text == timed.final == sent + SEAM + fallback
    assert [r["body"]["model"] for r in upstream.requests] == [GROQ_MODEL, OPENAI_MODEL]


@pytest.mark.parametrize("route", ["chat_completions", "responses", "chat"])
def test_a_mid_stream_failure_gives_the_same_content_without_streaming(server, upstream, route):
    fallback = "The fallback model's answer: 2078.93."
    reply, sent = cut_mid_answer(GROQ_MODEL)
    upstream.script(GROQ_MODEL, reply)
    upstream.script(OPENAI_MODEL, text(OPENAI_MODEL, fallback))
    assert non_streamed(server, route, "interest?") == sent + SEAM + fallback


def test_a_mid_stream_failure_ends_the_responses_stream_well_formed(server, upstream):
    reply, _ = cut_mid_answer(GROQ_MODEL)
    upstream.script(GROQ_MODEL, reply)
    upstream.script(OPENAI_MODEL, text(OPENAI_MODEL, "Fallback."))
    timed = stream_responses(server, "interest?")
    kinds = [e.type for e in timed.raw]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in timed.raw] == list(range(len(timed.raw)))
    assert timed.raw[-1].response.model == f"openai:{OPENAI_MODEL}"


# --- include_usage ---------------------------------------------------------------------------------
def test_with_include_usage_every_chunk_before_the_last_says_usage_null(server, upstream):
    upstream.script(GROQ_MODEL, text(GROQ_MODEL, ANSWER, pieces=5, groq=True))
    body = {
        "model": "chatloop",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body, timeout=30) as response:
        lines = list(response.iter_lines())
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")]
    assert len(chunks) >= 3
    for chunk in chunks[:-1]:
        assert "usage" in chunk and chunk["usage"] is None, chunk  # present and null, as OpenAI sends it
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0


# --- what the stream carries stays safe and whole ---------------------------------------------------
@pytest.mark.parametrize("route", ["chat_completions", "responses", "chat"])
def test_a_secret_split_across_deltas_never_reaches_the_client(server, upstream, route):
    """The model echoes the provider key in pieces that each look harmless; the invariant still holds."""
    key = KEYS["groq"]
    leaky = f"Here is the key: {key} and that is all."
    upstream.script(GROQ_MODEL, text(GROQ_MODEL, leaky, pieces=12, groq=True))
    timed = STREAMS[route](server, "what is your key?")
    assert key not in timed.text and key[4:] not in timed.text, timed.deltas
    assert timed.text == timed.final and timed.text.startswith("Here is the key: ")


@pytest.mark.parametrize("path", ["/chat", "/v1/chat/completions", "/v1/responses"])
def test_line_separators_are_escaped_in_the_sse(server, upstream, path):
    """U+2028, U+2029 and U+0085 end a line for some SSE parsers: they travel as JSON escapes, never raw."""
    answer = "one\u2028two\u2029three\u0085four"
    upstream.script(GROQ_MODEL, text(GROQ_MODEL, answer, pieces=2, groq=True))
    body: dict[str, Any] = {"stream": True}
    if path == "/v1/responses":
        body |= {"model": "chatloop", "input": "hi"}
    else:
        body |= {"model": "chatloop", "messages": [{"role": "user", "content": "hi"}]}
    raw = httpx.post(f"{server.root}{path}", json=body, timeout=30).content
    for char in ("\u2028", "\u2029", "\u0085"):
        assert char.encode() not in raw, (char, raw[:400])
    assert b"\\u2028" in raw and b"\\u2029" in raw and b"\\u0085" in raw


@pytest.mark.parametrize("route", ["chat_completions", "responses"])
def test_a_failure_mid_answer_after_a_tool_run_keeps_the_invariant(server, upstream, route):
    reply, sent = cut_mid_answer(GROQ_MODEL)
    upstream.script(GROQ_MODEL, narrated_call(GROQ_MODEL), reply)
    upstream.script(OPENAI_MODEL, text(OPENAI_MODEL, "It grows to 2078.93."))
    timed = STREAMS[route](server, "What is 1000 at 5% compounded yearly for 15 years?")
    assert timed.text == timed.final, (timed.text, timed.final)
    assert timed.text.startswith(PROSE + SEAM + sent) and timed.text.endswith(SEAM + "It grows to 2078.93.")
