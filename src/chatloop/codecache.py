"""What Python compiles as modules are imported, compiled once when the function is built and shipped beside the
bytecode (``scripts/package.py``), so that a cold start does not compile it again.

Shipping ``.pyc`` files covers modules, not what modules compile as they run:

- ``dataclasses`` writes each class's ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and (frozen)
  ``__setattr__``/``__delattr__`` as source text and ``exec``\\ s it;
- ``typing`` compiles every string annotation it turns into a ``ForwardRef`` (pydantic's models, the ``TypedDict``\\ s
  of ``pydantic_core`` and of the SDKs);
- ``re`` parses and compiles every module-level pattern (in pure Python, the ``re._parser``/``re._compiler`` pair);
- ``collections.namedtuple`` passes each class's ``__new__`` to ``eval``, and ``typing_inspection.typing_objects``
  (pydantic's) 30 small check functions to ``exec`` as it is imported.

``import app``, the groq SDK and a first turn do ~600, ~1,000 and ~170 of these: measured by instruction count
(callgrind), 1,830 M instructions without the table and ~1,300 M with it, about 90 ms of CPU, which at 512 MB's
0.29 of a core is ~0.3 s of a cold start.

``install()`` (``chatloop.coldstart`` calls it before anything else is imported) gives ``dataclasses`` an ``exec``,
``typing`` a ``compile`` and ``collections`` an ``eval`` (module globals, which Python looks up before the builtins;
``typing_inspection.typing_objects`` gets its ``exec`` as it is imported: ``_GivesExec``), and ``re._compiler`` a
``compile``, that take the result from the shipped table when it holds the same source text or pattern, and do what
they did before otherwise. An entry is what the interpreter makes of that text (same filename and mode, no inherited
``__future__`` flags: neither module has any; a pattern's own compiled program, checked at build time to give an
equal pattern), made by the same Python (the table carries the bytecode magic number, as a ``.pyc`` does: another
Python ignores it), so nothing behaves differently whether an entry is found or not.

Usage::

    install()                              # at the entry point, first: the shipped table, if there is one
    build("build/function", first_turn)    # at build time: run a first turn's imports, keep what they compiled
"""

from __future__ import annotations

import builtins
import marshal
import os
import re
import sys
from types import CodeType

TYPE_CHECKING = False
if (
    TYPE_CHECKING
):  # not imported at run time: install() puts the pattern compiler in place before typing loads
    from collections.abc import Callable
    from typing import Any

FILE_NAME = "codecache.marshal"
"""Beside this module in the built function (``scripts/package.py``); absent in a source checkout: what a cold start
and its first /chat turn compile, loaded by ``install``."""
LATER_NAME = "codecache-later.marshal"
"""Beside it: what later imports compile (the other SDK, the routes imported on their first request), loaded on the
first text the first table does not hold (a third of the entries: ~9 M instructions a cold start need not spend)."""
CodeKey = tuple[str, str, str]
"""(source text, filename, mode), as ``compile`` is called."""
PatternKey = tuple[str | bytes, int]
"""(pattern, flags), as ``re._compiler.compile`` is called."""
Program = tuple[int, list[int], int, dict[str, int], tuple[str | None, ...]]
"""What ``_sre.compile`` makes a pattern from: its flags, its program, its groups and their names."""
_sre = re._compiler._sre  # type: ignore[attr-defined]  # the C engine the pure-Python compiler feeds
_COMPILE_PATTERN = re._compiler.compile  # type: ignore[attr-defined]


def _magic() -> bytes:
    """The stamp a table starts with: the bytecode's magic number (as a ``.pyc`` starts with it) and the regular
    expression engine's (``_sre.MAGIC``: the format of a compiled pattern's program, which can change apart from
    the bytecode's). A Python that differs in either ignores the table."""
    from importlib.util import MAGIC_NUMBER

    return bytes(MAGIC_NUMBER) + int(_sre.MAGIC).to_bytes(4, "little")


