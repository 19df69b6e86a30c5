"""Fixtures the engine tests share."""

import pytest


@pytest.fixture
def registry(sandbox):
    """The real sandbox's execute_javascript as a turn's only tool. Used by tests/engine/test_seed_scenarios.py and tests/engine/test_turn_contract.py
    (modules with a ``registry`` of their own use theirs)."""
    from chatloop.tools.base import ToolRegistry
    from chatloop.tools.javascript import ExecuteJavaScriptTool

    return ToolRegistry([ExecuteJavaScriptTool(sandbox)])
