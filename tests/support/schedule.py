"""The order test files reach pytest-xdist's workers in: the longest first (longest-processing-time-first), so a
parallel run never ends waiting on one long file that a worker only picked up near the end.

``make test`` runs ``--dist loadfile --no-loadscope-reorder``: each file goes whole to one worker (its module
fixtures start once), in the order collected, and xdist's own reordering (by number of tests, which put the
one-test bench smoke run last) is off. A file weighs the seconds it took in the last run that ran it (kept in
pytest's cache, ``.pytest_cache/``, by the process that ran it or the xdist controller); a file with none recorded
(a clean clone, as on CI, or a new or moved file) is estimated from its tests: ``SLOW_SECONDS`` for each marked slow
(or the seconds its mark names: ``@pytest.mark.slow(seconds=100)``, for the few that take minutes), a fraction of a
second for each other. Within a file the order is unchanged, and a serial run is left as collected.

Loaded by tests/conftest.py (``pytest_plugins``).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

KEY = "chatloop/file-seconds"
SLOW_SECONDS = 5.0
"""What a test marked slow is taken to cost when its file has no recorded time."""
TEST_SECONDS = 0.3
"""What any other test is taken to cost."""

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
    weight = {name: recorded.get(name) or estimate(tests) for name, tests in files.items()}
    items[:] = [item for name in sorted(files, key=lambda n: -weight[n]) for item in files[name]]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[_file(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    cache = getattr(config, "cache", None)
    if hasattr(config, "workerinput") or cache is None or not _seconds:
        return  # a worker: its controller saw every report too, and records them
    cache.set(KEY, {**cache.get(KEY, {}), **{name: round(s, 1) for name, s in _seconds.items()}})
