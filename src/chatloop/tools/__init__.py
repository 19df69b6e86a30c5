"""Tools the engine may offer to a model: the ``Tool`` protocol and the ``ToolRegistry``."""

from chatloop.tools.base import Tool, ToolRegistry, ToolResult

__all__ = ["Tool", "ToolRegistry", "ToolResult"]
