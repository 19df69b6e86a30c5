"""Request bodies of /chat and /v1/chat/completions, validated with pydantic, and what /v1/responses shares with them
(``api.openai.responses.schemas`` holds its own).

``/chat`` rejects unknown fields (a typo such as ``max_iteration`` should not pass silently);
``/v1/chat/completions`` ignores them, as OpenAI clients send many optional fields.

Usage::

    body = ChatBody.model_validate(json.loads(raw))        # raises pydantic.ValidationError
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from chatloop.api.turns.schema_checks import check_schema
from chatloop.jsontypes import JSONObject

# Each endpoint validates with one schema: build it on first use (cold start), not at import.
LAZY = ConfigDict(defer_build=True)
CLIENT_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What a client's function tool may be called (OpenAI's rule); ``TOOL_NAME`` is the built-in tool's own name."""


def _tool_name(value: str) -> str:
    if not CLIENT_TOOL_NAME.match(value):
        raise ValueError("must be 1-64 letters, digits, '_' or '-'")
    return value


ToolName = Annotated[StrictStr, AfterValidator(_tool_name)]
"""A function tool's name, as OpenAI takes it: checked wherever a client names a tool (chat and Responses alike)."""


def _client_schema(value: dict[str, object]) -> dict[str, object]:
    check_schema(value)
    return value


ClientSchema = Annotated[dict[str, object], AfterValidator(_client_schema)]
"""A JSON schema a client sends (tool ``parameters``, a ``json_schema`` format): its bounds checked (schema_checks)."""


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

    messages: list[object]
    """Checked by the engine's ``normalize_conversation`` (its rules name ``messages[i]``), not here."""
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
    conversation: StrictStr | None = None
    """A stored conversation to continue (``conv_…``): ``messages`` then holds only the new message(s)."""
    approvals: list[ChatApproval] | None = None
    """Answers to the conversation's approval requests (``approval_request`` events), with ``conversation``."""


class ChatApproval(BaseModel):
    """``/chat``'s answer to an approval request: the Responses API's ``mcp_approval_response`` without its type."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    approval_request_id: StrictStr
    approve: StrictBool
    reason: Annotated[StrictStr, Field(max_length=1000)] | None = None

    def as_item(self) -> dict[str, object]:
        return {"type": "mcp_approval_response", **self.model_dump(exclude_none=True)}


class StopBody(BaseModel):
    """``POST /chat/stop``: the conversation whose running turn to stop."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    conversation: StrictStr


class ClientFunction(BaseModel):
    model_config = LAZY

    name: ToolName
    description: StrictStr | None = None
    parameters: ClientSchema | None = None
    strict: StrictBool | None = None


class ClientTool(BaseModel):
    model_config = LAZY

    type: Literal["function"]
    function: ClientFunction

    def schema_for_model(self) -> JSONObject:
        return {"type": "function", "function": self.function.model_dump(exclude_none=True)}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    include_usage: StrictBool = False
    include_obfuscation: Literal[False] | None = None
    """Obfuscation padding is not sent; a client that asks for it (true) is refused rather than ignored."""


class JSONSchemaFormat(BaseModel):
    model_config = LAZY

    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    schema_: ClientSchema | None = Field(default=None, alias="schema")
    description: StrictStr | None = None
    strict: StrictBool | None = None


class ResponseFormat(BaseModel):
    """Chat completions' ``response_format``."""

    model_config = LAZY

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("json_schema is required when type is json_schema")
        return self

    def upstream(self) -> JSONObject | None:
        """What the model is sent: None for plain text."""
        if self.type == "text":
            return None
        if self.json_schema is None:
            return {"type": self.type}
        return {
            "type": "json_schema",
            "json_schema": self.json_schema.model_dump(by_alias=True, exclude_none=True),
        }


# --- parameters OpenAI's APIs take beyond the turn's basics ------------------------------------------------
Penalty = Annotated[float, Field(ge=-2, le=2)]
Metadata = Annotated[
    dict[Annotated[StrictStr, Field(max_length=64)], Annotated[StrictStr, Field(max_length=512)]],
    Field(max_length=16),
]
Effort = Literal["none", "minimal", "low", "medium", "high"]
Verbosity = Literal["low", "medium", "high"]
FORWARDED = (
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "reasoning_effort",
    "verbosity",
    "prompt_cache_key",
)
"""Request parameters sent to the model as they are, to models whose catalog entry takes them (``params``)."""


class Unsupported(ValueError):
    """A request parameter this server cannot honour: a 400 ``unsupported_parameter`` naming it."""

    def __init__(self, param: str, why: str) -> None:
        super().__init__(f"{param}: {why}")
        self.param = param


class OpenAIParams(BaseModel):
    """What both OpenAI APIs take besides the turn's basics. Every one is honoured or refused by name
    (``refusals``); unknown fields are refused too, as OpenAI refuses them."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    seed: StrictInt | None = None
    stop: StrictStr | Annotated[list[StrictStr], Field(max_length=4)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: (
        Annotated[dict[StrictStr, Annotated[int, Field(ge=-100, le=100)]], Field(max_length=1024)] | None
    ) = None
    prompt_cache_key: Annotated[StrictStr, Field(max_length=1024)] | None = None
    user: Annotated[StrictStr, Field(max_length=1024)] | None = None
    safety_identifier: Annotated[StrictStr, Field(max_length=1024)] | None = None
    metadata: Metadata | None = None
    service_tier: StrictStr | None = None
    store: StrictBool | None = None
    top_logprobs: Annotated[StrictInt, Field(ge=0, le=20)] | None = None

    def forwarded(self) -> JSONObject:
        """The parameters the model is sent as they are (the catalog says which models take them)."""
        return {name: value for name in FORWARDED if (value := getattr(self, name, None)) is not None}

    def refusals(self) -> list[Unsupported]:
        refused = []
        if self.service_tier not in (None, "auto", "default"):
            refused.append(Unsupported("service_tier", "only 'auto' or 'default' (the provider's own tier)"))
        if self.top_logprobs:
            refused.append(Unsupported("top_logprobs", "log probabilities are not relayed by this server"))
        return refused


class OpenAIChatBody(OpenAIParams, _ChatFields):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    tools: list[ClientTool] | None = None
    response_format: ResponseFormat | None = None
    max_completion_tokens: MaxTokens | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: Annotated[StrictInt, Field(ge=1, le=1)] | None = None
    reasoning_effort: Effort | None = None
    verbosity: Verbosity | None = None
    logprobs: StrictBool | None = None
    modalities: list[StrictStr] | None = None
    audio: dict[str, object] | None = None
    prediction: dict[str, object] | None = None
    web_search_options: dict[str, object] | None = None
    functions: list[object] | None = None
    function_call: object = None

    def refusals(self) -> list[Unsupported]:
        refused = super().refusals()
        if self.store:
            refused.append(
                Unsupported("store", "stored chat completions are not kept; use the Responses API")
            )
        if self.logprobs:
            refused.append(Unsupported("logprobs", "log probabilities are not relayed by this server"))
        if self.modalities not in (None, ["text"]):
            refused.append(Unsupported("modalities", "only text"))
        for name in ("audio", "prediction", "web_search_options"):
            if getattr(self, name) is not None:
                refused.append(Unsupported(name, "not supported by this server"))
        if self.functions is not None or self.function_call is not None:
            name = "functions" if self.functions is not None else "function_call"
            refused.append(
                Unsupported(name, "the legacy function-calling fields are not supported; use tools")
            )
        return refused
