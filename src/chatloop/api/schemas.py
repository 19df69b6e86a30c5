"""Request bodies of /chat, /v1/chat/completions and /v1/responses, validated with pydantic.

``/chat`` rejects unknown fields (a typo such as ``max_iteration`` should not pass silently);
``/v1/chat/completions`` ignores them, as OpenAI clients send many optional fields.

Usage::

    body = ChatBody.model_validate(json.loads(raw))        # raises pydantic.ValidationError
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

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

from chatloop.api.mcp_items import McpCallInput, McpListToolsInput

# Each endpoint validates with one schema: build it on first use (cold start), not at import.
LAZY = ConfigDict(defer_build=True)
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _tool_name(value: str) -> str:
    if not TOOL_NAME.match(value):
        raise ValueError("must be 1-64 letters, digits, '_' or '-'")
    return value


ToolName = Annotated[StrictStr, AfterValidator(_tool_name)]
"""A function tool's name, as OpenAI takes it: checked wherever a client names a tool (chat and Responses alike)."""


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

    name: ToolName
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class ClientTool(BaseModel):
    model_config = LAZY

    type: Literal["function"]
    function: ClientFunction

    def schema_for_model(self) -> dict[str, Any]:
        return {"type": "function", "function": self.function.model_dump(exclude_none=True)}


class StreamOptions(BaseModel):
    model_config = LAZY

    include_usage: StrictBool = False


class JSONSchemaFormat(BaseModel):
    model_config = LAZY

    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
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

    def upstream(self) -> dict[str, Any] | None:
        """What the model is sent: None for plain text."""
        if self.type == "text":
            return None
        if self.json_schema is None:
            return {"type": self.type}
        return {
            "type": "json_schema",
            "json_schema": self.json_schema.model_dump(by_alias=True, exclude_none=True),
        }


class OpenAIChatBody(_ChatFields):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    tools: list[ClientTool] | None = None
    response_format: ResponseFormat | None = None
    max_completion_tokens: MaxTokens | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: Annotated[StrictInt, Field(ge=1, le=1)] | None = None


# --- /v1/responses --------------------------------------------------------------------------------
class InputText(BaseModel):
    model_config = LAZY

    type: Literal["input_text", "output_text", "text"]
    text: StrictStr


class InputMessage(BaseModel):
    """A ``message`` item (the ``type`` may be left out, as the SDKs' "easy input message" does)."""

    model_config = LAZY

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: StrictStr | list[InputText]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class FunctionCallItem(BaseModel):
    model_config = LAZY

    type: Literal["function_call"]
    call_id: StrictStr
    name: StrictStr
    arguments: StrictStr


class FunctionCallOutputItem(BaseModel):
    model_config = LAZY

    type: Literal["function_call_output"]
    call_id: StrictStr
    output: StrictStr | list[InputText]

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.text for p in self.output)


class ReasoningItem(BaseModel):
    """A reasoning item a client sends back from an earlier response: it carries nothing this server needs."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["reasoning"]


InputItem = Annotated[
    InputMessage
    | FunctionCallItem
    | FunctionCallOutputItem
    | ReasoningItem
    | McpCallInput
    | McpListToolsInput,
    Field(union_mode="left_to_right"),
]


class ResponsesFunctionTool(BaseModel):
    model_config = LAZY

    type: Literal["function"]
    name: ToolName
    description: StrictStr | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None

    def as_chat_tool(self) -> ClientTool:
        fields = self.model_dump(exclude={"type"}, exclude_none=True)
        return ClientTool(type="function", function=ClientFunction(**fields))


class ResponsesMcpTool(BaseModel):
    """A client-supplied MCP server (OpenAI's hosted ``mcp`` tool), checked by ``api.mcp_items.client_servers``.
    Its ``headers`` and ``authorization`` are never echoed back (``exclude``)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["mcp"]
    server_label: StrictStr
    server_url: StrictStr | None = None
    allowed_tools: Any = None
    headers: dict[StrictStr, StrictStr] | None = Field(default=None, exclude=True)
    authorization: StrictStr | None = Field(default=None, exclude=True)
    require_approval: Any = None
    server_description: StrictStr | None = None
    connector_id: StrictStr | None = None


class ResponsesNamedChoice(BaseModel):
    model_config = LAZY

    type: Literal["function"]
    name: StrictStr


class TextFormat(BaseModel):
    """``text.format``: the Responses API's flat form of ``response_format``."""

    model_config = LAZY

    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")] | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: StrictStr | None = None
    strict: StrictBool | None = None

    def as_response_format(self) -> ResponseFormat:
        if self.type != "json_schema":
            return ResponseFormat(type=self.type)
        if self.name is None or self.schema_ is None:
            raise ValueError("text.format: a json_schema format needs a name and a schema")
        spec = JSONSchemaFormat(
            name=self.name, schema=self.schema_, description=self.description, strict=self.strict
        )
        return ResponseFormat(type="json_schema", json_schema=spec)


class TextOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    format: TextFormat | None = None


class ResponsesBody(BaseModel):
    """``POST /v1/responses``, stateless. Unknown fields are ignored, as OpenAI clients send many."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    input: StrictStr | list[InputItem]
    model: StrictStr | None = None
    instructions: StrictStr | None = None
    tools: list[Annotated[ResponsesFunctionTool | ResponsesMcpTool, Field(discriminator="type")]] | None = (
        None
    )
    tool_choice: Literal["auto", "none", "required"] | ResponsesNamedChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    text: TextOptions | None = None
    stream: StrictBool = False
    store: StrictBool | None = None
    previous_response_id: StrictStr | None = None
    metadata: dict[str, StrictStr] | None = None
