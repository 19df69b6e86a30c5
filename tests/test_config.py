"""Settings come from the environment, typed; a value the handler cannot use stops it at start, clearly."""

import pytest

from chatloop.config import ConfigError, Settings


def test_defaults():
    s = Settings.from_env({})
    assert (s.max_iterations, s.substantive_answer_chars, s.request_timeout_seconds) == (10, 200, 28.0)
    assert (
        dict(s.tool_budgets) == {"execute_javascript": 3} and s.system_prompt_guidance and not s.log_content
    )


def test_values_are_parsed_by_type():
    s = Settings.from_env(
        {
            "MAX_ITERATIONS": "4",
            "LOG_CONTENT": "yes",
            "SYSTEM_PROMPT_GUIDANCE": "0",
            "TOOL_BUDGETS": '{"execute_javascript": 2, "search_web": 5}',
            "REQUEST_TIMEOUT_SECONDS": "12.5",
            "MODEL_CHAIN": "groq:openai/gpt-oss-120b, openai:gpt-4.1-mini",
            "APP_VERSION": "1.2.3",
        }
    )
    assert s.max_iterations == 4 and s.log_content and not s.system_prompt_guidance
    assert s.tool_budgets == {"execute_javascript": 2, "search_web": 5} and s.request_timeout_seconds == 12.5
    assert s.version == "1.2.3"


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"MAX_ITERATIONS": "ten"}, "MAX_ITERATIONS"),
        ({"MAX_ITERATIONS": "0"}, "between 1 and 100"),
        ({"LOG_CONTENT": "maybe"}, "LOG_CONTENT"),
        ({"TOOL_BUDGETS": "[3]"}, "TOOL_BUDGETS"),
        ({"TOOL_BUDGETS": '{"execute_javascript": 0}'}, "positive"),
        (
            {"MODEL_CHAIN": "groq:llama-3.3-70b-versatile,gpt-4o"},
            "'gpt-4o' is not of the form provider:model",
        ),
    ],
)
def test_unusable_values_fail_at_start(env, words):
    with pytest.raises(ConfigError) as raised:
        Settings.from_env(env)
    assert words in str(raised.value)
