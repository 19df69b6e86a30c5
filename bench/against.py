"""The engine's and the handler's own cost, here and at an earlier commit, measured in one run.

A restructure must not make the hot path slower. Each tree is measured by its own code (its own ``bench/overhead.py``
and its own handler), in fresh interpreters, the two trees alternating round by round so that whatever else the
machine does falls on both alike; the medians and their ratio are reported.

Usage::

    .venv/bin/python -m bench.against --base 4ebb52b --rounds 25    # prints JSON; make bench reports it
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import ROOT
from bench.common import child_values, median, tree_at

BASE_COMMIT = "4ebb52b"
"""main before the house's round 2 (issue #32: api/ in sub-packages, no import circles, tests by layer)."""

# Runs in a fresh interpreter inside one tree (the tree's src/ and root on sys.path): argv = [reps].
CHILD = r"""
import json, sys, time
reps = int(sys.argv[1])
start = time.perf_counter()
import app as lambda_app
import_ms = (time.perf_counter() - start) * 1000
from bench import overhead
from bench.common import AnswerAtOnce
from scripts.invoke_local import LocalContext
from tests.support.events import rest_event
from chatloop.api.runtime import Runtime
from chatloop.config import Settings
from chatloop.providers.chain import FallbackChain
from chatloop.tools.base import ToolRegistry

engine = overhead.measure(reps)
lambda_app.app.state.runtime = Runtime(Settings(), chain=FallbackChain([AnswerAtOnce()]), registry=ToolRegistry())
event = rest_event("POST", "/chat", {"messages": [{"role": "user", "content": "hello"}], "stream": False, "tools": []})
samples = []
for _ in range(reps * 5):
    start = time.perf_counter()
    response = lambda_app.handler(event, LocalContext())
    samples.append((time.perf_counter() - start) * 1e6)
    assert response["statusCode"] == 200, response
samples.sort()
print(json.dumps({
    "engine_per_iteration_us": engine["per_iteration_us"],
    "engine_1000_messages_us": engine["growth_us"][1000],
    "handler_overhead_us": samples[len(samples) // 2],
    "import_app_ms": import_ms,
}))
"""


def _child(tree: Path, reps: int) -> dict[str, float]:
    return child_values(tree, CHILD, str(reps))


def measure(rounds: int, reps: int, base: str = BASE_COMMIT) -> dict[str, Any]:
    """Medians over ``rounds`` alternating runs of each tree (each run: ``reps`` turns per measurement)."""
    with tempfile.TemporaryDirectory(prefix="chatloop-against-") as tmp:
        base_root = tree_at(base, Path(tmp) / "base")
        runs: dict[str, list[dict[str, float]]] = {"here": [], "base": []}
        for round_ in range(rounds):  # which tree goes first alternates too: no order effect favours either
            order = [("here", ROOT), ("base", base_root)]
            for label, tree in order if round_ % 2 == 0 else order[::-1]:
                runs[label].append(_child(tree, reps))
    out: dict[str, Any] = {"base_commit": base, "rounds": rounds, "reps": reps, "metrics": {}}
    for key in runs["here"][0]:
        here = median([r[key] for r in runs["here"]])
        was = median([r[key] for r in runs["base"]])
        out["metrics"][key] = {"here": here, "base": was, "ratio": here / was if was else None}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base", default=BASE_COMMIT)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    print(json.dumps(measure(args.rounds, args.reps, args.base), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
