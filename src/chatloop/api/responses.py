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
import time
from collections.abc import AsyncIterator
from typing import Any

from chatloop.api.render import (
    INTERNAL_ERROR,
    ReplyEnd,
    ReplyFailed,
    ReplyText,
    dumps_unredacted,
    extension,
    final_reply,
)
from chatloop.api.schemas import (
    FunctionCallItem,
    FunctionCallOutputItem,
    InputMessage,
    ResponsesBody,
)
from chatloop.engine.events import Event
from chatloop.observability import logger, redact

INCOMPLETE = {"length": "max_output_tokens", "iteration_cap": "iteration_cap", "deadline": "deadline"}
"""Stop reasons that leave a response ``incomplete``, and the reason ``incomplete_details`` gives."""


# --- input ----------------------------------------------------------------------------------------
def conversation_of(body: ResponsesBody) -> list[dict[str, Any]]:
    """The chat conversation for ``instructions`` and ``input``: ``developer`` is ``system``, consecutive
    ``function_call`` items join the assistant message before them, ``function_call_output`` is a tool message,
    reasoning items carry nothing this server needs."""
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        return [*messages, {"role": "user", "content": body.input}]
    for item in body.input:
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
    return messages


def echo_of(body: ResponsesBody, model: str) -> dict[str, Any]:
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
        "text": {"format": text_format or {"type": "text"}},
        "metadata": body.metadata or {},
    }


# --- output ---------------------------------------------------------------------------------------
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


def message_item(request_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        if status == "completed"
        else []
    )
    return {
        "type": "message",
        "id": f"msg_{request_id}",
        "status": status,
        "role": "assistant",
        "content": content,
    }


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


def output_of(done: dict[str, Any], request_id: str) -> list[dict[str, Any]]:
    """The reply's items: its text as one message, then each client tool call as a ``function_call``."""
    message = done["message"]
    items = [message_item(request_id, message["content"])] if message.get("content") else []
    return items + [call_item(c) for c in message.get("tool_calls") or []]


def response_object(
    done: dict[str, Any], request_id: str, echo: dict[str, Any], created: int | None = None
) -> dict[str, Any]:
    """The finished ``response``: ``incomplete`` (with its reason) when the turn stopped on the output-token cap, the
    iteration cap or the deadline; server tool calls and the stop reason under ``x_chatloop``."""
    body = _skeleton(request_id, echo, created or int(time.time()))
    reason = INCOMPLETE.get(done["stop_reason"])
    body.update(
        model=done["model"] or echo["model"],
        status="incomplete" if reason else "completed",
        incomplete_details={"reason": reason} if reason else None,
        output=output_of(done, request_id),
        usage=_usage(done["usage"]),
        x_chatloop=extension(done),
    )
    return body


TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


class _Events:
    """Numbers and frames Responses API stream events (``sequence_number`` from 0), and knows when the terminal
    one has been framed. Frames are not yet redacted: ``response_events`` redacts each chunk as a whole."""

    def __init__(self) -> None:
        self._numbers = itertools.count()
        self.ended = False

    def __call__(self, kind: str, **fields: Any) -> str:
        self.ended = self.ended or kind in TERMINAL
        data = {"type": kind, "sequence_number": next(self._numbers), **fields}
        return f"event: {kind}\ndata: {dumps_unredacted(data)}\n\n"

    def with_response(self, kind: str, response: str) -> str:
        """An event carrying a response object already serialised (the opening pair share one)."""
        self.ended = self.ended or kind in TERMINAL
        head = dumps_unredacted({"type": kind, "sequence_number": next(self._numbers)})[:-1]
        return f'event: {kind}\ndata: {head},"response":{response}}}\n\n'


def _sealed(frames: str) -> bytes:
    """A chunk as it leaves: redacted once, whole (no secret or key-shaped string, whatever produced it)."""
    return redact(frames).encode()