class CodeCache:
    """The tables, and the ``compile`` / ``exec`` / pattern compiler that use them (``hits`` and ``misses`` count
    lookups; ``recording`` keeps what missed, for ``build``)."""

    def __init__(
        self,
        codes: dict[CodeKey, CodeType] | None = None,
        patterns: dict[PatternKey, Program] | None = None,
        recording: bool = False,
        later: str | None = None,
    ):
        self.codes: dict[CodeKey, CodeType] = codes or {}
        self.patterns: dict[PatternKey, Program] = patterns or {}
        self.recording = recording
        self.later = later
        """The second table's path, until it is loaded (on the first miss)."""
        self.hits = self.misses = 0

    def _load_later(self) -> bool:
        """Merge the second table in (once, on the first miss); whether there was one."""
        path, self.later = self.later, None
        tables = _read(path) if path else None
        if tables is None:
            return False
        self.codes.update(tables[0])
        self.patterns.update(tables[1])
        return True

    def compile(
        self,
        source: Any,
        filename: Any,
        mode: str,
        flags: int = 0,
        dont_inherit: bool = False,
        optimize: int = -1,
    ) -> Any:
        """``compile()``, from the table for a text compiled as its entries were (no flags, the default
        optimization level)."""
        if type(source) is not str or type(filename) is not str or flags or optimize != -1:
            return builtins.compile(source, filename, mode, flags, dont_inherit, optimize)
        key = (source, filename, mode)
        code = self.codes.get(key)
        if code is None and self.later and self._load_later():
            code = self.codes.get(key)
        if code is not None:
            self.hits += 1
            return code
        self.misses += 1
        # dont_inherit: the callers (dataclasses, typing) have no __future__ flags to pass on; this module has
        code = builtins.compile(source, filename, mode, dont_inherit=True)
        if self.recording:
            self.codes[key] = code
        return code

    def exec(self, source: Any, globals: Any = None, locals: Any = None, /, **closure: Any) -> None:
        """``exec()``, its source text compiled by ``compile``; the caller's namespace when none is given."""
        if globals is None:
            caller = sys._getframe(1)
            globals, locals = caller.f_globals, caller.f_locals if locals is None else locals
        if type(source) is str:
            source = self.compile(source, "<string>", "exec")
        builtins.exec(source, globals, locals, **closure)  # noqa: S102  # the call dataclasses made, as it made it

    def eval(self, source: Any, globals: Any = None, locals: Any = None, /) -> Any:
        """``eval()`` as ``collections.namedtuple`` calls it (a text and a namespace), its text compiled by
        ``compile``."""
        if type(source) is str and globals is not None:
            source = self.compile(source, "<string>", "eval")
        return builtins.eval(source, globals, locals)  # noqa: S307  # the call namedtuple made, as it made it

    def compile_pattern(self, pattern: Any, flags: int = 0) -> Any:
        """``re._compiler.compile``: a pattern's program from the table, else compiled as before."""
        if type(pattern) not in (str, bytes) or flags & re.DEBUG:
            return _COMPILE_PATTERN(pattern, flags)
        program = self.patterns.get((pattern, flags))
        if program is None and self.later and self._load_later():
            program = self.patterns.get((pattern, flags))
        if program is not None:
            self.hits += 1
            return _sre.compile(pattern, *program)
        self.misses += 1
        compiled = _COMPILE_PATTERN(pattern, flags)
        if self.recording:
            program = _program(pattern, flags)
            if _sre.compile(pattern, *program) == compiled:  # equal flags, pattern and program
                self.patterns[pattern, flags] = program
        return compiled


def _program(pattern: str | bytes, flags: int) -> Program:
    """What ``re._compiler.compile`` hands ``_sre.compile`` for ``pattern`` (build time only)."""
    parsed = re._parser.parse(pattern, flags)  # type: ignore[attr-defined]
    code = re._compiler._code(parsed, flags)  # type: ignore[attr-defined]
    names: dict[str, int] = parsed.state.groupdict
    index: list[str | None] = [None] * parsed.state.groups
    for name, number in names.items():
        index[number] = name
    # plain ints: the compiler emits its opcodes as an int subclass, which marshal does not write
    return (
        int(flags | parsed.state.flags),
        [int(op) for op in code],
        int(parsed.state.groups - 1),
        {str(name): int(number) for name, number in names.items()},
        tuple(index),
    )


_CACHE: CodeCache | None = None


def installed() -> CodeCache | None:
    """The cache ``install`` put in place, if any."""
    return _CACHE


