"""Input items: what a request sends as ``input`` (the Responses API's shapes), and what a conversation or a stored
response is read back as, so that stored items become messages like any input (``api.items.messages``). Validated
with pydantic; built on first use (``defer_build``: the turn endpoints that never read items pay nothing).

Usage::

    TypeAdapter(list[InputItem]).validate_python([{"role": "user", "content": "hi"}])   # [InputMessage(...)]
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from chatloop.api.items.approvals import McpApprovalRequestInput, McpApprovalResponseInput
from chatloop.api.items.compaction import CompactionInput
from chatloop.api.items.mcp import McpCallInput, McpListToolsInput
from chatloop.jsontypes import JSONObject, JSONValue

LAZY = ConfigDict(defer_build=True)


class InputText(BaseModel):
    model_config = LAZY

    type: Literal["input_text", "output_text", "text"]
    text: StrictStr


class InputImage(BaseModel):
    """An ``input_image`` part: an image by ``image_url`` (https, or a ``data:`` URL), checked at the door
    (``api.turns.images``: only in a user message, ``file_id`` refused by name, the limits)."""

    model_config = LAZY

    type: Literal["input_image"]
    image_url: StrictStr | None = None
    file_id: StrictStr | None = None
    detail: StrictStr = "auto"

    def stored(self) -> JSONObject:
        """As OpenAI shows a kept ``input_image`` part."""
        return {"type": "input_image", "image_url": self.image_url, "file_id": None, "detail": self.detail}

    def chat_part(self) -> JSONObject:
        """As chat completions (and the engine) take it."""
        return {"type": "image_url", "image_url": {"url": self.image_url or "", "detail": self.detail}}


class InputMessage(BaseModel):
    """A ``message`` item (the ``type`` may be left out, as the SDKs' "easy input message" does)."""

    model_config = LAZY

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: StrictStr | list[InputText | InputImage]

    def text(self) -> str:
        """The message's text (its images left out)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, InputText))

    def images(self) -> list[InputImage]:
        return [] if isinstance(self.content, str) else [p for p in self.content if isinstance(p, InputImage)]

    def chat_content(self) -> str | list[JSONValue]:
        """The content as an engine message holds it: the text, or, with images, text and ``image_url`` parts in
        order."""
        if not self.images():
            return self.text()
        return [
            p.chat_part() if isinstance(p, InputImage) else {"type": "text", "text": p.text}
            for p in self.content
            if not isinstance(p, str)
        ]

    @classmethod
    def of_chat(cls, role: str, content: object) -> InputMessage:
        """An engine (chat-completions-shaped) message as an input item: ``image_url`` parts become
        ``input_image``."""
        if isinstance(content, list):
            content = [
                {"type": "input_image", **_image_of(p)}
                if isinstance(p, dict) and p.get("type") == "image_url"
                else p
                for p in content
            ]
        return cls.model_validate({"role": role, "content": content})


def _image_of(part: JSONObject) -> JSONObject:
    image = part.get("image_url")
    image = image if isinstance(image, dict) else {}
    return {"image_url": image.get("url"), "detail": image.get("detail", "auto")}


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
