"""Settings come from the environment, typed; a value the handler cannot use stops it at start, clearly."""

import pytest

from chatloop.config import ConfigError, Settings


def test_defaults():
    s = Settings.from_env({})
    assert (s.max_iterations, s.substantive_answer_chars, s.request_timeout_seconds) == (10, 200, 28.0)
    assert dict(s.tool_caps) == {"execute_javascript": 3} and s.system_prompt_guidance and not s.log_content


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
    assert s.tool_caps == {"execute_javascript": 2, "search_web": 5} and s.request_timeout_seconds == 12.5
    assert s.version == "1.2.3"


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"MAX_ITERATIONS": "ten"}, "MAX_ITERATIONS"),
        ({"MAX_ITERATIONS": "0"}, "between 1 and 100"),
        ({"LOG_CONTENT": "maybe"}, "LOG_CONTENT"),
        ({"TOOL_BUDGETS": "[3]"}, "TOOL_BUDGETS"),
        ({"TOOL_BUDGETS": '{"execute_javascript": 0}'}, "positive"),
    ],
)
def test_unusable_values_fail_at_start(env, words):
    with pytest.raises(ConfigError) as raised:
        Settings.from_env(env)
    assert words in str(raised.value)


def test_sandbox_concurrency_fits_the_memory_budget():
    assert Settings(function_memory_mb=1024).sandbox_concurrency() == 2  # 512 MB share / 256 MB a run
    assert Settings(function_memory_mb=3008).sandbox_concurrency() == 5
    assert (
        Settings(function_memory_mb=1024, js_max_concurrency=8).sandbox_concurrency() == 2
    )  # lowered to fit
    assert Settings(function_memory_mb=1024, js_max_concurrency=1).sandbox_concurrency() == 1
    env = {"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "2048", "SANDBOX_MEMORY_SHARE": "0.25"}
    assert Settings.from_env(env).sandbox_concurrency() == 2
    with pytest.raises(ConfigError, match="JS_MEMORY_MB"):
        Settings.from_env({"JS_MEMORY_MB": "600"})  # more than half of 1024 MB for one run
