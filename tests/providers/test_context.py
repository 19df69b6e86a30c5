"""Fitting long conversations to context windows, before any model is called: a small-window model added through
MODEL_CATALOG_FILE, the real groq SDK, and a scripted upstream that counts tokens its own way and rejects an
over-window request as Groq does (400 context_length_exceeded)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.deadline import Deadline
from chatloop.providers.base import ModelRequest
from chatloop.providers.catalog import Catalog, CatalogError
from chatloop.providers.chain import FallbackChain
from chatloop.providers.failures import ContextTooLong
from chatloop.providers.tokens import TokenEstimator, message_chars
from chatloop.providers.window import EXCERPT_CHARS, Window, fit, fitted, trim
from chatloop.tools.base import ToolRegistry
from chatloop.tools.javascript import ExecuteJavaScriptTool
from tests.support.events import response_body, rest_event
from tests.support.fake_llm import Reply, error, text
from tests.support.handler import handle
from tests.support.models import assert_valid_conversation

SMALL, LARGE = "small-ctx-model", "large-ctx-model"
WINDOW = 4000
UPSTREAM_CHARS_PER_TOKEN = 3.6


def upstream_tokens(body: dict[str, Any]) -> int:
    """The upstream's own count (it is not ours): 3.6 characters a token plus 4 a message, and the tool schemas."""
    chars = sum(
        len(json.dumps(m.get("content") or "")) + len(json.dumps(m.get("tool_calls") or []))
        for m in body["messages"]
    )
    return math.ceil((chars + len(json.dumps(body.get("tools") or []))) / UPSTREAM_CHARS_PER_TOKEN) + 4 * len(
        body["messages"]
    )


def history(turns: int, with_tools: bool = True) -> list[dict[str, Any]]:
    """Earlier turns, each a question, a tool exchange with a long result, and an answer; then the new question."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for n in range(turns):
        messages.append({"role": "user", "content": f"Question {n}: " + "why " * 40})
        if with_tools:
            call = {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "execute_javascript", "arguments": json.dumps({"code": f"{n} + 1"})},
            }
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            result = json.dumps({"result": n + 1, "output": "log line " * 150})
            messages.append(
                {"role": "tool", "tool_call_id": f"call_{n}", "name": "execute_javascript", "content": result}
            )
        messages.append({"role": "assistant", "content": f"Answer {n}: " + "because " * 30})
    messages.append({"role": "user", "content": "And the last question?"})
    return messages


@pytest.fixture
def catalog_file(tmp_path):
    path = tmp_path / "models.json"
    path.write_text(
        json.dumps(
            {
                "models": {
                    f"groq:{SMALL}": {"context_window": WINDOW, "tools": True},
                    f"groq:{LARGE}": {"context_window": WINDOW * 4, "tools": True},
                    "groq:llama-3.3-70b-versatile": {"context_window": 8192},  # one field of a packaged entry
                }
            }
        )
    )
    return str(path)


@pytest.fixture
def upstream(fake_llm):
    llm = fake_llm
    llm.rejected = []

    def answer(body: dict[str, Any]) -> Reply:
        window = WINDOW if body["model"] == SMALL else WINDOW * 4
        used = upstream_tokens(body)
        if used + (body.get("max_tokens") or 0) > window:
            llm.rejected.append(body["model"])
            return error(
                400, "context_length_exceeded", "Please reduce the length of the messages or completion."
            )
        assert_valid_conversation(body["messages"])  # every request the upstream receives
        return text(body["model"], "Short answer.", groq=True, usage=(used, 3))

    llm.default = answer
    return llm


@pytest.fixture
def serve(app_runtime):
    """``serve(catalog_file, chain, sandbox)``: the handler's runtime for ``chain`` with the catalog overlay."""

    def use(catalog_file: str, chain: str, sandbox) -> Runtime:
        settings = Settings(model_chain=chain, model_catalog_file=catalog_file)
        return app_runtime(
            settings,
            registry=ToolRegistry([ExecuteJavaScriptTool(sandbox)]),
            keys={"groq": "gsk_ctx_test_000000000"},
        )

    return use


def chat(messages: list[dict[str, Any]], **extra: Any) -> tuple[int, dict[str, Any]]:
    body = {"messages": messages, "stream": False, "tools": [], **extra}
    response = handle(rest_event("POST", "/chat", body))
    return response["statusCode"], json.loads(response_body(response))


def scaled(fraction: float) -> list[dict[str, Any]]:
    """A history that the upstream counts at ``fraction`` of WINDOW (within 1 %), the answer's reserve (200)
    included: whole earlier turns, then the last question padded to the exact size."""
    target = fraction * WINDOW - 200
    turns = 0
    while upstream_tokens({"messages": history(turns + 1)}) < target * 0.9:
        turns += 1
    messages = history(turns)
    while upstream_tokens({"messages": messages}) < target - 0.01 * WINDOW:
        messages[-1] = {"role": "user", "content": messages[-1]["content"] + " and more"}
    return messages


