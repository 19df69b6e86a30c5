"""The ``execute_javascript`` tool and its Deno subprocess sandbox."""

from chatloop.tools.javascript.frames import SandboxResult
from chatloop.tools.javascript.sandbox import JavaScriptSandbox
from chatloop.tools.javascript.tool import ExecuteJavaScriptTool

__all__ = ["ExecuteJavaScriptTool", "JavaScriptSandbox", "SandboxResult"]
