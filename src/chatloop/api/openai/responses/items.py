"""The ``output`` items of a Responses API response, and the stream events that tell a client about each, in the
order and shape OpenAI sends them (checked against a recorded OpenAI stream): an item is added empty (a message
with no content, a ``code_interpreter_call`` with ``code: ""``, an ``mcp_call`` with ``arguments: ""``), its deltas
fill it, and ``response.output_item.done`` carries it whole.

``ResponseOutput`` turns a turn's events into items (``message``, ``code_interpreter_call``, ``mcp_call``,
``function_call``); ``ResponseEvents`` numbers and frames each stream event. ``api.openai.responses.endpoint`` renders them as a
``response`` or its event stream; a ``/chat`` turn in a stored conversation keeps the same items.

Usage::

    output = ResponseOutput("req-1", ResponseEvents())
    frames = output.feed(event)            # the SSE frames (unredacted) this event makes known
    output.finish(done); output.items      # the response's ``output``
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from chatloop.api.http.wire import sse_frame
from chatloop.api.openai.responses.approval_items import approval_request_item, whole_item_frames
from chatloop.api.openai.responses.mcp_items import (
    call_finished_frames,
    call_started_frames,
    finish_call_item,
    list_tools_frames,
    started_call_item,
)
from chatloop.engine.events import ApprovalRequested, Delta, Event, ToolCallResult, ToolCallStart
from chatloop.providers.base import ToolCall
from chatloop.tools.javascript.tool import TOOL_NAME

if TYPE_CHECKING:
    from chatloop.api.openai.responses.objects import (
        CallStatus,
        CodeInterpreterCall,
        CompactionItem,
        FunctionCall,
        McpCall,
        McpListTools,
        MessageStatus,
        OutputItem,
        OutputMessage,
        OutputText,
    )

CONTAINER_ID = "chatloop-sandbox"
"""What a ``code_interpreter_call`` names as its container: each run gets a fresh sandbox, nothing persists."""
TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


class ResponseEvents:
    """Numbers and frames Responses API stream events (``sequence_number`` from 0), and knows when the terminal
    one has been framed. Frames are not yet redacted: the stream redacts each chunk as a whole (``api.turns.serve``)."""

    def __init__(
        self, record: bool = False, listener: Callable[[dict[str, object]], None] | None = None
    ) -> None:
        self._numbers = itertools.count()
        self.ended = False
        self.recorded: list[dict[str, object]] | None = [] if record else None
        """Every event's data, when the response is stored (a resumed stream replays them)."""
        self.listener = listener
        """Told of every event as it is framed (a client following the stream live)."""

    def __call__(self, kind: str, **fields: object) -> str:
        self.ended = self.ended or kind in TERMINAL
        data: dict[str, object] = {"type": kind, "sequence_number": next(self._numbers), **fields}
        if self.recorded is not None:
            self.recorded.append(data)
        if self.listener is not None:
            self.listener(data)
        return sse_frame(data, event=kind)


def message_item(item_id: str, text: str, status: MessageStatus = "completed") -> OutputMessage:
    content: list[OutputText] = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        if status == "completed"
        else []
    )
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(call: ToolCall, status: CallStatus = "completed") -> FunctionCall:
    """A client tool call as a ``function_call`` item (in progress: its arguments not yet given)."""
    return {
        "type": "function_call",
        "id": f"fc_{call.id}",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments if status == "completed" else "",
        "status": status,
    }


def code_interpreter_item(call_id: str, arguments: str) -> CodeInterpreterCall:
    """An ``execute_javascript`` run as OpenAI's hosted-code item (in progress: no outputs yet)."""
    try:
        code = json.loads(arguments).get("code")
    except (ValueError, AttributeError):
        code = None
    return {
        "type": "code_interpreter_call",
        "id": f"ci_{call_id}",
        "code": code if isinstance(code, str) else arguments,
        "container_id": CONTAINER_ID,
        "outputs": None,
        "status": "in_progress",
    }


