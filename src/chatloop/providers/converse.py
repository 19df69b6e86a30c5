"""The loop's contract on Amazon Bedrock's Converse API: an OpenAI-shaped ``ModelRequest`` as Converse parameters,
and ConverseStream's events folded back into text deltas, tool calls, a finish reason and usage. Pure: no boto3.

Converse differs from chat completions in ways the loop must not feel: the system prompt is a separate ``system``
list; tool calls are ``toolUse`` blocks of the assistant message and their results ``toolResult`` blocks of one
user message; consecutive messages of the same role are one message; ``tool_choice`` is ``auto``/``any``/``tool`` and
there is no "none" (no tools are sent, and earlier tool exchanges are told as text, since Converse refuses
``toolUse`` blocks without a ``toolConfig``).

Usage::

    params = converse_params(info, request)          # {"modelId": ..., "messages": [...], "system": [...], ...}
    folder = ConverseFolder()
    for event in client.converse_stream(**params)["stream"]:
        for text in folder.add(event): print(text, end="")
    folder.tool_calls(), folder.finish_reason(), folder.usage()
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from chatloop.jsontypes import JSONObject, JSONValue
from chatloop.providers.base import ModelRequest, ToolCall, Usage, tool_name
from chatloop.providers.catalog import ModelInfo
from chatloop.providers.failures import BadRequest
from chatloop.textsafe import text_safe

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
"""Converse's ``stopReason`` as chat completions' ``finish_reason``."""

IMAGE_FORMATS = {"png", "jpeg", "gif", "webp"}
CONVERSATION_START = "(The conversation so far.)"
"""The user turn put before a conversation that starts with the assistant: Converse requires a user message first."""


def converse_params(info: ModelInfo, request: ModelRequest) -> dict[str, Any]:
    """The ``converse_stream`` keyword arguments for ``request`` to the model ``info`` (its ``model_id`` is the
    Bedrock model or inference-profile id). Raises ``BadRequest`` naming what Converse cannot carry."""
    offered = bool(request.tools) and request.tool_choice != "none"
    system, messages = converse_messages(request.messages, tools_offered=offered)
    params: dict[str, Any] = {"modelId": info.model_id, "messages": messages}
    if system:
        params["system"] = system
    inference = _inference_config(request)
    if inference:
        params["inferenceConfig"] = inference
    if offered:
        params["toolConfig"] = tool_config(request.tools or [], request.tool_choice, info.tool_choices)
    output = _output_config(request.response_format)
    if output:
        params["outputConfig"] = output
    return params


def _inference_config(request: ModelRequest) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if request.max_tokens is not None:
        config["maxTokens"] = request.max_tokens
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if request.top_p is not None:
        config["topP"] = request.top_p
    stop = request.params.get("stop")
    if isinstance(stop, str):
        config["stopSequences"] = [stop]
    elif isinstance(stop, list):
        config["stopSequences"] = [s for s in stop if isinstance(s, str)]
    refused = sorted(k for k in request.params if k != "stop")
    if (
        refused
    ):  # the chain passes over models whose catalog entry refuses these: one that does not say lands here
        raise BadRequest(f"Converse does not take {', '.join(refused)}", status=400)
    return config


def _output_config(response_format: JSONObject | None) -> dict[str, Any] | None:
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    spec = (response_format or {}).get("json_schema")
    if kind != "json_schema" or not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise BadRequest(f"Converse does not take response_format {kind!r} (only json_schema)", status=400)
    schema: dict[str, Any] = {"schema": json.dumps(spec["schema"])}
    for key in ("name", "description"):
        if isinstance(spec.get(key), str):
            schema[key] = spec[key]
    return {"textFormat": {"type": "json_schema", "structure": {"jsonSchema": schema}}}


def tool_config(
    tools: list[JSONObject], tool_choice: str | JSONObject | None, takes: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """OpenAI tool definitions and ``tool_choice`` as Converse's ``toolConfig``. ``takes``: the ``toolChoice`` forms
    the model takes (its catalog entry; None: any). A named tool for a model without the ``tool`` form is sent as
    that tool alone with ``any`` (the same obligation); a choice the model cannot hold at all is refused by name."""
    choice: dict[str, Any] | None = None
    named = None
    if tool_choice == "required":
        choice = {"any": {}}
    elif isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, dict) else tool_choice.get("name")
        if isinstance(name, str):
            named, choice = name, {"tool": {"name": name}}
    elif tool_choice == "auto":
        choice = {"auto": {}}
    if named is not None and takes is not None and "tool" not in takes and "any" in takes:
        tools = [t for t in tools if tool_name(t) == named]
        choice = {"any": {}}
    if choice is not None and takes is not None and next(iter(choice)) not in takes and "auto" not in choice:
        raise BadRequest(
            f"tool_choice: this model takes no {next(iter(choice))!r} toolChoice on Converse", status=400
        )
    config: dict[str, Any] = {"tools": [spec for tool in tools if (spec := _tool_spec(tool))]}
    if choice is not None and (takes is None or next(iter(choice)) in takes):
        config["toolChoice"] = choice
    return config


def _tool_spec(tool: JSONObject) -> dict[str, Any] | None:
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return None
    parameters = function.get("parameters")
    spec: dict[str, Any] = {
        "name": function["name"],
        "inputSchema": {"json": parameters if isinstance(parameters, dict) else {"type": "object"}},
    }
    if isinstance(function.get("description"), str) and function["description"]:
        spec["description"] = function["description"]
    return {"toolSpec": spec}


def converse_messages(
    messages: list[dict[str, Any]], tools_offered: bool = True
) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """``(system, messages)`` in Converse's shape: system prompts apart, each message a list of content blocks,
    consecutive same-role messages merged. Without ``tools_offered``, tool calls and results are told as text."""
    system: list[dict[str, str]] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            text = _text_of(message.get("content"))
            if text:
                system.append({"text": text})
            continue
        blocks = _blocks(message, tools_offered)
        if not blocks:
            continue
        converse_role = "assistant" if role == "assistant" else "user"
        if out and out[-1]["role"] == converse_role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": converse_role, "content": blocks})
    if out and out[0]["role"] == "assistant":  # Converse refuses it; chat completions (and clients) allow it
        out.insert(0, {"role": "user", "content": [{"text": CONVERSATION_START}]})
    return system, out


def _blocks(message: dict[str, Any], tools_offered: bool) -> list[dict[str, Any]]:
    role = message.get("role")
    if role == "tool":
        result = tool_result(message)
        if tools_offered:
            return [result]
        content = message.get("content")
        return [{"text": f"[tool result {message.get('tool_call_id', '')}]: {_text_of(content)}"}]
    blocks = _content_blocks(message.get("content"))
    for call in message.get("tool_calls") or [] if role == "assistant" else []:
        function = call.get("function") or {}
        name, arguments = str(function.get("name", "")), str(function.get("arguments") or "{}")
        if tools_offered:
            block = {"toolUseId": str(call.get("id", "")), "name": name, "input": _tool_input(arguments)}
            blocks.append({"toolUse": block})
        else:
            blocks.append({"text": f"[called {name} ({call.get('id', '')}) with {arguments}]"})
    return blocks


def _content_blocks(content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []  # Converse refuses a blank text block
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") in ("text", "input_text", "output_text") and part.get("text"):
            blocks.append({"text": str(part["text"])})
        elif part.get("type") in ("image_url", "input_image"):
            blocks.append(image_block(part))
    return blocks


def image_block(part: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions ``image_url`` part (or a Responses ``input_image``) as a Converse ``image`` block: the
    bytes of a ``data:`` URL (Converse fetches no URL)."""
    url = part.get("image_url")
    url = url.get("url") if isinstance(url, dict) else url
    if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
        raise BadRequest("messages: Bedrock takes images as data:image/...;base64 URLs only", status=400)
    header, _, data = url.partition(";base64,")
    kind = header.removeprefix("data:image/").lower().replace("jpg", "jpeg")
    if kind not in IMAGE_FORMATS:
        raise BadRequest(f"messages: Bedrock does not take image/{kind} images", status=400)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("messages: an image's data URL is not valid base64", status=400) from None
    return {"image": {"format": kind, "source": {"bytes": raw}}}


