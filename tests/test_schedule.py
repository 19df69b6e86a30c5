"""The order a parallel run hands files out in (tests/support/schedule.py): the last run's times, else the checked-in
table's (a clean clone), else the marks' estimate; and the table is rewritten from a run's record."""

import json

import pytest

from tests.support import schedule


class Item:
    """What the estimate reads of a collected test: its ``slow`` mark, if any."""

    def __init__(self, slow: pytest.Mark | None = None) -> None:
        self.slow = slow

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.slow if name == "slow" else None


def test_a_clean_clone_weighs_a_file_by_the_checked_in_table_not_its_marks():
    files = {"tests/test_pip.py": [Item()] * 5, "tests/test_many.py": [Item()] * 259}
    table = {"tests/test_pip.py": 52.0, "tests/test_many.py": 18.0}
    weight = schedule.weights(files, {}, table)
    assert weight == {"tests/test_pip.py": 52.0, "tests/test_many.py": 18.0}  # marks alone: 1.5 and 77.7
    assert (
        schedule.weights(files, {"tests/test_pip.py": 40.0}, table)["tests/test_pip.py"] == 40.0
    )  # a run here wins
    slow = pytest.mark.slow(seconds=30).mark
    assert schedule.weights({"tests/test_new.py": [Item(slow), Item()]}, {}, table) == {
        "tests/test_new.py": 30.0 + schedule.TEST_SECONDS
    }  # in neither: estimated


def test_the_checked_in_table_is_read_and_an_unreadable_one_is_no_table(tmp_path, monkeypatch):
    assert schedule.table()["tests/ops/test_bench_cold.py"] > 0
    monkeypatch.setattr(schedule, "TABLE", tmp_path / "file_seconds.json")
    assert schedule.table() == {}  # missing
    (tmp_path / "file_seconds.json").write_text("{not json")
    assert schedule.table() == {}


def test_writing_the_table_takes_the_last_runs_times_and_drops_files_gone(tmp_path, monkeypatch):
    monkeypatch.setattr(schedule, "TABLE", tmp_path / "file_seconds.json")
    (tmp_path / "file_seconds.json").write_text(
        json.dumps({"tests/test_config.py": 9.0, "tests/test_layout.py": 4.0, "tests/test_gone.py": 7.0})
    )
    record = tmp_path / "cache" / "v" / schedule.KEY
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"tests/test_config.py": 2.26, "tests/also_gone.py": 1.0}))
    written = schedule.write_table(tmp_path / "cache")
    assert written == {"tests/test_config.py": 2.3, "tests/test_layout.py": 4.0}
    assert json.loads((tmp_path / "file_seconds.json").read_text()) == written
