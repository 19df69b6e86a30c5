"""OpenAI's contract as the client tests check it (tests/clients/test_openai_contract.py, tests/clients/test_responses_stream_items.py):
the chain they run (a listed Groq model, an OpenAI-compatible model the catalog does not list, and a listed one with
json_schema), the compound-interest question, the code the model runs and the total it gets, and the scripted model
on the wire. The app under uvicorn with that chain and its upstream are the ``server``, ``upstream`` and
``store_path`` fixtures of tests/conftest.py.

The scripted model behaves as real ones do when the API enforces ``tool_choice``: it computes with
execute_javascript when offered it, then answers in text unless the request forces a call to a client tool.

Usage::

    def test_x(server, upstream):
        response = client_of(server).responses.create(model="chatloop", input=QUESTION)
        assert response.output_text == ANSWER
"""

from __future__ import annotations

import json
import re
from typing import Any

import openai
from pydantic import BaseModel

from tests.support.fake_llm import Reply, text, tool_calls
from tests.support.server import Server

LLAMA = "llama-3.3-70b-versatile"  # listed: parallel tool calls, json_object only
GPT_OSS = "openai/gpt-oss-120b"  # listed: json_schema
UNLISTED = "acme-unlisted-1"  # an OpenAI-compatible model the catalog has never heard of
CHAIN = f"groq:{LLAMA},openai:{UNLISTED},groq:{GPT_OSS}"
KEYS = {"groq": "gsk_clients_contract_0000000000", "openai": "sk-clients-contract-0000000000"}

QUESTION = "What is 1000 at 5% compounded yearly for 15 years?"
CODE = "const total = Math.round(1000 * 1.05 ** 15 * 100) / 100;\nconsole.log(total);\ntotal"
TOTAL = 2078.93
ANSWER = f"1000 at 5% compounded yearly for 15 years grows to {TOTAL}."


class Interest(BaseModel):
    principal: float
    rate_percent: float
    years: int
    total: float


EXPECTED = Interest(principal=1000, rate_percent=5, years=15, total=TOTAL)


def last_total(messages: list[dict[str, Any]]) -> float | None:
    """The number the last tool result carries (the sandbox's run), whatever the result's JSON shape."""
    for m in reversed(messages):
        if m["role"] == "tool":
            found = re.findall(r"\d+\.\d+", str(m["content"]))
            return float(found[-1]) if found else None
    return None


def wire_model(body: dict[str, Any]) -> Reply:
    """Computes with execute_javascript when offered it and not yet run; calls a client tool only when the request
    forces one (``required`` or named), as an API that enforces tool_choice makes a model do; otherwise answers in
    text, or in JSON for a json_schema response_format. "twice" in the question: a run that fails, then one that
    computes 14."""
    model, messages = body["model"], body["messages"]
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    runs = [m for m in messages if m["role"] == "tool"]
    question = next((str(m["content"]) for m in reversed(messages) if m["role"] == "user"), "")
    choice = body.get("tool_choice")
    if "execute_javascript" in offered and "twice" in question and len(runs) < 2:
        code = json.dumps({"code": "null.x" if not runs else "2 * 7"})  # a failed run leaves the tool offered
        return tool_calls(model, [(f"call_js_{len(runs) + 1}", "execute_javascript", code)], groq=True)
    if "execute_javascript" in offered and "compounded" in question and not runs:
        return tool_calls(model, [("call_js_1", "execute_javascript", json.dumps({"code": CODE}))], groq=True)
    client = [name for name in offered if name != "execute_javascript"]
    if client and (choice == "required" or isinstance(choice, dict)):
        name = choice["function"]["name"] if isinstance(choice, dict) else client[0]
        values = {"principal": 1000, "rate_percent": 5, "years": 15, "total": last_total(messages)}
        return tool_calls(model, [("call_client_1", name, json.dumps(values))], groq=True)
    if (body.get("response_format") or {}).get("type") == "json_schema":
        return text(model, EXPECTED.model_dump_json(), groq=True)
    if runs:
        return text(
            model, f"1000 at 5% compounded yearly for 15 years grows to {last_total(messages)}.", groq=True
        )
    return text(model, "Hello from the wire.", groq=True)


def client_of(server: Server) -> openai.OpenAI:
    """The openai SDK against ``server``, no retries (a retry would hide a failure of the contract)."""
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=60)
