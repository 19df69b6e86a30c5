"""Request bodies of ``/v1/responses``, validated with pydantic: the body and its input items (also read back from
the store as items a request continues from). Every field is honoured or refused by name; unknown fields are refused.

Usage::

    body = ResponsesBody.model_validate({"input": "5!", "model": "chatloop"})
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from chatloop.api.openai.responses.approval_items import McpApprovalRequestInput, McpApprovalResponseInput
from chatloop.api.openai.responses.mcp_items import McpCallInput, McpListToolsInput
from chatloop.api.openai.responses.mcp_servers import ResponsesMcpTool
from chatloop.api.turns.compaction import CompactionInput, CompactionSetting
from chatloop.api.turns.schemas import (
    LAZY,
    ClientFunction,
    ClientSchema,
    ClientTool,
    Effort,
    JSONSchemaFormat,
    MaxTokens,
    OpenAIParams,
    ResponseFormat,
    Temperature,
    ToolName,
    TopP,
    Unsupported,
    Verbosity,
)
from chatloop.jsontypes import JSONObject


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


class CodeInterpreterLogs(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["logs"]
    logs: StrictStr


class CodeInterpreterImage(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["image"]
    url: StrictStr


class CodeInterpreterCallItem(BaseModel):
    """An ``execute_javascript`` run from an earlier response (OpenAI's ``code_interpreter_call``), sent back as
    input: the model is given it as that earlier tool call and its result."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["code_interpreter_call"]
    id: Annotated[StrictStr, Field(min_length=1, max_length=256)]
    code: StrictStr | None = None
    outputs: list[CodeInterpreterLogs | CodeInterpreterImage] | None = None

    def call_id(self) -> str:
        return self.id.removeprefix("ci_")

    def logs(self) -> str:
        """What the run returned, as the model saw it (an image output is described, not dropped)."""
        parts = [
            o.logs if isinstance(o, CodeInterpreterLogs) else f"[image: {o.url}]" for o in self.outputs or []
        ]
        return "".join(parts) or "(the run returned no output)"


class ReasoningItem(BaseModel):
    """A reasoning item a client sends back from an earlier response: it carries nothing this server needs."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    type: Literal["reasoning"]


InputItem = Annotated[
    InputMessage
    | FunctionCallItem
    | FunctionCallOutputItem
    | CodeInterpreterCallItem
    | ReasoningItem
    | McpCallInput
    | McpListToolsInput
    | McpApprovalRequestInput
    | McpApprovalResponseInput
    | CompactionInput,
    Field(union_mode="left_to_right"),
]


class ResponsesFunctionTool(BaseModel):
    model_config = LAZY

    type: Literal["function"]
    name: ToolName
    description: StrictStr | None = None
    parameters: ClientSchema | None = None
    strict: StrictBool | None = None

    def as_chat_tool(self) -> ClientTool:
        fields = self.model_dump(exclude={"type"}, exclude_none=True)
        return ClientTool(type="function", function=ClientFunction(**fields))


class ResponsesNamedChoice(BaseModel):
    model_config = LAZY

    type: Literal["function"]
    name: StrictStr


class TextFormat(BaseModel):
    """``text.format``: the Responses API's flat form of ``response_format``."""

    model_config = LAZY

    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")] | None = None
    schema_: ClientSchema | None = Field(default=None, alias="schema")
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
    model_config = ConfigDict(extra="forbid", defer_build=True)

    format: TextFormat | None = None
    verbosity: Verbosity | None = None


class ReasoningOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    effort: Effort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesStreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    include_obfuscation: Literal[False] | None = None


INCLUDABLE = {"code_interpreter_call.outputs"}
"""What ``include`` may ask for: the outputs of sandbox runs are always included."""


class ResponsesBody(OpenAIParams):
    """``POST /v1/responses``. Every field is honoured or refused by name; unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    input: StrictStr | list[InputItem]
    model: StrictStr | None = None
    instructions: StrictStr | None = None
    tools: list[Annotated[ResponsesFunctionTool | ResponsesMcpTool, Field(discriminator="type")]] | None = (
        None
    )
    tool_choice: Literal["auto", "none", "required"] | ResponsesNamedChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    max_output_tokens: MaxTokens | None = None
    max_tool_calls: Annotated[StrictInt, Field(ge=0, le=1000)] | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    text: TextOptions | None = None
    reasoning: ReasoningOptions | None = None
    truncation: Literal["auto", "disabled"] | None = None
    include: list[StrictStr] | None = None
    stream: StrictBool = False
    stream_options: ResponsesStreamOptions | None = None
    background: StrictBool | None = None
    previous_response_id: StrictStr | None = None
    conversation: StrictStr | dict[str, object] | None = None
    prompt: dict[str, object] | None = None
    context_management: list[CompactionSetting] | None = None
    """Automatic compaction past ``compact_threshold`` estimated tokens (``api.turns.compaction``)."""

    def compact_threshold(self) -> int | None:
        return next((c.compact_threshold for c in self.context_management or [] if c.compact_threshold), None)

    def forwarded(self) -> JSONObject:
        params = super().forwarded()
        if self.reasoning and self.reasoning.effort:
            params["reasoning_effort"] = self.reasoning.effort
        if self.text and self.text.verbosity:
            params["verbosity"] = self.text.verbosity
        return params

    def refusals(self) -> list[Unsupported]:
        refused = super().refusals()
        if self.background and self.store is False:  # OpenAI: "Background sampling requires store=true"
            refused.append(
                Unsupported("background", "a background response must be stored: set store to true")
            )
        if self.prompt is not None:
            refused.append(Unsupported("prompt", "stored prompts are not supported; send instructions"))
        if self.reasoning and (self.reasoning.summary or self.reasoning.generate_summary):
            refused.append(
                Unsupported("reasoning.summary", "reasoning summaries are not relayed by this server")
            )
        other = sorted(set(self.include or []) - INCLUDABLE)
        if other:
            refused.append(Unsupported("include", f"{other} cannot be included (only {sorted(INCLUDABLE)})"))
        return refused
