"""The node client scripts of tests/clients/ (the Vercel AI SDK's, openai-node's), run as a test runs them.

Usage::

    result = run_node("tool_choice.mjs", "7", "responses", env={"CHATLOOP_BASE_URL": server.base_url})
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest

from tests.support.repo import ROOT

CLIENTS = ROOT / "tests" / "clients"


def run_node(script: str, *args: str, env: dict[str, str]) -> dict[str, Any]:
    """Run tests/clients/<script> with ``args``; its last stdout line is the JSON result."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the Vercel AI SDK tests need it (apt-get install nodejs)")
    if not (CLIENTS.parent.parent / "node_modules" / "ai-v7").is_dir():
        pytest.fail("node_modules is missing or stale: `make install` runs npm ci at the repository root")
    done = subprocess.run(
        [node, script, *args],
        cwd=CLIENTS,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=90,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(lines[-1])
    assert result["ok"], (result, done.stderr[-2000:])
    return result
