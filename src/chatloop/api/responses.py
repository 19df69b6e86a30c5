"""``/v1/responses``: OpenAI's Responses API as one more renderer over the same engine, stateless.

Input items become the chat conversation the engine runs (``conversation_of``); the engine's events become a
``response`` object (``response_object``) or its event stream (``response_events``), both drawn from the same
``final_reply`` projection as chat completions. The engine knows nothing of this API.

Usage::

    messages = conversation_of(body)                        # then normalize_conversation(messages)
    body = response_object(done, request_id, echo)          # stream=false
    async for chunk in response_events(events, request_id, echo): ...   # stream=true
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from chatloop.api.mcp_items import (
    McpCallInput,
    call_finished_frames,
    call_started_frames,
    finish_call_item,
    list_tools_frames,
    started_call_item,
)
from chatloop.api.render import INTERNAL_ERROR, dumps_unredacted, extension, held_secrets
from chatloop.api.schemas import (
    CodeInterpreterCallItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputMessage,
    ResponsesBody,
)
from chatloop.engine.events import Delta, Event, EventType, ToolCallResult, ToolCallStart
from chatloop.observability import logger, redact

INCOMPLETE = {"length": "max_output_tokens", "iteration_cap": "iteration_cap", "deadline": "deadline"}
"""Stop reasons that leave a response ``incomplete``, and the reason ``incomplete_details`` gives."""


# --- input ----------------------------------------------------------------------------------------
def conversation_of(body: ResponsesBody, history: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """The chat conversation for ``instructions``, the earlier items a request continues from (``history``: a
    previous response's chain, or a conversation's items) and ``input``: ``developer`` is ``system``, consecutive
    ``function_call`` items join the assistant message before them, ``function_call_output`` is a tool message,
    reasoning items carry nothing this server needs."""
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    current = [InputMessage(role="user", content=body.input)] if isinstance(body.input, str) else body.input
    return messages + messages_of([*history, *current])


def messages_of(items: Sequence[Any]) -> list[dict[str, Any]]:
    """Input items (a request's, or stored ones read back) as chat messages."""
    messages: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, InputMessage):
            role = "system" if item.role == "developer" else item.role
            messages.append({"role": role, "content": item.text()})
        elif isinstance(item, FunctionCallItem):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
        elif isinstance(
            item, CodeInterpreterCallItem
        ):  # an earlier run, replayed (the Agents SDK sends outputs)
            call = {
                "id": item.call_id(),
                "type": "function",
                "function": {"name": JAVASCRIPT_TOOL, "arguments": json.dumps({"code": item.code or ""})},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and not last.get("content"):
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": item.logs()})
        elif isinstance(item, McpCallInput):  # an earlier MCP call, replayed: the call and its answer
            messages += item.messages()
    return messages


def echo_of(
    body: ResponsesBody, model: str, stored: bool = False, conversation: str | None = None
) -> dict[str, Any]:
    """The request's settings, as a response object repeats them; ``model`` is the one the turn starts with (the
    finished response names the one that answered)."""
    text_format = (
        body.text.format.model_dump(by_alias=True, exclude_none=True)
        if body.text and body.text.format
        else None
    )
    choice = body.tool_choice
    return {
        "model": model,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "parallel_tool_calls": True if body.parallel_tool_calls is None else body.parallel_tool_calls,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "tool_choice": choice.model_dump()
        if choice is not None and not isinstance(choice, str)
        else choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
        "text": {
            "format": text_format or {"type": "text"},
            "verbosity": body.text.verbosity if body.text else None,
        },
        "metadata": body.metadata or {},
        "truncation": body.truncation or "disabled",
        "max_tool_calls": body.max_tool_calls,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
        "user": body.user,
        "safety_identifier": body.safety_identifier,
        "prompt_cache_key": body.prompt_cache_key,
        "service_tier": body.service_tier or "auto",
        "top_logprobs": body.top_logprobs or 0,
        "background": False,
        "store": stored,
        "previous_response_id": body.previous_response_id,
        "conversation": {"id": conversation} if conversation else None,
    }


# --- output ---------------------------------------------------------------------------------------
CONTAINER_ID = "chatloop-sandbox"
"""What a ``code_interpreter_call`` names as its container: each run gets a fresh sandbox, nothing persists."""
JAVASCRIPT_TOOL = "execute_javascript"


def _skeleton(request_id: str, echo: dict[str, Any], created: int) -> dict[str, Any]:
    return {
        "id": f"resp_{request_id}",
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "output": [],
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "truncation": "disabled",
        "usage": None,
        "user": None,
        **echo,
    }


def _usage(usage: dict[str, int]) -> dict[str, Any]:
    return {
        "input_tokens": usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage["total_tokens"],
    }


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        if status == "completed"
        else []
    )
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(call: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    function = call["function"]
    return {
        "type": "function_call",
        "id": f"fc_{call['id']}",
        "call_id": call["id"],
        "name": function["name"],
        "arguments": function["arguments"] if status == "completed" else "",
        "status": status,
    }


def code_interpreter_item(start: dict[str, Any]) -> dict[str, Any]:
    """An ``execute_javascript`` run as OpenAI's hosted-code item (in progress: no outputs yet)."""
    try:
        code = json.loads(start["arguments"]).get("code")
    except (ValueError, AttributeError):
        code = None
    return {
        "type": "code_interpreter_call",
        "id": f"ci_{start['id']}",
        "code": code if isinstance(code, str) else start["arguments"],
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

    def __init__(self, request_id: str, emit: _Events, listed: Sequence[dict[str, Any]] = ()) -> None:
        self.request_id = request_id
        self.emit = emit
        self.items: list[dict[str, Any]] = []
        self._message: dict[str, Any] | None = None
        self._text: list[str] = []
        self._runs: dict[str, int] = {}
        self._mcp_calls: dict[str, int] = {}
        self._listed = list(listed)

    def start(self) -> list[str]:
        """The ``mcp_list_tools`` items: what each of the request's MCP servers offered, or why it could not."""
        frames: list[str] = []
        for item in self._listed:
            self.items.append(item)
            frames += list_tools_frames(self.emit, item, self._index())
        return frames

    def feed(self, event: Event) -> list[str]:
        if isinstance(event, Delta):
            if event.seam and self._message is None:
                return []  # a seam separates texts; after a tool item the next message stands apart anyway
            return self._add_text(event.content)
        data = event.data
        if isinstance(event, ToolCallStart) and event.tool_name == JAVASCRIPT_TOOL:
            return self._close_message() + self._open_run(code_interpreter_item(data))
        if isinstance(event, ToolCallResult) and event.id in self._runs:
            return self._finish_run(data)
        if isinstance(event, ToolCallStart) and event.server:  # a tool on an MCP server
            self.items.append(started_call_item(data))
            self._mcp_calls[event.id] = self._index()
            return self._close_message() + call_started_frames(self.emit, self.items[-1], self._index())
        if isinstance(event, ToolCallResult) and event.id in self._mcp_calls:
            index = self._mcp_calls.pop(event.id)
            finish_call_item(self.items[index], data)
            return call_finished_frames(self.emit, self.items[index], index)
        return []

    def finish(self, done: dict[str, Any]) -> list[str]:
        """Close the open message, then add each client tool call as a ``function_call`` item."""
        frames = self._close_message()
        for call in done["message"].get("tool_calls") or []:
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
            part = {"type": "output_text", "text": "", "annotations": []}
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
        return [
            self.emit("response.output_text.done", **where, text=whole, logprobs=[]),
            self.emit(
                "response.content_part.done",
                **where,
                part={"type": "output_text", "text": whole, "annotations": []},
            ),
            self.emit("response.output_item.done", output_index=index, item=self.items[index]),
        ]

    def _index(self) -> int:
        return len(self.items) - 1

    def _where(self) -> dict[str, Any]:
        """Where the open message is (it is always the last item while it is open)."""
        return {"item_id": self.items[-1]["id"], "output_index": self._index(), "content_index": 0}

    # --- server tool runs ---------------------------------------------------------------------------
    def _open_run(self, item: dict[str, Any]) -> list[str]:
        index = len(self.items)
        self.items.append(item)
        self._runs[item["id"].removeprefix("ci_")] = index
        where = {"item_id": item["id"], "output_index": index}
        return [
            self.emit("response.output_item.added", output_index=index, item=dict(item)),
            self.emit("response.code_interpreter_call.in_progress", **where),
            self.emit("response.code_interpreter_call_code.delta", **where, delta=item["code"] or ""),
            self.emit("response.code_interpreter_call_code.done", **where, code=item["code"] or ""),
            self.emit("response.code_interpreter_call.interpreting", **where),
        ]

    def _finish_run(self, result: dict[str, Any]) -> list[str]:
        index = self._runs.pop(result["id"])
        item = self.items[index]
        item.update(
            outputs=[{"type": "logs", "logs": result["content"]}],
            status="completed" if result["status"] == "ok" else "failed",
        )
        where = {"item_id": item["id"], "output_index": index}
        return [
            self.emit("response.code_interpreter_call.completed", **where),
            self.emit("response.output_item.done", output_index=index, item=item),
        ]


def response_object(
    done: dict[str, Any],
    request_id: str,
    echo: dict[str, Any],
    output: list[dict[str, Any]],
    created: int | None = None,
) -> dict[str, Any]:
    """The finished ``response``: ``incomplete`` (with its reason) when the turn stopped on the output-token cap, the
    iteration cap or the deadline; the stop reason and tool records under ``x_chatloop``."""
    body = _skeleton(request_id, echo, created or int(time.time()))
    reason = INCOMPLETE.get(done["stop_reason"])
    body.update(
        model=done["model"] or echo["model"],
        status="incomplete" if reason else "completed",
        incomplete_details={"reason": reason} if reason else None,
        output=output,
        usage=_usage(done["usage"]),
        x_chatloop=extension(done),
    )
    return body


async def collect_response(
    events: AsyncIterator[Event],
    request_id: str,
    echo: dict[str, Any],
    listed: Sequence[dict[str, Any]] = (),
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A non-streamed request's ``response`` (the same projection as the stream), and the turn's error events."""
    output = ResponseOutput(request_id, _Events(), listed)
    output.start()
    errors: list[dict[str, Any]] = []
    done: dict[str, Any] = {}
    async for event in held_secrets(events):
        if event.type is EventType.ERROR:
            errors.append(event.data)
        elif event.type is EventType.DONE:
            done = event.data
            output.finish(done)
        else:
            output.feed(event)
    return response_object(done, request_id, echo, output.items), errors


TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


class _Events:
    """Numbers and frames Responses API stream events (``sequence_number`` from 0), and knows when the terminal
    one has been framed. Frames are not yet redacted: ``response_events`` redacts each chunk as a whole."""

    def __init__(
        self, record: bool = False, listener: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        self._numbers = itertools.count()
        self.ended = False
        self.recorded: list[dict[str, Any]] | None = [] if record else None
        """Every event's data, when the response is stored (a resumed stream replays them)."""
        self.listener = listener
        """Told of every event as it is framed (a client following the stream live)."""

    def __call__(self, kind: str, **fields: Any) -> str:
        self.ended = self.ended or kind in TERMINAL
        data = {"type": kind, "sequence_number": next(self._numbers), **fields}
        if self.recorded is not None:
            self.recorded.append(data)
        if self.listener is not None:
            self.listener(data)
        return f"event: {kind}\ndata: {dumps_unredacted(data)}\n\n"


def _sealed(frames: str) -> bytes:
    """A chunk as it leaves: redacted once, whole (no secret or key-shaped string, whatever produced it)."""
    return redact(frames).encode()


Keep = Callable[[dict[str, Any], list[dict[str, Any]]], Awaitable[dict[str, Any]]]
"""Stores a finished response (and its stream's events) and returns it as it should be shown."""


async def response_events(
    events: AsyncIterator[Event],
    request_id: str,
    echo: dict[str, Any],
    keep: Keep | None = None,
    listener: Callable[[dict[str, Any]], None] | None = None,
    listed: Sequence[dict[str, Any]] = (),
) -> AsyncIterator[bytes]:
    """The Responses API's event stream. It always ends with its terminal event: ``response.completed``,
    ``response.incomplete`` or ``response.failed`` (after an ``error`` event when something broke mid-way). With
    ``keep``, the finished response is stored before its terminal event goes out (read-after-write holds)."""
    emit = _Events(record=keep is not None, listener=listener)
    created = int(time.time())
    try:
        async for frames in _response_events(events, request_id, echo, emit, created, keep, listed):
            yield _sealed(frames)
    except Exception:
        logger.exception("response event stream failed")
        if not emit.ended:
            error = emit("error", code=INTERNAL_ERROR["code"], message=INTERNAL_ERROR["message"], param=None)
            failed = _skeleton(request_id, echo, created)
            failed.update(
                status="failed", error={"code": "server_error", "message": INTERNAL_ERROR["message"]}
            )
            yield _sealed(error + emit("response.failed", response=failed))


async def _response_events(
    events: AsyncIterator[Event],
    request_id: str,
    echo: dict[str, Any],
    emit: _Events,
    created: int,
    keep: Keep | None,
    listed: Sequence[dict[str, Any]] = (),
) -> AsyncIterator[str]:
    """The events, framed. ``response.created`` goes out at once; frames that become known together leave as one
    chunk (fewer writes through the heartbeat wrapper and the socket)."""
    started = _skeleton(request_id, echo, created)
    output = ResponseOutput(request_id, emit, listed)
    head = [emit("response.created", response=started), emit("response.in_progress", response=started)]
    yield "".join(head + output.start())
    async for event in held_secrets(events):
        if event.type is EventType.ERROR and event.data.get("code") == "all_models_failed":
            failed = _skeleton(request_id, echo, created)
            failed.update(status="failed", error={"code": "server_error", "message": event.data["message"]})
            yield emit("response.failed", response=failed)
            return
        if event.type is EventType.DONE:
            frames = output.finish(event.data)
            final = response_object(event.data, request_id, echo, output.items, created)
            kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
            if keep is not None:
                # The terminal event is stored as it will be sent: numbered next, with the rest.
                number = len(emit.recorded or [])
                terminal = {"type": kind, "sequence_number": number, "response": final}
                final = await keep(final, [*(emit.recorded or []), terminal])
            yield "".join([*frames, emit(kind, response=final)])
            return
        frames = output.feed(event)
        if frames:
            yield "".join(frames)
