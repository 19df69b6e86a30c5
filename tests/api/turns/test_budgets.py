"""Per-caller budgets through the app under uvicorn: the real ``openai`` SDK against the app, the app's chain against
the scripted LLM server (tests/support/fake_llm.py), the budget in the SQLite store file. Every refusal is checked
to have called no model (the fake server counts its requests)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from chatloop.config import Settings
from chatloop.providers.base import ModelResponse, Usage
from chatloop.providers.catalog import Catalog
from chatloop.providers.chain import FallbackChain
from chatloop.tools.base import ToolRegistry
from tests.support.events import rest_event
from tests.support.fake_llm import FakeLLM, error, text
from tests.support.handler import build_runtime, handle, serving
from tests.support.models import ScriptedModel, call, tool_results
from tests.support.repo import ROOT
from tests.support.server import Server, app_server
from tests.support.tools import FakeSearch

FIRST, SECOND = "gpt-4.1-mini", "gpt-4o-mini"
CHAIN = f"openai:{FIRST},openai:{SECOND}"
KEYS = {"openai": "sk-budget-test-0000000000", "groq": None}
HELLO = [{"role": "user", "content": "hello"}]


def budget_settings(tmp_path: Path, **limits: Any) -> Settings:
    return Settings(
        model_chain=CHAIN,
        rate_limit_max_wait_seconds=0.0,
        conversation_store_path=str(tmp_path / "store.sqlite3"),
        **limits,
    )


@pytest.fixture
def serve(fake_llm: FakeLLM, tmp_path: Path) -> Iterator[Any]:
    """``serve(**limits)``: the app over the fake LLM with those BUDGET_* settings (and any other setting)."""
    fake_llm.default = lambda body: text(body["model"], "Hi there!", usage=(20, 5))
    servers: list[Any] = []

    def start(**limits: Any) -> Server:
        context = app_server(budget_settings(tmp_path, **limits), keys=KEYS, registry=ToolRegistry([]))
        servers.append(context)
        return context.__enter__()

    yield start
    for context in servers:
        context.__exit__(None, None, None)


def sdk(server: Server, key: str = "alice") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.base_url,
        api_key="unused",
        max_retries=0,
        timeout=20,
        default_headers={"x-api-key": key},
    )


def usage_of(server: Server, key: str = "alice") -> dict[str, Any]:
    answer = httpx.get(f"{server.base_url}/usage", headers={"x-api-key": key}, timeout=10)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


# --- refusals through the real openai SDK ------------------------------------------------------------------
def test_the_openai_sdk_raises_rate_limit_error_with_readable_headers_and_no_model_is_called(serve, fake_llm):
    server = serve(budget_requests_per_minute=1, budget_tokens_per_day=100_000)
    client = sdk(server)
    raw = client.chat.completions.with_raw_response.create(model="chatloop", messages=HELLO, max_tokens=50)
    assert raw.parse().choices[0].message.content == "Hi there!"
    assert raw.headers["x-ratelimit-limit-requests"] == "1"
    assert raw.headers["x-ratelimit-remaining-requests"] == "0"
    assert raw.headers["x-ratelimit-reset-requests"].endswith("s")
    assert raw.headers["x-ratelimit-limit-tokens"] == "100000"
    assert 0 < int(raw.headers["x-ratelimit-remaining-tokens"]) < 100_000
    calls = len(fake_llm.requests)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50)
    assert refused.value.code == "rate_limit_exceeded"
    headers = refused.value.response.headers
    assert 1 <= int(headers["retry-after"]) <= 60
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert len(fake_llm.requests) == calls  # refused: no model call


def test_a_spent_daily_quota_is_insufficient_quota_on_every_route(serve, fake_llm):
    """A call that used more than its estimate (2,000 prompt tokens) passes the limit by that overshoot; the next
    turn, on any route, is refused."""
    fake_llm.script(FIRST, text(FIRST, "A long answer.", usage=(2000, 5)))
    server = serve(budget_tokens_per_day=1500)
    sdk(server).chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50)
    assert usage_of(server)["usage"]["tokens_today"] == 2005
    calls = len(fake_llm.requests)
    with pytest.raises(openai.RateLimitError) as refused:
        sdk(server).responses.create(model="chatloop", input="hello", max_output_tokens=50, store=False)
    assert refused.value.code == "insufficient_quota" and refused.value.type == "insufficient_quota"
    assert int(refused.value.response.headers["retry-after"]) > 60  # renews at midnight UTC
    answer = httpx.post(
        f"{server.root}/chat", json={"messages": HELLO, "stream": True}, headers={"x-api-key": "alice"}
    )
    assert answer.status_code == 429 and answer.json()["error"]["code"] == "insufficient_quota"
    assert len(fake_llm.requests) == calls


def test_another_callers_budget_is_untouched_and_usage_shows_only_ones_own(serve, fake_llm):
    fake_llm.script(FIRST, text(FIRST, "A long answer.", usage=(2000, 5)))
    server = serve(budget_tokens_per_day=1500)
    sdk(server, "alice").chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50)
    with pytest.raises(openai.RateLimitError):
        sdk(server, "alice").chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50)
    bob = sdk(server, "bob").chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50)
    assert bob.choices[0].message.content == "Hi there!"
    assert usage_of(server, "bob")["usage"]["tokens_today"] == 25
    assert usage_of(server, "alice")["usage"]["tokens_today"] == 2005
    assert usage_of(server, "carol")["usage"]["tokens_today"] == 0
    assert usage_of(server, "carol")["limits"]["tokens_per_day"] == 1500


def test_concurrent_turns_hold_a_slot_until_their_response_is_sent(serve, fake_llm):
    import threading

    slow = text(FIRST, "Slowly.", usage=(20, 5))
    slow.delay = 1.5
    fake_llm.script(FIRST, slow)
    server = serve(budget_concurrent_turns=1)
    first: list[Any] = []
    running = threading.Thread(
        target=lambda: first.append(
            sdk(server).chat.completions.create(model="chatloop", messages=HELLO, max_tokens=20)
        )
    )
    running.start()
    while not fake_llm.requests:  # the first turn is at its model
        threading.Event().wait(0.02)
    with pytest.raises(openai.RateLimitError) as refused:
        sdk(server).chat.completions.create(model="chatloop", messages=HELLO, max_tokens=20)
    assert refused.value.code == "rate_limit_exceeded" and "concurrent turns" in refused.value.message
    running.join(20)
    assert first[0].choices[0].message.content == "Slowly."
    assert usage_of(server)["usage"]["running_turns"] == 0  # given back as the response ended
    again = sdk(server).chat.completions.create(model="chatloop", messages=HELLO, max_tokens=20)
    assert again.choices[0].message.content == "Hi there!"
    assert len(fake_llm.requests) == 2


# --- what goes wrong in other proxies (BerriAI/litellm issues, shared/reference/fleet-budgets-traces.md) ------------
def test_streamed_requests_are_held_to_the_tokens_per_minute_limit(serve, fake_llm):
    """litellm#41610: a per-minute token limit never enforced for streaming requests. Here a stream is reserved
    before its call and settled after it like any other, and the next stream past the limit is a 429."""
    fake_llm.script(FIRST, text(FIRST, "A long streamed answer.", usage=(3000, 50)))
    server = serve(budget_tokens_per_minute=2000)
    client = sdk(server)
    list(client.chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50, stream=True))
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50, stream=True)
    assert refused.value.code == "rate_limit_exceeded"
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60
    assert len(fake_llm.requests) == 1


def test_a_model_with_no_catalog_price_is_charged_the_highest_price_not_skipped(tmp_path):
    """litellm#35524: a request whose cost cannot be estimated skipped the reservation. A model the catalog has no
    price for is reserved and settled at the highest price it lists."""
    model = ScriptedModel(
        lambda r, n: ModelResponse("", content="ok", usage=Usage(1000, 0, 1000)), name="local:x"
    )
    settings = Settings(conversation_store_path=str(tmp_path / "s.sqlite3"), budget_cost_per_day_usd=0.0026)
    with app_server(settings, model=model, registry=ToolRegistry([]), keys={}) as server:
        client = sdk(server)
        client.chat.completions.create(model="chatloop", messages=HELLO, max_tokens=10)
        spent = usage_of(server)["usage"]["cost_today_usd"]
        with pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="chatloop", messages=HELLO, max_tokens=10)
    prices = [
        e["price_per_million_tokens"]["input"]
        for e in Catalog.load().models.values()
        if "price_per_million_tokens" in e
    ]
    assert spent == pytest.approx(
        1000 * max(prices) / 1e6
    )  # 1,000 prompt tokens at the catalog's highest input price
    assert refused.value.code == "insufficient_quota" and model.calls == 1


# --- settling real usage -------------------------------------------------------------------------------------
def test_a_streamed_answer_settles_its_reported_usage_and_releases_the_rest(serve):
    server = serve(budget_tokens_per_day=100_000)
    chunks = list(
        sdk(server).chat.completions.create(model="chatloop", messages=HELLO, stream=True, max_tokens=500)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hi there!"
    used = usage_of(server)["usage"]
    assert used["tokens_today"] == 25 and used["tokens_reserved_today"] == 0


def test_a_failed_call_costs_nothing_and_the_fallback_settles_its_usage(serve, fake_llm):
    fake_llm.script(FIRST, error(500, "server_error", "upstream broke", kind="server_error"))
    server = serve(budget_tokens_per_day=100_000)
    answer = sdk(server).chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50)
    assert answer.model.endswith(SECOND)
    used = usage_of(server)["usage"]
    assert used["tokens_today"] == 25 and used["tokens_reserved_today"] == 0


def test_a_cut_stream_is_charged_for_its_prompt_and_the_text_it_sent(serve, fake_llm):
    fake_llm.script(FIRST, text(FIRST, "This answer is cut off half way through", pieces=6, cut_after=3))
    server = serve(budget_tokens_per_day=100_000)
    sdk(server).chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50)
    used = usage_of(server)["usage"]
    assert used["tokens_today"] > 25  # the fallback's 25 and the cut attempt's prompt and text
    assert used["tokens_reserved_today"] == 0


def test_a_turn_every_model_failed_releases_its_reservation(serve, fake_llm):
    fake_llm.default = lambda body: error(500, "server_error", "down", kind="server_error")
    server = serve(budget_tokens_per_day=100_000)
    with pytest.raises(openai.InternalServerError):
        sdk(server).chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50)
    used = usage_of(server)["usage"]
    assert used["tokens_today"] == 0 and used["tokens_reserved_today"] == 0


# --- a turn refused mid-way ------------------------------------------------------------------------------------
def searcher(request, n):
    """Says what it does, calls search_web, then answers from the result."""
    if not tool_results(request):
        return ModelResponse(
            "",
            content="Let me look that up.",
            tool_calls=[call("search_web", {"query": "budget"}, "call_1")],
            finish_reason="tool_calls",
            usage=Usage(900, 10, 910),
        )
    return ModelResponse("", content="Found it.", usage=Usage(950, 5, 955))


@pytest.mark.parametrize("stream", [False, True])
def test_a_turn_the_budget_stops_mid_way_ends_well_formed_with_the_answer_so_far(tmp_path, stream):
    model = ScriptedModel(searcher, name="scripted:search")
    settings = Settings(conversation_store_path=str(tmp_path / "store.sqlite3"), budget_tokens_per_day=1200)
    with app_server(
        settings, chain=FallbackChain([model]), registry=ToolRegistry([FakeSearch()]), keys={}
    ) as server:
        body = {"messages": [{"role": "user", "content": "search"}], "max_tokens": 100, "stream": stream}
        answer = httpx.post(f"{server.root}/chat", json=body, headers={"x-api-key": "alice"}, timeout=20)
        assert answer.status_code == 200
        if stream:
            frames = [f for f in answer.text.split("\n\n") if f.strip()]
            assert frames[-1].startswith("event: done")
            done = json.loads(frames[-1].partition("data: ")[2])
        else:
            done = answer.json()
    assert model.calls == 1  # the second call was refused before the model was asked
    assert done["stop_reason"] == "budget"
    content = done["message"]["content"]
    assert content.startswith("Let me look that up.") and "usage limit" in content
    assert answer.headers["x-ratelimit-limit-tokens"] == "1200"


def test_openai_streams_refused_mid_way_end_with_their_terminal_events(tmp_path):
    model = ScriptedModel(searcher, name="scripted:search")
    settings = Settings(conversation_store_path=str(tmp_path / "store.sqlite3"), budget_tokens_per_day=1200)
    with app_server(
        settings, chain=FallbackChain([model]), registry=ToolRegistry([FakeSearch()]), keys={}
    ) as server:
        client = sdk(server, "alice")
        chunks = list(
            client.chat.completions.create(
                model="chatloop",
                messages=[{"role": "user", "content": "search"}],
                max_tokens=100,
                stream=True,
            )
        )
        text_so_far = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[-1].choices[0].finish_reason == "stop"
        assert chunks[-1].model_extra["x_chatloop"]["stop_reason"] == "budget"
        assert text_so_far.startswith("Let me look that up.") and "usage limit" in text_so_far
        bob = sdk(server, "bob")  # alice's day is spent: her next turn would be a 429 at once
        with bob.responses.stream(
            model="chatloop", input="search", max_output_tokens=100, store=False
        ) as events:
            kinds = [event.type for event in events]
            final = events.get_final_response()
        assert kinds[-1] == "response.completed"
        assert final.model_extra is not None and final.model_extra["x_chatloop"]["stop_reason"] == "budget"
        assert final.output_text.startswith("Let me look that up.")
    assert model.calls == 2  # one call per turn: each turn's second call was refused


# --- the store down --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["closed", "open"])
def test_the_budget_store_down(fake_llm, tmp_path, mode):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the store's folder should be")
    fake_llm.default = lambda body: text(body["model"], "Hi there!", usage=(20, 5))
    settings = Settings(
        model_chain=CHAIN,
        conversation_store_path=str(blocker / "store.sqlite3"),
        budget_tokens_per_day=1000,
        budget_store_failure=mode,
    )
    with app_server(settings, keys=KEYS, registry=ToolRegistry([])) as server:
        answer = httpx.post(
            f"{server.base_url}/chat/completions", json={"model": "chatloop", "messages": HELLO}, timeout=20
        )
    if mode == "closed":
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "budget_unavailable"
        assert fake_llm.requests == []
    else:
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "Hi there!"
        assert "x-ratelimit-limit-tokens" not in answer.headers  # unmetered


def test_with_no_budget_configured_the_store_is_never_called(serve, monkeypatch):
    import chatloop.store as budget

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a budget store was opened with no budget configured")

    monkeypatch.setattr(budget, "open_ledger", unreachable)
    server = serve()
    answer = sdk(server).chat.completions.with_raw_response.create(model="chatloop", messages=HELLO)
    assert answer.parse().choices[0].message.content == "Hi there!"
    assert not any(k.startswith("x-ratelimit") for k in answer.headers)
    assert server.runtime.budgets() is None
    assert usage_of(server) == {"object": "usage", "metered": False, "limits": None, "usage": None}


# --- on Lambda: the real handler, real-shaped API Gateway events -----------------------------------------------
def emitted_metrics(out: str) -> list[str]:
    names: list[str] = []
    for line in out.splitlines():
        if line.startswith('{"_aws"'):
            for directive in json.loads(line)["_aws"]["CloudWatchMetrics"]:
                names += [m["Name"] for m in directive["Metrics"]]
    return names


def lambda_turn(key_id: str | None = None) -> dict[str, Any]:
    event = rest_event("POST", "/chat", {"messages": HELLO, "stream": False, "max_tokens": 20})
    if key_id is not None:
        event["requestContext"]["identity"]["apiKeyId"] = key_id
    return event


def answering(request: Any, n: int) -> ModelResponse:
    return ModelResponse("", content="ok", usage=Usage(10, 2, 12))


def test_on_lambda_callers_without_identity_share_the_anonymous_budget_and_refusals_are_metrics(tmp_path):
    model = ScriptedModel(answering, name="scripted:ok")
    settings = Settings(conversation_store_path=str(tmp_path / "s.sqlite3"), budget_requests_per_minute=1)
    out = io.StringIO()
    with (
        serving(build_runtime(settings, model=model, registry=ToolRegistry([]))),
        contextlib.redirect_stdout(out),
    ):
        first = handle(lambda_turn())
        second = handle(lambda_turn())  # no identity either: the same anonymous budget
        keyed = handle(lambda_turn("key-1"))  # an API key id: its own budget
    assert [first["statusCode"], second["statusCode"], keyed["statusCode"]] == [200, 429, 200]
    assert json.loads(second["body"])["error"]["code"] == "rate_limit_exceeded"
    assert model.calls == 2
    assert emitted_metrics(out.getvalue()).count("BudgetRefusals") == 1


def test_on_lambda_budget_anonymous_caller_none_leaves_them_unmetered(tmp_path):
    model = ScriptedModel(answering, name="scripted:ok")
    settings = Settings(
        conversation_store_path=str(tmp_path / "s.sqlite3"),
        budget_requests_per_minute=1,
        budget_anonymous_caller="none",
    )
    with serving(build_runtime(settings, model=model, registry=ToolRegistry([]))):
        statuses = [handle(lambda_turn())["statusCode"] for _ in range(3)]
    assert statuses == [200, 200, 200] and model.calls == 3


def test_on_lambda_the_store_down_fails_closed_by_default_with_a_metric(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    model = ScriptedModel(answering, name="scripted:ok")
    settings = Settings(
        conversation_store_path=str(blocker / "s.sqlite3"),
        budget_tokens_per_day=1000,
        lambda_function_name="chatloop-chat",
    )
    out = io.StringIO()
    with (
        serving(build_runtime(settings, model=model, registry=ToolRegistry([]))),
        contextlib.redirect_stdout(out),
    ):
        answer = handle(lambda_turn("key-1"))
    assert answer["statusCode"] == 503 and json.loads(answer["body"])["error"]["code"] == "budget_unavailable"
    assert model.calls == 0
    assert "BudgetStoreFailures" in emitted_metrics(out.getvalue())


# --- make budget: per-caller overrides -------------------------------------------------------------------------


def budget_script(*args: str, env: dict[str, str]) -> dict[str, Any]:
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "scripts/budget.py", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_an_override_set_by_the_budget_script_applies_to_that_caller_only(serve, fake_llm, tmp_path):
    server = serve(budget_tokens_per_day=100_000)
    store = {"CONVERSATION_STORE_PATH": str(tmp_path / "store.sqlite3")}
    caller = usage_of(server, "leaked")["caller"]
    assert caller.startswith("local-key:") and "leaked" not in caller  # the key itself is never shown
    shown = budget_script("--local", "--caller", caller, "--tokens-per-day", "0", env=store)
    assert shown == {"caller": caller, "overrides": {"tokens_per_day": 0}}
    with pytest.raises(openai.RateLimitError):
        sdk(server, "leaked").chat.completions.create(model="chatloop", messages=HELLO, max_tokens=20)
    assert fake_llm.requests == []
    sdk(server, "other").chat.completions.create(model="chatloop", messages=HELLO, max_tokens=20)
    budget_script("--local", "--caller", caller, "--tokens-per-day", "unlimited", env=store)
    assert (
        usage_of(server, "leaked")["limits"]["tokens_per_day"] is None
    )  # the default lifted for this caller
    sdk(server, "leaked").chat.completions.create(model="chatloop", messages=HELLO, max_tokens=20)
    shown = budget_script("--local", "--caller", caller, "--tokens-per-day", "default", env=store)
    assert shown["overrides"] == {}
    assert usage_of(server, "leaked")["limits"]["tokens_per_day"] == 100_000


def test_the_budget_machinery_is_not_imported_at_cold_start():
    """``import app`` (a cold start) loads only the rate-limit middleware; the ledger, the meter and the admission
    load with the first turn that has a budget to keep."""
    import os
    import subprocess
    import sys

    probe = (
        "import sys, app; "
        "print(sorted(m for m in sys.modules if m.startswith(('chatloop.store.budget', 'chatloop.api.turns.budgets', "
        "'chatloop.providers.budgeted'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BUDGET_TOKENS_PER_DAY": "1000"}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_reading_ones_usage_builds_no_chain_and_reads_no_key(tmp_path):
    def no_keys(settings: Settings) -> dict[str, str | None]:
        raise AssertionError("GET /v1/usage read the provider keys")

    settings = Settings(conversation_store_path=str(tmp_path / "s.sqlite3"), budget_tokens_per_day=1000)
    with app_server(settings, keys_loader=no_keys, registry=ToolRegistry([])) as server:
        assert usage_of(server)["limits"]["tokens_per_day"] == 1000


def test_a_spent_day_is_refused_until_midnight_utc_then_answered(serve, fake_llm, tmp_path):
    """The period rollover through the app, its ledger's clock injected."""
    import calendar

    from chatloop.store.budget_sqlite import SQLiteLedger

    now = [calendar.timegm((2026, 11, 27, 23, 59, 0))]
    fake_llm.script(FIRST, text(FIRST, "A long answer.", usage=(2000, 5)))
    server = serve(budget_tokens_per_day=1500)
    book = server.runtime.budgets()
    book.ledger_ = SQLiteLedger(tmp_path / "store.sqlite3", lambda: now[0])
    client = sdk(server)
    client.chat.completions.create(model="chatloop", messages=HELLO, max_tokens=20)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="chatloop", messages=HELLO, max_tokens=20)
    assert refused.value.response.headers["retry-after"] == "60"  # a minute to midnight UTC
    now[0] += 61
    answer = client.chat.completions.with_raw_response.create(model="chatloop", messages=HELLO, max_tokens=20)
    assert answer.parse().choices[0].message.content == "Hi there!"
    assert answer.headers["x-ratelimit-reset-tokens"] == "23h59m59s"  # 00:00:01 UTC
    assert usage_of(server)["usage"]["day"] == "2026-11-28"


