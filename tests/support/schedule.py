"""The order test files reach pytest-xdist's workers in: the longest first (longest-processing-time-first), so a
parallel run never ends waiting on one long file that a worker only picked up near the end.

``make test`` runs ``--dist loadfile --no-loadscope-reorder``: each file goes whole to one worker (its module
fixtures start once), in the order collected, and xdist's own reordering (by number of tests, which put the
one-test bench smoke run last) is off. A file weighs the seconds it took in the last run that ran it (kept in
pytest's cache, ``.pytest_cache/``, by the process that ran it or the xdist controller); on a clean clone (as on CI)
it weighs what ``file_seconds.json`` beside this module says (a whole run's times, checked in); a file in neither (a
new or moved file) is estimated from its tests: ``SLOW_SECONDS`` for each marked slow (or the seconds its mark names:
``@pytest.mark.slow(seconds=100)``, for the few that take minutes), a fraction of a second for each other. The marks
alone ordered a clean clone badly: a file of five tests that installs pydantic-ai 1.x with pip weighed 16 s and took
~50, one of 259 quick tests weighed 78 and took ~18. Within a file the order is unchanged, and a serial run is left
as collected.

After a run on a quiet machine, ``python -m tests.support.schedule`` writes that run's times into
``file_seconds.json`` (a file the run did not have keeps its entry; one gone from tests/ is dropped).

Loaded by tests/conftest.py (``pytest_plugins``).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support.repo import ROOT

KEY = "chatloop/file-seconds"
SLOW_SECONDS = 5.0
"""What a test marked slow is taken to cost when its file has no recorded time."""
TEST_SECONDS = 0.3
"""What any other test is taken to cost."""

TABLE = ROOT / "tests" / "support" / "file_seconds.json"
"""Seconds per test file from a whole run, for a clean clone (no pytest cache)."""

_seconds: defaultdict[str, float] = defaultdict(float)


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def estimate(items: list[pytest.Item]) -> float:
    """Seconds a file's tests are taken to cost when none is recorded."""
    total = 0.0
    for item in items:
        slow = item.get_closest_marker("slow")
        total += float(slow.kwargs.get("seconds", SLOW_SECONDS)) if slow is not None else TEST_SECONDS
    return total


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # only an xdist worker's collection is scheduled
        return
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    recorded: dict[str, float] = cache.get(KEY, {}) if cache is not None else {}
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(_file(item.nodeid), []).append(item)
    weight = weights(files, recorded, table())
    items[:] = [item for name in sorted(files, key=lambda n: -weight[n]) for item in files[name]]


def weights(
    files: dict[str, list[pytest.Item]], recorded: dict[str, float], checked_in: dict[str, float]
) -> dict[str, float]:
    """Each file's weight: its time in the last run here, else in the checked-in table, else estimated::

    weights({"tests/test_a.py": items}, {}, {"tests/test_a.py": 12.5})  # {"tests/test_a.py": 12.5}
    """
    return {
        name: recorded.get(name) or checked_in.get(name) or estimate(tests) for name, tests in files.items()
    }


def table() -> dict[str, float]:
    """``file_seconds.json``; empty when it is missing or unreadable (the marks' estimates then order the run)."""
    try:
        loaded = json.loads(TABLE.read_text())
    except (OSError, ValueError):
        return {}
    return {str(name): float(seconds) for name, seconds in loaded.items()} if isinstance(loaded, dict) else {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[_file(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    cache = getattr(config, "cache", None)
    if hasattr(config, "workerinput") or cache is None or not _seconds:
        return  # a worker: its controller saw every report too, and records them
    cache.set(KEY, {**cache.get(KEY, {}), **{name: round(s, 1) for name, s in _seconds.items()}})


def write_table(cache_dir: Path = ROOT / ".pytest_cache") -> dict[str, float]:
    """``file_seconds.json`` from the last run's times in ``cache_dir`` (its entries first, then the table's own for
    files that run did not have), less the files no longer in tests/; returns what it wrote."""
    recorded = json.loads((cache_dir / "v" / KEY).read_text())
    merged = {**table(), **recorded}
    kept = {name: round(float(s), 1) for name, s in sorted(merged.items()) if (ROOT / name).is_file()}
    TABLE.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n")
    return kept


if __name__ == "__main__":
    written = write_table(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / ".pytest_cache")
    print(f"{TABLE}: {len(written)} files, {sum(written.values()):.0f} s in all")