def tool_result(message: dict[str, Any]) -> dict[str, Any]:
    """A ``tool`` message as a ``toolResult`` block: a JSON object as ``json``, anything else as ``text``; a result
    that is an object with an ``error`` (the loop's shape for a failed run) has ``status: error``."""
    text = _text_of(message.get("content"))
    try:
        value: JSONValue = json.loads(text)
    except ValueError:
        value = None
    result: dict[str, Any] = {"toolUseId": str(message.get("tool_call_id", ""))}
    if isinstance(value, dict):
        result["content"] = [{"json": value}]
        if "error" in value:
            result["status"] = "error"
    else:
        result["content"] = [{"text": text or "(no output)"}]
    return {"toolResult": result}


def _tool_input(arguments: str) -> JSONObject:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content)


class ConverseFolder:
    """ConverseStream's events (as boto3 yields them: ``{"contentBlockDelta": {...}}``) folded into the answer."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self.stop_reason: str | None = None
        self._usage: Usage | None = None
        self.ended = False

    def add(self, event: dict[str, Any]) -> list[str]:
        """Fold one event; returns the text it adds (empty for the others). An event of another shape than Converse's
        (a field missing, a list where an object belongs) adds nothing rather than failing the turn."""
        if "contentBlockDelta" in event:
            body = _object(event["contentBlockDelta"])
            delta = _object(body.get("delta"))
            if isinstance(delta.get("text"), str) and delta["text"]:
                piece = text_safe(delta["text"])
                self.text.append(piece)
                return [piece]
            if "toolUse" in delta:
                given = _object(delta["toolUse"]).get("input")
                self._slot(body.get("contentBlockIndex"))["input"] += given if isinstance(given, str) else ""
        elif "contentBlockStart" in event:
            body = _object(event["contentBlockStart"])
            start = _object(body.get("start")).get("toolUse")
            if isinstance(start, dict):
                slot = self._slot(body.get("contentBlockIndex"))
                slot["id"], slot["name"] = str(start.get("toolUseId") or ""), str(start.get("name") or "")
        elif "messageStop" in event:
            self.stop_reason = str(_object(event["messageStop"]).get("stopReason") or "end_turn")
        elif "metadata" in event:
            self._usage = usage_of(_object(event["metadata"]).get("usage")) or self._usage
            self.ended = True
        return []

    def _slot(self, index: object) -> dict[str, Any]:
        key = index if isinstance(index, int) and not isinstance(index, bool) else 0
        return self._calls.setdefault(key, {"id": "", "name": "", "input": ""})

    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall(
                id=text_safe(s["id"]), name=text_safe(s["name"]), arguments=text_safe(s["input"]) or "{}"
            )
            for _, s in sorted(self._calls.items())
            if s["name"]
        ]

    def finish_reason(self) -> str | None:
        if self.stop_reason is None:
            return None
        return FINISH_REASONS.get(self.stop_reason, self.stop_reason)

    def usage(self) -> Usage | None:
        return self._usage


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def usage_of(raw: object) -> Usage | None:
    """Converse's ``usage`` as the turn's: the prompt counts cache reads and writes too (Bedrock's ``inputTokens``
    leaves them out), so budgets and the context calibration see every token the model read."""
    if not isinstance(raw, dict):
        return None
    prompt = sum(
        int(raw.get(k) or 0) for k in ("inputTokens", "cacheReadInputTokens", "cacheWriteInputTokens")
    )
    completion = int(raw.get("outputTokens") or 0)
    return Usage(prompt, completion, prompt + completion)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