def test_a_metered_turn_is_traced_and_its_span_says_the_budget_stopped_it(tmp_path, app_runtime):
    """Budgets and tracing compose: tracing traces the chain's models in place, the budget's wrapper around the same
    chain calls them, so each metered model call is a chat span and the turn's span ends ``budget``."""
    from chatloop.tracing.setup import uninstall
    from tests.support.telemetry import InMemoryTelemetry

    telemetry = InMemoryTelemetry()
    try:
        model = ScriptedModel(searcher, name="groq:llama-3.3-70b-versatile")
        settings = Settings(conversation_store_path=str(tmp_path / "s.sqlite3"), budget_tokens_per_day=1200)
        app_runtime(settings, model=model, registry=ToolRegistry([FakeSearch()]), keys={})
        event = rest_event("POST", "/chat", {"messages": HELLO, "stream": False, "max_tokens": 100})
        answer = handle(event)
        assert answer["statusCode"] == 200 and json.loads(answer["body"])["stop_reason"] == "budget"
        assert len(telemetry.named("chat ")) == 1 and model.calls == 1
        assert (telemetry.agent().attributes or {})["chatloop.stop_reason"] == "budget"
    finally:
        uninstall()


def test_a_background_response_is_metered_for_its_caller_and_gives_its_slot_back(serve, fake_llm):
    import time

    server = serve(budget_tokens_per_day=100_000, budget_concurrent_turns=1)
    client = sdk(server)
    queued = client.responses.create(model="chatloop", input="hello", background=True, max_output_tokens=50)
    assert queued.status == "queued"
    for _ in range(200):
        done = client.responses.retrieve(queued.id)
        if done.status not in ("queued", "in_progress"):
            break
        time.sleep(0.05)
    assert done.status == "completed" and done.output_text == "Hi there!"
    used = usage_of(server)["usage"]
    assert used["tokens_today"] == 25 and used["running_turns"] == 0 and used["tokens_reserved_today"] == 0


