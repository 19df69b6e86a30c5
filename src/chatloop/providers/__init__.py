"""Chat models behind one protocol (``base.ChatModel``).

``sdk`` (with ``groq``, ``openai``) and ``stream`` adapt the official SDKs; ``failures`` sorts their failures into a
small taxonomy; ``chain`` is the FallbackChain (ordering and fallback), helped by ``health`` (cooldowns, disabled
models), ``recovery`` (tool calls a model wrote as text when its native call failed) and ``window`` (``fit``: the
pure decision of which window holds a conversation, and trimming), over ``tokens`` (the token estimate);
``textcall_formats`` parses tool calls written as text; ``catalog`` + ``models.json`` hold each model's capabilities;
``factory`` builds the chain from settings; ``demo`` (with ``schema_values``) is the offline demo model.
"""

from chatloop.providers.base import (
    ChatModel,
    ModelFallback,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolCall,
    Usage,
)

__all__ = ["ChatModel", "ModelFallback", "ModelRequest", "ModelResponse", "TextDelta", "ToolCall", "Usage"]