async def response_events(
    events: AsyncIterator[Event], request_id: str, echo: dict[str, Any]
) -> AsyncIterator[bytes]:
    """The Responses API's event stream. It always ends with its terminal event: ``response.completed``,
    ``response.incomplete`` or ``response.failed`` (after an ``error`` event when something broke mid-way)."""
    emit = _Events()
    created = int(time.time())
    try:
        async for frames in _response_events(events, request_id, echo, emit, created):
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
    events: AsyncIterator[Event], request_id: str, echo: dict[str, Any], emit: _Events, created: int
) -> AsyncIterator[str]:
    """The events, framed. Events that become known together leave as one chunk (the opening pair, a message's
    opening with its first delta, the whole ending): fewer writes through the heartbeat wrapper and the socket."""
    started = dumps_unredacted(_skeleton(request_id, echo, created))
    yield emit.with_response("response.created", started) + emit.with_response(
        "response.in_progress", started
    )
    text: list[str] | None = None  # the message item's text, once it is open
    async for part in final_reply(events):
        if isinstance(part, ReplyText):
            frames = _open_message(emit, request_id) if text is None else []
            text = [*(text or []), part.text]
            yield "".join([*frames, _text_delta(emit, request_id, part.text)])
        elif isinstance(part, ReplyFailed):
            failed = _skeleton(request_id, echo, created)
            failed.update(status="failed", error={"code": "server_error", "message": part.error["message"]})
            yield emit("response.failed", response=failed)
            return
        elif isinstance(part, ReplyEnd):
            yield "".join(_ending(emit, part.done, request_id, echo, created, text))
            return


def _open_message(emit: _Events, request_id: str) -> list[str]:
    part = {"type": "output_text", "text": "", "annotations": []}
    return [
        emit("response.output_item.added", output_index=0, item=message_item(request_id, "", "in_progress")),
        emit(
            "response.content_part.added",
            item_id=f"msg_{request_id}",
            output_index=0,
            content_index=0,
            part=part,
        ),
    ]


def _text_delta(emit: _Events, request_id: str, piece: str) -> str:
    return emit(
        "response.output_text.delta",
        item_id=f"msg_{request_id}",
        output_index=0,
        content_index=0,
        delta=piece,
        logprobs=[],
    )


def _ending(
    emit: _Events,
    done: dict[str, Any],
    request_id: str,
    echo: dict[str, Any],
    created: int,
    text: list[str] | None,
) -> list[str]:
    """The message item's closing events, each client tool call as a ``function_call`` item, then the terminal
    ``response.completed`` / ``response.incomplete`` with the finished response."""
    message = done["message"]
    frames: list[str] = []
    if text is None and message.get("content"):  # e.g. the fallback text, or text beside client calls
        text = [message["content"]]
        frames += [*_open_message(emit, request_id), _text_delta(emit, request_id, message["content"])]
    index = 0
    if text is not None:
        whole = "".join(text)
        where = {"item_id": f"msg_{request_id}", "output_index": 0, "content_index": 0}
        frames += [
            emit("response.output_text.done", **where, text=whole, logprobs=[]),
            emit(
                "response.content_part.done",
                **where,
                part={"type": "output_text", "text": whole, "annotations": []},
            ),
            emit("response.output_item.done", output_index=0, item=message_item(request_id, whole)),
        ]
        index = 1
    for call in message.get("tool_calls") or []:
        item = call_item(call)
        where = {"item_id": item["id"], "output_index": index}
        frames += [
            emit("response.output_item.added", output_index=index, item=call_item(call, "in_progress")),
            emit("response.function_call_arguments.delta", **where, delta=item["arguments"]),
            emit(
                "response.function_call_arguments.done",
                **where,
                name=item["name"],
                arguments=item["arguments"],
            ),
            emit("response.output_item.done", output_index=index, item=item),
        ]
        index += 1
    final = response_object(done, request_id, echo, created)
    if text is not None:  # the object names exactly the text that streamed
        calls = [item for item in final["output"] if item["type"] != "message"]
        final["output"] = [message_item(request_id, "".join(text)), *calls]
    kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    return [*frames, emit(kind, response=final)]
