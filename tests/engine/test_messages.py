"""Client conversations: accepted shapes are normalised; broken ones are a clear error naming the index."""

import pytest

from chatloop.engine.messages import ConversationError, normalize_conversation


def assistant_call(call_id="c1", flat=False, arguments='{"code": "1+1"}'):
    if flat:
        return {"id": call_id, "name": "execute_javascript", "arguments": arguments}
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "execute_javascript", "arguments": arguments},
    }


def test_flat_and_nested_tool_calls_normalise_to_nested():
    for flat in (False, True):
        out = normalize_conversation(
            [
                {"role": "user", "content": "1+1"},
                {"role": "assistant", "content": None, "tool_calls": [assistant_call(flat=flat)]},
                {"role": "tool", "tool_call_id": "c1", "content": '{"result": 2}'},
            ]
        )
        assert out[1] == {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "execute_javascript", "arguments": '{"code": "1+1"}'},
                }
            ],
        }
        assert out[2]["name"] == "execute_javascript"  # filled from the call


def test_arguments_given_as_an_object_become_a_json_string():
    out = normalize_conversation(
        [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"a": 1}}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
    )
    assert out[1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'


def test_text_parts_are_joined_and_developer_becomes_system():
    out = normalize_conversation(
        [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        ]
    )
    assert out == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "ab"}]


def test_exact_duplicate_tool_messages_are_dropped():
    tool = {"role": "tool", "tool_call_id": "c1", "content": '{"result": 2}'}
    out = normalize_conversation(
        [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [assistant_call()]},
            tool,
            dict(tool),
        ]
    )
    assert [m["role"] for m in out] == ["user", "assistant", "tool"]


def test_legacy_call_text_is_removed_from_history():
    out = normalize_conversation(
        [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": 'ok <function=search>{"q":1}</function>'},
            {"role": "user", "content": "y"},
        ]
    )
    assert out[1]["content"] == "ok"


@pytest.mark.parametrize(
    ("messages", "index", "words"),
    [
        ([], None, "non-empty list"),
        ("hello", None, "non-empty list"),
        ([{"role": "wizard", "content": "x"}], 0, "unknown role"),
        (
            [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "zz", "content": "r"}],
            1,
            "orphan tool message",
        ),
        ([{"role": "user", "content": None}], 0, "must not be null"),
        ([{"role": "user", "content": 42}], 0, "must be a string"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            0,
            "needs image_url.url",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]},
            ],
            1,
            "needs an id",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [assistant_call()]},
                {"role": "user", "content": "next"},
            ],
            1,
            "not answered",
        ),
        (
            [{"role": "user", "content": "x"}, {"role": "assistant", "content": None}],
            1,
            "content or tool_calls",
        ),
        (["just a string"], 0, "must be an object"),
        (
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [assistant_call()]},
                {"role": "tool", "tool_call_id": "c1", "content": "a"},
                {"role": "tool", "tool_call_id": "c1", "content": "b"},
            ],
            3,
            "answered twice",
        ),
    ],
)
def test_broken_conversations_name_the_message(messages, index, words):
    with pytest.raises(ConversationError) as err:
        normalize_conversation(messages)
    assert err.value.index == index and words in str(err.value)
    if index is not None:
        assert f"messages[{index}]" in str(err.value)
