"""Processes a test started, and only those: a developer may be running `make run` meanwhile.

Usage::

    before = children_of()            # this test process's own children
    children_of(server.pid)           # the children of a server the test started (its sandbox runs)
"""

from __future__ import annotations

import contextlib
from pathlib import Path


def children_of(pid: int | str = "self") -> set[int]:
    """The child processes of ``pid`` (every thread's), from /proc: nothing looked up by name or command line."""
    pids: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            pids.update(int(child) for child in (task / "children").read_text().split())
    return pids