def test_a_spent_quota_refuses_compact_too_with_no_model_call(serve, fake_llm):
    """``/v1/responses/compact`` calls a model of the chain: a caller whose day is spent gets the 429 every other
    model-calling route gives, not a free summary; within budget, the summary's usage is counted."""
    server = serve(budget_tokens_per_day=50_000)
    compact = {"model": "chatloop", "input": [{"role": "user", "content": "hello"}]}
    answer = httpx.post(f"{server.base_url}/responses/compact", json=compact, headers={"x-api-key": "alice"})
    assert answer.status_code == 200, answer.text
    assert usage_of(server)["usage"]["tokens_today"] == 25  # the summary's reported usage (20 + 5)
    fake_llm.script(FIRST, text(FIRST, "A long answer.", usage=(60_000, 5)))
    sdk(server).chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50)
    calls = len(fake_llm.requests)
    answer = httpx.post(f"{server.base_url}/responses/compact", json=compact, headers={"x-api-key": "alice"})
    assert answer.status_code == 429 and answer.json()["error"]["code"] == "insufficient_quota"
    assert len(fake_llm.requests) == calls


def test_a_spent_quota_refuses_a_turn_past_its_compact_threshold_before_the_summary_is_written(
    serve, fake_llm
):
    """A turn whose input is past ``compact_threshold`` is compacted before it runs: that summary is a model call
    like the turn's own, so a caller whose day is spent gets the 429 before it, not a free summary."""
    server = serve(budget_tokens_per_day=50_000)
    fake_llm.script(FIRST, text(FIRST, "A long answer.", usage=(60_000, 5)))
    sdk(server).chat.completions.create(model="chatloop", messages=HELLO, max_tokens=50)
    calls = len(fake_llm.requests)
    body = {
        "model": "chatloop",
        "input": "word " * 3000 + "and now a question?",
        "store": False,
        "max_output_tokens": 50,
        "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    }
    answer = httpx.post(f"{server.base_url}/responses", json=body, headers={"x-api-key": "alice"}, timeout=20)
    assert answer.status_code == 429 and answer.json()["error"]["code"] == "insufficient_quota"
    assert len(fake_llm.requests) == calls
