"""One running turn (issue #42): ``/chat`` threads and stored responses journal, follow, stop and end their turns
through ``api.runs`` alone, with one journal API, and ``Run`` names one thing.

These read the source (as ``tests/api/test_layers.py`` does): what they guard is where code lives, so that the
two wire APIs cannot drift apart again. Each check is also tried on a snippet written the old way, so it cannot pass
on a blind scan.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.repo import ROOT

SRC = ROOT / "src" / "chatloop"
RUNS = SRC / "api" / "runs"

JOURNAL_CALLS = frozenset({"append_events", "events_after"})
"""The store's two journal methods (a response's events, a ``/chat`` turn's under its run)."""
RUNNING_PARTS = frozenset({"Tracked", "run_to_the_end", "watcher", "end_run", "follow", "runs_of"})
"""What a door once wired by hand to run or follow a stored turn, now ``RunningTurn``'s and ``api.runs.follow``'s."""


def modules(root: Path) -> dict[str, ast.Module]:
    return {
        str(p.relative_to(SRC)): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(root.rglob("*.py"))
    }


def called_methods(tree: ast.AST, names: frozenset[str]) -> list[str]:
    """The calls in ``tree`` of a method or function named in ``names``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else None
            )
            if name in names:
                found.append(f"{name} (line {node.lineno})")
    return found


def imported_names(tree: ast.AST, package: str, names: frozenset[str]) -> list[str]:
    """The ``names`` imported from a module of ``package``."""
    return [
        f"{alias.name} from {node.module}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package)
        for alias in node.names
        if alias.name in names
    ]


def test_only_the_journal_writes_or_reads_a_journal():
    """``append_events`` wrote two different journals; now ``api.runs.journal``'s ``EventLog`` is the one API."""
    outside = {
        name: calls
        for name, tree in modules(SRC / "api").items()
        if name != "api/runs/journal.py" and (calls := called_methods(tree, JOURNAL_CALLS))
    }
    assert outside == {}, f"journal calls outside api/runs/journal.py (use its EventLog): {outside}"


def test_the_doors_run_and_follow_stored_turns_through_runs_alone():
    doors = {name: tree for name, tree in modules(SRC / "api").items() if not name.startswith("api/runs/")}
    wired = {
        name: found
        for name, tree in doors.items()
        if (found := imported_names(tree, "chatloop.api.runs", RUNNING_PARTS))
    }
    wired.pop("api/openai/responses/background.py", None)  # its queueing and worker side (runs_of: the queue)
    wired.pop("api/openai/responses/worker.py", None)
    assert wired == {}, (
        f"doors wiring a running turn by hand (use api.runs.turn.RunningTurn / api.runs.follow): {wired}"
    )


def test_the_checks_see_the_old_wiring():
    old = ast.parse(
        "from chatloop.api.runs.running import Tracked, run_to_the_end\n"
        "async def f(runs):\n    await runs.append_events('o', 't', [], d)\n    await store.events_after('o', 'r', 1, d)\n"
    )
    assert len(called_methods(old, JOURNAL_CALLS)) == 2
    assert imported_names(old, "chatloop.api.runs", RUNNING_PARTS) == [
        "Tracked from chatloop.api.runs.running",
        "run_to_the_end from chatloop.api.runs.running",
    ]


def test_run_names_one_thing():
    """A stored turn's run (``store.runs.Run``); the idempotency claim it once shared the name with is ``Claimed``."""
    classes = [
        name
        for name, tree in modules(SRC).items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == "Run"
    ]
    assert len(classes) == 1 and classes[0].startswith("store/"), f"classes named Run: {classes}"
