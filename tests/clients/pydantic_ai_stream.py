"""pydantic-ai's streaming runs against the server's ``/v1/responses``, as a user of either major version runs them.

Run as a script by tests/clients/test_responses_stream_items.py, with whichever pydantic-ai is importable (2.x from the
project's dev requirements, or 1.x installed by the test into a folder of its own): ``run_stream`` and
``run_stream_events`` with ``OpenAIResponsesModel``, on a question the server answers with a sandbox run. It prints
one JSON object: the version, each run's output, and the code of each server-side tool call pydantic-ai built from the
stream's deltas.

Usage::

    python tests/clients/pydantic_ai_stream.py http://127.0.0.1:8000/v1 "What is 1000 at 5% ..."
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


async def main(base_url: str, question: str) -> dict[str, Any]:
    import pydantic_ai
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIResponsesModel("chatloop", provider=OpenAIProvider(base_url=base_url, api_key="unused"))
    agent = Agent(model)
    found: dict[str, Any] = {"version": pydantic_ai.__version__}

    async with agent.run_stream(question) as result:
        found["run_stream"] = await result.get_output()
        found["run_stream_codes"] = _codes(result.all_messages())

    events: list[str] = []
    stream: Any = agent.run_stream_events(question)
    if hasattr(stream, "__aenter__"):  # 2.x: a context manager; 1.x: the iterator itself
        async with stream as iterator:
            await _read(iterator, events, found)
    else:
        await _read(stream, events, found)
    found["events"] = events
    return found


async def _read(iterator: Any, events: list[str], found: dict[str, Any]) -> None:
    async for event in iterator:
        events.append(type(event).__name__)
        if type(event).__name__ == "AgentRunResultEvent":
            found["run_stream_events"] = event.result.output
            found["run_stream_events_codes"] = _codes(event.result.all_messages())


def _codes(messages: list[Any]) -> list[Any]:
    """What each server-side tool call in ``messages`` ran (pydantic-ai 1.x: BuiltinToolCallPart; 2.x: Native):
    a code run's code, an MCP call's ``{"tool_name", "tool_args"}``."""
    codes: list[Any] = []
    for message in messages:
        for part in getattr(message, "parts", []):
            if type(part).__name__ in ("NativeToolCallPart", "BuiltinToolCallPart"):
                args = part.args_as_dict()
                if "code" in args:
                    codes.append(args["code"])
                elif "tool_args" in args:
                    codes.append({"tool_name": args.get("tool_name"), "tool_args": args["tool_args"]})
    return codes


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
