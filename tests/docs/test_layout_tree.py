"""The source map in docs/architecture.md is the source tree: generated from the packages' docstrings and modules by
scripts/layout.py, so a module added, moved or renamed without `make layout` fails here, naming the difference; and
its layer table is the one the import tests check (scripts/layers.py)."""

from __future__ import annotations

import difflib

from scripts import layers, layout


def test_the_documented_tree_is_the_source_tree() -> None:
    documented, actual = layout.documented(), layout.render()
    difference = "\n".join(
        difflib.unified_diff(documented.splitlines(), actual.splitlines(), "docs", "src", lineterm="")
    )
    assert documented == actual, f"docs/architecture.md's layout is stale: run `make layout`\n{difference}"


def test_the_tree_names_every_package_and_module() -> None:
    tree = layout.render()
    for path in layout.SOURCE.rglob("*.py"):
        if path.name == "__init__.py":
            assert f"{path.parent.name}/" in tree, path
        else:
            assert path.stem in tree, path


def test_a_package_is_labelled_by_what_it_is() -> None:
    # "What it is: what it holds" -- the map keeps the first clause; a package's own name is not a label
    assert layout.summary(layout.SOURCE / "api" / "openai" / "responses" / "__init__.py") == (
        "OpenAI's Responses API (/v1/responses)"
    )
    assert layout.summary(layout.SOURCE / "__init__.py").startswith("a serverless chat handler")


def test_the_documented_layers_are_the_checked_layers() -> None:
    assert layout.documented_layers() == layers.markdown(), (
        "docs/architecture.md's layer table is stale: make layout"
    )
    assert (
        "| api.page | `chatloop.api.page` |" in layout.documented_layers()
    )  # page/: one place, in one table
