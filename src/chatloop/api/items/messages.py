"""Items as chat messages: a request's input, a stored response chain or a conversation, read back as the messages the
engine runs on (``/v1/responses`` turns and ``/chat`` turns in a conversation alike).

Usage::

    messages_of([InputMessage(role="user", content="5!")])        # [{"role": "user", "content": "5!"}]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from chatloop.api.items.approvals import McpApprovalRequestInput, McpApprovalResponseInput, denied_messages
from chatloop.api.items.compaction import CompactionInput
from chatloop.api.items.inputs import (
    CodeInterpreterCallItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputItem,
    InputMessage,
)
from chatloop.api.items.mcp import McpCallInput
from chatloop.engine.messages import Message
from chatloop.jsontypes import JSONObject
from chatloop.tools.javascript.tool import TOOL_NAME


def messages_of(items: Sequence[InputItem], answering: frozenset[str] = frozenset()) -> list[Message]:
    """Input items (a request's, or stored ones read back) as chat messages. An approval request is no message
    until it is answered: a denial answered earlier is the call and the denial the model was told; an approval
    is the ``mcp_call`` that followed it; the ones in ``answering`` the turn itself adds."""
    messages: list[Message] = []
    requests = {i.id: i for i in items if isinstance(i, McpApprovalRequestInput)}
    for item in items:
        if isinstance(item, InputMessage):
            role = "system" if item.role == "developer" else item.role
            messages.append({"role": role, "content": item.chat_content()})
        elif isinstance(item, FunctionCallItem):
            call = _call(item.call_id, item.name, item.arguments)
            _add_call(messages, call, lambda last: last["role"] == "assistant")
        elif isinstance(item, FunctionCallOutputItem):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
        elif isinstance(
            item, CodeInterpreterCallItem
        ):  # an earlier run, replayed (the Agents SDK sends outputs)
            code = json.dumps({"code": item.code or ""})
            call = _call(item.call_id(), TOOL_NAME, code)
            _add_call(messages, call, lambda last: last["role"] == "assistant" and not last.get("content"))
            messages.append({"role": "tool", "tool_call_id": item.call_id(), "content": item.logs()})
        elif isinstance(item, McpCallInput):  # an earlier MCP call, replayed: the call and its answer
            messages += item.messages()
        elif isinstance(item, CompactionInput):  # it stands for everything before it
            messages = [item.message()]
        elif isinstance(item, McpApprovalResponseInput) and not item.approve:
            request = requests.get(item.approval_request_id)
            if request is not None and request.id not in answering:
                messages += denied_messages(request, item.reason)
    return messages


def _call(call_id: str, name: str, arguments: str) -> JSONObject:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _add_call(messages: list[Message], call: JSONObject, joins: Callable[[Message], bool]) -> None:
    """``call`` added to the last message when ``joins`` it (an assistant message's calls), else as a new assistant
    message that calls it."""
    last = messages[-1] if messages else None
    if last is not None and joins(last):
        calls = last.get("tool_calls")
        if isinstance(calls, list):
            calls.append(call)
        else:
            last["tool_calls"] = [call]
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