# --- the catalog overlay ---------------------------------------------------------------------------
def test_model_catalog_file_adds_models_and_overrides_fields(catalog_file):
    catalog = Catalog.load(overlay=catalog_file)
    assert catalog.get(f"groq:{SMALL}").context_window == WINDOW and catalog.get(f"groq:{SMALL}").known
    llama = catalog.get("groq:llama-3.3-70b-versatile")
    assert llama.context_window == 8192 and llama.parallel_tool_calls  # the rest of the packaged entry stays
    assert (
        Catalog.load().get("groq:llama-3.3-70b-versatile").context_window == 131072
    )  # the packaged one is untouched


def test_a_broken_catalog_file_fails_at_start_with_its_name(tmp_path):
    bad = tmp_path / "models.json"
    bad.write_text("{not json")
    with pytest.raises(CatalogError, match="MODEL_CATALOG_FILE"):
        Catalog.load(overlay=str(bad))


# --- the fitting decision (pure) -------------------------------------------------------------------
A, B, C = "groq:a", "groq:b", "openai:c"


@pytest.mark.parametrize(
    ("windows", "allow_trimming", "action", "model", "skipped"),
    [
        ([(A, 8000, 5000), (B, 32000, 5000)], True, "fits", A, ()),
        ([(A, 8000, 8000)], True, "fits", A, ()),  # exactly the window holds it
        ([(A, 8000, 9000), (B, 32000, 9000)], True, "skip", B, (A,)),
        ([(A, 8000, 9000), (B, 8000, 7000)], True, "skip", B, (A,)),  # each model's own calibration
        ([(A, 8000, 9000), (B, None, 9000), (C, 32000, 9000)], True, "skip", B, (A,)),  # unknown: tried
        ([(A, 8000, 40000), (B, 32000, 40000), (C, 16000, 40000)], True, "trim", B, (A, C)),
        ([(A, 32000, 40000), (B, 32000, 40000)], True, "trim", A, (B,)),  # equal windows: the first
        ([(A, 8000, 40000), (B, 32000, 40000)], False, "refuse", B, (A,)),
        ([(A, 8000, 5000)], False, "fits", A, ()),  # nothing to refuse when it holds
    ],
)
def test_fit_decides_which_window_takes_the_conversation(windows, allow_trimming, action, model, skipped):
    fitting = fit([Window(*w) for w in windows], allow_trimming)
    assert (fitting.action, fitting.model, fitting.skipped) == (action, model, skipped)
    _, size, need = next(w for w in windows if w[0] == model)
    assert (fitting.need, fitting.window) == (need, size)
    assert fitting.holds == (action in ("fits", "skip"))
    assert fitting.windows == tuple(Window(*w) for w in windows)  # every input kept


def test_fitting_trims_to_the_chosen_window_or_refuses_without_touching_the_conversation():
    estimator = TokenEstimator()
    request = ModelRequest(messages=history(12), deadline=Deadline.after(10), max_tokens=200)
    needs = estimator.needs(request, [A, B])
    fitting = fit([Window(A, 2000, needs[A]), Window(B, 3000, needs[B])])
    trimmed, report, after = fitted(request, fitting, estimator, needs)
    assert report.action == "trim" and report.model == B and report.skipped == [A] and report.window == 3000
    assert report.trimmed_messages > 0 and report.estimated_tokens <= 3000
    assert len(trimmed.messages) < len(request.messages) and list(after) == [A]  # B is tried whatever it says
    assert_valid_conversation(trimmed.messages)
    refusing = fit([Window(A, 2000, needs[A]), Window(B, 3000, needs[B])], allow_trimming=False)
    with pytest.raises(ContextTooLong, match="trimming is disabled") as refused:
        fitted(request, refusing, estimator, needs)
    assert refused.value.fallback is False and len(request.messages) == len(history(12))


class Named:
    """A chain entry that is never called: ``can_hold`` only reads names and windows."""

    def __init__(self, name: str):
        self.name = name

    async def stream(self, request):  # pragma: no cover - never called
        raise AssertionError("can_hold must not call a model")
        yield


@pytest.mark.parametrize(
    ("entries", "words", "holds", "largest"),
    [
        ([SMALL, LARGE], 100, True, WINDOW),  # the first holds it: its window
        ([SMALL, LARGE], 4_000, True, WINDOW * 4),
        ([SMALL, LARGE], 60_000, False, WINDOW * 4),  # the largest window, for the 413's message
        ([SMALL, "unknown-model"], 60_000, True, WINDOW),  # an unknown window could hold it
    ],
)
def test_the_http_pre_check_asks_the_same_decision(catalog_file, entries, words, holds, largest):
    chain = FallbackChain([Named(f"groq:{e}") for e in entries], catalog=Catalog.load(overlay=catalog_file))
    assert chain.can_hold([{"role": "user", "content": "word " * words}], 200) == (holds, largest)