def _read(path: str) -> tuple[dict[CodeKey, CodeType], dict[PatternKey, Program]] | None:
    """The tables in the file at ``path``; None when there is none, or it was written by another Python."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError:
        return None
    magic = _magic()
    if not data.startswith(magic):
        return None
    try:
        # the function's own build output, in its read-only code directory beside the .pyc files it trusts alike
        codes, patterns = marshal.loads(data[len(magic) :])  # noqa: S302
    except (EOFError, ValueError, TypeError):
        return None
    return codes, patterns


def load(path: str) -> CodeCache | None:
    """The cache of the first table at ``path`` (the second, beside it, is read on the first miss); None when there
    is none, or it was written by another Python."""
    tables = _read(path)
    if tables is None:
        return None
    return CodeCache(*tables, later=os.path.join(os.path.dirname(path), LATER_NAME))


def install(path: str | None = None, cache: CodeCache | None = None) -> CodeCache | None:
    """Put ``cache``, or the tables shipped beside this module (``path``), in place. Nothing is installed without
    a table, nor under ``-O`` (the table holds code compiled at the default level). Once per process."""
    global _CACHE
    if _CACHE is not None or sys.flags.optimize:
        return _CACHE
    if cache is None:
        cache = load(path or os.path.join(os.path.dirname(__file__), FILE_NAME))
        if cache is None:
            return None
    re._compiler.compile = cache.compile_pattern  # type: ignore[attr-defined]  # first: the imports below use it
    import collections

    collections.eval = cache.eval  # type: ignore[attr-defined]  # before dataclasses: it imports inspect's namedtuples
    import dataclasses
    import typing

    dataclasses.exec = cache.exec  # type: ignore[attr-defined]  # a module global: found before the builtin
    typing.compile = cache.compile  # type: ignore[attr-defined]
    if EXECS_AS_IMPORTED not in sys.modules:  # imported later (by pydantic): given its exec then
        sys.meta_path.insert(0, _GivesExec(cache))
    _CACHE = cache
    return cache


EXECS_AS_IMPORTED = "typing_inspection.typing_objects"
"""A module that passes source text to ``exec`` while it is imported: its ``exec`` must be in its namespace before its
code runs, so ``install`` puts it there as the import creates the module (``_GivesExec``)."""


class _GivesExec:
    """A meta path finder for ``EXECS_AS_IMPORTED`` only: the module the other finders find, given the cache's
    ``exec`` as a module global before its code runs (found before the builtin, as in ``dataclasses``)."""

    def __init__(self, cache: CodeCache) -> None:
        self.cache = cache

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != EXECS_AS_IMPORTED:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            original, cache = spec.loader.exec_module, self.cache

            def exec_module(module: Any) -> None:
                module.exec = cache.exec
                original(module)

            spec.loader.exec_module = exec_module  # type: ignore[method-assign]  # this one spec's loader
        return spec


def uninstall() -> None:
    """What was there before ``install`` (tests)."""
    global _CACHE
    import dataclasses
    import typing

    re._compiler.compile = _COMPILE_PATTERN  # type: ignore[attr-defined]
    vars(dataclasses).pop("exec", None)  # the builtins again
    vars(typing).pop("compile", None)
    vars(sys.modules["collections"]).pop("eval", None)
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _GivesExec)]
    _CACHE = None


def build(target: str, first_turn: Callable[[], object], later: Callable[[], object] = lambda: None) -> int:
    """Run ``first_turn`` then ``later`` (in a fresh interpreter of the runtime's version, the built function first
    on its path: a cold start's imports and what its first turn builds, then what later requests import), recording
    what each compiles, and write the two tables to ``target``/``chatloop``/``FILE_NAME`` and ``LATER_NAME``.
    Returns how many entries they hold."""
    cache = install(cache=CodeCache(recording=True))
    if cache is None or not cache.recording:
        raise RuntimeError("codecache.build needs a fresh interpreter, without -O")
    first_turn()
    first = (dict(cache.codes), dict(cache.patterns))
    later()
    rest = (
        {key: code for key, code in cache.codes.items() if key not in first[0]},
        {key: program for key, program in cache.patterns.items() if key not in first[1]},
    )
    for name, tables in ((FILE_NAME, first), (LATER_NAME, rest)):
        with open(os.path.join(target, "chatloop", name), "wb") as file:
            file.write(_magic() + marshal.dumps(tables))
    return len(cache.codes) + len(cache.patterns)
