"""The source tree as docs/architecture.md shows it: every package with the first sentence of its docstring and its
modules, generated from the code so the map cannot drift from the house; and the layer table of ``scripts.layers``
(tests/docs/test_layout_tree.py compares both with the page).

Usage::

    python -m scripts.layout            # print the tree
    python -m scripts.layout --write    # rewrite both blocks in docs/architecture.md (``make layout``)
"""

from __future__ import annotations

import ast
import re
import sys
import textwrap
from pathlib import Path

from scripts.layers import markdown

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "chatloop"
PAGE = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- layout: begin (make layout) -->", "<!-- layout: end -->"
LAYERS_BEGIN, LAYERS_END = "<!-- layers: begin (make layout) -->", "<!-- layers: end -->"
WIDTH = 110
"""The longest line the tree writes: the docs' code blocks read without scrolling at this width."""
COLUMN = 28
"""Where every package's summary starts, whatever its depth."""


def summary(path: Path) -> str:
    """The first sentence of a module's docstring, without reStructuredText's double backticks."""
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = docstring.split("\n\n")[0].replace("\n", " ").replace("``", "")
    sentence = re.split(r"(?<=[.;])\s", first, maxsplit=1)[0].rstrip(".;")
    head, colon, rest = sentence.partition(": ")
    if colon and head != path.parent.name:
        return head  # "What it is: what it holds" -- the map shows what it is
    return rest or sentence


def package_lines(package: Path, depth: int) -> list[str]:
    """A package's line (name and summary), its modules wrapped beneath it, then its sub-packages'."""
    indent = "    " * depth
    label = f"{indent}{package.name}/"
    lines = textwrap.wrap(
        f"{label:<{COLUMN}} {summary(package / '__init__.py')}",
        WIDTH,
        subsequent_indent=" " * (COLUMN + 1),
    )
    modules = sorted(p.stem for p in package.glob("*.py") if p.name != "__init__.py")
    if modules:
        # "·" ends a name rather than starting the next, so a line never begins with one
        names = [f"{name} ·" for name in modules[:-1]] + modules[-1:]
        lines += textwrap.wrap(
            " ".join(names).replace(" ", "\u00a0").replace("·\u00a0", "· "),
            WIDTH,
            initial_indent=indent + "    ",
            subsequent_indent=indent + "    ",
            break_on_hyphens=False,
        )
        lines = [line.replace("\u00a0", " ") for line in lines]
    for child in sorted(p for p in package.iterdir() if (p / "__init__.py").is_file()):
        lines += package_lines(child, depth + 1)
    return lines


def render() -> str:
    """The tree of ``src/chatloop``, packages first-sentence-labelled, as the docs page holds it."""
    return "\n".join(package_lines(SOURCE, 0)) + "\n"


def block(tree: str) -> str:
    return f"{BEGIN}\n```text\n{tree}```\n{END}"


def documented() -> str:
    """The tree as docs/architecture.md holds it now."""
    found = re.search(
        re.escape(BEGIN) + r"\n```text\n(.*?)```\n" + re.escape(END), PAGE.read_text(), re.DOTALL
    )
    if not found:
        raise SystemExit(f"{PAGE} has no layout block ({BEGIN} … {END})")
    return found.group(1)


def documented_layers() -> str:
    """The layer table as docs/architecture.md holds it now."""
    found = re.search(
        re.escape(LAYERS_BEGIN) + r"\n(.*?)" + re.escape(LAYERS_END), PAGE.read_text(), re.DOTALL
    )
    if not found:
        raise SystemExit(f"{PAGE} has no layer table ({LAYERS_BEGIN} … {LAYERS_END})")
    return found.group(1)


def _replaced(page: str, begin: str, end: str, text: str) -> str:
    start, stop = page.index(begin), page.index(end) + len(end)
    return page[:start] + text + page[stop:]


def main(argv: list[str]) -> None:
    if "--write" in argv:
        page = _replaced(PAGE.read_text(), BEGIN, END, block(render()))
        page = _replaced(page, LAYERS_BEGIN, LAYERS_END, f"{LAYERS_BEGIN}\n{markdown()}{LAYERS_END}")
        PAGE.write_text(page)
    else:
        sys.stdout.write(render())


if __name__ == "__main__":
    main(sys.argv[1:])
