"""Tool calls written as text: one table per format (well-formed, with words before, malformed, truncated), the
answers that must never be taken for calls, and the stream filter that keeps pseudo calls out of deltas."""

from __future__ import annotations

import json

import pytest

from chatloop.engine.textfilter import TextCallFilter
from chatloop.providers.tagcalls import has_tag_call, strip_tag_calls, tag_call_at
from chatloop.providers.textcall_formats import find_text_calls

JS = "execute_javascript"
TOOLS = {JS: {"code", "timeout_seconds"}, "get_weather": {"city"}}
CODE = "Math.round(10000 * 1.05 ** 15 * 100) / 100"
ARGS = json.dumps({"code": CODE})

# (id, text, format, [(name, arguments)], prefix)
RECOVERED = [
    (
        "hermes",
        f'<tool_call>\n{{"name": "{JS}", "arguments": {ARGS}}}\n</tool_call>',
        "hermes",
        [(JS, {"code": CODE})],
        "",
    ),
    (
        "hermes with words before",
        f'Let me compute that.\n<tool_call>{{"name": "{JS}", "arguments": {ARGS}}}</tool_call>',
        "hermes",
        [(JS, {"code": CODE})],
        "Let me compute that.",
    ),
    (
        "hermes, two calls",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>',
        "hermes",
        [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})],
        "",
    ),
    (
        "hermes, arguments as a JSON string",
        f'<tool_call>{{"name": "{JS}", "arguments": {json.dumps(ARGS)}}}</tool_call>',
        "hermes",
        [(JS, {"code": CODE})],
        "",
    ),
    (
        "hermes, unclosed",
        f'<tool_call>{{"name": "{JS}", "arguments": {ARGS}}}',
        "hermes",
        [(JS, {"code": CODE})],
        "",
    ),
    (
        "python_tag",
        f'<|python_tag|>{{"name": "{JS}", "parameters": {ARGS}}}<|eom_id|>',
        "python_tag",
        [(JS, {"code": CODE})],
        "",
    ),
    (
        "python_tag, two calls",
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}; '
        '{"name": "get_weather", "parameters": {"city": "Rome"}}',
        "python_tag",
        [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})],
        "",
    ),
    ("function tag", f"<function={JS}>{ARGS}</function>", "function_tag", [(JS, {"code": CODE})], ""),
    (
        "function tag, brace inside",
        f"<function={JS}{ARGS}></function>",
        "function_tag",
        [(JS, {"code": CODE})],
        "",
    ),
    (
        "fenced json",
        f'I will run this:\n```json\n{{"name": "{JS}", "arguments": {ARGS}}}\n```',
        "fenced_json",
        [(JS, {"code": CODE})],
        "I will run this:",
    ),
    (
        "fenced, no language",
        f'```\n{{"name": "{JS}", "arguments": {ARGS}}}\n```',
        "fenced_json",
        [(JS, {"code": CODE})],
        "",
    ),
    ("bare json", f'{{"name": "{JS}", "arguments": {ARGS}}}', "json", [(JS, {"code": CODE})], ""),
    (
        "bare json, parameters",
        f'{{"name": "{JS}", "parameters": {ARGS}}}',
        "json",
        [(JS, {"code": CODE})],
        "",
    ),
    (
        "bare json list",
        '[{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]',
        "json",
        [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})],
        "",
    ),
    (
        "openai tool_calls entry as text",
        f'{{"type": "function", "function": {{"name": "{JS}", "arguments": {json.dumps(ARGS)}}}}}',
        "json",
        [(JS, {"code": CODE})],
        "",
    ),
    (
        "flat json (seen from Qwen2.5-Coder)",
        f'{{"name": "{JS}", "code": {json.dumps(CODE)}, "timeout_seconds": 10}}',
        "flat_json",
        [(JS, {"code": CODE, "timeout_seconds": 10})],
        "",
    ),
    (
        "name then json (Groq failed_generation)",
        f"{JS}{ARGS}</function>",
        "name_json",
        [(JS, {"code": CODE})],
        "",
    ),
    (
        "a tool that was never offered, shaped like a call",
        '```json\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n```',
        "fenced_json",
        [("calculator", {"expression": "2+2"})],
        "",
    ),
]


@pytest.mark.parametrize(
    ("text", "fmt", "calls", "prefix"), [r[1:] for r in RECOVERED], ids=[r[0] for r in RECOVERED]
)
def test_each_format_is_recovered(text, fmt, calls, prefix):
    found = find_text_calls(text, TOOLS)
    assert found is not None and found.format == fmt
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == calls
    assert found.prefix == prefix
    assert len({c.id for c in found.calls}) == len(calls) and all(
        c.id.startswith("call_text_") for c in found.calls
    )


