"""The code a cold start would compile as modules run (dataclasses' methods, typing's forward references, re's
patterns) comes precompiled from the built function (``chatloop.codecache``, written by ``scripts/package.py``), and
is exactly what the interpreter would have made of it."""

from __future__ import annotations

import json
import marshal
import subprocess
import sys
from importlib.util import MAGIC_NUMBER

import pytest

from chatloop import codecache
from tests.support.adapter import ROOT


def _sre_magic() -> bytes:
    """The regular expression engine's magic number, as the tables' stamp carries it after the bytecode's."""
    return int(codecache._sre.MAGIC).to_bytes(4, "little")


PYTHON = (3, 12)
"""The Lambda runtime's: the build writes a table only with it (as it writes bytecode)."""

DEFINITIONS = r'''
import collections, dataclasses, re, typing

Pair = collections.namedtuple("Pair", ["left", "right"], defaults=[0])

@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Point:
    x: int
    tags: "list[str]" = dataclasses.field(default_factory=list)

@dataclasses.dataclass(kw_only=True, eq=False, unsafe_hash=False)
class Named:
    name: str = "n"
    point: "Point | None" = None

class Shape(typing.TypedDict):
    corner: "Point"
    label: "typing.Optional[str]"

REFERENCE = typing.ForwardRef("dict[str, Point]")
PATTERNS = [
    re.compile(r"(?P<key>\w+)\s*=\s*(?P<value>[^;]+);?", re.IGNORECASE),
    re.compile(rb"\x00[\x80-\xff]+"),
    re.compile(r"""(?x) a  b   # spaced out
                   (?:c|d){2,5}+"""),
    re.compile(r"(?<=a)b(?!c)(?i:x)", re.MULTILINE | re.DOTALL),
    re.compile(r"[^\W\d]+|\d{1,3}(?:,\d{3})*"),
]
'''

CHILD = r"""
import json, re, sys
sys.path.insert(0, sys.argv[2])
from chatloop import codecache

DEFINITIONS = sys.stdin.read()
LATER = "import dataclasses\n@dataclasses.dataclass\nclass Later:\n    only_later: int = 0\n"
if sys.argv[1] == "build":
    print(codecache.build(sys.argv[3], lambda: exec(DEFINITIONS, {}), lambda: exec(LATER, {})))
    raise SystemExit
cache = codecache.install(sys.argv[3])
cached = {}
exec(DEFINITIONS, cached)
counts = {"hits": cache.hits, "misses": cache.misses, "later_loaded_first": cache.later is None}
exec(LATER, {})  # in the second table only: read on this first miss
counts.update(later_loaded=cache.later is None, misses_after=cache.misses)
codecache.uninstall()
re.purge()  # re's own cache would hand back the patterns made above
plain = {}
exec(DEFINITIONS, plain)

def _sre_magic() -> bytes:
    import _sre

    return _sre.MAGIC.to_bytes(4, "little")


def codes(namespace):
    classes = [namespace["Point"], namespace["Named"]]
    functions = [f for c in classes for f in vars(c).values() if callable(f) and hasattr(f, "__code__")]
    refs = [namespace["REFERENCE"], *namespace["Shape"].__annotations__.values()]
    return [f.__code__ for f in functions] + [r.__forward_code__ for r in refs] + [namespace["Pair"].__new__.__code__]

same_code = [a == b for a, b in zip(codes(cached), codes(plain), strict=True)]
same_patterns = [a == b for a, b in zip(cached["PATTERNS"], plain["PATTERNS"], strict=True)]
point = cached["Point"](1, ["a"])
print(json.dumps({**counts, "code": same_code, "patterns": same_patterns, "repr": repr(point),
                  "ordered": point < cached["Point"](2), "match": cached["PATTERNS"][0].match("K = v;").groupdict(),
                  "pair": repr(cached["Pair"](1))}))
"""


