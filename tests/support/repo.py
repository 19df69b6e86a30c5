"""The repository the tests run in: its root wherever a test file sits (tests/ or a folder under it), the venv's
tools, and a command run at the root.

Usage::

    result = run(str(BIN / "cfn-lint"), "template.yaml", check=False)
    (ROOT / "build").mkdir(exist_ok=True)
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"


def run(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """``args`` run at the repository's root, output captured as text; raises on failure when ``check``."""
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=check, timeout=300)
