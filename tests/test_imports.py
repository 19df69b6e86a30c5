"""The import graph of the package: no circle, no import up between layers, and no function-local import of the
project's own modules except the ones cold start needs, each listed in ``chatloop.lazy``.

Every import is read from the source with ``ast`` (nothing is imported): at module level, inside a function and
under ``if TYPE_CHECKING:`` alike (a type-only import is a dependency a reader must follow, and the one that turns
into a real import the day someone needs the name at run time). ``from pkg import name`` is the module ``pkg.name``
when there is one, else ``pkg``; relative imports are resolved; and importing ``a.b.c`` runs ``a/b/__init__`` too,
so it counts as an import of every package on the way that the importer is not already inside.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from scripts import layers

from chatloop import lazy
from tests.support.repo import ROOT

SRC = ROOT / "src"

# The layers, lowest first, are one table in scripts/layers.py (docs/architecture.md shows it, written from it by
# ``make layout``): a module may import its own layer and those below, never one above.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (layer.name, layer.modules) for layer in layers.LAYERS
)

LEAVES = ("chatloop.redaction", "chatloop.lazy", "chatloop.tools.javascript.lifecycle")
"""Modules that import nothing of the package, so that anything may use them: redaction (every layer redacts, the
logger first), the table of what is lazy (the app and the snapshot read it), and the sandboxes' lifecycle (it
knows a sandbox only by the ``Member`` protocol)."""


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int
    local: bool  # inside a function: runs when called, not when the importer is imported
    typing_only: bool  # under ``if TYPE_CHECKING:``
    package: bool = False  # a package ``__init__`` the import runs on its way to the module it names

    def where(self) -> str:
        return f"{self.importer}:{self.line} -> {self.target}"


def modules() -> dict[str, Path]:
    """Every module of the package, and the entry point ``app``, by dotted name (a package by its own name)."""
    found = {"app": SRC / "app.py"}
    for path in sorted((SRC / "chatloop").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(known: dict[str, Path]) -> list[Import]:
    """Every import of one of ``known`` by one of them."""
    found: list[Import] = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, local, typing_only in _walk(tree, local=False, typing_only=False):
            for target in _targets(node, package, known):
                found.extend(
                    Import(name, reached, node.lineno, local, typing_only, package=reached != target)
                    for reached in _with_packages(target, name, known)
                    if reached != name
                )
    return found


def _walk(
    node: ast.AST, local: bool, typing_only: bool
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, local, typing_only
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk(child, True, typing_only)
        elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for statement in child.body:
                yield from _walk(ast.Module(body=[statement], type_ignores=[]), local, True)
            for statement in child.orelse:
                yield from _walk(ast.Module(body=[statement], type_ignores=[]), local, typing_only)
        else:
            yield from _walk(child, local, typing_only)


def _targets(node: ast.Import | ast.ImportFrom, package: str, known: dict[str, Path]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            module = _known_prefix(alias.name, known)
            if module:
                yield module
        return
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, *([node.module] if node.module else [])])
    for alias in node.names:
        if f"{base}.{alias.name}" in known:
            yield f"{base}.{alias.name}"
        else:
            module = _known_prefix(base, known)
            if module:
                yield module


def _known_prefix(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _with_packages(target: str, importer: str, known: dict[str, Path]) -> Iterator[str]:
    """``target`` and each package on its way that ``importer`` is not already inside (those run first)."""
    yield target
    parts = target.split(".")
    for i in range(1, len(parts)):
        package = ".".join(parts[:i])
        if package in known and not (importer == package or importer.startswith(package + ".")):
            yield package


def layer_of(module: str) -> int:
    best, level = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), index
    assert level >= 0, f"{module} is in no layer: add it to LAYERS in scripts/layers.py (then make layout)"
    return level


def lazy_routes() -> list[Import]:
    """The app's lazy routes: ``chatloop.api.app`` imports each on its route's first request (``importlib``)."""
    return [Import("chatloop.api.app", module, 0, True, False) for module in lazy.ROUTES]


def cycles(edges: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def graph() -> list[Import]:
    return imports(modules())


def test_the_graph_sees_every_kind_of_import(graph: list[Import]) -> None:
    """The reader itself: a function-local import, a type-only one, a ``from pkg import module`` and the package
    ``__init__`` that an import runs are all edges (without them the checks below could pass on a blind graph)."""
    edges = {(e.importer, e.target) for e in graph}
    assert any(
        e.importer == "app" and e.target == "chatloop.api" and not e.local for e in graph
    )  # create_app
    assert (
        "chatloop.api.app",
        "chatloop.api.chat.endpoint",
    ) in edges  # from chatloop.api.chat import endpoint
    assert ("chatloop.api.app", "chatloop.api.chat") in edges  # ... runs api/chat/__init__ too
    assert ("chatloop.api.app", "chatloop.api") not in edges  # but not the package the app is in
    assert any(e.local for e in graph) and any(e.typing_only for e in graph)


def test_there_is_no_import_circle(graph: list[Import]) -> None:
    found = cycles(graph + lazy_routes())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_module_imports_a_layer_above_its_own(graph: list[Import]) -> None:
    upward = sorted(
        {
            f"{e.where()} ({LAYERS[layer_of(e.importer)][0]} imports {LAYERS[layer_of(e.target)][0]})"
            for e in graph
            if layer_of(e.target) > layer_of(e.importer)
        }
    )
    assert not upward, "imports up between layers:\n" + "\n".join(upward)


def test_the_leaves_import_nothing_of_the_package(graph: list[Import]) -> None:
    found = sorted({e.where() for e in graph if e.importer in LEAVES})
    assert not found, "a leaf imports the package:\n" + "\n".join(found)


def test_the_lazy_routes_are_the_apps_lazy_routes() -> None:
    """``chatloop.lazy.ROUTES`` names real modules of the API, and exactly those the app's route table loads lazily
    (``lazy("<module>", ...)`` in api/app.py): one list, used by the app and by the snapshot alike."""
    known = modules()
    assert all(m in known and m.startswith("chatloop.api.") for m in lazy.ROUTES)
    tree = ast.parse(known["chatloop.api.app"].read_text(encoding="utf-8"))
    used = {
        f"chatloop.api.{node.args[0].value}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("lazy", "lazy_socket")
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }
    assert used == set(lazy.ROUTES)


def test_function_local_imports_are_the_listed_lazy_ones(graph: list[Import]) -> None:
    """A function-local import of the project's own modules is allowed only for a module kept out of ``import app``
    on purpose (cold start), listed in ``chatloop.lazy.FIRST_USE`` or ``chatloop.lazy.ROUTES``; and each listed
    module is imported that way somewhere (listed <=> present)."""
    listed = {**lazy.FIRST_USE, **dict.fromkeys(lazy.ROUTES, "a lazy route")}
    local = [e for e in graph if e.local and not e.typing_only and not e.package]
    unlisted = sorted({e.where() for e in local if e.target not in listed})
    assert not unlisted, "function-local imports not in chatloop.lazy:\n" + "\n".join(unlisted)
    present = {e.target for e in graph if e.local} | set(lazy.ROUTES)
    assert not set(lazy.FIRST_USE) - present, "listed in chatloop.lazy.FIRST_USE, imported lazily nowhere"


def test_lazy_modules_stay_out_of_import_app(graph: list[Import]) -> None:
    """What is listed as lazy is lazy: no module-level import chain from the entry point reaches it."""
    reached, todo = {"app"}, ["app"]
    by_importer: dict[str, set[str]] = {}
    for e in graph:
        if not e.local and not e.typing_only:
            by_importer.setdefault(e.importer, set()).add(e.target)
    while todo:
        for target in by_importer.get(todo.pop(), set()) - reached:
            reached.add(target)
            todo.append(target)
    eager = sorted(reached & ({*lazy.FIRST_USE} | set(lazy.ROUTES)))
    assert not eager, f"listed as lazy, but imported by `import app`: {eager}"


def test_no_module_imports_another_modules_private_names() -> None:
    """A module's ``_private`` names are its own: what another module needs is a public function (the sandbox
    lifecycle's ``join``/``leave``, not its ``_LIVE`` set)."""
    known = modules()
    private = []
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = next(_targets(node, package, known), None)
            if source is None:
                continue
            private += [
                f"{name}:{node.lineno} imports {alias.name}"
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    assert not private, "private names imported across modules:\n" + "\n".join(private)
