"""Near-miss calls: the almost-right JSON small open-weight models write as text (Qwen2.5-Coder 0.5B behind
llama.cpp, Llama 3.2 1B/3B, Hermes fine-tunes) now runs; prose that quotes a call tag stays prose.

Each row is the text a model wrote; the table says which call it meant. The second table is prose that must never
run, nor be cut: it is the answer, said once.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatloop.jsontypes import JSONObject
from chatloop.providers import nearjson
from chatloop.providers.tagcalls import has_tag_call, strip_tag_calls
from chatloop.providers.textcall_formats import find_text_calls, tool_keys
from tests.support.small_models import NEAR_MISSES

JS = "execute_javascript"
SCHEMAS: list[JSONObject] = [
    {
        "type": "function",
        "function": {
            "name": JS,
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}, "timeout_seconds": {"type": "number"}},
                "required": ["code"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
]
TOOLS = tool_keys(SCHEMAS)


@pytest.mark.parametrize(("text", "meant"), [r[1:] for r in NEAR_MISSES], ids=[r[0] for r in NEAR_MISSES])
def test_a_near_miss_call_is_repaired_and_runs(text, meant):
    found = find_text_calls(text, TOOLS)
    assert found is not None, text
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == [meant]


def test_the_table_has_at_least_fifteen_rows():
    assert len(NEAR_MISSES) >= 15


# (id, prose that quotes or names a call, whether the tag in it is a call to cut)
PROSE = [
    (
        "hermes tag in inline code",
        'In Hermes format a call looks like `<tool_call>{"name": "f", "arguments": {}}</tool_call>`, '
        "and the server runs it.",
    ),
    ("hermes tag named in a sentence", "Hermes models wrap each call in <tool_call> tags."),
    (
        "Llama's tag in inline code",
        "Llama 3.1 starts a call with `<|python_tag|>` and ends it with `<|eom_id|>`.",
    ),
    ("Llama's tag named", "The <|python_tag|> token tells the runtime that code follows."),
    (
        "Groq's tag named",
        "Groq's legacy Llama dialect writes <function=name> followed by the JSON arguments.",
    ),
    ("Groq's tag in quotes", "Some models emit '<function=get_weather>' instead of a real call."),
    (
        "a JSON object quoted mid-answer",
        'A call is an object such as {"name": "execute_javascript", "arguments": {"code": "1"}} sent to the API.',
    ),
    (
        "a closed JSON value then more words",
        '{"name": "execute_javascript", "arguments": {"code": "1"}} is what a call looks like.',
    ),
    ("a python fence", "```python\nprint({'name': 'execute_javascript', 'arguments': {}})\n```"),
    ("cut off inside the code string", '{"name": "execute_javascript", "arguments": {"code": "Math.pow(1.05'),
    ("unquoted keys: not JSON a model meant", "{name: execute_javascript, code: 1}"),
    ("a person as JSON", "{'name': 'Alice', 'age': 30,}"),
]


@pytest.mark.parametrize("text", [r[1] for r in PROSE], ids=[r[0] for r in PROSE])
def test_prose_that_quotes_a_call_stays_prose(text):
    assert find_text_calls(text, TOOLS) is None
    assert not has_tag_call(text)
    assert strip_tag_calls(text) == text.strip()  # nothing cut: the sentence is the answer


def test_a_huge_near_miss_is_not_repaired():
    code = "x" * (nearjson.MAX_REPAIR_CHARS + 10)
    text = '{"name": "execute_javascript", "arguments": {"code": "' + code + '",}}'
    assert find_text_calls(text, TOOLS) is None  # json-repair is pure Python: bounded in size, so in time
    raw_newlines = '{"name": "execute_javascript", "arguments": {"code": "' + code + '\n1"}}'
    found = find_text_calls(raw_newlines, TOOLS)  # read by the standard library's lenient mode, at C speed
    assert found is not None and json.loads(found.calls[0].arguments)["code"] == code + "\n1"
    huge = (
        '{"name": "execute_javascript", "arguments": {"code": "' + "x" * nearjson.MAX_LENIENT_CHARS + '\n"}}'
    )
    assert find_text_calls(huge, TOOLS) is None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("{}[]\"':,\\ \nabcname01truefalsenul/*")), max_size=120))
def test_repairing_hostile_text_never_raises(body):
    text = '{"name": ' + body + "}"
    value = nearjson.loads(text)
    assert value is None or isinstance(value, dict | list | str | int | float | bool)
    find_text_calls(text, TOOLS)  # never raises either