def child(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-I", "-c", CHILD, *args],
        input=DEFINITIONS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_what_the_table_holds_is_what_the_interpreter_makes_of_the_same_text(tmp_path):
    (tmp_path / "chatloop").mkdir()
    entries = int(child("build", str(ROOT / "src"), str(tmp_path)))
    table = tmp_path / "chatloop" / codecache.FILE_NAME
    assert entries > 10 and table.read_bytes().startswith(MAGIC_NUMBER + _sre_magic())
    result = json.loads(child("use", str(ROOT / "src"), str(table)))
    # every method, forward reference and pattern came from the table, and equals what compiling it gives: the same
    # bytecode, flags (no __future__ flag inherited) and constants; the same pattern program
    first = codecache.load(str(table))
    assert (
        first is not None and 10 < len(first.codes) + len(first.patterns) < entries
    )  # Later's are in the second
    assert result["misses"] == 0 and result["hits"] >= len(first.codes) + len(first.patterns)
    # the second table (what later imports compile) is read on the first text the first does not hold, not before
    assert result["later_loaded_first"] is False and result["later_loaded"] is True
    assert result["misses_after"] == 0
    assert result["code"] and all(result["code"])
    assert len(result["patterns"]) == 5 and all(result["patterns"])
    assert result["repr"] == "Point(x=1, tags=['a'])" and result["ordered"] is True
    assert result["match"] == {"key": "K", "value": "v"}
    assert result["pair"] == "Pair(left=1, right=0)"  # namedtuple's __new__ from the table too


def test_a_table_from_another_python_or_a_broken_one_is_not_used(tmp_path):
    assert codecache.installed() is None  # the source tree ships none: nothing was installed by import app
    table = tmp_path / codecache.FILE_NAME
    table.write_bytes(
        b"\x00\x01\r\n" + _sre_magic() + marshal.dumps(({}, {}))
    )  # another bytecode magic number
    assert codecache.load(str(table)) is None
    # the same bytecode, another regular expression engine: its compiled programs would not fit
    table.write_bytes(
        MAGIC_NUMBER
        + (_sre_magic()[0] ^ 1).to_bytes(1, "little")
        + _sre_magic()[1:]
        + marshal.dumps(({}, {}))
    )
    assert codecache.load(str(table)) is None
    table.write_bytes(MAGIC_NUMBER + _sre_magic() + marshal.dumps(({}, {})))
    assert codecache.load(str(table)) is not None  # the stamp is what tells them apart
    table.write_bytes(MAGIC_NUMBER + _sre_magic() + b"\x00garbage")
    assert codecache.load(str(table)) is None
    assert codecache.install(str(table)) is None and codecache.installed() is None
    assert codecache.load(str(tmp_path / "absent")) is None


@pytest.mark.slow
@pytest.mark.skipif(
    sys.version_info[:2] != PYTHON, reason="the table is written by the runtime's Python only"
)
def test_the_built_function_compiles_nothing_as_import_app_and_the_sdk_load(tmp_path):
    """``scripts/package.py`` records what ``import app`` and a first turn's imports compile; a cold start of the
    built function then compiles none of it (the source tree, without the table, compiles ~1,600 texts)."""
    from scripts.package import build_function

    function = tmp_path / "build" / "function"
    build_function(tmp_path / "build")
    assert (function / "chatloop" / codecache.FILE_NAME).is_file()
    probe = (
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "generated = {}\n"
        "def audit(event, args):\n"
        "    if event == 'compile' and sys._getframe(2).f_code.co_name != 'source_to_code':\n"
        "        caller = sys._getframe(1).f_globals.get('__name__', '?')\n"
        "        generated[caller] = generated.get(caller, 0) + 1\n"
        "sys.addaudithook(audit)\n"
        "import app, groq, groq.resources.chat.completions\n"
        "from chatloop.api.runtime import build_schemas\n"
        "build_schemas()\n"
        "from chatloop import codecache\n"
        "cache = codecache.installed()\n"
        "print(json.dumps([generated, cache and [cache.hits, cache.misses]]))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "POWERTOOLS_SERVICE_NAME": "t", "POWERTOOLS_LOG_LEVEL": "ERROR"}
    results = {}
    for label, tree in (("built", function), ("source", ROOT / "src")):
        done = subprocess.run(
            [sys.executable, "-I", "-B", "-c", probe, str(tree)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        results[label] = json.loads(done.stdout.strip().splitlines()[-1])
    (built, table), (source, none) = results["built"], results["source"]
    assert none is None and source.get("dataclasses", 0) > 300 and source.get("typing", 0) > 300
    assert "dataclasses" not in built and "typing" not in built  # all from the table
    assert source.get("collections", 0) > 10 and source.get("typing_inspection.typing_objects", 0) >= 30
    assert "collections" not in built and "typing_inspection.typing_objects" not in built
    hits, misses = table
    assert misses == 0 and hits > 1000
    assert sum(built.values()) < 20  # what is left: a few libraries' own (not cached)
