"""The Responses API's output items and ``response`` object as this server builds them: TypedDicts with the keys
of openai-python's own models (``openai.types.responses``; named beside each), which are never imported at run time
(the SDK's types take longer to import than a cold start can spare). Only the keys and values this server sends are
typed: a ``message`` holds ``output_text`` parts, a ``code_interpreter_call`` logs, an ``mcp_call`` never needs an
approval.

A TypedDict is a plain ``dict`` at run time, so the JSON built with these types is what it always was. The modules
that build them import this one under ``TYPE_CHECKING`` only (its classes cost a cold start about a millisecond).
The store keeps ``JSONObject`` bodies: ``chatloop.jsontypes.json_object`` copies one of these into one.

Usage::

    if TYPE_CHECKING:
        from chatloop.api.openai.responses.objects import OutputMessage

    item: OutputMessage = {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": "Hi", "annotations": [], "logprobs": []}]}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NotRequired, TypeAlias, TypedDict

from chatloop.jsontypes import JSONObject


# --- output items ---------------------------------------------------------------------------------------
class OutputText(TypedDict):
    """``ResponseOutputText``: a message's text (``logprobs`` always empty: no model's are passed on)."""

    type: Literal["output_text"]
    text: str
    annotations: list[JSONObject]
    logprobs: NotRequired[list[JSONObject]]


MessageStatus: TypeAlias = Literal["in_progress", "completed", "incomplete"]


class OutputMessage(TypedDict):
    """``ResponseOutputMessage``: the assistant's text (no ``content`` while it is in progress)."""

    type: Literal["message"]
    id: str
    status: MessageStatus
    role: Literal["assistant"]
    content: list[OutputText]


CallStatus: TypeAlias = Literal["in_progress", "completed", "incomplete"]


class FunctionCall(TypedDict):
    """``ResponseFunctionToolCall``: a call of one of the client's own tools (its ``arguments`` empty while in
    progress)."""

    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str
    status: CallStatus


class CodeInterpreterLogs(TypedDict):
    """``ResponseCodeInterpreterToolCall``'s ``OutputLogs``: what a sandbox run gave the model."""

    type: Literal["logs"]
    logs: str


class CodeInterpreterCall(TypedDict):
    """``ResponseCodeInterpreterToolCall``: an ``execute_javascript`` run (``outputs`` None until it ends)."""

    type: Literal["code_interpreter_call"]
    id: str
    code: str
    container_id: str
    outputs: list[CodeInterpreterLogs] | None
    status: Literal["in_progress", "completed", "incomplete", "interpreting", "failed"]


class McpListedTool(TypedDict):
    """``McpListToolsTool``: one tool a server offered, under its own name."""

    name: str
    description: str | None
    input_schema: Mapping[str, object]
    annotations: None


class McpListTools(TypedDict):
    """``McpListTools``: what one of the request's MCP servers offered, or the ``error`` that kept it from
    listing."""

    id: str
    type: Literal["mcp_list_tools"]
    server_label: str
    tools: list[McpListedTool]
    error: str | None


class McpErrorText(TypedDict):
    type: Literal["text"]
    text: str


class McpToolExecutionError(TypedDict):
    """``McpToolExecutionError``: the tool ran and reported an error (what it said, as text content)."""

    type: Literal["mcp_tool_execution_error"]
    content: list[McpErrorText]


class McpProtocolError(TypedDict):
    """``McpProtocolError``: the call did not get an answer from the tool (timeout, refused, broken server)."""

    type: Literal["mcp_protocol_error"]
    code: int
    message: str


McpCallStatus: TypeAlias = Literal["in_progress", "completed", "failed"]


class McpCall(TypedDict):
    """``McpCall``: a call of a tool on an MCP server (``output`` or ``error`` once it ended)."""

    id: str
    type: Literal["mcp_call"]
    server_label: str
    name: str
    arguments: str
    output: str | None
    error: McpToolExecutionError | McpProtocolError | None
    status: McpCallStatus
    approval_request_id: str | None
    """The approval request a person answered before it ran (``mcpr_…``), or None."""


class McpApprovalRequest(TypedDict):
    """``McpApprovalRequest``: a call that waits for a person's approval (``id`` is what the answer names)."""

    id: str
    type: Literal["mcp_approval_request"]
    server_label: str
    name: str
    arguments: str


class CompactionItem(TypedDict):
    """``ResponseCompactionItem``: the earlier conversation, summarized and sealed (``api.turns.compaction``)."""

    id: str
    type: Literal["compaction"]
    encrypted_content: str
    created_by: str | None


OutputItem: TypeAlias = (
    "OutputMessage | FunctionCall | CodeInterpreterCall | McpCall | McpListTools | McpApprovalRequest"
    " | CompactionItem"
)
"""One item of a response's ``output`` (``ResponseOutputItem``, the kinds this server makes)."""


# --- the response object ------------------------------------------------------------------------------------
class TextConfig(TypedDict):
    """``ResponseTextConfig``: the requested ``text.format`` (``{"type": "text"}`` by default)."""

    format: JSONObject
    verbosity: str | None


class ReasoningConfig(TypedDict):
    """``Reasoning``: repeated from the request (no model here reasons in summaries)."""

    effort: str | None
    summary: None


class ConversationRef(TypedDict):
    id: str


class ResponseEcho(TypedDict):
    """The request's settings, as a ``Response`` repeats them (``api.openai.responses.endpoint.echo_of``)."""

    model: str
    instructions: str | None
    max_output_tokens: int | None
    parallel_tool_calls: bool
    temperature: float | None
    top_p: float | None
    tool_choice: str | JSONObject
    tools: list[JSONObject]
    text: TextConfig
    metadata: dict[str, str]
    truncation: str
    max_tool_calls: int | None
    reasoning: ReasoningConfig
    user: str | None
    safety_identifier: str | None
    prompt_cache_key: str | None
    service_tier: str
    top_logprobs: int
    background: bool
    store: bool
    previous_response_id: str | None
    conversation: ConversationRef | None


class InputTokensDetails(TypedDict):
    cached_tokens: int


class OutputTokensDetails(TypedDict):
    reasoning_tokens: int


class ResponseUsage(TypedDict):
    """``ResponseUsage``: the turn's tokens (nothing here is cached or reasoned)."""

    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseError(TypedDict):
    """``ResponseError``: why a ``failed`` response failed."""

    code: Literal["server_error"]
    message: str


class IncompleteDetails(TypedDict):
    """``IncompleteDetails``: why an ``incomplete`` response stopped (``max_output_tokens``, or this server's
    ``iteration_cap`` and ``deadline``)."""

    reason: str


ResponseStatus: TypeAlias = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]


class ResponseObject(ResponseEcho):
    """``Response``: the echoed settings, the ``output`` items, the status and usage."""

    id: str
    object: Literal["response"]
    created_at: int
    status: ResponseStatus
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    output: list[OutputItem]
    usage: ResponseUsage | None


class FinishedResponse(ResponseObject):
    """A finished ``Response``, with ``x_chatloop``: what the turn did beyond OpenAI's fields."""

    x_chatloop: Mapping[str, object]
