"""The suite's layout: shared fixtures live in conftest.py files and shared helpers in tests/support/, so no test
file, conftest, bench module or script imports a test module (``tests.test_x`` or, once the tests sit in folders by
layer, ``tests.api.test_x``), nor a conftest. Every import counts: module-level, function-local and
``TYPE_CHECKING`` alike, absolute or relative, and ``importlib.import_module`` with a literal name."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.repo import ROOT


def imported_modules(tree: ast.AST, package: str) -> Iterator[tuple[int, str]]:
    """``(line, dotted name)`` of every module ``tree`` imports, relative imports resolved against ``package`` (the
    dotted package of the file); ``from a import b`` yields ``a.b`` too, since ``b`` may be a module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def is_test_module(name: str) -> bool:
    """Whether ``name`` is a test module or a conftest of the suite: ``tests.test_x``, ``tests.api.test_x``,
    ``tests.conftest``, ``tests.api.conftest`` (and anything inside one)."""
    parts = name.split(".")
    return parts[0] == "tests" and any(p.startswith("test_") or p == "conftest" for p in parts[1:])


def cross_imports(source: str, path: Path) -> list[str]:
    """The imports of a test module or conftest in ``source`` (the file at ``path``, relative to the root)."""
    package = ".".join(path.with_suffix("").parts[:-1])
    found: dict[int, str] = {}
    for line, name in imported_modules(ast.parse(source), package):
        if is_test_module(name) and len(name) < len(found.get(line, name + ".")):
            found[line] = name  # the shortest: the test module, not the names imported from it
    return [f"{path}:{line} imports {name}" for line, name in sorted(found.items())]


def checked_files() -> list[Path]:
    """Every Python file of the suite (any depth under tests/), the bench and the scripts, relative to the root."""
    files = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/**/*.py"), *ROOT.glob("scripts/**/*.py")]
    # not what the bench unpacks or caches (bench/.cache holds a whole Lambda layer: ~3,500 files of libraries)
    return sorted(
        p.relative_to(ROOT)
        for p in files
        if not any(
            part.startswith(".") or part in ("node_modules", "__pycache__")
            for part in p.relative_to(ROOT).parts
        )
    )


def test_no_test_conftest_bench_or_script_file_imports_a_test_module():
    files = checked_files()
    assert Path("tests/conftest.py") in files and Path("tests/support/models.py") in files
    assert any(p.parts[0] == "bench" for p in files) and any(p.parts[0] == "scripts" for p in files)
    found = [hit for path in files for hit in cross_imports((ROOT / path).read_text(), path)]
    assert found == [], (
        "move what is shared into tests/support/ (helpers) or a conftest.py (fixtures):\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("tests/test_a.py", "from tests.test_api import realistic"),
        ("tests/api/test_a.py", "from tests.engine.test_engine import drive"),
        ("tests/test_a.py", "import tests.test_store"),
        ("tests/test_a.py", "import tests.test_store as store"),
        ("tests/test_a.py", "from tests import test_page"),
        ("tests/api/test_a.py", "from tests.api import test_b"),
        ("tests/api/test_a.py", "from .test_b import client"),
        ("tests/api/test_a.py", "from . import test_b"),
        ("tests/api/test_a.py", "from ..engine.test_engine import drive"),
        ("tests/api/test_a.py", "from tests.conftest import fake_llm"),
        ("tests/api/test_a.py", "from .conftest import server"),
        ("tests/support/x.py", "def f():\n    from tests.test_near_miss_calls import NEAR_MISSES\n"),
        (
            "tests/test_a.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tests.test_b import X\n",
        ),
        ("bench/x.py", "import importlib\nm = importlib.import_module('tests.browser.test_page')"),
        ("bench/x.py", "def corpus():\n    from tests.test_near_miss_calls import NEAR_MISSES\n"),
    ],
)
def test_the_check_finds_an_import_of_a_test_module_however_it_is_written(path, source):
    assert cross_imports(source, Path(path)) != []


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("tests/test_a.py", "from tests.support.server import Server, client"),
        ("tests/api/test_a.py", "from tests.support import fake_llm"),
        ("tests/api/test_a.py", "from ..support.models import ScriptedModel"),
        ("tests/test_a.py", "import pytest\nfrom chatloop.api import testing"),
        ("bench/x.py", "from tests.support.wire_models import realistic"),
        ("tests/test_a.py", "import importlib\nm = importlib.import_module('chatloop.api.app')"),
    ],
)
def test_the_check_lets_support_and_source_imports_through(path, source):
    assert cross_imports(source, Path(path)) == []


def test_tests_find_the_repository_through_support_not_their_own_location():
    """A test file that reads ``__file__`` to find the repository breaks when it moves to another folder; ROOT in
    tests/support/repo.py is the one place that knows where tests sit."""
    found = [
        f"{path}:{node.lineno}"
        for path in checked_files()
        if path.parts[0] == "tests" and path != Path("tests/support/repo.py")
        for node in ast.walk(ast.parse((ROOT / path).read_text()))
        if isinstance(node, ast.Name) and node.id == "__file__"
    ]
    assert found == [], "use tests.support.repo.ROOT:\n" + "\n".join(found)


TESTS_OF_ALL_API = {"test_layers.py"}
"""tests/api's own files: they test api/ as a whole (its import layers), no one sub-package."""


def unmirrored(tests_api: Path, src_api: Path) -> list[str]:
    """Test files of ``tests_api`` that do not sit in a folder named after a sub-package of ``src_api`` (at any
    depth: ``openai/`` or ``openai/responses/``); only what tests api/ as a whole stays on top."""
    packages = {p.parent.relative_to(src_api) for p in src_api.rglob("__init__.py")} - {Path(".")}
    found = []
    for path in sorted(tests_api.rglob("test_*.py")):
        folder = path.parent.relative_to(tests_api)
        if folder == Path(".") and path.name not in TESTS_OF_ALL_API:
            found.append(
                f"{path.relative_to(tests_api)}: move it into the folder of the api/ sub-package it tests"
            )
        elif folder != Path(".") and folder not in packages:
            found.append(f"{path.relative_to(tests_api)}: {folder}/ is no sub-package of api/")
    return found


def test_tests_api_mirrors_the_api_sub_packages():
    assert unmirrored(ROOT / "tests" / "api", ROOT / "src" / "chatloop" / "api") == []


def test_the_mirror_check_finds_a_flat_test_and_a_folder_of_no_sub_package(tmp_path):
    src, tests = tmp_path / "src", tmp_path / "tests"
    for package in ("", "http", "openai", "openai/responses"):
        (src / package).mkdir(parents=True, exist_ok=True)
        (src / package / "__init__.py").write_text("")
    for test in (
        "test_layers.py",
        "test_flat.py",
        "http/test_a.py",
        "openai/responses/test_b.py",
        "misc/test_c.py",
    ):
        (tests / test).parent.mkdir(parents=True, exist_ok=True)
        (tests / test).write_text("")
    assert [line.split(":")[0] for line in unmirrored(tests, src)] == ["misc/test_c.py", "test_flat.py"]
