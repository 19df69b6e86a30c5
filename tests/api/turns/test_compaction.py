"""Compaction (issue 37): ``responses.compact`` through the openai SDK, automatic compaction of a stored conversation
past its threshold continued by another model of the chain, a 1,000-turn conversation whose early facts survive,
and sealed items that cannot be changed or used by another caller.

The scripted models act as models do: the summarizer keeps what the user asked to remember and drops small talk;
the answerer answers from the summary it is given (and says so when the fact is not there). Two app copies over one
SQLite store; the continuation goes to the copy that did not compact."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from chatloop.api.items.compaction import SUMMARY_HEADER
from chatloop.api.turns.compaction import SUMMARY_PROMPT
from chatloop.config import Settings
from chatloop.providers.base import ModelRequest, ModelResponse
from chatloop.providers.chain import FallbackChain
from chatloop.tools.base import ToolRegistry
from tests.support.models import ScriptedModel
from tests.support.server import Server, app_server, client

KEYS = {"groq": "gsk_compaction_test_key_0123456789", "openai": None}
FACT = re.compile(r"remember (?:that )?(.+?)(?:\.|$)", re.IGNORECASE)


def notes_and_answers(request: ModelRequest, n: int) -> ModelResponse:
    """Summarizes (the compaction prompt) by keeping each thing the user asked to remember; otherwise answers a
    question about the code word from what it was given: the raw turns, or a summary."""
    messages = request.messages
    if messages[0]["content"] == SUMMARY_PROMPT:
        facts = FACT.findall(messages[-1]["content"])
        notes = "\n".join(f"- The user asked to remember {fact}." for fact in facts) or "- Small talk only."
        return ModelResponse("", notes, finish_reason="stop")
    question = messages[-1]["content"]
    if "code word" not in question:
        return ModelResponse("", "Noted.", finish_reason="stop")
    given = "\n".join(str(m["content"]) for m in messages if m["role"] in ("system", "user"))
    found = re.search(r"the code word is (\w+)", given, re.IGNORECASE)
    return ModelResponse(
        "", f"The code word is {found.group(1)}." if found else "I do not know.", finish_reason="stop"
    )


@pytest.fixture(scope="module")
def models() -> tuple[ScriptedModel, ScriptedModel]:
    return ScriptedModel(notes_and_answers, name="scripted:first"), ScriptedModel(
        notes_and_answers, name="scripted:second"
    )


@pytest.fixture(scope="module")
def copies(tmp_path_factory, models, sandbox) -> Iterator[tuple[Server, Server]]:
    path = str(tmp_path_factory.mktemp("compaction") / "store.sqlite3")
    settings = Settings(conversation_store_path=path, compaction_threshold_tokens=400, max_messages=5000)
    with (
        app_server(settings, chain=FallbackChain(list(models)), registry=ToolRegistry(), keys=KEYS) as first,
        app_server(settings, chain=FallbackChain(list(models)), registry=ToolRegistry(), keys=KEYS) as second,
    ):
        yield first, second


def chatter(turns: int, fact_at: int = 0) -> list[dict[str, Any]]:
    """``turns`` user/assistant turns of small talk; the one at ``fact_at`` tells the code word."""
    items: list[dict[str, Any]] = []
    for i in range(turns):
        said = (
            "Please remember that the code word is PELICAN." if i == fact_at else f"Turn {i}: nice weather."
        )
        items += [{"role": "user", "content": said}, {"role": "assistant", "content": "Noted."}]
    return items


def test_the_openai_sdk_compacts_and_any_copy_continues_from_the_item(copies, models):
    first, second = copies
    compacted = client(first).responses.compact(model="chatloop", input=chatter(6))
    assert compacted.object == "response.compaction"
    *users, item = compacted.output
    assert item.type == "compaction" and item.encrypted_content and "PELICAN" not in item.encrypted_content
    assert [u.role for u in users] == ["user"] * 6
    assert compacted.usage.total_tokens > 0
    # The next request at the other copy: the items it sent back, then a question. The summary stands for them.
    answer = client(second).responses.create(
        model="chatloop",
        input=[
            *[o.model_dump(exclude_none=True) for o in compacted.output],
            {"role": "user", "content": "The code word?"},
        ],
    )
    assert answer.output_text == "The code word is PELICAN."
    given = models[0].requests[-1].messages
    assert given[0]["content"].startswith(SUMMARY_HEADER) and not any(
        "Turn 3" in str(m["content"]) for m in given
    )


def test_a_changed_or_foreign_compaction_item_is_a_400_and_no_model_is_called(copies, models):
    first, second = copies
    item = client(first).responses.compact(model="chatloop", input=chatter(2)).output[-1].model_dump()
    calls = models[0].calls
    sealed = item["encrypted_content"]
    flipped = sealed[:20] + ("A" if sealed[20] != "A" else "B") + sealed[21:]
    for key, changed in [("alice-key", {**item, "encrypted_content": flipped}), ("mallory-key", item)]:
        with pytest.raises(openai.BadRequestError, match="cannot be read"):
            client(second, key).responses.create(
                model="chatloop", input=[changed, {"role": "user", "content": "The code word?"}]
            )
    assert models[0].calls == calls


def test_a_stored_conversation_past_the_threshold_is_compacted_and_another_model_continues(copies, models):
    first, second = copies
    alice = client(first)
    conversation = alice.conversations.create(items=chatter(1)).id
    for i in range(
        8
    ):  # each turn adds to the stored conversation until it crosses COMPACTION_THRESHOLD_TOKENS
        response = alice.responses.create(
            model="scripted:first", conversation=conversation, input=f"Turn {i}: more weather talk, " * 4
        )
        if response.output[0].type == "compaction":
            break
    else:
        pytest.fail("the conversation never crossed the threshold")
    later = client(second).responses.create(
        model="scripted:second", conversation=conversation, input="What is the code word?"
    )
    assert later.output_text == "The code word is PELICAN."
    given = models[1].requests[-1].messages
    assert given[0]["content"].startswith(SUMMARY_HEADER)
    assert not any("Turn 0" in str(m["content"]) for m in given)  # the compacted turns are not sent again


@pytest.mark.slow
def test_a_thousand_turns_stay_answerable_with_the_first_fact_remembered(copies, models):
    first, _ = copies
    turns = chatter(1000, fact_at=0)
    answer = client(first).responses.create(
        model="chatloop",
        input=[*turns, {"role": "user", "content": "What is the code word?"}],
        context_management=[{"type": "compaction", "compact_threshold": 2000}],
        store=False,
    )
    assert answer.output[0].type == "compaction"
    assert answer.output_text == "The code word is PELICAN."
    given = models[0].requests[-1].messages
    assert len(given) <= 3 and json.dumps(given).count("nice weather") == 0


def test_pydantic_ai_parses_the_compaction_item_in_a_stream_and_sends_it_back(copies, models):
    import asyncio

    from pydantic_ai import Agent
    from pydantic_ai.messages import CompactionPart
    from pydantic_ai.models.openai import OpenAICompaction, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    first, second = copies
    history = " ".join(f"Turn {i}: nice weather." for i in range(300))
    prompt = f"Please remember that the code word is PELICAN. {history}"

    def agent(server: Server) -> Agent[None, str]:
        provider = OpenAIProvider(base_url=server.base_url, api_key="unused")
        model = OpenAIResponsesModel("chatloop", provider=provider)
        return Agent(model, capabilities=[OpenAICompaction(token_threshold=1000)])

    async def streamed() -> tuple[list[Any], str]:
        async with agent(first).run_stream(prompt) as run:
            await run.get_output()
        messages = run.all_messages()
        # Continued at the other copy from pydantic-ai's own history: the compaction part goes back as an item.
        later = await agent(second).run("What is the code word?", message_history=messages)
        return messages, later.output

    messages, later = asyncio.run(streamed())
    parts = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, CompactionPart)]
    assert len(parts) == 1 and parts[0].provider_details["encrypted_content"]
    assert later == "The code word is PELICAN."
    assert models[0].requests[-1].messages[0]["content"].startswith(SUMMARY_HEADER)


def test_a_chat_conversation_past_the_threshold_is_compacted_not_trimmed(copies, models):
    import httpx

    first, second = copies
    conversation = client(first).conversations.create(items=chatter(1)).id

    def ask(server: Server, text: str) -> dict[str, Any]:
        body = {
            "conversation": conversation,
            "messages": [{"role": "user", "content": text}],
            "stream": False,
        }
        response = httpx.post(
            f"{server.root}/chat", json=body, headers={"x-api-key": "alice-key"}, timeout=30
        )
        assert response.status_code == 200, response.text
        return response.json()

    for i in range(8):
        ask(first, f"Turn {i}: more weather talk, " * 4)
    items = client(first).conversations.items.list(conversation, limit=100, order="asc").data
    assert any(i.type == "compaction" for i in items)
    answer = ask(second, "What is the code word?")
    assert answer["message"]["content"] == "The code word is PELICAN."
    given = models[0].requests[-1].messages
    assert given[0]["content"].startswith(SUMMARY_HEADER) and not any(
        "Turn 0" in str(m["content"]) for m in given
    )


def test_compact_follows_a_previous_response_id_chain(copies, models):
    first, second = copies
    alice = client(first)
    earlier = alice.responses.create(
        model="chatloop", input=[*chatter(3), {"role": "user", "content": "Just small talk."}]
    )
    compacted = client(second).responses.compact(
        model="chatloop", previous_response_id=earlier.id, input="bye"
    )
    summary_request = models[0].requests[-1].messages
    assert summary_request[0]["content"] == SUMMARY_PROMPT and "PELICAN" in summary_request[-1]["content"]
    assert [o.type for o in compacted.output][-1] == "compaction"


class SummaryRefuser:
    """Answers questions, but refuses every summary request as too large (a transcript past its request limit)."""

    name = "scripted:refuser"

    def __init__(self) -> None:
        self.answered = 0

    async def stream(self, request: ModelRequest) -> Any:
        from chatloop.providers.failures import RequestTooLarge

        if request.messages[0]["content"] == SUMMARY_PROMPT:
            raise RequestTooLarge("the request is too large", model=self.name)
        self.answered += 1
        yield ModelResponse(
            self.name, content=f"Answered over {len(request.messages)} messages.", finish_reason="stop"
        )


def test_a_summary_no_model_can_write_leaves_the_turn_uncompacted(tmp_path, sandbox):
    model = SummaryRefuser()
    settings = Settings(conversation_store_path=str(tmp_path / "s.sqlite3"), max_messages=5000)
    with app_server(settings, model=model, registry=ToolRegistry(), keys=KEYS) as server:
        sdk = client(server)
        answer = sdk.responses.create(
            model="chatloop",
            input=[*chatter(200), {"role": "user", "content": "And?"}],
            context_management=[{"type": "compaction", "compact_threshold": 1000}],
        )
        assert answer.status == "completed" and answer.output[0].type == "message"
        assert answer.output_text.startswith("Answered over") and model.answered == 1
        with pytest.raises(openai.InternalServerError, match=r"compaction_failed|no model could write"):
            sdk.responses.compact(model="chatloop", input=chatter(2))


def test_a_sealed_summary_opens_only_unchanged_and_for_its_caller():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from chatloop.api.turns.compaction import seal, unseal

    @settings(max_examples=200, deadline=None)
    @given(
        summary=st.text(max_size=200),
        owner=st.text(max_size=20),
        at=st.integers(min_value=0),
        bit=st.integers(0, 7),
    )
    def check(summary: str, owner: str, at: int, bit: int) -> None:
        import base64

        key = b"s" * 32
        sealed = seal(key, owner, {"summary": summary})
        assert unseal(key, owner, sealed)["summary"] == summary
        raw = bytearray(base64.urlsafe_b64decode(sealed))
        raw[at % len(raw)] ^= 1 << bit
        with pytest.raises(ValueError):
            unseal(key, owner, base64.urlsafe_b64encode(bytes(raw)).decode())
        with pytest.raises(ValueError):
            unseal(key, owner + "x", sealed)

    check()
