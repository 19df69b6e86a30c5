"""The smoke run of `make bench`, split into groups that run side by side (tests/support/bench_smoke.py and
tests/ops/test_bench_*.py): here, that the groups are every step of the bench, each once, and that a step the bench
does not have is refused by name."""

import subprocess
import sys
from itertools import chain

from tests.support.bench_smoke import GROUPS, step_names
from tests.support.repo import ROOT


def test_the_smoke_groups_run_every_step_of_the_bench_once():
    grouped = list(chain.from_iterable(GROUPS.values()))
    assert len(grouped) == len(set(grouped))  # none twice
    assert sorted(grouped) == sorted(step_names())  # and none left out: a new section joins a group


def test_only_refuses_a_step_the_bench_does_not_have():
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--only",
            "scenarios,no_such_step",
            "--out",
            "/nonexistent",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and "--only: no step named no_such_step" in run.stderr
