"""Chat models behind one protocol: SDK adapters, the fallback chain, the catalog and the demo model."""

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
