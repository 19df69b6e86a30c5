"""Request bodies of /chat and /v1/chat/completions, validated with pydantic.

``/chat`` rejects unknown fields (a typo such as ``max_iteration`` should not pass silently);
``/v1/chat/completions`` ignores them, as OpenAI clients send many optional fields.

Usage::

    body = ChatBody.model_validate(json.loads(raw))        # raises pydantic.ValidationError
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator

# Each endpoint validates with one schema: build it on first use (cold start), not at import.
LAZY = ConfigDict(defer_build=True)
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class FunctionName(BaseModel):
    model_config = LAZY

    name: StrictStr


class NamedToolChoice(BaseModel):
    model_config = LAZY

    type: Literal["function"]
    function: FunctionName


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice
Temperature = Annotated[float, Field(ge=0, le=2)]
TopP = Annotated[float, Field(gt=0, le=1)]
MaxTokens = Annotated[StrictInt, Field(ge=1, le=1_000_000)]


class _ChatFields(BaseModel):
    """Fields both endpoints take."""

    model_config = LAZY

    messages: list[Any]
    model: StrictStr | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    max_tokens: MaxTokens | None = None


class ChatBody(_ChatFields):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    tools: list[StrictStr] | None = None
    max_iterations: Annotated[StrictInt, Field(ge=1, le=100)] | None = None
    stream: StrictBool = True


class ClientFunction(BaseModel):
    model_config = LAZY

    name: StrictStr
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not TOOL_NAME.match(value):
            raise ValueError("must be 1-64 letters, digits, '_' or '-'")
        return value


class ClientTool(BaseModel):
    model_config = LAZY

    type: Literal["function"]
    function: ClientFunction

    def schema_for_model(self) -> dict[str, Any]:
        return {"type": "function", "function": self.function.model_dump(exclude_none=True)}


class StreamOptions(BaseModel):
    model_config = LAZY

    include_usage: StrictBool = False


class OpenAIChatBody(_ChatFields):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    tools: list[ClientTool] | None = None
    max_completion_tokens: MaxTokens | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: Annotated[StrictInt, Field(ge=1, le=1)] | None = None