NOT_CALLS = [
    ("a JSON example of a person", '{"name": "Alice", "age": 30, "email": "alice@example.com"}'),
    ("a fenced JSON example", 'Here is one:\n```json\n{"name": "Alice", "age": 30}\n```'),
    ("prose naming the tool", f"I used {JS} to compute it: the answer is 20789.28."),
    (
        "JSON in the middle of an answer",
        'The object {"name": "x", "arguments": {}} is a call shape. Hope that helps!',
    ),
    ("a python code block", "```python\nprint({'name': 'x'})\n```"),
    ("flat json with a key the tool lacks", f'{{"name": "{JS}", "code": "1", "color": "red"}}'),
    ("a list of numbers", "[1, 2, 3]"),
    ("empty", ""),
    ("tool name then JSON for an unknown tool", 'calculator{"x": 1}'),
]


@pytest.mark.parametrize("text", [r[1] for r in NOT_CALLS], ids=[r[0] for r in NOT_CALLS])
def test_answers_are_not_taken_for_calls(text):
    assert find_text_calls(text, TOOLS) is None
    assert not has_tag_call(text)


MALFORMED = [
    ("hermes, truncated JSON", f'<tool_call>{{"name": "{JS}", "arguments": {{"code": "1 +'),
    ("hermes, not JSON", "<tool_call>execute_javascript(code='1+1')</tool_call>"),
    ("hermes, no name", '<tool_call>{"arguments": {"code": "1"}}</tool_call>'),
    ("python_tag, Llama's builtin syntax", '<|python_tag|>brave_search.call(query="weather")'),
    ("function tag, not JSON", f"<function={JS}{{code: 1}}>"),
    ("function tag, truncated", f'<function={JS}>{{"code": "1 +'),
]


@pytest.mark.parametrize("text", [r[1] for r in MALFORMED], ids=[r[0] for r in MALFORMED])
def test_malformed_tagged_calls_are_not_calls_but_are_cut_from_the_text(text):
    assert find_text_calls(text, TOOLS) is None
    assert has_tag_call(text)
    assert strip_tag_calls("Working on it. " + text) == "Working on it."


def test_offered_only_refuses_other_tools():
    text = '<tool_call>{"name": "calculator", "arguments": {"x": 1}}</tool_call>'
    assert find_text_calls(text, TOOLS) is not None
    assert find_text_calls(text, TOOLS, offered_only=True) is None


def test_a_batch_with_one_bad_call_recovers_none():
    text = (
        f'<tool_call>{{"name": "{JS}", "arguments": {ARGS}}}</tool_call><tool_call>{{"oops": 1}}</tool_call>'
    )
    assert find_text_calls(text, TOOLS) is None


def test_nothing_is_recovered_when_no_tool_is_offered():
    assert find_text_calls(f'{{"name": "{JS}", "arguments": {ARGS}}}', {}) is None


# --- the stream filter --------------------------------------------------------------------------------
def stream(pieces, hold_json=True, judged=None):
    box = TextCallFilter(hold_json)
    shown = [box.feed(p) for p in pieces]
    shown.append(box.finish("".join(pieces) if judged is None else judged))
    return shown


def test_plain_text_is_never_held():
    pieces = ["The answer ", "is 42", ", as computed."]
    assert stream(pieces)[:-1] == pieces


@pytest.mark.parametrize(
    "pieces",
    [
        ["Let me check. <tool", '_call>{"name": ', '"execute_javascript", "arguments": {}}</tool_call>'],
        ["<|python", '_tag|>{"name": "f", "parameters": {}}'],
        ["Sure <func", 'tion=execute_javascript>{"code": "1"}</function>'],
        ['{"name": "execute', '_javascript", "code": "1"}'],
        ["  [", '{"name": "f", "arguments": {}}]'],
        ["Running:\n``", "`json\n", '{"name": "f", "arguments": {}}\n```'],
        ['Calling {"na', 'me": "f", "arguments": {}}'],
    ],
    ids=["hermes", "python_tag", "function", "leading json", "leading list", "fence", "mid-text object"],
)
def test_a_call_is_held_from_where_it_starts_and_dropped_when_recovered(pieces):
    text = "".join(pieces)
    start = min(i for i in (text.find(s) for s in ("<", "{", "[", "```")) if i >= 0)
    prefix = text[:start]
    shown = stream(pieces, judged=prefix.strip())
    assert "".join(shown) == prefix
    assert not any(
        mark in "".join(shown) for mark in ("<tool_call>", "python_tag", "function=", '"name"', "```")
    )


def test_held_text_is_released_when_it_turns_out_to_be_an_answer():
    pieces = ['{"name": "Alice",', ' "age": 30}']
    shown = stream(pieces)
    assert shown[:2] == ["", ""] and "".join(shown) == "".join(pieces)


def test_a_fence_for_another_language_is_released_after_its_first_line():
    shown = stream(["Here:\n```py", "thon\nprint(1)\n```"])
    # The opening fence waits for its language line; the closing one could open a new fence until the end.
    assert shown == ["Here:\n", "```python\nprint(1)\n", "```"]


def test_without_tools_only_tags_are_held():
    pieces = ['{"name": "x", "arguments": {}}', " and <tool_call>{}"]
    shown = stream(pieces, hold_json=False, judged='{"name": "x", "arguments": {}} and')
    assert shown[0] == pieces[0] and "<tool_call>" not in "".join(shown)


