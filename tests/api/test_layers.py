"""api/ has a direction (issue #32): every import inside ``src/chatloop/api`` goes down its layers, never up, at any
place in a module: at its top, inside a function, or under ``TYPE_CHECKING``.

    http -> idempotency -> items -> turns -> runs -> the wire APIs (chat/, openai/) -> page/ -> app

- ``http``: one request's plumbing; ``idempotency``: a request answered once; ``items``: the item vocabulary
  ``/chat`` threads, stored responses and conversations share, owned by none of them; ``turns``: the turn machinery
  every endpoint shares (checks, request schemas, the ``TurnRequest`` builder, serving, budgets, approvals,
  compaction); ``runs``: turns kept in the store (journal, record, follow, stop); then the wire APIs, the page and the
  app that routes them all.
- The wire APIs borrow nothing from each other: what two of them share lives in a lower layer (or, for the two OpenAI
  APIs, in ``openai/extension.py``).
- A function-local import of the project's own modules is kept only where cold start needs it, each listed with its
  reason in ``chatloop.lazy`` (checked by ``tests/test_imports.py``, with the cycles and the layers outside api/).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
from scripts.layers import API_LAYERS, api_layer_of

from tests.support.repo import ROOT

SRC = ROOT / "src"
API = SRC / "chatloop" / "api"

LAYERS = API_LAYERS  # the one table's api/ part (scripts/layers.py), lowest first
WIRE_APIS = (
    "chatloop.api.chat",
    "chatloop.api.openai.chat_completions",
    "chatloop.api.openai.models",
    "chatloop.api.openai.responses",
    "chatloop.api.openai.conversations",
)


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    local: bool
    """Inside a function (module-level and ``TYPE_CHECKING`` imports are not)."""


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(root: Path) -> list[Import]:
    """Every import of a module under ``root`` (``root`` holds the ``chatloop`` package), wherever it stands."""
    modules = {module_name(p, root): p for p in root.rglob("*.py")}
    found: list[Import] = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node, local in _walk(tree, local=False):
            for target in _targets(node, package):
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.append(Import(name, target, node.lineno, local))
    return found


def _walk(node: ast.AST, local: bool) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
    for child in ast.iter_child_nodes(node):
        inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if isinstance(child, ast.Import | ast.ImportFrom):
            found.append((child, local))
        found += _walk(child, inner)
    return found


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
    return [
        f"{base}.{alias.name}" for alias in node.names
    ]  # a submodule, or a name of ``base`` (trimmed to it)


def layer_of(module: str) -> str | None:
    if not module.startswith("chatloop.api"):
        return None
    layer = api_layer_of(module)
    assert layer in LAYERS, f"{module}: in no layer of api/ (add it to scripts/layers.py, in its place)"
    return layer


def wire_api_of(module: str) -> str | None:
    return next((w for w in WIRE_APIS if module == w or module.startswith(w + ".")), None)


def upward(imports: list[Import]) -> list[str]:
    """Each import that goes up the layers, or from one wire API into another."""
    wrong = []
    for i in imports:
        here, there = layer_of(i.importer), layer_of(i.imported)
        if here is None or there is None:
            continue
        if LAYERS.index(there) > LAYERS.index(here):
            wrong.append(f"{i.importer}:{i.line} imports {i.imported} ({here} -> {there}: upward)")
        elif (a := wire_api_of(i.importer)) and (b := wire_api_of(i.imported)) and a != b:
            wrong.append(f"{i.importer}:{i.line} imports {i.imported} (one wire API borrowing from another)")
    return wrong


def test_no_api_layer_imports_a_higher_one_anywhere_in_a_module():
    assert upward(imports_of(SRC)) == []


def test_every_api_module_is_in_a_layer():
    for path in API.rglob("*.py"):
        layer_of(module_name(path, SRC))  # asserts


@pytest.mark.parametrize(
    ("source", "hidden_as"),
    [
        ("from chatloop.api.chat import endpoint\n", "at the top"),
        ("def f():\n    from chatloop.api.chat.endpoint import chat\n", "inside a function"),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from chatloop.api.chat.endpoint import chat\n",
            "under TYPE_CHECKING",
        ),
        ("from ..chat import endpoint\n", "relatively"),
    ],
)
def test_the_check_finds_an_upward_import_however_it_is_hidden(tmp_path, source, hidden_as):
    """A turns module importing an endpoint is found at the top, in a function, under TYPE_CHECKING or relatively;
    and an openai module borrowing from /chat is found as one wire API borrowing from another."""
    package = tmp_path / "chatloop" / "api"
    for sub in ("turns", "chat", "openai/responses"):
        (package / sub).mkdir(parents=True)
    for init in ("", "turns/", "chat/", "openai/", "openai/responses/"):
        (package / init / "__init__.py").write_text("")
    (package / "chat" / "endpoint.py").write_text("def chat():\n    pass\n")
    (package / "turns" / "serve.py").write_text(source)
    (package / "openai" / "responses" / "run.py").write_text(source.replace("..chat", "...chat"))
    found = upward(imports_of(tmp_path))
    importers = sorted(f.split(":")[0] for f in found)
    assert importers == ["chatloop.api.openai.responses.run", "chatloop.api.turns.serve"], (hidden_as, found)
    assert any("upward" in f for f in found) and any("borrowing" in f for f in found), (hidden_as, found)
