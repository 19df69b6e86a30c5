"""The Lambda artefacts as ``scripts/package.py`` builds them, unpacked read-only, for the measurements that run them
(section 4's ``import app``, section 13's Lambda-sized turns, tests/ops/test_lambda_size.py).

The layer takes pip a minute or more on a busy machine and deleting its ~3,500 files as long again, so one is kept
per content in ``bench/.cache/`` (git-ignored): keyed by the requirements, the architecture, the interpreter and
the code of ``scripts/package.py`` that builds it, it is built once and shared by every run and every tree with the
same requirements (the oldest beyond ``KEPT_LAYERS`` are removed when a new one is built).
The function (``src/``, under a second to build) is built each time.

Usage::

    opt = layer(ROOT / "requirements.txt")          # .../layer-<key>/, its python/ goes on sys.path
    task = function(ROOT / "src", tmp / "task")     # tmp/task/, on sys.path first (as /var/task)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from bench import ROOT

CACHE = ROOT / "bench" / ".cache"
KEPT_LAYERS = 3
"""Layers kept in the cache: this tree's, main's when its requirements differ, and one more."""


def arch() -> str:
    return "arm64" if platform.machine() in ("aarch64", "arm64") else "x86_64"


def unpack(archive: Path, into: Path) -> Path:
    """``archive`` unpacked into ``into`` with its files' modes (the Deno binary stays executable), then made
    read-only, as Lambda mounts /opt and /var/task."""
    with zipfile.ZipFile(archive) as zipped:
        for info in zipped.infolist():
            target = into / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zipped.read(info))
            target.chmod(((info.external_attr >> 16) & 0o777 or 0o644) & 0o555)
    for folder in [into, *sorted((p for p in into.rglob("*") if p.is_dir()), reverse=True)]:
        folder.chmod(0o555)
    return into


def layer(requirements: Path) -> Path:
    """The layer built from ``requirements`` and unpacked read-only (its ``python/`` is what Lambda puts on
    ``sys.path`` from /opt); from the cache when one with the same key was built before."""
    key = hashlib.sha256(
        b"\0".join(
            [
                requirements.read_bytes(),
                arch().encode(),
                sys.version.encode(),
                _layer_build_source().encode(),
            ]
        )
    ).hexdigest()[:16]
    target = CACHE / f"layer-{key}"
    if target.is_dir():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    # Test workers (pytest-xdist) and the bench smoke run may all want it at once: one builds, the others wait.
    with (CACHE / f"lock-{key}").open("w") as lock:  # not "layer-*": _prune counts those
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_dir():
            _build(target, requirements)
    return target


def _build(target: Path, requirements: Path) -> None:
    from scripts.package import build_layer

    with tempfile.TemporaryDirectory(dir=CACHE, prefix="build-") as tmp:
        staged = Path(tmp) / "opt"
        unpack(build_layer(arch(), Path(tmp) / "build", requirements=requirements), staged)
        staged.chmod(0o755)
        try:
            os.rename(staged, target)  # atomic: a concurrent run sees all of it or none
        except OSError:
            if not target.is_dir():
                raise
        shutil.rmtree(Path(tmp) / "build", ignore_errors=True)
    target.chmod(0o555)
    _prune(keep=target)


def _layer_build_source() -> str:
    """The code of ``scripts/package.py`` that a layer's content depends on (not the function's build: editing that
    must not cost a new layer, a minute or more of pip)."""
    import inspect

    from scripts import package

    parts: list[Callable[..., object]] = [
        package.build_layer,
        package.compile_bytecode,
        package.missing_bytecode,
        package.hash_ca_bundle,
        package.zip_tree,
    ]
    settings = repr(
        (package.GLIBC_TAGS, package.MACHINES, package.LAMBDA_PYTHON, package.CA_DIR, package.SKIP)
    )
    return settings + "".join(inspect.getsource(part) for part in parts)


def _prune(keep: Path, most: int = KEPT_LAYERS) -> None:
    """Remove the oldest cached layers beyond ``most`` (each is ~200 MB), never ``keep``."""
    layers = sorted(CACHE.glob("layer-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [p for p in layers if p != keep][most - 1 :]:
        for folder in [old, *(p for p in old.rglob("*") if p.is_dir() and not p.is_symlink())]:
            folder.chmod(0o755)  # read-only folders: their entries could not be removed (but by root)
        shutil.rmtree(old, ignore_errors=True)


def function(source: Path, into: Path) -> Path:
    """``function.zip`` built from ``source`` (a tree's ``src/``) and unpacked read-only into ``into``."""
    from scripts.package import build_function

    return unpack(build_function(into.parent / f"{into.name}-build", source=source), into)