def test_nothing_comes_out_that_was_not_streamed():
    assert TextCallFilter(True).finish("a whole answer the model never streamed") == ""


# --- issue #41: repeated blocks, and tags prose quotes ----------------------------------------------------------
_CALL = f'{{"name": "{JS}", "arguments": {ARGS}}}'
_BLOCK = f"```json\n{_CALL}\n```"
# (id, text, [(name, arguments)], prefix)
REPEATED = [
    ("the same fenced call three times", "\n\n".join([_BLOCK] * 3), [(JS, {"code": CODE})], ""),
    (
        "twice, words before",
        "I will run it.\n" + _BLOCK + "\n" + _BLOCK,
        [(JS, {"code": CODE})],
        "I will run it.",
    ),
    (
        "two different fenced calls",
        _BLOCK + '\n```json\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```',
        [(JS, {"code": CODE}), ("get_weather", {"city": "Oslo"})],
        "",
    ),
    (
        "a python block, then a fenced call",
        "```python\nx = 1\n```\n\n" + _BLOCK,
        [(JS, {"code": CODE})],
        "```python\nx = 1\n```",
    ),
    (
        "the same hermes call twice",
        f"<tool_call>{_CALL}</tool_call>\n<tool_call>{_CALL}</tool_call>",
        [(JS, {"code": CODE})],
        "",
    ),
]


@pytest.mark.parametrize(("text", "calls", "prefix"), [r[1:] for r in REPEATED], ids=[r[0] for r in REPEATED])
def test_calls_written_again_in_one_reply_are_one_call(text, calls, prefix):
    found = find_text_calls(text, TOOLS)
    assert found is not None
    assert [(c.name, json.loads(c.arguments)) for c in found.calls] == calls
    assert found.prefix == prefix


QUOTED_TAGS = [
    (
        "hermes in inline code",
        "In Hermes format a call looks like `<tool_call>…</tool_call>` and you should never run it.",
    ),
    (
        "hermes, a call body, words after",
        f"A call looks like <tool_call>{_CALL}</tool_call> and you should never run it.",
    ),
    ("hermes, no body, words after", "A call looks like <tool_call>{...}</tool_call> and is never run."),
    (
        "hermes, in a fence prose follows",
        f"It looks like this:\n```\n<tool_call>\n{_CALL}\n</tool_call>\n```\nNever run it.",
    ),
    (
        "hermes, in an xml fence prose follows",
        "Like this:\n```xml\n<tool_call>{...}</tool_call>\n```\nThat is all.",
    ),
    ("python_tag, no body", "Llama writes <|python_tag|>{...} before a call, and you never run it."),
    ("python_tag, a call body, words after", f"Llama starts with <|python_tag|>{_CALL} and a stop token."),
    ("python_tag in inline code", "Llama writes `<|python_tag|>` first."),
    ("function tag, no body", "Groq writes <function=name>{...}</function> tags, and you never run them."),
    (
        "function tag, a call body, words after",
        f'Groq writes <function={JS}>{{"code": "1"}}</function> in text. Odd.',
    ),
    ("function tag, inline, dots", "Groq's `<function=...>` tags are legacy."),
    ("function tag, brace form, words after", f'Groq writes <function={JS}{{"code": "1"}}> and stops. Odd.'),
    (
        "hermes on its own line, no call body, words after",
        "Like this:\n<tool_call>{...}</tool_call>\nNever run it.",
    ),
]


@pytest.mark.parametrize("text", [r[1] for r in QUOTED_TAGS], ids=[r[0] for r in QUOTED_TAGS])
def test_a_tag_prose_quotes_is_neither_a_call_nor_cut(text):
    assert find_text_calls(text, TOOLS) is None
    assert not has_tag_call(text)
    assert tag_call_at(text) == -1
    assert strip_tag_calls(text) == text


TAG_CALLS_AT_THE_END = [
    ("hermes, closed, then a stop token", f"Sure.\n<tool_call>{_CALL}</tool_call><|eot_id|>", 6),
    ("python_tag, cut short", f'Sure.\n<|python_tag|>{{"name": "{JS}", "parameters": {{"code": "1 +', 6),
    (
        "two hermes calls, the first followed by the second",
        f"<tool_call>{{}}</tool_call>\n<tool_call>{_CALL}",
        0,
    ),
    ("function tag, brace form", f'<function={JS}{{"code": 1}}>', 0),
    (
        "hermes on its own line, a call, then chatter",
        f"Sure.\n<tool_call>{_CALL}</tool_call>\nLet me know.",
        6,
    ),
    (
        "function tag on its own line, a call, then chatter",
        f'<function={JS}>{{"code": "1"}}</function> Done.',
        0,
    ),
]


@pytest.mark.parametrize(
    ("text", "at"), [r[1:] for r in TAG_CALLS_AT_THE_END], ids=[r[0] for r in TAG_CALLS_AT_THE_END]
)
def test_a_tag_a_call_ends_the_reply_with_is_still_a_call(text, at):
    assert tag_call_at(text) == at
    assert has_tag_call(text)