class ResponseOutput:
    """The ``output`` items of a response as the turn's events make them known, and the stream events that tell a
    client about each (framed by ``emit``; a non-streamed request discards them).

    Text goes into a ``message`` item; a server tool run closes it and becomes an item of its own
    (``code_interpreter_call`` for ``execute_javascript``), so the text a model writes after the run opens a new
    message. Each message's deltas add up to its text. The client's tool calls come last, as ``function_call``
    items. A tool on an MCP server is an ``mcp_call`` item, and the request's own MCP servers each open the output
    with an ``mcp_list_tools`` item (``listed``, framed by ``start``)."""

    def __init__(
        self, request_id: str, emit: ResponseEvents, listed: Sequence[McpListTools | CompactionItem] = ()
    ) -> None:
        self.request_id = request_id
        self.emit = emit
        self.items: list[OutputItem] = []
        self._message: OutputMessage | None = None
        self._text: list[str] = []
        self._runs: dict[str, tuple[int, CodeInterpreterCall]] = {}
        """The sandbox runs under way, by call id: where each item is, and the item."""
        self._mcp_calls: dict[str, tuple[int, McpCall]] = {}
        self._listed = list(listed)

    def start(self) -> list[str]:
        """The ``mcp_list_tools`` items: what each of the request's MCP servers offered, or why it could not."""
        frames: list[str] = []
        for item in self._listed:
            self.items.append(item)
            if item["type"] == "compaction":  # the earlier conversation, summarized before the turn
                frames += whole_item_frames(self.emit, item, self._index())
            else:
                frames += list_tools_frames(self.emit, item, self._index())
        return frames

    def feed(self, event: Event) -> list[str]:
        if isinstance(
            event, Delta
        ):  # a seam opens the next message as its first text, as on the other routes
            return self._add_text(event.content)
        if isinstance(event, ToolCallStart) and event.tool_name == TOOL_NAME:
            return self._close_message() + self._open_run(code_interpreter_item(event.id, event.arguments))
        if isinstance(event, ToolCallResult) and event.id in self._runs:
            return self._finish_run(event)
        if isinstance(event, ToolCallStart) and event.server:  # a tool on an MCP server
            call = started_call_item(event)
            self.items.append(call)
            self._mcp_calls[event.id] = (self._index(), call)
            return self._close_message() + call_started_frames(self.emit, call, self._index())
        if isinstance(event, ToolCallResult) and event.id in self._mcp_calls:
            index, call = self._mcp_calls.pop(event.id)
            finish_call_item(call, event)
            return call_finished_frames(self.emit, call, index)
        if isinstance(event, ApprovalRequested):  # a call that waits for a person: the turn ends after these
            request = approval_request_item(event)
            frames = self._close_message()
            self.items.append(request)
            return frames + whole_item_frames(self.emit, request, self._index())
        return []

    def finish(self, client_calls: Sequence[ToolCall] = ()) -> list[str]:
        """Close the open message, then add each client tool call as a ``function_call`` item."""
        frames = self._close_message()
        for call in client_calls:
            item, index = call_item(call), len(self.items)
            self.items.append(item)
            where = {"item_id": item["id"], "output_index": index}
            frames += [
                self.emit(
                    "response.output_item.added", output_index=index, item=call_item(call, "in_progress")
                ),
                self.emit("response.function_call_arguments.delta", **where, delta=item["arguments"]),
                self.emit(
                    "response.function_call_arguments.done",
                    **where,
                    name=item["name"],
                    arguments=item["arguments"],
                ),
                self.emit("response.output_item.done", output_index=index, item=item),
            ]
        return frames

    # --- message items ---------------------------------------------------------------------------
    def _add_text(self, piece: str) -> list[str]:
        frames = []
        if self._message is None:
            messages = sum(1 for i in self.items if i["type"] == "message")
            item_id = f"msg_{self.request_id}" + (f"_{messages}" if messages else "")
            self._message, self._text = message_item(item_id, "", "in_progress"), []
            self.items.append(self._message)
            part: OutputText = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            frames += [
                self.emit("response.output_item.added", output_index=self._index(), item=dict(self._message)),
                self.emit("response.content_part.added", **self._where(), part=part),
            ]
        self._text.append(piece)
        frames.append(self.emit("response.output_text.delta", **self._where(), delta=piece, logprobs=[]))
        return frames

    def _close_message(self) -> list[str]:
        if self._message is None:
            return []
        index, where, whole = self._index(), self._where(), "".join(self._text)
        self._message.update(message_item(self._message["id"], whole))
        self._message = None
        part: OutputText = {"type": "output_text", "text": whole, "annotations": [], "logprobs": []}
        return [
            self.emit("response.output_text.done", **where, text=whole, logprobs=[]),
            self.emit("response.content_part.done", **where, part=part),
            self.emit("response.output_item.done", output_index=index, item=self.items[index]),
        ]

    def _index(self) -> int:
        return len(self.items) - 1

    def _where(self) -> dict[str, object]:
        """Where the open message is (it is always the last item while it is open)."""
        return {"item_id": self.items[-1]["id"], "output_index": self._index(), "content_index": 0}

    # --- server tool runs ---------------------------------------------------------------------------
    def _open_run(self, item: CodeInterpreterCall) -> list[str]:
        index = len(self.items)
        self.items.append(item)
        self._runs[item["id"].removeprefix("ci_")] = (index, item)
        where = {"item_id": item["id"], "output_index": index}
        # As OpenAI streams it: the item added with empty code, which its deltas then fill (pydantic-ai 1.x asserts
        # on the empty code); ``output_item.done`` carries everything.
        return [
            self.emit("response.output_item.added", output_index=index, item={**item, "code": ""}),
            self.emit("response.code_interpreter_call.in_progress", **where),
            self.emit("response.code_interpreter_call_code.delta", **where, delta=item["code"]),
            self.emit("response.code_interpreter_call_code.done", **where, code=item["code"]),
            self.emit("response.code_interpreter_call.interpreting", **where),
        ]

    def _finish_run(self, result: ToolCallResult) -> list[str]:
        index, item = self._runs.pop(result.id)
        # Set in place: the item keeps its keys' order, and ``items`` holds it.
        item["outputs"] = [{"type": "logs", "logs": result.content}]
        item["status"] = "completed" if result.status == "ok" else "failed"
        where = {"item_id": item["id"], "output_index": index}
        return [
            self.emit("response.code_interpreter_call.completed", **where),
            self.emit("response.output_item.done", output_index=index, item=item),
        ]