# --- trimming --------------------------------------------------------------------------------------
def test_trimming_keeps_systems_the_question_and_the_current_turn_whole():
    messages = history(6)
    current = [
        {"role": "user", "content": "Now compute this."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c_now",
                    "type": "function",
                    "function": {"name": "execute_javascript", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c_now", "name": "execute_javascript", "content": "x" * 5000},
    ]
    messages = messages[:-1] + current
    size = lambda ms: sum(message_chars(m) for m in ms)  # noqa: E731
    full = size(messages)
    trimmed = trim(messages, lambda ms: size(ms) <= full * 0.5)
    assert_valid_conversation(trimmed.messages)
    assert (
        trimmed.messages[0]["role"] == "system" and trimmed.messages[-3:] == current
    )  # the current turn untouched
    assert trimmed.shortened == 6 and trimmed.dropped > 0 and size(trimmed.messages) <= full * 0.5
    assert all(
        len(m["content"]) < 2 * EXCERPT_CHARS + 100 for m in trimmed.messages[:-3] if m["role"] == "tool"
    )


def test_shortening_old_tool_results_comes_before_dropping_turns():
    messages = history(3)
    size = lambda ms: sum(message_chars(m) for m in ms)  # noqa: E731
    shortened_size = size(trim(messages, lambda ms: False).messages)  # as far as it goes
    trimmed = trim(messages, lambda ms: size(ms) <= size(messages) - 100)
    assert trimmed.dropped == 0 and trimmed.shortened == 3 and len(trimmed.messages) == len(messages)
    assert shortened_size < size(trimmed.messages)


# --- the whole request, against an upstream that rejects what does not fit -------------------------
@pytest.mark.parametrize("fraction", [0.5, 0.99, 1.01, 3.0])
def test_no_call_is_ever_rejected_for_its_length(catalog_file, upstream, sandbox, fraction, serve):
    serve(catalog_file, f"groq:{SMALL}", sandbox)
    messages = scaled(fraction)
    counted = (upstream_tokens({"messages": messages}) + 200) / WINDOW
    assert abs(counted - fraction) < 0.02 or fraction > 1.5  # the history is the size the case says
    status, data = chat(messages, max_tokens=200)
    assert status == 200 and data["message"]["content"] == "Short answer."
    assert upstream.rejected == []
    context = data["context"]
    if fraction <= 0.5:
        assert context["action"] == "fits" and context["trimmed_messages"] == 0
    if fraction > 1:
        assert context["action"] == "trim" and context["window"] == WINDOW
        sent = upstream.requests[-1]["body"]["messages"]
        assert sent[0]["content"].startswith("You are terse.") and sent[-1] == messages[-1]


def test_a_larger_window_in_the_chain_is_chosen_instead_of_trimming(catalog_file, upstream, sandbox, serve):
    serve(catalog_file, f"groq:{SMALL},groq:{LARGE}", sandbox)
    status, data = chat(scaled(3.0), max_tokens=200)
    assert status == 200 and upstream.rejected == []
    assert data["context"]["action"] == "skip" and data["context"]["skipped_models"] == [f"groq:{SMALL}"]
    assert data["model"] == f"groq:{LARGE}" and data["context"]["trimmed_messages"] == 0
    assert [r["body"]["model"] for r in upstream.requests] == [LARGE]  # no call wasted on the small one


def test_the_estimate_learns_each_models_ratio_from_reported_usage(catalog_file, upstream, sandbox, serve):
    runtime = serve(catalog_file, f"groq:{SMALL}", sandbox)
    estimator: TokenEstimator = runtime.models.chain().health.estimator
    assert estimator.scale == {}
    for n in range(4):
        chat(history(n + 1, with_tools=False), max_tokens=200)
    learned = estimator.scale[f"groq:{SMALL}"]
    request = ModelRequest(messages=history(3, with_tools=False), deadline=None, max_tokens=200)
    truth = upstream_tokens({"messages": request.messages}) + 200
    estimate = estimator.tokens(request, f"groq:{SMALL}")
    assert truth <= estimate <= truth * 1.25  # conservative, and within 25 % of the upstream's own count
    assert learned != 1.0  # it learned how this model counts


def test_a_question_larger_than_every_window_is_a_413_with_no_model_call(
    catalog_file, upstream, sandbox, serve
):
    serve(catalog_file, f"groq:{SMALL},groq:{LARGE}", sandbox)
    status, data = chat([{"role": "user", "content": "word " * 60_000}])
    assert status == 413 and data["error"]["code"] == "context_length_exceeded"
    assert "16000 tokens" in data["error"]["message"]
    assert upstream.requests == []


# --- the estimator against real o200k counts, on text that tokenises badly ----------------------------------------
def adversarial_texts() -> dict[str, str]:
    import base64
    import random

    rng = random.Random(25)  # noqa: S311 (reproducible text, not secrets)
    astral = lambda low, high, n: "".join(chr(rng.randint(low, high)) for _ in range(n))  # noqa: E731
    return {
        "tag characters": astral(0xE0020, 0xE007E, 2000),
        "tags hidden in a sentence": "Please summarise this." + astral(0xE0020, 0xE007E, 800) + " Thanks.",
        "combining marks": "".join(rng.choice("aeiou") + astral(0x300, 0x36F, 4) for _ in range(500)),
        "zalgo": "Z" + astral(0x300, 0x36F, 3000),
        "ZWJ sequences": "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466" * 300,
        "emoji": astral(0x1F300, 0x1FAFF, 1000),
        "spaced digits": " ".join(str(rng.randint(0, 9)) for _ in range(3000)),
        "base64": base64.b64encode(rng.randbytes(3000)).decode(),
        "base64, another": base64.b64encode(rng.randbytes(6000)).decode(),
        "CJK ideographs": astral(0x4E00, 0x9FFF, 2000),
        "CJK prose": "我们今天去公园散步\uff0c天气非常好\u3002" * 100,
        "zero-width spaces": "a\u200b" * 1500,
        "variation selectors": "a\ufe0f" * 1500,
        "control characters": "".join(chr(rng.choice([*range(0, 9), *range(14, 32)])) for _ in range(3000)),
        "mathematical letters": astral(0x1D400, 0x1D7FF, 1000),
        "random astral": astral(0x10000, 0x10FFFF, 1000),
    }


PROSE_TEXTS = {
    "English prose": (
        "The quick brown fox jumps over the lazy dog. It was a bright cold day in April, and the clocks were "
        "striking thirteen. Winston Smith, his chin nuzzled into his breast in an effort to escape the vile wind, "
        "slipped quickly through the glass doors of Victory Mansions, though not quickly enough to prevent a "
        "swirl of gritty dust from entering along with him. "
    )
    * 40,
    "a question and its answer": (
        "Could you explain, in a few sentences, why the sky looks blue at noon? Sunlight scatters off the "
        "molecules of the air, and the shorter blue wavelengths scatter far more than the red ones, so blue "
        "reaches your eyes from every part of the sky. "
    )
    * 60,
}


def o200k_counts(texts: list[str]) -> list[int]:
    import shutil
    import subprocess
    from pathlib import Path

    node = shutil.which("node")
    if node is None or not Path("node_modules/gpt-tokenizer").is_dir():
        pytest.skip("node and the gpt-tokenizer package are needed for real o200k counts")
    conversations = [[{"role": "user", "content": t}] for t in texts]
    out = subprocess.run(
        [node, "tests/clients/count_tokens.mjs"],
        input=json.dumps(conversations),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def test_the_estimate_is_never_under_real_counts_for_text_that_tokenises_badly():
    """Once under by 3x for tag characters, 2.5x for combining marks, 2x for spaced digits, and under for ZWJ
    sequences, base64, CJK and emoji: an over-long request went to the model instead of being trimmed."""
    texts = adversarial_texts()
    real = o200k_counts(list(texts.values()))
    estimator = TokenEstimator()
    for (name, sample), count in zip(texts.items(), real, strict=True):
        estimate = estimator.prompt_tokens([{"role": "user", "content": sample}], None, "any:model")
        assert estimate >= count, f"{name}: estimated {estimate}, o200k counts {count}"


def test_the_estimate_of_ordinary_prose_is_at_most_about_40_percent_over():
    """~40 %: the rates keep 10 % of safety over letters that o200k packs 4-5 to a token (1.39-1.44 measured)."""
    real = o200k_counts(list(PROSE_TEXTS.values()))
    estimator = TokenEstimator()
    for (name, sample), count in zip(PROSE_TEXTS.items(), real, strict=True):
        estimate = estimator.prompt_tokens([{"role": "user", "content": sample}], None, "any:model")
        assert count <= estimate <= 1.45 * count, f"{name}: estimated {estimate}, o200k counts {count}"


def test_a_model_that_counts_less_never_makes_the_estimate_reckless():
    estimator = TokenEstimator()
    request = ModelRequest(messages=[{"role": "user", "content": "hello " * 1000}], deadline=None)
    estimator.observe("any:model", request, 10)  # a provider reporting far fewer tokens than the estimate
    tags = [{"role": "user", "content": "".join(chr(0xE0041 + i % 26) for i in range(1000))}]
    assert estimator.prompt_tokens(tags, None, "any:model") >= 3_700  # o200k: ~3,680 for these
