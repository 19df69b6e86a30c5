"""Sizes that read in one sitting (issue #42): no module of ``src/`` over 400 lines and no function over 60, unless
the first sentence of its docstring says why it is longer (``... is longer than 400 lines because ...``).

The checker reads the source with ``ast`` (nothing is imported); a function's length runs from its ``def`` (its
decorators not counted) to its last line, its docstring and comments included, since that is what a reader reads.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.repo import ROOT

MODULE_LINES = 400
FUNCTION_LINES = 60
REASON = "longer than"
"""What the first sentence of a docstring says when a module or function is long on purpose (and why)."""


def first_sentence(docstring: str | None) -> str:
    """The first sentence of a docstring (up to its first full stop followed by a space or line end)."""
    text = " ".join((docstring or "").split())
    return text.split(". ", 1)[0]


def explained(docstring: str | None, limit: int) -> bool:
    """Whether the first sentence says why the limit is passed: ``longer than <limit> lines because ...``."""
    sentence = first_sentence(docstring)
    return f"{REASON} {limit} lines because" in sentence


def oversized(path: Path, root: Path) -> list[str]:
    """What is too long in one file, each with what to do about it."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    where = path.relative_to(root)
    found: list[str] = []
    lines = len(text.splitlines())
    if lines > MODULE_LINES and not explained(ast.get_docstring(tree), MODULE_LINES):
        found.append(
            f"{where}: {lines} lines (limit {MODULE_LINES}): split it by job into modules of at most "
            f"{MODULE_LINES} lines, or begin its docstring with a sentence saying it is "
            f"'{REASON} {MODULE_LINES} lines because ...'"
        )
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > FUNCTION_LINES and not explained(ast.get_docstring(node), FUNCTION_LINES):
                found.append(
                    f"{where}:{node.lineno} {node.name}(): {length} lines (limit {FUNCTION_LINES}): move steps of "
                    f"it into functions of their own, or begin its docstring with a sentence saying it is "
                    f"'{REASON} {FUNCTION_LINES} lines because ...'"
                )
    return found


def test_no_module_or_function_in_src_is_over_its_size() -> None:
    found = [problem for path in sorted((ROOT / "src").rglob("*.py")) for problem in oversized(path, ROOT)]
    assert found == [], "too long to read in one sitting:\n" + "\n".join(found)


def test_the_checker_finds_a_long_module_and_function_and_accepts_a_reason(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    long_function = f"def f():\n{body}\n"
    (tmp_path / "a.py").write_text(long_function)
    (tmp_path / "b.py").write_text("\n" * MODULE_LINES + "x = 1\n")
    (tmp_path / "c.py").write_text(
        f'"""Kept whole: it is {REASON} {MODULE_LINES} lines because it is one table."""\n'
        + "\n" * MODULE_LINES
        + f'def g():\n    """One step: {REASON} {FUNCTION_LINES} lines because it is one match."""\n{body}\n'
    )
    (tmp_path / "d.py").write_text(
        f'def h():\n    """Long. It is {REASON} {FUNCTION_LINES} lines because."""\n{body}\n'
    )
    assert [p.split(":")[0] for p in oversized(tmp_path / "a.py", tmp_path)] == ["a.py"]
    assert "f(): 61 lines" in oversized(tmp_path / "a.py", tmp_path)[0]
    assert "split it by job" in oversized(tmp_path / "b.py", tmp_path)[0]
    assert oversized(tmp_path / "c.py", tmp_path) == []
    assert len(oversized(tmp_path / "d.py", tmp_path)) == 1  # the reason is not in the first sentence
